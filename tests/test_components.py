"""A config's components are built once (issue 77 item 3): validation builds every attack,
recipe and output defense, and the stages read their capabilities from that one record."""

from __future__ import annotations

from conftest import tiny_audit
from miaudit import registry
from miaudit.auditor import stages
from miaudit.config import validate_config


def counting(monkeypatch, which: registry.Registry) -> list[str]:
    """Every name ``which`` builds from now on."""
    built: list[str] = []
    create = which.create

    def counted(name, options, **kwargs):
        built.append(name)
        return create(name, options, **kwargs)

    monkeypatch.setattr(which, "create", counted)
    return built


def test_components_are_built_once_and_rebuilt_when_a_section_is_replaced(tmp_path,
                                                                          monkeypatch):
    cfg = validate_config(tiny_audit(tmp_path))
    built = counting(monkeypatch, registry.ATTACKS)
    first = cfg.components
    assert cfg.components is first and built == []  # validation built them already
    assert list(first.attacks) == ["loss", "lira", "lira:offline=true"]
    assert first.attacks["lira"].min_references == 2 and not first.needs_features  # IN + OUT
    assert first.recipe is first.recipe_of(cfg.train) and first.reference_recipe is None
    cfg.attacks = ["loss"]  # validated on assignment: the record follows the new section
    assert list(cfg.components.attacks) == ["loss"] and built == ["loss"]


def test_an_audit_builds_no_attack_after_validation(tmp_path, monkeypatch):
    cfg = validate_config(tiny_audit(tmp_path, num_models=4, train={"epochs": 2,
                                                                     "batch_size": 32}))
    built = counting(monkeypatch, registry.ATTACKS)
    results = stages.audit(cfg, show_progress=False)
    assert set(results.summary.attacks) == {"loss", "lira", "lira:offline=true"}
    assert built == [], f"attacks built again after validation: {built}"
