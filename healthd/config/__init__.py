"""Configuration: the TOML file read, trusted, validated (or its validation cached), host sections merged."""
