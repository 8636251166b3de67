"""The disks check: NVMe controller state, SMART warnings and media errors, block I/O errors."""
