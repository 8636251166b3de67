"""The kernel check: stuck tasks, hung-task, lockup and RCU-stall reports, and who a hung task waits on."""
