"""The built-in checks, one package each, registered through the same entry points a third party uses."""
