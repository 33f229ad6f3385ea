"""Per-sample memorization from an audit's own models, and the DeMem paper's Figure 1 analysis.

Memorization (Feldman & Zhang 2020, Eq. 1, estimated as in their Sec. 2 from models trained on
random halves): mem(x) = Pr_IN[f(x) = y] - Pr_OUT[f(x) = y], the accuracy on x of the models that
trained on x minus that of the models that did not. An audit's keep matrix is exactly such a
design (every sample IN for half of the models).

Memorization from independent models (issue 79; the DeMem paper's Table 1 / Fig. 1 read it off
models that are neither the attacked target nor the attack's references): pass
``memorization_models``, a disjoint family of the audit's models; the analysis then states the
estimate's own uncertainty: the per-sample binomial standard error of Pr_IN - Pr_OUT, and a
delete-one-model jackknife (Efron & Stein 1981) of every summary it reports, whose interval
covers what a rerun with a new family of the same size would see. (A bootstrap over the
models is not used: a resample repeats models, so its memorization is coarser than the
estimate's, and its percentile interval is shifted below the estimate it is meant to bracket:
at the CIFAR-10 floor, rho 0.52 against a bootstrap interval [0.38, 0.50].)

The analysis of one target model relates memorization to the per-sample loss (Spearman rank
correlation, for the target's members and non-members separately) and splits the pool into
memorization bins (bin 0: mem <= 0; bins 1..21: equal widths over (0, 1]) with, per bin, the
target's train and test accuracy and the MI leakage (TPR at 0.1% FPR).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr
from scipy.stats import t as student_t

from miaudit._runtime.io import save_figure
from miaudit.queries.signals import cross_entropy
from miaudit.stats.metrics import roc_curve, summarize

FPR_LEVEL = 1e-3


def correctness(outputs: np.ndarray, labels: np.ndarray, query: int = 0) -> np.ndarray:
    """(M, N) bool: is each model's prediction on each sample correct. ``outputs`` are float
    logits (M, N, Q, C) or (M, N, C), or integer predictions (M, N) or (M, N, Q); ``query``
    picks the query column where there is one."""
    outputs, labels = np.asarray(outputs), np.asarray(labels)
    if np.issubdtype(outputs.dtype, np.integer):
        predictions = outputs[..., query] if outputs.ndim == 3 else outputs
    elif np.issubdtype(outputs.dtype, np.floating) and outputs.ndim in (3, 4):
        predictions = (outputs[:, :, query] if outputs.ndim == 4 else outputs).argmax(-1)
    else:
        raise ValueError(f"outputs must be float logits (M, N, Q, C) / (M, N, C) or integer "
                         f"predictions (M, N) / (M, N, Q); got {outputs.dtype} {outputs.shape}")
    if predictions.ndim != 2 or labels.shape != predictions.shape[1:]:
        raise ValueError(f"labels {labels.shape} do not match outputs {outputs.shape}")
    return predictions == labels[None, :]


def memorization(outputs: np.ndarray, labels: np.ndarray, keep: np.ndarray, query: int = 0,
                 exclude: int | list[int] | None = None) -> np.ndarray:
    """(N,) mem(x) = Pr_IN[correct] - Pr_OUT[correct] over the models not in ``exclude`` (e.g.
    the target, so the estimate is independent of it); NaN where a sample has no IN or no OUT
    model. ``outputs`` as in :func:`correctness`; keep (M, N) bool."""
    correct = correctness(outputs, labels, query)
    keep = np.asarray(keep, dtype=bool)
    if keep.shape != correct.shape:
        raise ValueError(f"keep {keep.shape} does not match outputs' (models, samples) "
                         f"{correct.shape}")
    use = np.ones(len(keep), dtype=bool)
    if exclude is not None:
        use[np.atleast_1d(exclude)] = False
    correct, keep = correct[use], keep[use]
    n_in, n_out = keep.sum(0), (~keep).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        pr_in = (correct & keep).sum(0) / n_in
        pr_out = (correct & ~keep).sum(0) / n_out
    return np.where((n_in > 0) & (n_out > 0), pr_in - pr_out, np.nan)


def memorization_se(outputs: np.ndarray, labels: np.ndarray, keep: np.ndarray, query: int = 0,
                     models: np.ndarray | list[int] | None = None) -> np.ndarray:
    """(N,) the binomial standard error of each sample's memorization estimate over
    ``models`` (all when None): sqrt(p_in (1 - p_in) / n_in + p_out (1 - p_out) / n_out)."""
    correct = correctness(outputs, labels, query)
    keep = np.asarray(keep, dtype=bool)
    if models is not None:
        correct, keep = correct[np.asarray(models)], keep[np.asarray(models)]
    n_in, n_out = keep.sum(0), (~keep).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_in = (correct & keep).sum(0) / n_in
        p_out = (correct & ~keep).sum(0) / n_out
        variance = p_in * (1 - p_in) / n_in + p_out * (1 - p_out) / n_out
    return np.where((n_in > 0) & (n_out > 0), np.sqrt(variance), np.nan)


def memorization_bins(mem: np.ndarray, bins: int = 21) -> np.ndarray:
    """Bin index per sample: 0 for mem <= 0, k in 1..bins for mem in ((k-1)/bins, k/bins],
    -1 where mem is NaN."""
    mem = np.asarray(mem, dtype=np.float64)
    index = np.clip(np.ceil(mem * bins), 0, bins)
    return np.where(np.isnan(mem), -1, index).astype(np.int64)


def spearman(values: np.ndarray, mem: np.ndarray) -> dict[str, float]:
    """Spearman rank correlation (scipy) over the samples where both are finite."""
    ok = np.isfinite(values) & np.isfinite(mem)
    if ok.sum() < 3 or np.ptp(values[ok]) == 0 or np.ptp(mem[ok]) == 0:
        return {"rho": float("nan"), "p": float("nan"), "n": int(ok.sum())}
    result = spearmanr(values[ok], mem[ok])
    return {"rho": float(result.statistic), "p": float(result.pvalue), "n": int(ok.sum())}


def _global_threshold(scores: np.ndarray, is_member: np.ndarray, level: float) -> float:
    """The score threshold of the ROC point whose FPR is <= level with the largest TPR."""
    fpr, tpr, thresholds = roc_curve(scores, is_member)
    return float(thresholds[np.argmax(np.where(fpr <= level, tpr, -1.0))])


def _bin_row(k: int, bins: int, rows: np.ndarray, member: np.ndarray, correct: np.ndarray,
             above: np.ndarray, scores: np.ndarray) -> dict[str, Any]:
    members, nonmembers = rows & member, rows & ~member
    low, high = (-np.inf, 0.0) if k == 0 else ((k - 1) / bins, k / bins)
    row: dict[str, Any] = {
        "bin": k, "low": low, "high": high,
        "n_members": int(members.sum()), "n_nonmembers": int(nonmembers.sum()),
        "train_acc": float(correct[members].mean()) if members.any() else float("nan"),
        "test_acc": float(correct[nonmembers].mean()) if nonmembers.any() else float("nan"),
        # TPR of the bin's members at the pool-wide threshold of FPR <= 0.1%.
        "tpr@0.1%": float(above[members].mean()) if members.any() else float("nan"),
    }
    in_bin = summarize(scores[rows], member[rows], (FPR_LEVEL,)) \
        if members.any() and nonmembers.any() else {}
    row["tpr@0.1%_bin"] = in_bin.get("tpr@0.1%", float("nan"))
    row["auc_bin"] = in_bin.get("auc", float("nan"))
    return row


def memorization_analysis(logits: np.ndarray, labels: np.ndarray, keep: np.ndarray,
                          scores: np.ndarray, target: int, query: int = 0,
                          bins: int = 21, memorization_models: list[int] | None = None,
                          ) -> dict[str, Any]:
    """The DeMem paper's Figure 1 analysis for one target model of an audit.

    logits (M, N, Q, C), labels (N,), keep (M, N), scores (N,) an attack's membership scores
    for ``target`` (higher = member). Memorization is estimated from the other M - 1 models,
    or, given ``memorization_models``, from those only (a family disjoint from the target and,
    for an independent estimate, from the attack's references): then the table also carries
    the estimate's own uncertainty (``independent``: the models, the median and root mean
    square per-sample standard error, and per summary the delete-one-model jackknife's
    standard error, its 95% Student-t interval around the estimate (clipped to the summary's
    range) and its bias estimate b: the estimate's expected excess over its limit with many
    more memorization models, so that limit is about estimate - b).
    Returns a table (plain dict): Spearman correlation of the target's per-sample loss with
    memorization for its members ("train") and non-members ("test"), and per memorization bin
    the counts, the target's train/test accuracy, "tpr@0.1%" (the bin's members above the
    pool-wide threshold at FPR <= 0.1%), and "tpr@0.1%_bin"/"auc_bin" (ROC within the bin).
    """
    logits, labels = np.asarray(logits), np.asarray(labels)
    keep, scores = np.asarray(keep, dtype=bool), np.asarray(scores, dtype=np.float64)
    if logits.ndim != 4:
        raise ValueError(f"logits must be (M, N, Q, C), got {logits.shape}")
    if not 0 <= target < len(keep):
        raise ValueError(f"target {target} is not a model index (0..{len(keep) - 1})")
    if scores.shape != labels.shape:
        raise ValueError(f"scores {scores.shape} do not match labels {labels.shape}")
    models = None
    if memorization_models is not None:
        models = np.asarray(sorted(set(memorization_models)), dtype=np.int64)
        if target in models or len(models) < 2 or models.min() < 0 \
                or models.max() >= len(keep):
            raise ValueError(f"memorization_models must be two or more model indices other "
                             f"than the target {target}, got {list(memorization_models)}")
        correct_all = correctness(logits, labels, query)
        mem = _mem_of(correct_all[models], keep[models])
    else:
        mem = memorization(logits, labels, keep, query, exclude=target)
    member = keep[target]
    loss = cross_entropy(logits[target, :, query], labels)
    correct = correctness(logits[target : target + 1], labels, query)[0]
    above = scores >= _global_threshold(scores, member, FPR_LEVEL)
    table = _summaries(mem, member, loss, correct, above, scores, bins)
    table = {"target": int(target), "query": int(query), "bins_over_0_1": int(bins), **table}
    if models is not None:
        se = memorization_se(logits, labels, keep, query, models)
        table["independent"] = {
            "memorization_models": [int(m) for m in models],
            "median_se": float(np.nanmedian(se)),
            "rms_se": float(np.sqrt(np.nanmean(se ** 2))),
            **_jackknife(table, correct_all[models], keep[models], member, loss, correct,
                         above, scores, bins),
        }
    return table


def _mem_of(correct: np.ndarray, keep: np.ndarray) -> np.ndarray:
    n_in, n_out = keep.sum(0), (~keep).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n_in > 0) & (n_out > 0), (correct & keep).sum(0) / n_in
                        - (correct & ~keep).sum(0) / n_out, np.nan)


def _summaries(mem: np.ndarray, member: np.ndarray, loss: np.ndarray, correct: np.ndarray,
               above: np.ndarray, scores: np.ndarray, bins: int) -> dict[str, Any]:
    bin_of = memorization_bins(mem, bins)
    return {
        "n_undefined": int((bin_of < 0).sum()),
        "mean_memorization": {"train": float(np.nanmean(mem[member])),
                              "test": float(np.nanmean(mem[~member]))},
        "spearman_loss_mem": {"train": spearman(loss[member], mem[member]),
                              "test": spearman(loss[~member], mem[~member])},
        "bins": [_bin_row(k, bins, bin_of == k, member, correct, above, scores)
                 for k in range(bins + 1)],
    }


def _pooled_tpr(table: dict[str, Any], high: bool) -> float:
    """TPR@0.1% of the members of memorization 0 (``high`` False) or > 0.5 (True)."""
    rows = [b for b in table["bins"] if b["n_members"]
            and (b["low"] >= 0.5 if high else b["bin"] == 0)]
    n = sum(b["n_members"] for b in rows)
    return sum(b["tpr@0.1%"] * b["n_members"] for b in rows) / n if n else float("nan")


HEADLINES = {  # the summaries whose jackknife interval over memorization models is reported
    "rho_train": lambda t: t["spearman_loss_mem"]["train"]["rho"],
    "rho_test": lambda t: t["spearman_loss_mem"]["test"]["rho"],
    "tpr@0.1%_memorization_0": lambda t: _pooled_tpr(t, False),
    "tpr@0.1%_memorization_above_0.5": lambda t: _pooled_tpr(t, True),
}


def jackknife_quantile(family_size: int) -> float:
    """The multiplier q of the jackknife's 95% interval t +- q se over a memorization family of
    ``family_size`` models: Student's 97.5% quantile on family_size - 1 degrees of freedom."""
    return float(student_t.ppf(0.975, family_size - 1))


def _jackknife(table: dict[str, Any], correct: np.ndarray, keep: np.ndarray,
               member: np.ndarray, loss: np.ndarray, target_correct: np.ndarray,
               above: np.ndarray, scores: np.ndarray, bins: int) -> dict[str, Any]:
    """Delete-one-model jackknife of the HEADLINES over the memorization family (K models):
    se = sqrt((K - 1) / K * sum_i (t_(i) - mean t_(.))^2), the 95% interval
    t +- q se around the full-family estimate t with q Student's 97.5% quantile on K - 1
    degrees of freedom (Efron & Tibshirani 1993, Ch. 11; at K = 8 the normal quantile covered
    92% in a known-truth simulation like tests/test_memorization_independent.py's, t 96%),
    and the bias estimate
    (K - 1) (mean t_(.) - t) (Efron & Stein 1981).
    NaN where a family less one model leaves a summary undefined (K = 2)."""
    count = len(keep)
    with warnings.catch_warnings():  # a smaller family may leave a bin or a side empty
        warnings.simplefilter("ignore", RuntimeWarning)
        dropped = [_summaries(_mem_of(correct[rest], keep[rest]), member, loss, target_correct,
                              above, scores, bins)
                   for rest in (np.delete(np.arange(count), i) for i in range(count))]
    quantile = jackknife_quantile(count)
    se, ci95, bias = {}, {}, {}
    for key, pick in HEADLINES.items():
        estimate = pick(table)
        values = np.array([pick(d) for d in dropped], dtype=float)
        spread = float(np.sqrt((count - 1) / count * np.sum((values - values.mean()) ** 2)))
        se[key] = spread
        low, high = (-1.0, 1.0) if key.startswith("rho") else (0.0, 1.0)  # its range
        ci95[key] = [max(low, estimate - quantile * spread),
                     min(high, estimate + quantile * spread)]
        bias[key] = float((count - 1) * (values.mean() - estimate))
    return {"interval": f"delete-one-model jackknife: estimate +- {quantile:.3f} se "
                        f"(Student t, {count - 1} degrees of freedom)",
            "jackknife_se": se, "ci95": ci95, "jackknife_bias": bias}


def plot_memorization_analysis(table: dict[str, Any], path: str | Path) -> Path:
    """Accuracy (train/test) and MI leakage (TPR at 0.1% FPR) per memorization bin, with the
    sample counts, as a PNG/PDF (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table["bins"]
    x = np.arange(len(rows))
    names = ["<=0"] + [f"{r['high']:.2f}" for r in rows[1:]]
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    top.plot(x, [r["train_acc"] for r in rows], "o-", label="train (members)")
    top.plot(x, [r["test_acc"] for r in rows], "s-", label="test (non-members)")
    top.set_ylabel("accuracy")
    top.legend()
    middle.plot(x, [r["tpr@0.1%"] for r in rows], "o-", color="C3")
    middle.set_ylabel("TPR @ 0.1% FPR")
    bottom.bar(x - 0.2, [r["n_members"] for r in rows], 0.4, label="members")
    bottom.bar(x + 0.2, [r["n_nonmembers"] for r in rows], 0.4, label="non-members")
    bottom.set_ylabel("samples")
    bottom.set_yscale("symlog")
    bottom.legend()
    bottom.set_xticks(x, names, rotation=60, fontsize=7)
    bottom.set_xlabel("memorization bin (upper edge)")
    rho = table["spearman_loss_mem"]
    top.set_title(f"target {table['target']}: Spearman(loss, mem) train "
                  f"{rho['train']['rho']:.3f}, test {rho['test']['rho']:.3f}")
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
