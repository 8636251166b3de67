"""Readers several checks share: sysfs and procfs files, mountinfo, the process table, outside programs."""
