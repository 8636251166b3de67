"""NVML readings behind one small interface, and snapshots of them that the gpu and nvlink checks replay."""
