"""The dcgm check: DCGM diagnostics, an active check that runs only on an idle, drained node."""
