"""privacy (see module docstrings)."""
