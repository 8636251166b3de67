"""The ipmi check: critical events in the BMC's System Event Log since the last pass."""
