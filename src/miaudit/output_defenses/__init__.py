"""Defenses applied to released outputs (registered in OUTPUT_DEFENSES)."""
