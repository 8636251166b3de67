"""One pass from start to end: checks, plan, execute, settle; the active checks, GPU resets, the repair hook."""
