"""``miaudit datasets | models | recipes | ...``: what each registry holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from miaudit.cli.commands import console
from miaudit.cli.errors import user_errors
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


def listing_command(registry: Registry, title: str) -> Callable[..., None]:
    """The command that lists ``registry``, or with a NAME describes that entry."""
    @user_errors()
    def listing(name: Annotated[str | None, typer.Argument(
            help="describe this one: its options (types, defaults), paper and needs")] = None
            ) -> None:
        if name is None:
            print_listing(registry, title)
        else:
            for line in describe_entry(registry, name):
                console.print(line, markup=False, highlight=False, soft_wrap=True)

    listing.__doc__ = f"List the registered {title}, or describe one (NAME)."
    return listing


def describe_entry(registry: Registry, name: str) -> list[str]:
    """An entry's description: its docstring (paper, equation, options as documented), its
    constructor's options with types and defaults, and for an attack what it needs."""
    import inspect

    entry = registry.get(name)
    lines = [f"{registry.kind} {name}", ""]
    lines += [f"  {line}" for line in inspect.cleandoc(entry.__doc__ or "").splitlines()]
    try:
        parameters = [p for p in inspect.signature(entry).parameters.values()
                      if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
    except (TypeError, ValueError):
        parameters = []
    if parameters:
        lines += ["", "options (type = default):"]
        for parameter in parameters:
            kind = parameter.annotation
            kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
            default = ("required" if parameter.default is inspect.Parameter.empty
                       else repr(parameter.default))
            lines.append(f"  {parameter.name}: {kind} = {default}")
    if registry is ATTACKS:
        lines += ["", "needs:"] + [f"  {need}" for need in attack_needs(registry.create(
            name, {}, where=f"attack {name!r}"))]
        other = "loss" if name != "loss" else "lira"
        lines += ["", f"example: miaudit audit --attacks \"{name};{other}\" (';' separates "
                  "attacks; ':' then ',' set options: lira:offline=true,fixed_variance=true)"]
    return lines


def attack_needs(attack: object) -> list[str]:
    """What an attack (built with its defaults) reads and needs, from its declared
    attributes."""
    references = getattr(attack, "min_references", 0)
    queries = getattr(attack, "queries", None)
    kind = getattr(attack, "kind", "")
    return [
        f"reference models: at least {references}" if references else
        "reference models: none (reference-free)",
        "population data (data.population_size): yes" if getattr(attack, "needs_population",
                                                                  False)
        else "population data: no",
        "the inputs themselves (features): yes" if getattr(attack, "needs_features", False)
        else "the inputs themselves: no (outputs only)",
        f"outputs of: {', '.join(getattr(attack, 'modalities', ('classes',)))}",
        f"queries read: {', '.join(queries)}" if queries else
        f"queries read: every '{kind}' query (label-only)" if kind else
        "queries read: every score query (default)",
    ]


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
