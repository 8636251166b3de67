"""Pure decisions: results and remembered state in, one decision and its Slurm steps out (policy, breaker, acks)."""
