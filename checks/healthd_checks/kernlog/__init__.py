"""The kernel log, read once per record from each check's cursor: /dev/kmsg or the journal, and its events."""
