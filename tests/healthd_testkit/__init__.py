"""What the tests share: paths, waiting, the host guard, the Slurm test cluster, fakes and kits.

The root conftest puts ``tests/`` on ``sys.path``, so every test module imports these
as ``healthd_testkit.<module>`` (pytest's importlib mode lets test modules import
nothing from each other).
"""
