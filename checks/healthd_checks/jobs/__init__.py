"""The jobs check: application Xids that follow a GPU across users' jobs (the epilog's records)."""
