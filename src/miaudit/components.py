"""Components built from their specs: recipes with their penalties, attacks, output defenses
and queries. Each build checks the options against the constructor's signature first, then
calls it; a ValueError raised inside a constructor is a bad option value (the constructors
validate their options that way) and becomes a ConfigError naming the config field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from miaudit.errors import ConfigError
from miaudit.registry import ATTACKS, OUTPUT_DEFENSES, PENALTIES, QUERIES, RECIPES, parse_spec

if TYPE_CHECKING:
    from miaudit.config import TrainConfig

Spec = str | dict[str, Any]


def build_penalties(specs: list[Spec]) -> list[Any]:
    penalties = []
    for index, spec in enumerate(specs):
        name, options = parse_spec(spec)
        PENALTIES.check_options(name, options)
        penalties.append(_construct(PENALTIES, name, options, f"train.penalties[{index}]"))
    return penalties


def build_recipe(train: TrainConfig) -> Any:
    """The recipe object with its penalties (options checked against the constructors)."""
    penalties = build_penalties(train.penalties)
    RECIPES.check_options(train.recipe, train.recipe_options, provided=("penalties",))
    return _construct(RECIPES, train.recipe, {"penalties": penalties, **train.recipe_options},
                      "train.recipe_options")


def _construct(registry: Any, name: str, options: dict[str, Any], where: str) -> Any:
    """Build a component whose options fit its signature; a ValueError inside the constructor
    is a bad option value (the constructors validate their options that way)."""
    return registry.create(name, options, where=f"{where}: {registry.kind} {name!r}")


def attack_label(spec: Spec) -> tuple[str, str, dict[str, Any]]:
    """(label, registry name, options). The label is the spec as written, or its ``label``
    option when given (e.g. ``{name: lira, offline: true, label: LiRA-offline}``)."""
    name, options = parse_spec(spec)
    label = options.pop("label", None)
    if label is None:
        label = spec if isinstance(spec, str) else ":".join(
            filter(None, [name, ",".join(f"{k}={v}" for k, v in options.items())]))
    return str(label), name, options


def build_attack(spec: Spec, where: str = "attacks") -> Any:
    try:
        _, name, options = attack_label(spec)
        ATTACKS.check_options(name, options)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    return _construct(ATTACKS, name, options, where)


def build_output_defense(spec: Spec) -> Any:
    """The output defense; it must derive from :class:`OutputDefense`, whose attributes
    (``needs_holdout``) say what it needs."""
    from miaudit.output_defenses.memguard import OutputDefense

    name, options = parse_spec(spec)
    OUTPUT_DEFENSES.check_options(name, options)
    defense = _construct(OUTPUT_DEFENSES, name, options, "output_defense")
    if not isinstance(defense, OutputDefense):
        raise ConfigError(f"output_defense {name!r} built a {type(defense).__name__}; an "
                          "output defense must derive from "
                          "miaudit.output_defenses.memguard.OutputDefense")
    return defense


def check_queries(specs: list[str]) -> list[str]:
    """The query specs with presets replaced by their query lists, each one built once."""
    from miaudit.queries import build_query, expand_queries

    expanded = expand_queries(specs)
    for index, spec in enumerate(expanded):
        name, options = parse_spec(spec)
        QUERIES.check_options(name, options)
        _construct(QUERIES, name, options, f"queries[{index}]")
        build_query(spec)
    return expanded
