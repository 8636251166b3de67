"""The infiniband check: port state, rate, link layer, flapping and error-counter rates from sysfs."""
