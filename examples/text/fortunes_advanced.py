"""The newer language-model attacks on Debian's fortune cookies: ReCaLL, Con-ReCall and DC-PDD
beside Min-K%++ and the others, the blind baseline, and (with ``miaudit dataset-inference``
afterwards) dataset inference.

ReCaLL and Con-ReCall put other texts before each text, so the model needs a context longer
than one fortune: a 2-layer GPT-2 (dim 64, 256 positions) is first pre-trained on 192-byte
chunks of *other* fortune files (public data, disjoint from the audited pool), then each of
``--models`` models is fully fine-tuned on a random half of the audited cookies (rotation).
The prefix queries store every text's per-token log-probabilities after 5 population texts
(ReCaLL) and after 5 of the model's own members (Con-ReCall), once per model.

    python examples/text/fortunes_advanced.py --out runs/text-advanced
    miaudit dataset-inference runs/text-advanced/<run> --attack loss,min_k_pp,recall,zlib
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

FORTUNES = Path("/usr/share/games/fortunes")
PUBLIC = ("computers", "definitions", "education", "drugs", "disclaimer")
ATTACKS = ["loss", "zlib", "min_k", "min_k_pp", "dc_pdd", "recall", "con_recall", "ref_model",
           "lira"]
CONTEXT = 256


def pretrain_base(out: Path, fortunes: Path, epochs: int) -> Path:
    """A GPT-2 with CONTEXT positions trained on 192-byte chunks of other fortune files."""
    import torch

    from miaudit import DATASETS, MODELS, RECIPES
    from miaudit.data import make_pool
    from miaudit.training import TrainEnv, TrainParams

    # the registered components, as an audit config names them
    load_text, causal_lm = DATASETS.get("text"), MODELS.get("causal_lm")
    language_model = RECIPES.get("lm")

    folder = out / "base-gpt2-256"
    if (folder / "config.json").is_file():
        return folder
    torch.set_num_threads(1)
    public = out / "public-fortunes.txt"
    public.parent.mkdir(parents=True, exist_ok=True)
    public.write_text("\n%\n".join((fortunes / name).read_text(errors="replace")
                                   for name in PUBLIC if (fortunes / name).is_file()))
    pool = make_pool(load_text(data_dir=public, format="fortune", unit="chunk",
                               max_tokens=192), "all", None, 0)
    torch.manual_seed(0)
    model = causal_lm(input_shape=(pool.x.shape[1],), num_classes=pool.num_classes, dim=64,
                      heads=4, positions=CONTEXT)
    params = TrainParams(epochs=epochs, batch_size=16, optimizer="adam", lr=0.003,
                         weight_decay=0.0, schedule="constant")
    started = time.process_time()
    model, log = language_model().train(model, pool.x, pool.y, params, TrainEnv(seed=0))
    model.lm.save_pretrained(folder)
    print(f"pre-trained the base on {len(pool.x)} chunks of public fortunes in "
          f"{time.process_time() - started:.0f} CPU-s (final loss {log['loss'][-1]:.3f} "
          "nats per byte)", flush=True)
    return folder


def config(corpus: Path, out: Path, base: Path, models: int, pool: int,
           epochs: int) -> dict[str, Any]:
    return {
        "name": "fortunes-advanced", "seed": 0,
        "data": {"name": "text", "data_dir": str(corpus), "pool_size": pool,
                 "population_size": 0.1, "options": {"format": "fortune", "max_tokens": 48}},
        "model": {"name": "causal_lm", "options": {"checkpoint": str(base)}},
        "train": {"recipe": "lm", "epochs": epochs, "batch_size": 8, "optimizer": "adam",
                  "lr": 0.001, "weight_decay": 0.0, "schedule": "constant"},
        "num_models": models, "queries": ["identity", "prefix", "prefix:member=true"],
        "attacks": ATTACKS, "output_dir": str(out), "device": "cpu", "threads": 1,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/text-advanced"))
    parser.add_argument("--fortunes", type=Path, default=FORTUNES)
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--pool", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--base-epochs", type=int, default=6)
    args = parser.parse_args(argv)
    from miaudit import audit

    corpus = args.fortunes / "cookie"
    if not corpus.is_file():
        raise SystemExit(f"{corpus} is missing: apt-get install fortunes (or --fortunes DIR)")
    base = pretrain_base(args.out, args.fortunes, args.base_epochs)
    results = audit(config(corpus, args.out, base, args.models, args.pool, args.epochs),
                    show_progress=False)
    summary = results.summary
    rows = {label: {"auc": a.auc, "auc_ci": a.interval("auc"), "tpr@1%": a.pooled["tpr@1%"],
                    "tpr@1%_ci": a.interval("tpr@1%"),
                    "auc_minus_min_k_pp": None if label == "min_k_pp" else
                    a.differences["min_k_pp"]["auc"].model_dump(),
                    "auc_over_blind": a.over_blind["auc"].model_dump()}
            for label, a in summary.attacks.items()}
    record = {"run_dir": str(results.run_dir), "attacks": rows,
              "blind_baseline": summary.blind_baseline.model_dump(),
              "target_models": {"train_ppl": summary.target_models.train_perplexity,
                                "test_ppl": summary.target_models.test_perplexity}}
    (args.out / "text_advanced.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(rows, indent=1))
    return record


if __name__ == "__main__":
    main()
