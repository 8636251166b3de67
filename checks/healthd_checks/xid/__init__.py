"""The xid check: NVIDIA Xid and SXid lines from the kernel log, graded by NVIDIA's Xid catalog."""
