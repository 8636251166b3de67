"""The ib_bandwidth check: ib_write_bw from each HCA to itself, an active check run only on an idle, drained node."""
