"""The nccl check: NCCL all_reduce bandwidth and sums, an active check run only on an idle, drained node."""
