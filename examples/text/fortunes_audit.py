"""Audit a small language model fine-tuned on Debian's fortune cookies, three ways.

1. **overfit**: a 2-layer GPT-2 (dim 64) trained from scratch on its members for many epochs;
2. **regularized**: the same model with dropout 0.2, weight decay and a third of the epochs;
3. **dp_lora**: LoRA adapters on a base pre-trained on *other* fortune files (public data,
   disjoint from the audited pool), fine-tuned with DP-SGD (Opacus) on the LoRA matrices.

Each audit trains ``--models`` models on random halves of the pool (rotation: every model is
the target once), stores every model's per-token log-probabilities once, and scores the text
attacks over them. Prints one row per setting: next-token accuracy and perplexity on members
and non-members, and per attack the pooled AUC (mean +- std over targets) and TPR at 1% FPR
with its 95% Clopper-Pearson interval. Needs ``apt-get install fortunes`` (or ``--corpus``).

    python examples/text/fortunes_audit.py --out runs/text-example
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

FORTUNES = Path("/usr/share/games/fortunes")
AUDITED = "cookie"  # the audited pool
PUBLIC = ("computers", "definitions", "education", "drugs", "disclaimer")  # the base's data
ATTACKS = ["loss", "zlib", "min_k", "min_k_pp", "ref_model", "lira", "rmia:gamma=1"]
SHOWN = ["loss", "zlib", "min_k_pp", "ref_model", "lira", "rmia:gamma=1"]


def base_config(corpus: Path, out: Path, models: int, pool: int) -> dict[str, Any]:
    return {
        "seed": 0,
        "data": {"name": "text", "data_dir": str(corpus), "pool_size": pool,
                 "population_size": 0.1,
                 "options": {"format": "fortune", "max_tokens": 48}},
        "model": {"name": "causal_lm", "options": {"dim": 64, "heads": 4, "layers": 2}},
        "num_models": models, "queries": ["identity"], "attacks": ATTACKS,
        "output_dir": str(out), "device": "cpu", "threads": 1,
    }


def settings(base_checkpoint: Path | None) -> dict[str, dict[str, Any]]:
    adam = {"batch_size": 8, "optimizer": "adam", "lr": 0.002, "weight_decay": 0.0,
            "schedule": "constant"}
    chosen = {
        "overfit": {"train": {"recipe": "lm", "epochs": 30, **adam}},
        "regularized": {
            "model": {"name": "causal_lm", "options": {"dim": 64, "heads": 4, "layers": 2,
                                                       "dropout": 0.2}},
            "train": {"recipe": "lm", "epochs": 10, **{**adam, "optimizer": "adamw",
                                                       "weight_decay": 0.1}}},
    }
    if base_checkpoint is not None:
        chosen["dp_lora"] = {
            "model": {"name": "causal_lm", "options": {"checkpoint": str(base_checkpoint)}},
            "train": {"recipe": "dpsgd", "epochs": 10, "batch_size": 32, "optimizer": "adam",
                      "lr": 0.01, "weight_decay": 0.0, "schedule": "constant",
                      "recipe_options": {"base": {"name": "lora", "r": 8},
                                         "target_epsilon": 8.0, "max_grad_norm": 1.0}}}
    return chosen


def pretrain_base(out: Path, fortunes: Path, epochs: int = 4) -> Path:
    """A 2-layer GPT-2 trained on other fortune files (no audited text), saved with
    save_pretrained; reused when present (its files enter the audits' identities)."""
    import torch

    from miaudit import DATASETS, RECIPES
    from miaudit.data import make_pool
    from miaudit.models import build_model
    from miaudit.training import TrainEnv, TrainParams

    folder = out / "base-gpt2-public-fortunes"
    if (folder / "config.json").is_file():
        return folder
    torch.set_num_threads(1)  # as the audits (threads: 1): spinning threads waste a shared CPU
    public = out / "public-fortunes.txt"
    public.parent.mkdir(parents=True, exist_ok=True)
    public.write_text("\n%\n".join((fortunes / name).read_text(errors="replace")
                                   for name in PUBLIC if (fortunes / name).is_file()))
    pool = make_pool(DATASETS.build("text", data_dir=public, format="fortune", max_tokens=48),
                     "all", None, 0)
    torch.manual_seed(0)
    # n_positions 49: the audited pool's samples are at most 1 + 48 tokens as well
    model = build_model("causal_lm", input_shape=(49,), num_classes=pool.num_classes, dim=64,
                        heads=4)
    params = TrainParams(epochs=epochs, batch_size=32, optimizer="adam", lr=0.003,
                         weight_decay=0.0, schedule="constant")
    x = torch.nn.functional.pad(pool.x, (0, 49 - pool.x.shape[1]), value=-1)[:, :49]
    model, log = RECIPES.build("lm").train(model, x, pool.y, params, TrainEnv(seed=0))
    model.lm.save_pretrained(folder)
    print(f"pre-trained the base on {len(x)} public fortunes (final loss "
          f"{log['loss'][-1]:.3f} nats per byte)", flush=True)
    return folder


def row(name: str, summary: Any) -> dict[str, Any]:
    """One table row from the run's typed results (``Results.summary``)."""
    models = summary.target_models
    attacks = {}
    for label in SHOWN:
        attack = summary.attacks[label]
        attacks[label] = {"auc": attack.auc, "auc_mean": attack.mean["auc"],
                          "auc_std": attack.std["auc"],
                          "tpr@1%": attack.pooled["tpr@1%"],
                          "tpr@1%_ci": attack.interval("tpr@1%")}
    return {"setting": name, "train_acc": models.train_accuracy,
            "test_acc": models.test_accuracy, "test_acc_ci": models.test_accuracy_ci,
            "train_ppl": models.train_perplexity, "test_ppl": models.test_perplexity,
            "epsilon": None if summary.privacy is None else summary.privacy.epsilon,
            "train_seconds_per_model": models.train_seconds_mean, "attacks": attacks}


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| setting | eps | next-token acc train / test [95% CI] | perplexity train / test | "
          + " | ".join(f"{a} AUC (TPR@1%)" for a in SHOWN) + " |")
    print("|" + " --- |" * (4 + len(SHOWN)))
    for r in rows:
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:.1f}"
        low, high = r["test_acc_ci"]
        cells = [f"{r['attacks'][a]['auc']:.3f} ({100 * r['attacks'][a]['tpr@1%']:.1f}%)"
                 for a in SHOWN]
        print(f"| {r['setting']} | {eps} | {100 * r['train_acc']:.1f} / {100 * r['test_acc']:.1f} "
              f"[{100 * low:.1f}, {100 * high:.1f}] | {r['train_ppl']:.2f} / {r['test_ppl']:.2f} | "
              + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/text-example"))
    parser.add_argument("--fortunes", type=Path, default=FORTUNES)
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--pool", type=int, default=400)
    parser.add_argument("--only", nargs="*", default=None, help="settings to run")
    args = parser.parse_args(argv)
    from miaudit import audit

    corpus = args.fortunes / AUDITED
    if not corpus.is_file():
        raise SystemExit(f"{corpus} is missing: apt-get install fortunes (or --fortunes DIR)")
    wanted = args.only or ["overfit", "regularized", "dp_lora"]
    checkpoint = pretrain_base(args.out, args.fortunes) if "dp_lora" in wanted else None
    rows = []
    for name, overrides in settings(checkpoint).items():
        if name not in wanted:
            continue
        started = time.perf_counter()
        config = {**base_config(corpus, args.out, args.models, args.pool), "name": name,
                  **overrides}
        results = audit(config, show_progress=False)
        rows.append(row(name, results.summary))
        print(f"{name}: {time.perf_counter() - started:.0f} s, {results.run_dir}", flush=True)
    print_table(rows)
    (args.out / "text_example.json").write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
