"""The gpu check: NVML's view of each GPU (count, ECC, row remapping, PCIe, clocks, model, VBIOS)."""
