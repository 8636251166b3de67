"""``healthd fleet``: reliability analytics from Slurm's own accounting (sacct and sacctmgr events).

The package turns the parsable output of ``sacct`` (job runs) and ``sacctmgr show
event`` (drains and downs with their reasons) into the study's figures: failures
attributed to node-health causes, the cause taxonomy, MTTF by job size with the
"nodes in series" fit, expected ETTR and lemon nodes (docs/fleet.md). Offline files
and a live run share everything from ``healthd.fleet.analyze.analyze`` on. Nothing
here is imported by the node agent.
"""
