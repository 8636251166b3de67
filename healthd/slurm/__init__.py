"""Slurm: the only code that knows scontrol and sinfo exist; reads, writes, reasons, node state, host lists."""
