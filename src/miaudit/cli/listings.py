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


#: what ``train.precision`` to use where bfloat16 has kernels, has none, or torch cannot say
PRECISION_ADVICE = {True: "bf16 (1.85-2.4x fp32 on the AVX512_BF16 CPU measured)",
                    False: "fp32 (bf16 runs in fallback code, 4-10x slower)",
                    None: "unknown: measure with benchmarks/train_throughput.py"}


def devices() -> None:
    """List the devices here (--device) and whether train.precision bf16 pays off on each."""
    from miaudit._runtime import machine  # torch

    table = Table(title="devices")
    for column in ("device", "what", "bfloat16 kernels", "train.precision"):
        table.add_column(column)
    for device in machine.devices():
        facts = machine.describe(device)
        what = facts["gpu"] or (f"{facts['cpus']} CPUs, {facts['cpu_capability']}"
                                if device.type == "cpu" else device.type)
        kernels = facts["bf16_kernels"]
        table.add_row(str(device), escape(what), machine.BF16_ANSWERS[kernels],
                      PRECISION_ADVICE[kernels])
    console.print(table)
