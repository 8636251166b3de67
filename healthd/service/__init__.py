"""The long-running side: the daemon, its sinks (logs, metrics, sd_notify) and slurmd's HealthCheckProgram hook."""
