"""The nvlink check: NVLinks up, fabric registration, NVSwitches and Fabric Manager."""
