"""``miaudit datasets | models | recipes | ...``: what each registry holds."""

from __future__ import annotations

from collections.abc import Callable

from rich.markup import escape
from rich.table import Table

from miaudit.cli.commands import console
from miaudit.registry import (
    ACCOUNTANTS,
    ATTACKS,
    DATASETS,
    MODELS,
    OUTPUT_DEFENSES,
    PENALTIES,
    QUERIES,
    RECIPES,
    Registry,
)

LISTINGS = {
    "datasets": (DATASETS, "data sets"), "models": (MODELS, "models"),
    "recipes": (RECIPES, "training recipes and defenses"), "penalties": (PENALTIES, "penalties"),
    "attacks": (ATTACKS, "attacks"), "queries": (QUERIES, "query augmentations"),
    "defenses": (OUTPUT_DEFENSES, "output defenses"), "accountants": (ACCOUNTANTS, "accountants"),
}


def print_listing(registry: Registry, title: str) -> None:
    table = Table(title=title)
    table.add_column("name")
    table.add_column("description")
    for name, description in registry.describe().items():
        table.add_row(escape(name), escape(description))
    console.print(table)


def listing_command(registry: Registry, title: str) -> Callable[[], None]:
    """The command that lists ``registry``."""
    def listing() -> None:
        print_listing(registry, title)

    listing.__doc__ = f"List the registered {title}."
    return listing
