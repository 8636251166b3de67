"""healthd's built-in check plugins (installed as the ``healthd_checks`` package)."""
