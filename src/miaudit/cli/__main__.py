"""``python -m miaudit.cli``."""

from miaudit.cli import app

app()
