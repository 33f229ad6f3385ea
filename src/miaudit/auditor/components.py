"""Components built from their specs: recipes with their penalties, attacks, output defenses
and queries. Each build checks the options against the constructor's signature first, then
calls it through :meth:`Registry.create`, the one place where a ValueError raised inside a
constructor (how constructors reject an option value) becomes a ConfigError naming the config
field. The builders of recipes, attacks, output defenses and queries also check that the
result derives from its kind's base class, whose class attributes say what the component
needs (nothing is probed with ``getattr``).

The builders take a spec as written or as the config holds it (a parsed
:class:`~miaudit.auditor.specs.Component`); this module knows no config class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from miaudit.auditor.specs import Component, Spec, parse_attack, parse_component
from miaudit.errors import ConfigError
from miaudit.registry import ATTACKS, OUTPUT_DEFENSES, PENALTIES, QUERIES, RECIPES, Registry

__all__ = ["Component", "Components", "RecipeSettings", "Spec", "attack_label", "build_attack",
           "build_output_defense", "build_penalties", "build_recipe", "check_queries",
           "resolve_components"]


class RecipeSettings(Protocol):
    """What builds a recipe: the train section of a config (``TrainConfig``)."""

    recipe: str
    recipe_options: dict[str, Any]
    penalties: Sequence[Spec | Component]


def build_penalties(specs: Sequence[Spec | Component]) -> list[Any]:
    penalties = []
    for index, spec in enumerate(specs):
        where = f"train.penalties[{index}]"
        penalty = parse_component(spec)
        penalties.append(_construct(PENALTIES, penalty.name, penalty.options, where))
    return penalties


def build_recipe(train: RecipeSettings) -> Any:
    """The recipe object with its penalties (options checked against the constructors); it
    must derive from :class:`~miaudit.training.engine.Recipe`."""
    from miaudit.training.engine import Recipe

    penalties = build_penalties(train.penalties)
    RECIPES.check_options(train.recipe, train.recipe_options, provided=("penalties",))
    recipe = RECIPES.create(train.recipe, {"penalties": penalties, **train.recipe_options},
                            where=f"train.recipe_options: {RECIPES.kind} {train.recipe!r}")
    _check_base(recipe, Recipe, f"train.recipe {train.recipe!r}")
    return recipe


def _construct(registry: Registry, name: str, options: dict[str, Any], where: str) -> Any:
    """Build a component whose options fit its signature."""
    registry.check_options(name, options)
    return registry.create(name, options, where=f"{where}: {registry.kind} {name!r}")


def _check_base(component: Any, base: type, what: str) -> None:
    if not isinstance(component, base):
        raise ConfigError(f"{what} built a {type(component).__name__}; it must derive from "
                          f"{base.__module__}.{base.__qualname__}")


def attack_label(spec: Spec | Component) -> tuple[str, str, dict[str, Any]]:
    """(label, registry name, options). The label is the spec as written, or its ``label``
    option when given (e.g. ``{name: lira, offline: true, label: LiRA-offline}``)."""
    attack = parse_attack(spec)
    return attack.label, attack.name, dict(attack.options)


def build_attack(spec: Spec | Component, where: str = "attacks") -> Any:
    """The attack; it must derive from :class:`~miaudit.attacks.Attack`, whose attributes
    (``min_references``, ``needs_population``, ``needs_features``, ``modalities``) say what
    it needs."""
    from miaudit.attacks._base import Attack

    try:
        attack = parse_attack(spec)
        ATTACKS.check_options(attack.name, attack.options)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    built = ATTACKS.create(attack.name, attack.options,
                           where=f"{where}: {ATTACKS.kind} {attack.name!r}")
    _check_base(built, Attack, f"{where} {attack.name!r}")
    return built


def build_output_defense(spec: Spec | Component) -> Any:
    """The output defense; it must derive from :class:`OutputDefense`, whose attributes
    (``needs_holdout``) say what it needs."""
    from miaudit.output_defenses.memguard import OutputDefense

    defense = parse_component(spec)
    built = _construct(OUTPUT_DEFENSES, defense.name, defense.options, "output_defense")
    _check_base(built, OutputDefense, f"output_defense {defense.name!r}")
    return built


def check_queries(specs: list[str]) -> list[str]:
    """The query specs with presets replaced by their query lists, each one built once; each
    must derive from :class:`~miaudit.queries.Query`."""
    from miaudit.queries import Query, expand_queries

    expanded = expand_queries(specs)
    for index, spec in enumerate(expanded):
        query = parse_component(spec)
        built = _construct(QUERIES, query.name, query.options, f"queries[{index}]")
        _check_base(built, Query, f"queries[{index}] {query.name!r}")
    return expanded


@dataclass(frozen=True)
class Components:
    """A config's components built once, when it is validated, with the capabilities their
    base classes declare: what validation, the stages and the planner read (``needs_features``,
    ``min_references``, a recipe's ``needs_validation``, ...) instead of building a throwaway
    component each time. Working instances (a recipe that trains, a defense fitted per model)
    are still built where they work: these are shared and must not be mutated."""

    attacks: dict[str, Any]  # label -> Attack, in the config's order
    recipes: tuple[tuple[RecipeSettings, Any], ...]  # (train section, its recipe): train first
    output_defense: Any | None

    @property
    def recipe(self) -> Any:
        """The train section's recipe."""
        return self.recipes[0][1]

    @property
    def reference_recipe(self) -> Any | None:
        """The reference_train section's recipe (None: the references use train's)."""
        return self.recipes[1][1] if len(self.recipes) > 1 else None

    @property
    def needs_features(self) -> bool:
        """Some attack reads input features (``AttackInput.features``)."""
        return any(attack.needs_features for attack in self.attacks.values())

    def recipe_of(self, train: RecipeSettings) -> Any:
        """The built recipe of ``train`` when it is the config's train or reference_train
        section (the same object), else a recipe built for it."""
        for settings, recipe in self.recipes:
            if settings is train:
                return recipe
        return build_recipe(train)


def resolve_components(attacks: Sequence[Spec | Component], train: RecipeSettings,
                       reference_train: RecipeSettings | None,
                       output_defense: Spec | Component | None) -> Components:
    """Build every component a config names, once (options checked; one error per field)."""
    built = {}
    for spec in attacks:
        label = attack_label(spec)[0]
        built[label] = build_attack(spec, f"attack {label!r}")
    recipes = tuple((settings, build_recipe(settings))
                    for settings in (train, reference_train) if settings is not None)
    return Components(
        attacks=built, recipes=recipes,
        output_defense=None if output_defense is None else build_output_defense(output_defense))
