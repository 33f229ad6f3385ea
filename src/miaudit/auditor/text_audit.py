"""The checks a language model's audit (data set ``text``) needs before training, and the
text attacks scored by default. What else differs for text outputs (their storage, the attack
input, the targets' statistics) is the text modality's (:mod:`miaudit.auditor.modality`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from miaudit._runtime.machine import check_score_memory, score_memory_bytes
from miaudit.auditor.modality import TEXT, modality_of
from miaudit.config import AuditConfig, build_attack
from miaudit.data import Pool
from miaudit.errors import ConfigError
from miaudit.queries.signals import token_view

TEXT_QUERIES = ["identity"]
#: the text attacks scored by default on per-token log-probs (``miaudit score``); RMIA on a
#: text's per-token geometric-mean probability needs gamma near 1 (its ratios stay near 1)
TEXT_ATTACKS = ["loss", "zlib", "min_k", "min_k_pp", "dc_pdd", "ref_model", "lira",
                "lira:offline=true", "rmia:gamma=1", "attack_r"]


def check_modality(cfg: AuditConfig, pool: Pool) -> None:
    """Attacks, queries, recipes and stages that fit the pool's kind of outputs (one clear
    line each, before training)."""
    modality = modality_of(pool)
    for label, attack in cfg.components.attacks.items():
        if modality.name not in attack.modalities:
            raise ConfigError(f"attacks: {label!r} does not apply to {modality.outputs}; "
                              f"{fitting_attacks(modality.name)}")
    if modality is TEXT:
        check_text_settings(cfg, pool)


def fitting_attacks(kind: str) -> str:
    from miaudit.registry import ATTACKS

    names = [n for n in ATTACKS.names() if ":" not in n
             and kind in getattr(ATTACKS.get(n), "modalities", ("classes",))]
    return f"attacks for {kind}: {', '.join(names)}"


def check_text_settings(cfg: AuditConfig, pool: Pool) -> None:
    from miaudit.auditor.stages.prefix_query import is_conditional

    queries = list(cfg.queries)
    if queries[:1] != TEXT_QUERIES or not all(is_conditional(q) for q in queries[1:]):
        raise ConfigError(f"queries: a language model is queried once per text (its per-token "
                          f"log-probabilities), then optionally after prefixes of other texts; "
                          f"set queries: {TEXT_QUERIES} (ReCaLL: [identity, prefix], "
                          f"Con-ReCall: [identity, prefix, 'prefix:member=true']), got "
                          f"{cfg.queries}")
    if len(queries) > 1:
        check_prefix_room(cfg, pool)
    for where, train in (("train", cfg.train), ("reference_train", cfg.reference_train)):
        if train is not None and not cfg.components.recipe_of(train).language_model:
            raise ConfigError(f"{where}.recipe {train.recipe!r} does not train language models; "
                              "use lm (full fine-tuning), lora, or dpsgd with base lora")
        if train is not None and train.ensemble > 1:
            raise ConfigError(f"{where}.ensemble: vectorized ensembles are not supported for "
                              "language models; set it to 1")
    unsupported = [name for name, value in (
        ("output_defense", cfg.output_defense), ("robust_eval", cfg.robust_eval),
        ("memorization_attack", cfg.memorization_attack)) if value is not None]
    if unsupported:
        raise ConfigError(f"{', '.join(unsupported)}: not available for language models "
                          "(they assume class outputs); remove them")
    positions = pool.x.shape[1] - 1
    models = cfg.num_models + (cfg.protocol == "fixed_target")
    # outputs: 4 float32 arrays per token position; signals: 4 float64 statistics per text
    check_score_memory(score_memory_bytes(models, len(pool), outputs=4 * positions, signals=4),
                       f"num_models {models} x pool {len(pool)} x {positions} tokens",
                       "lower one of them (or data.options.max_tokens)")


def check_prefix_room(cfg: AuditConfig, pool: Pool) -> None:
    """A prefix query needs context beyond the longest sample (a GPT-2 built from a config
    has exactly that many positions unless model.options.positions says more)."""
    options = cfg.model.options
    if options.get("checkpoint") is not None:
        return  # its context length is checked when the query runs
    width = pool.x.shape[1]
    if (options.get("positions") or width) <= width:
        raise ConfigError(f"queries: a prefix query puts other texts before each text, and the "
                          f"model's context is the longest sample ({width} tokens); set "
                          f"model.options.positions above {width} (e.g. {4 * width})")
    if cfg.data.population_size in (None, 0, 0.0):
        raise ConfigError("queries: the prefix query takes its non-member texts from the "
                          "population data; set data.population_size")


def default_text_attacks(outputs: Any, has_population: bool) -> list[str]:
    """TEXT_ATTACKS less those the outputs lack inputs for (texts: zlib; mu/sigma:
    min_k_pp; token ids: dc_pdd; population data: rmia, dc_pdd)."""
    has_mu = np.isfinite(token_view(outputs.logits[0, :, 0])[:, 1]).any()
    return [a for a in TEXT_ATTACKS if (a != "zlib" or outputs.texts is not None)
            and (a != "min_k_pp" or has_mu)
            and (a != "dc_pdd" or getattr(outputs, "tokens", None) is not None)
            and (has_population or not build_attack(a).needs_population)]
