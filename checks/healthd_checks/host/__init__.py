"""The host check: clock sync, CPUs, memory, huge pages, Ethernet, kernel/driver/BIOS versions."""
