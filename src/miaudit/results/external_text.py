"""Per-token log-probabilities of language models produced elsewhere, for ``miaudit score``.

A bundle (``.npz`` or ``.safetensors``) with arrays

- ``keep`` (M, N): model m trained on text i;
- ``token_logprobs`` (M, N, T): log p(t_j | t_<j) of each text's tokens under each model,
  NaN after a text's last token (texts of different lengths);
- optional ``token_mu``, ``token_sigma`` (M, N, T): mean and standard deviation of
  log p(z | t_<j) over the model's next-token distribution (Min-K%++ needs them);
- optional ``token_correct`` (M, N, T): 1 where the model's most likely next token was t_j
  (the next-token accuracy beside the leakage numbers);
- optional ``texts`` (N,) strings (``.npz`` only; the zlib attack and the blind baseline
  need them);
- optional ``token_ids`` (N, T) integers: the id of each scored token, -1 where padded
  (DC-PDD's token frequencies need them, with ``--population``).

is turned into the layout the audit's query stage stores for ``causal_lm`` models (see
:mod:`miaudit.queries.signals`), so every text attack reads it the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from miaudit.errors import ExternalOutputsError
from miaudit.results.external_outputs import ExternalOutputs, as_bool_keep, check_balance
from miaudit.results.outputfiles import _read_arrays

OPTIONAL = ("token_mu", "token_sigma", "token_correct")


def is_text_bundle(path: Path) -> bool:
    """Whether the bundle holds token_logprobs (array names only; nothing is loaded)."""
    try:
        if path.suffix.lower() == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="numpy") as handle:
                return "token_logprobs" in handle.keys()
        if path.suffix.lower() == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                return "token_logprobs" in archive.files
    except Exception:  # not readable as such: the bundle reader reports it with its message
        return False
    return False


def read_text_bundle(path: Path, *, balance: str = "warn",
                     population: np.ndarray | None = None) -> ExternalOutputs:
    where = str(path)
    arrays = _read_arrays(path, path.suffix.lower())
    if "keep" not in arrays:
        raise ExternalOutputsError(f"{where}: no array 'keep' (models x texts, bool)")
    keep = as_bool_keep(np.asarray(arrays["keep"]), where)
    log_p = _real(arrays["token_logprobs"], "token_logprobs", where)
    if keep.ndim != 2 or keep.shape[0] < 2 or log_p.ndim != 3 or log_p.shape[:2] != keep.shape:
        raise ExternalOutputsError(
            f"{where}: keep {keep.shape} and token_logprobs {log_p.shape} must be (M, N) and "
            "(M, N, T) for the same M >= 2 models and N texts")
    _check_padding(log_p, where)
    real = np.isfinite(log_p)
    if (log_p[real] > 1e-6).any():
        raise ExternalOutputsError(f"{where}: token_logprobs holds values > 0; give natural "
                                   "log-probabilities (<= 0), not probabilities or losses")
    if not real.any(axis=2).all():
        raise ExternalOutputsError(f"{where}: some texts have no finite token log-probability "
                                   "under some model; each text needs at least one token")
    stats = [log_p]
    for name in OPTIONAL:
        if name in arrays:
            extra = _real(arrays[name], name, where)
            if extra.shape != log_p.shape:
                raise ExternalOutputsError(f"{where}: {name} {extra.shape} must match "
                                           f"token_logprobs {log_p.shape}")
            if not np.isfinite(extra[real]).all():
                raise ExternalOutputsError(f"{where}: {name} is NaN or infinite where "
                                           "token_logprobs is finite")
            _check_range(extra[real], name, where)
            stats.append(np.where(real, extra, np.nan))
        else:
            stats.append(np.full(log_p.shape, np.nan))
    check_balance(keep, balance, where, population)
    packed = np.concatenate(stats, axis=-1).astype(np.float32)[:, :, None, :]
    return ExternalOutputs(keep=keep, logits=packed, labels=np.zeros(keep.shape[1], np.int64),
                           query_names=["identity"],
                           model_names=[f"model{m}" for m in range(keep.shape[0])],
                           modality="text", texts=_texts(arrays, keep.shape[1], where),
                           tokens=_token_ids(arrays, log_p.shape[1:], where))


def _token_ids(arrays: dict[str, Any], shape: tuple[int, ...], where: str) -> np.ndarray | None:
    """(N, 1 + T) ids in the audit's layout (a first column for the begin-of-text token,
    unused by the attacks), or None."""
    if "token_ids" not in arrays:
        return None
    ids = np.asarray(arrays["token_ids"])
    if ids.dtype.kind not in "iu" or ids.shape != shape or (ids < -1).any():
        raise ExternalOutputsError(f"{where}: token_ids must be {shape} integers >= -1 (-1 "
                                   f"where padded), got {ids.dtype} {ids.shape}")
    return np.concatenate([np.full((shape[0], 1), -1, dtype=np.int64),
                           ids.astype(np.int64)], axis=1)


def _real(array: Any, name: str, where: str) -> np.ndarray:
    """``array`` as float64 when it holds real numbers (never a complex value cast with a
    warning, nor strings or objects)."""
    array = np.asarray(array)
    if array.dtype.kind not in "biuf":
        kind = "complex numbers" if array.dtype.kind == "c" else f"dtype {array.dtype}"
        raise ExternalOutputsError(f"{where}: {name} holds {kind}; give real numbers "
                                   "(float32 or float64)")
    return array.astype(np.float64)


def _check_padding(log_p: np.ndarray, where: str) -> None:
    """NaN marks the positions after a text's last token, nothing else: +-inf, or NaN
    before a finite value, is a damaged or misaligned array."""
    if np.isinf(log_p).any():
        m, n, t = (int(i) for i in np.argwhere(np.isinf(log_p))[0])
        raise ExternalOutputsError(f"{where}: token_logprobs is infinite (model {m}, text {n}, "
                                   f"token {t}); give finite log-probabilities and NaN only "
                                   "after a text's last token")
    real = np.isfinite(log_p)
    gap = real[..., 1:] & ~real[..., :-1]  # a token after a NaN
    if gap.any():
        m, n, t = (int(i) for i in np.argwhere(gap)[0])
        raise ExternalOutputsError(f"{where}: token_logprobs is NaN at token {t} of text {n} "
                                   f"(model {m}) but finite after it; NaN marks only the "
                                   "positions after a text's last token (pad at the end)")


def _check_range(values: np.ndarray, name: str, where: str) -> None:
    if name == "token_correct" and not np.isin(values, (0.0, 1.0)).all():
        bad = values[~np.isin(values, (0.0, 1.0))][0]
        raise ExternalOutputsError(f"{where}: token_correct holds {bad:g}; give 1 where the "
                                   "model's most likely next token was the text's, else 0")
    if name == "token_sigma" and (values <= 0).any():
        raise ExternalOutputsError(f"{where}: token_sigma holds {values[values <= 0][0]:g}; "
                                   "standard deviations must be > 0 (Min-K%++ divides by them)")


def _texts(arrays: dict[str, Any], count: int, where: str) -> list[str] | None:
    if "texts" not in arrays:
        return None
    texts = np.asarray(arrays["texts"])
    if texts.dtype.kind != "U" or texts.shape != (count,):
        raise ExternalOutputsError(f"{where}: texts must be ({count},) strings, got "
                                   f"{texts.dtype} {texts.shape}")
    return [str(t) for t in texts]
