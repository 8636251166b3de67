"""Fleet reliability analytics from Slurm accounting."""
