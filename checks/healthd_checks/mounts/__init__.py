"""The mounts check: expected filesystems mounted as expected, space and inodes, hung and dead mounts."""
