"""healthd: a node health checker for GPU clusters run by Slurm."""

__version__ = "0.1.0"
