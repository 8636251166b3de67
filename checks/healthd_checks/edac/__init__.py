"""The edac check: host memory errors per DIMM from EDAC, and machine checks from the kernel log."""
