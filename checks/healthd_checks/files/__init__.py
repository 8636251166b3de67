"""The ``files`` check: files the node must (or must not) have, with their type, owner, mode, age and lines."""
