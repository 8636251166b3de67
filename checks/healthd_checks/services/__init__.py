"""The services check: systemd units or daemon processes, and kernel modules."""
