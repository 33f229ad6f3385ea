"""The target models' statistics: every fact results.json states about the audited models
(accuracy, loss, calibration, training time, robust accuracy) is declared here once, as a
field of :class:`TargetModels`, computed here from the targets' outputs
(:func:`classifier_stats`, :func:`text_stats`) and shown by the reports from the field's
title (:func:`shown_rows`): adding a statistic changes this module only.

Every rate is a fraction in [0, 1] (the displays print percent and say so).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from miaudit.results.record import Record
from miaudit.stats import metrics

Interval = list[float]  # [low, high]
CALIBRATION_BINS = 15  # Guo et al. (2017)'s equal-width confidence bins


def shown(title: str, unit: str) -> Any:
    """An optional statistic the reports list under ``title`` when a run has it; ``unit``:
    "percent" (a fraction printed as percent), "seconds" or "number"."""
    return Field(default=None, title=title, json_schema_extra={"shown": unit})


class TargetModels(Record):
    """Utility of the target models (means over targets; fractions)."""

    train_accuracy: float
    test_accuracy: float
    generalization_gap: float
    train_accuracy_std: float
    test_accuracy_std: float
    test_accuracy_ci: Interval | None = None
    per_target_train: list[float] = []
    per_target_test: list[float] = []
    accuracy_query: str | None = None  # the clean query the accuracy was measured on
    accuracy_note: str | None = None  # outputs made elsewhere without a clean query
    accuracy_kind: str | None = None  # language models: what the accuracy counts
    train_loss: float | None = None  # language models: per-token loss and perplexity
    test_loss: float | None = None
    train_perplexity: float | None = None
    test_perplexity: float | None = None
    test_calibration_error: float | None = shown(
        f"expected calibration error (test, {CALIBRATION_BINS} bins)", "percent")
    train_seconds_mean: float | None = shown("training time per target", "seconds")
    # robust evaluation (config robust_eval): natural and adversarial accuracy
    train_natural_acc: float | None = shown("train natural acc", "percent")
    train_natural_acc_per_target: list[float] | None = None
    train_robust_acc: float | None = shown("train robust acc", "percent")
    train_robust_acc_per_target: list[float] | None = None
    test_natural_acc: float | None = shown("test natural acc", "percent")
    test_natural_acc_per_target: list[float] | None = None
    test_robust_acc: float | None = shown("test robust acc", "percent")
    test_robust_acc_per_target: list[float] | None = None

    def robust_accuracy(self) -> dict[str, float]:
        """{"train_natural_acc": ..., ...}: the robust evaluation's means, when it ran."""
        names = ("train_natural_acc", "train_robust_acc", "test_natural_acc", "test_robust_acc")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}

    def with_facts(self, **facts: Any) -> TargetModels:
        """These statistics with ``facts`` that other stages own (training time, robust
        accuracy, the query the accuracy was measured on) added, validated."""
        return type(self).model_validate({**dict(self.items()), **facts})


def shown_rows(stats: TargetModels) -> dict[str, str]:
    """{title: printed value} of every optional statistic the run has, in declaration order,
    for the reports' table of the target models."""
    rows = {}
    for name, field in type(stats).model_fields.items():
        unit = (field.json_schema_extra or {}).get("shown")
        value = getattr(stats, name)
        if unit is None or value is None:
            continue
        rows[field.title] = {"percent": f"{100 * value:.2f}%", "seconds": f"{value:.1f} s",
                             "number": f"{value:.4g}"}[unit]
    return rows


def classifier_stats(logits: np.ndarray, labels: np.ndarray, keep: np.ndarray,
                     audited: np.ndarray, targets: list[int], column: int) -> TargetModels:
    """Train (members) and test (audited non-members) accuracy of the targets from their
    (M, N, Q, C) outputs' query ``column``, with an exact 95% interval for the mean test
    accuracy, and their calibration on the test samples."""
    in_audit = np.zeros(len(labels), dtype=bool)
    in_audit[audited] = True
    train_acc, test_acc, calibration, tested, correct_total = [], [], [], 0, 0
    for target in targets:
        outputs = logits[target, :, column]
        correct = outputs.argmax(-1) == labels
        member, held_out = keep[target], ~keep[target] & in_audit
        train_acc.append(correct[member].mean())
        test_acc.append(correct[held_out].mean())
        calibration.append(calibration_error(outputs[held_out], labels[held_out]))
        tested += int(held_out.sum())
        correct_total += int(correct[held_out].sum())
    train, test = np.array(train_acc), np.array(test_acc)
    return TargetModels(
        train_accuracy=float(train.mean()), test_accuracy=float(test.mean()),
        generalization_gap=float((train - test).mean()),
        train_accuracy_std=float(train.std()), test_accuracy_std=float(test.std()),
        test_accuracy_ci=metrics.clopper_pearson(correct_total, tested),
        per_target_train=[float(v) for v in train], per_target_test=[float(v) for v in test],
        test_calibration_error=float(np.mean(calibration)))


def calibration_error(logits: np.ndarray, labels: np.ndarray,
                      bins: int = CALIBRATION_BINS) -> float:
    """Expected calibration error (Guo et al. 2017, Eq. 3): the sample-weighted mean over
    equal-width bins of the top softmax probability of |accuracy - mean confidence|. An
    overconfident model (confidence above accuracy on unseen data) is what confidence-based
    membership attacks exploit. NaN without samples."""
    if len(labels) == 0:
        return float("nan")
    shifted = logits - logits.max(-1, keepdims=True)
    probabilities = np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)
    confidence = probabilities.max(-1)
    correct = probabilities.argmax(-1) == labels
    # bin b holds confidences in (b / bins, (b + 1) / bins]
    index = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
    count = np.bincount(index, minlength=bins)
    gap = np.abs(np.bincount(index, correct, bins) - np.bincount(index, confidence, bins))
    return float(gap.sum() / count.sum())


def text_stats(outputs: np.ndarray, keep: np.ndarray, audited: np.ndarray,
               targets: list[int]) -> TargetModels:
    """The targets' utility on text: next-token top-1 accuracy (the keys of class accuracy,
    so reports read it unchanged) and per-token loss / perplexity, on members and audited
    non-members. The interval of the test accuracy is a normal interval over the test texts'
    per-text accuracies (tokens of one text are not independent trials)."""
    from miaudit.queries.signals import token_view

    in_audit = np.zeros(keep.shape[1], dtype=bool)
    in_audit[audited] = True
    rows: dict[str, list[float]] = {key: [] for key in (
        "train_acc", "test_acc", "train_loss", "test_loss")}
    tested: list[np.ndarray] = []
    for target in targets:
        view = token_view(outputs[target, :, 0]).astype(np.float64)
        real = np.isfinite(view[:, 0])
        count = np.maximum(real.sum(1), 1)
        loss = -np.where(real, view[:, 0], 0).sum(1) / count
        given = np.isfinite(view[:, 3])  # outputs made elsewhere may lack correctness
        correct = np.where(given, view[:, 3], 0).sum(1) / np.maximum(given.sum(1), 1)
        correct[~given.any(1)] = np.nan
        member, non_member = keep[target], ~keep[target] & in_audit
        for split, rows_mask in (("train", member), ("test", non_member)):
            rows[f"{split}_acc"].append(float(correct[rows_mask].mean()))
            rows[f"{split}_loss"].append(float(loss[rows_mask].mean()))
        tested.append(correct[non_member])
    train, test = np.array(rows["train_acc"]), np.array(rows["test_acc"])
    per_text = np.concatenate(tested)
    half = 1.96 * per_text.std(ddof=1) / np.sqrt(len(per_text)) if len(per_text) > 1 else np.nan
    return TargetModels(
        train_accuracy=float(train.mean()), test_accuracy=float(test.mean()),
        generalization_gap=float((train - test).mean()),
        train_accuracy_std=float(train.std()), test_accuracy_std=float(test.std()),
        test_accuracy_ci=[float(test.mean() - half), float(test.mean() + half)],
        per_target_train=[float(v) for v in train], per_target_test=[float(v) for v in test],
        accuracy_kind="next-token top-1 accuracy" if np.isfinite(train).all() else
        "not given (no token_correct in the outputs)",
        train_loss=float(np.mean(rows["train_loss"])),
        test_loss=float(np.mean(rows["test_loss"])),
        train_perplexity=float(np.exp(np.mean(rows["train_loss"]))),
        test_perplexity=float(np.exp(np.mean(rows["test_loss"]))))


#: accuracy within this many points of chance (1 / classes) counts as "learned nothing"
CHANCE_MARGIN = 0.05


def untrained_caveat(stats: TargetModels, num_classes: int) -> str | None:
    """A warning when the targets' test or train accuracy is within :data:`CHANCE_MARGIN` of
    chance (1 / ``num_classes``): their leakage numbers then describe an untrained model (a
    CIFAR-10 audit at 3 epochs: 11.4% train, 11.1% test, printed as if meaningful)."""
    if num_classes < 2 or "test_accuracy" not in stats:
        return None
    chance = 1.0 / num_classes
    test, train = stats["test_accuracy"], stats["train_accuracy"]
    if max(test, train) > chance + CHANCE_MARGIN:
        return None
    return (f"the target models learned (almost) nothing: train accuracy {100 * train:.1f}%, "
            f"test {100 * test:.1f}%, chance {100 * chance:.1f}% ({num_classes} classes); the "
            "leakage numbers describe an untrained model: train longer (train.epochs, train.lr)"
            " or check the data")
