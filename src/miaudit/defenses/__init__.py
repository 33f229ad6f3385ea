"""defenses (see module docstrings)."""
