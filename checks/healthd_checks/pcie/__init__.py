"""The pcie check: link width and speed of GPUs and NICs, and AER counters, from sysfs."""
