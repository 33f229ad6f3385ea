"""``miaudit dp-audit``: an empirical DP audit with canaries (one run or R runs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from miaudit.cli.errors import user_errors
from miaudit.configtools import format_errors
from miaudit.errors import ConfigError, InputFileError
from miaudit.registry import parse_spec

if TYPE_CHECKING:
    from miaudit.dp_audit.settings import DPAuditConfig

console = Console()


def _spec(text: str) -> tuple[str, dict[str, Any]]:
    try:
        return parse_spec(text)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


def build_config(*, dataset: str, model: str, width: float, recipe: str, epochs: int,
                 batch_size: int, lr: float, optimizer: str, weight_decay: float, canaries: int,
                 canary_kind: str, runs: int, guesses: list[str] | None, selection: str,
                 confidence: float, delta: float, claimed_epsilon: float | None, seed: int,
                 device: str, threat_model: str = "final_model",
                 analysis: list[str] | None = None, gradient_canary: str = "coordinate",
                 gradient_canary_norm: float = 1.0, fdp_family: str = "gdp") -> Any:
    """The validated :class:`~miaudit.dp_audit.settings.DPAuditConfig` of the command's options
    (raises ``ValidationError`` naming the bad field, before anything is trained)."""
    from miaudit.dp_audit.settings import DPAuditConfig

    data_name, data_options = _spec(dataset)
    model_name, model_options = _spec(model)
    recipe_name, recipe_options = _spec(recipe)
    pairs = []
    for item in guesses or []:
        k_pos, sep, k_neg = item.partition(",")
        if not sep:
            raise typer.BadParameter(f"--guesses expects k_pos,k_neg; got {item!r}")
        try:
            pairs.append((int(k_pos), int(k_neg)))
        except ValueError:
            raise typer.BadParameter(f"--guesses expects two integers k_pos,k_neg; "
                                     f"got {item!r}") from None
    return _validated(DPAuditConfig, {
        "seed": seed, "data": {"name": data_name, "options": data_options},
        "model": {"name": model_name, "width": width, "options": model_options},
        "train": {"recipe": recipe_name, "recipe_options": recipe_options, "epochs": epochs,
                  "batch_size": batch_size, "lr": lr, "optimizer": optimizer,
                  "weight_decay": weight_decay},
        "canaries": canaries, "canary_kind": canary_kind, "runs": runs,
        "guesses": pairs or None, "selection": selection, "confidence": confidence,
        "delta": delta, "claimed_epsilon": claimed_epsilon, "device": device,
        "threat_model": threat_model, "analyses": analysis or None,
        "gradient_canary": gradient_canary, "gradient_canary_norm": gradient_canary_norm,
        "fdp_family": fdp_family})


def load_dp_config(path: Path) -> Any:
    """A DP-audit config section from YAML (validated, unknown keys fail)."""
    import yaml

    from miaudit.dp_audit.settings import DPAuditConfig

    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise InputFileError(f"DP-audit config {path}: {error}") from None
    if not isinstance(raw, dict):
        raise InputFileError(f"DP-audit config {path} holds a YAML {type(raw).__name__}; give "
                             "a mapping of DPAuditConfig fields (optionally under dp_audit:)")
    return _validated(DPAuditConfig, raw.get("dp_audit", raw))


def _validated(model: Any, raw: Any) -> Any:
    """``model.model_validate(raw)``, a bad field as one :class:`ConfigError` line."""
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(f"dp-audit: {format_errors(error)}") from None


@user_errors()
def audit_command(
        dataset: Annotated[str, typer.Option(help="data set spec, e.g. digits")] = "digits",
        model: Annotated[str, typer.Option(help="model spec, e.g. mlp or "
                                           "'sdenet:sigma=2,steps=4'")] = "mlp",
        width: Annotated[float, typer.Option(help="model width multiplier")] = 1.0,
        recipe: Annotated[str, typer.Option(help="recipe spec: standard, "
                                            "'dpsgd:target_epsilon=8' or "
                                            "'dpsgd:noise_multiplier=1.1'")] = "standard",
        epochs: Annotated[int, typer.Option(help="training epochs")] = 20,
        batch_size: Annotated[int, typer.Option(help="batch size")] = 64,
        lr: Annotated[float, typer.Option(help="learning rate")] = 0.1,
        optimizer: Annotated[str, typer.Option(help="sgd | adam | adamw")] = "sgd",
        weight_decay: Annotated[float, typer.Option(help="weight decay")] = 0.0,
        canaries: Annotated[int, typer.Option(help="number of canaries m (one run)")] = 256,
        canary_kind: Annotated[str, typer.Option(help="natural | mislabelled | ood | adversarial")]
        = "mislabelled",
        runs: Annotated[int, typer.Option(help="0: one-run audit; R >= 2: R runs with the "
                                          "canary and R without")] = 0,
        guesses: Annotated[list[str] | None, typer.Option(help="one run: 'k_pos,k_neg' "
                                                          "(repeatable; Bonferroni over them)")]
        = None,
        selection: Annotated[str, typer.Option(help="multi-run threshold choice: split | "
                                               "bonferroni")] = "split",
        confidence: Annotated[float, typer.Option(help="confidence of the bound")] = 0.95,
        delta: Annotated[float, typer.Option(help="delta of the audited (eps, delta) claim")]
        = 1e-5,
        claimed_epsilon: Annotated[float | None, typer.Option(
            help="a claim to compare with when the recipe records none")] = None,
        seed: Annotated[int, typer.Option(help="seed (canaries, inclusion, training)")] = 0,
        threat_model: Annotated[str, typer.Option(
            help="final_model (the released model only) | all_iterates (every privatized "
            "DP-SGD update, Dirac gradient canaries)")] = "final_model",
        analysis: Annotated[list[str] | None, typer.Option(
            help="fdp | gaussian | steinke | clopper_pearson (repeatable; default: all that "
            "apply; the first is the headline)")] = None,
        gradient_canary: Annotated[str, typer.Option(
            help="all_iterates: coordinate | direction")] = "coordinate",
        gradient_canary_norm: Annotated[float, typer.Option(
            help="all_iterates: inserted gradient norm in clipping norms")] = 1.0,
        fdp_family: Annotated[str, typer.Option(
            help="trade-off family of the fdp analysis: gdp | dp")] = "gdp",
        device: Annotated[str, typer.Option(help="cpu | cuda[:i]")] = "cpu",
        output: Annotated[Path | None, typer.Option("--output", "-o",
                                                    help="write the report as JSON")] = None,
        html: Annotated[Path | None, typer.Option(
            "--html", help="write the HTML report (claimed vs audited per analysis)")] = None,
        config: Annotated[Path | None, typer.Option(
            "--config", "-c", help="a YAML file with the DPAuditConfig section (then the "
            "flags above are not used)")] = None,
) -> None:
    """Lower-bound epsilon empirically with canaries and print every analysis (Steinke et al.
    2023, f-DP one run, Gaussian-DP, Clopper-Pearson) beside the claimed epsilon; threat model
    final_model (input canaries) or all_iterates (DP-SGD gradient canaries)."""
    from miaudit.dp_audit.canary import run_dp_audit

    cfg = load_dp_config(config) if config is not None else build_config(
        dataset=dataset, model=model, width=width, recipe=recipe, epochs=epochs,
        batch_size=batch_size, lr=lr, optimizer=optimizer, weight_decay=weight_decay,
        canaries=canaries, canary_kind=canary_kind, runs=runs, guesses=guesses,
        selection=selection, confidence=confidence, delta=delta,
        claimed_epsilon=claimed_epsilon, seed=seed, device=device, threat_model=threat_model,
        analysis=analysis, gradient_canary=gradient_canary,
        gradient_canary_norm=gradient_canary_norm, fdp_family=fdp_family)
    report = run_dp_audit(cfg)  # checks data, model and recipe before training
    data = report.as_dict()
    console.print(analyses_table(cfg, data))
    console.print(f"test accuracy {100 * data['test_accuracy']:.1f}%")
    if output is not None:
        console.print(f"wrote {report.write(output)}")
    if html is not None:
        from miaudit.reporting.dp_audit_html import write_dp_audit_html

        console.print(f"wrote {write_dp_audit_html(data, html)}")


def analyses_table(cfg: DPAuditConfig, data: dict[str, Any]) -> Table:
    """One row per analysis: the claimed and audited epsilon, the ceiling, the verdict."""
    canaries_text = "Dirac gradient" if cfg.threat_model == "all_iterates" else cfg.canary_kind
    table = Table(title=f"DP audit ({data['mode'].replace('_', '-')}, {cfg.canaries} "
                        f"{canaries_text} canaries, delta = {cfg.delta:g}, "
                        f"{100 * cfg.confidence:g}% confidence)")
    for column in ("analysis", "claimed eps", "audited eps >=", "max provable", "verdict",
                   "CPU s"):
        table.add_column(column, justify="left" if column == "analysis" else "right")
    claimed = data["claimed_epsilon"]
    for name, audit in data["analyses"].items():
        bound = audit["epsilon_lower"]
        verdict = "-" if claimed is None else (
            "contradicted" if bound > claimed else "consistent")
        ceiling = audit.get("max_provable")
        table.add_row(name, "none" if claimed is None else f"{claimed:.3f}", f"{bound:.3f}",
                      "no ceiling" if ceiling is None else f"{ceiling:.3f}", verdict,
                      f"{audit['cpu_seconds']:.2f}")
    return table
