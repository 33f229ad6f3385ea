"""Read-only view of a finished run directory for the HTML report and the run comparison.

This is the one module of :mod:`miaudit.reporting` that reads the results records
(:class:`miaudit.results.Summary`) and the run directory; everything else asks a
:class:`RunView`. When the results schema changes, adapt this file.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from miaudit._runtime.io import path_problem, read_json, verify_file
from miaudit.auditor.modality import CLASSES, TEXT, Modality
from miaudit.auditor.rundir import REBUILD
from miaudit.auditor.runfiles import EXPOSED_FILE, RESULTS_FILE
from miaudit.errors import RunDirError
from miaudit.results import (
    AttackRecord,
    EmpiricalEpsilon,
    Privacy,
    Summary,
    parse_summary,
    read_results,
)
from miaudit.stats.metrics import MetricKeys, is_measurable

LEVELS = ("0.1%", "1%")  # the FPR levels the report leads with (Carlini et al. 2022, Sec. IV)


@dataclass(frozen=True)
class Metric:
    """One metric: value, optional 95% interval, optional mean and std over targets."""

    value: float
    ci: tuple[float, float] | None = None
    mean: float | None = None
    std: float | None = None
    measurable: bool = True  # False: no threshold reaches that FPR (metrics.summarize)
    # conditional on the trained models (Clopper-Pearson); simultaneous over all attacks
    ci_conditional: tuple[float, float] | None = None
    ci_simultaneous: tuple[float, float] | None = None


@dataclass(frozen=True)
class AttackView:
    """One attack of a run, as the report reads it."""

    label: str
    record: AttackRecord

    @property
    def name(self) -> str:
        return self.record.attack

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.record.options)

    def metric(self, key: str) -> Metric:
        """``key`` e.g. "tpr@0.1%", "auc": pooled value [CI], mean and std over targets."""
        record = self.record
        interval, conditional, band = (record.interval(key, kind) for kind in (
            "", "conditional", "simultaneous"))
        return Metric(float(record.pooled[key]), tuple(interval) if interval else None,
                      record.mean.get(key), record.std.get(key), record.measurable(key),
                      tuple(conditional) if conditional else None,
                      tuple(band) if band else None)

    def tpr(self, level: str) -> Metric:
        return self.metric(f"tpr@{level}")

    @property
    def auc(self) -> float:
        return self.record.auc

    @property
    def per_class(self) -> dict[int, dict[str, Any]]:
        """{class index: metrics or counts only}."""
        return dict(self.record.per_class)

    def class_metric(self, row: dict[str, Any], key: str) -> Metric | None:
        if key not in row:
            return None
        interval = row.get(MetricKeys(key).ci)
        return Metric(float(row[key]), tuple(interval) if interval else None,
                      measurable=is_measurable(row, key))

    @property
    def caveats(self) -> list[str]:
        return self.record.caveats

    @property
    def empirical_epsilon(self) -> EmpiricalEpsilon | None:
        return self.record.empirical_epsilon


@dataclass(frozen=True)
class Accuracy:
    """Mean train/test accuracy of the target models and the generalization gap."""

    train: float
    test: float
    gap: float
    train_std: float | None
    test_std: float | None


class RunView:
    """A finished run: ``results.json`` plus the arrays the report plots."""

    def __init__(self, root: Path, summary: Summary | None = None):
        self.root = Path(root)
        if summary is None:
            path = self.root / RESULTS_FILE if self.root.is_dir() else self.root
            if not path.is_file():
                raise RunDirError(f"{path_problem(path)}: give a run directory or its "
                                  "results.json (run `miaudit audit` first)")
            summary = parse_summary(read_results(path), path)
            self.root = path.parent
        self.summary = summary

    # -- identity and settings ------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.summary.name

    @property
    def config(self) -> dict[str, Any]:
        return self.summary.config

    @property
    def targets(self) -> list[int]:
        return list(self.summary.targets)

    @property
    def num_models(self) -> int:
        return self.summary.num_models

    @property
    def protocol(self) -> str:
        return self.summary.protocol

    @property
    def external(self) -> bool:
        """Scored from outputs made elsewhere (``miaudit score``): no config, no inputs."""
        return self.summary.external

    def external_settings(self) -> dict[str, str]:
        """What a ``miaudit score`` run knows about itself: the outputs, not how they were
        made."""
        summary = self.summary
        return {
            "run": self.name,
            "data": f"outputs made elsewhere: {summary.pool_size} samples, "
                    f"{_or(summary.audited_size, '?')} scored, "
                    f"{_or(summary.population_size, 0)} population",
            "models": ", ".join(map(str, self.config.get("models", []))) or "?",
            "protocol": f"{self.protocol}: {len(self.targets)} target(s), "
                        f"{self.num_models} models",
            "queries": ", ".join(summary.queries),
        }

    def settings(self) -> dict[str, str]:
        """Label -> text of what the run was: data, model, training, protocol, queries."""
        if self.external:
            return self.external_settings()
        cfg, data = self.config, self.config.get("data", {})
        model, train = cfg.get("model", {}), cfg.get("train", {})
        rows = {
            "run": self.name,
            "data": _spec(data.get("name", "?"), data.get("options"))
            + f", pool '{data.get('pool', '?')}' of {self.summary.pool_size} samples",
            "model": _spec(model.get("name", "?"), model.get("options"))
            + f", width {model.get('width', '?')}",
            "training": _spec(train.get("recipe", "?"), train.get("recipe_options"))
            + (f", penalties {', '.join(map(str, train['penalties']))}"
               if train.get("penalties") else "")
            + f", {train.get('epochs', '?')} epochs, batch {train.get('batch_size', '?')}, "
            f"{train.get('optimizer', '?')} lr {train.get('lr', '?')}",
            "protocol": f"{self.protocol}: {len(self.targets)} target(s), "
            f"{self.num_models} models",
            "queries": ", ".join(self.summary.queries),
        }
        if cfg.get("reference_model") or cfg.get("reference_train"):
            reference = cfg.get("reference_model") or model
            rows["reference models"] = _spec(reference.get("name", "?"), reference.get("options"))
        if cfg.get("output_defense"):
            rows["output defense"] = str(cfg["output_defense"])
        return rows

    def provenance(self) -> dict[str, str]:
        """Who wrote the run and when: version, seed, device, time, hashes, run directory."""
        from miaudit.version import __version__

        timing = self.summary.timing
        device = timing.device if timing else str(self.config.get("device", "?"))
        if timing and timing.machine:
            device += f" ({timing.machine.text()})"
        rows = {
            "miaudit": __version__,
            "seed": str(self.config.get("seed", "?")),
            "device": device,
            "results written": _mtime(self.root / RESULTS_FILE),
            "time (this run)": (f"{timing.total_seconds_this_run:.1f} s (training "
                                f"{timing.train_seconds_this_run:.1f} s, attacks "
                                f"{timing.attack_seconds:.1f} s)") if timing else "n/a",
            "run identity": _or(self.summary.run_identity, "?")[:16],
            "run directory": self.summary.run_dir,
            "python": platform.python_version(),
        }
        if self.external:  # the models were trained and queried elsewhere
            for unknown in ("seed", "device", "run identity"):
                rows.pop(unknown)
        return rows

    # -- metrics --------------------------------------------------------------------------
    @cached_property
    def attacks(self) -> dict[str, AttackView]:
        return {label: AttackView(label, record)
                for label, record in self.summary.attacks.items()}

    @property
    def headline_level(self) -> str | None:
        """The FPR level the headline ranks by: "0.1%", else "1%" when no attack measures
        TPR at 0.1% (few non-members), else None (ranked by AUC)."""
        for level in ("0.1%", "1%"):
            if any(a.tpr(level).measurable for a in self.attacks.values()):
                return level
        return None

    @property
    def modality(self) -> Modality:
        """The kind of outputs audited (:mod:`miaudit.auditor.modality`): a language model's
        audit states next-token accuracy and perplexity."""
        return TEXT if self.summary.target_models.test_perplexity is not None else CLASSES

    def best_attack(self) -> AttackView:
        """The strongest attack (:meth:`Summary.strongest` at :attr:`headline_level`, the
        terminal's rule too); by AUC when no TPR level is measurable."""
        level = self.headline_level
        if level is None:
            return max(self.attacks.values(), key=lambda a: a.auc)
        return self.attacks[self.summary.strongest(f"tpr@{level}")]

    @property
    def interval_method(self) -> str:
        """What the pooled intervals cover (results.json's ``ci_method``)."""
        method = next(iter(self.attacks.values())).record.ci_method
        return method or ("exact Clopper-Pearson, conditional on these trained models "
                          "(results written before issue 23)")

    @property
    def accuracy(self) -> Accuracy:
        stats = self.summary.target_models
        return Accuracy(stats.train_accuracy, stats.test_accuracy, stats.generalization_gap,
                        stats.train_accuracy_std, stats.test_accuracy_std)

    @property
    def robust_accuracy(self) -> dict[str, float]:
        return self.summary.target_models.robust_accuracy()

    @property
    def seconds_per_model(self) -> float | None:
        return self.summary.target_models.train_seconds_mean

    @property
    def privacy(self) -> Privacy | None:
        return self.summary.privacy

    # -- artefacts ------------------------------------------------------------------------
    @cached_property
    def members(self) -> np.ndarray:
        """(T, A) bool: membership of every audited sample in every target (the columns of
        the stored scores)."""
        from miaudit.auditor.rundir import audited_members

        return audited_members(self.root, self.summary.targets)

    @cached_property
    def audited(self) -> np.ndarray:
        """(A,) the pool indices of the audited samples (the columns of the stored scores)."""
        from miaudit.auditor.rundir import RunDir

        return RunDir(self.root).read_split()["audited"]

    def has_scores(self) -> bool:
        return self.scores_problem() is None

    def scores_problem(self) -> str | None:
        """What of the per-sample scores and their memberships the run directory lacks."""
        missing = [name for name in (_or(self.summary.scores_dir, "scores-*"), "keep.npy",
                                     "split.npz") if not (self.root / name).exists()]
        if not missing:
            return None
        return (f"{self.root} holds no {' or '.join(missing)}"
                + (" (only results.json was kept)" if len(missing) == 3 else
                   "; rerun the audit to rebuild it (it reuses every intact model)"))

    def scores(self, label: str) -> np.ndarray:
        """(T, A) per-sample scores of attack ``label`` (higher = member)."""
        from miaudit.auditor.rundir import read_scores

        return read_scores(self.root, self.summary.scores_dir, label)

    def model_accuracies(self) -> list[dict[str, float]]:
        """Train/test accuracy of every target model (recorded by the score stage)."""
        stats = self.summary.target_models
        return [{"index": int(t), "train": float(train), "test": float(test)}
                for t, train, test in zip(self.targets, stats.per_target_train,
                                          stats.per_target_test)]

    @property
    def memorization(self) -> dict[str, Any] | None:
        """The memorization analysis of this scores generation (an older one is ignored)."""
        path = self.root / "memorization.json"
        table = read_json(verify_file(path, REBUILD)) if path.exists() else None
        return table if table and table.get("scores_dir") == self.summary.scores_dir else None

    def file_bytes(self, name: str) -> bytes | None:
        path = self.root / name
        return verify_file(path, REBUILD).read_bytes() if path.exists() else None

    def exposed(self) -> dict[str, Any] | None:
        """The contents of exposed.npz (see :mod:`miaudit.reporting.exposed`), or None."""
        path = self.root / EXPOSED_FILE
        if not path.exists():
            return None
        try:
            with np.load(verify_file(path, REBUILD), allow_pickle=False) as stored:
                return {key: stored[key] for key in stored.files}
        except (OSError, ValueError) as error:
            raise RunDirError(f"cannot read {path}: {error}") from None

    def class_names(self) -> list[str] | None:
        exposed = self.exposed()
        return None if exposed is None else [str(c) for c in exposed["class_names"]]


def _or(value: Any, default: Any) -> Any:
    """``value``, or ``default`` where the record has none (a field older layouts lack)."""
    return default if value is None else value


def _spec(name: str, options: dict[str, Any] | None) -> str:
    if not options:
        return str(name)
    return f"{name} (" + ", ".join(f"{k}={v}" for k, v in options.items()) + ")"


def _mtime(path: Path) -> str:
    if not path.exists():
        return "n/a"
    stamp = datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M UTC")
