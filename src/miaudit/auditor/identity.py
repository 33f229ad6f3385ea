"""What identifies each stage's artefacts: one definition each.

* a **run** (the run directory's hash): the data (content included), the split, the seed, the
  protocol, and the target's and references' architecture and training. Not the number of
  models, queries, attacks or evaluation settings: those grow or change inside one run.
* a **model** (train stage): the data content, the architecture, the recipe and its
  hyper-parameters (:func:`section_dump`: fields added later are left out at their neutral
  default), the model's seed, its membership row, the device kind and the digests of the
  user's own code it depends on (:func:`code_digests`); a pre-trained target: its weights
  file and its members (:func:`pretrained_identity`); for a derived model (ANN -> SNN
  conversion, replace-then-finetune) also its parent's model identity.
* a **snapshot** (train.snapshots): the model's identity and the epoch.
* a **query output**: the model (or snapshot) and the query spec.
* an **evaluation**: the model and the evaluation settings.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from miaudit._runtime.io import file_digest, text_digest

__all__ = ["array_digest", "text_digest"]

IDENTITY_VERSION = 2  # bump when the meaning of an artefact changes


def section_dump(section: Any) -> Any:
    """A config section as it enters identities and model records: its JSON dump, less the
    fields a TrainConfig declares identity-neutral while they hold their neutral default
    (fields added after layout 2, so adding them kept existing models valid)."""
    return None if section is None else section.identity_dump()


def code_digests(data_name: str, model_name: str, model_options: dict[str, Any],
                 recipe: Any) -> list[str]:
    """Digests of the user's own code that a model depends on (a data set or model named by
    import path, a recipe's ``fingerprint``, e.g. of a user training function), and of the
    files a model starts from (the ``content_digest`` its registry entry declares, e.g. of a
    checkpoint): editing them retrains the model."""
    from miaudit._runtime.importpath import source_digest
    from miaudit.registry import DATASETS, MODELS

    digests = [source_digest(registry.get(name)) for registry, name in
               ((DATASETS, data_name), (MODELS, model_name)) if ":" in name]
    if (content := MODELS.content_digest(model_name, model_options)) is not None:
        digests.append(content)
    return digests + ([recipe.fingerprint] if recipe.fingerprint else [])


def pretrained_identity(weights: Path, members: np.ndarray) -> str:
    """A target trained elsewhere: the content of its weights file and its members."""
    return text_digest({"pretrained": file_digest(weights),
                        "members": array_digest(members)})[:32]


def _update(digest: Any, values: Any) -> None:
    """Feed an array's dtype, shape and bytes (a torch tensor or numpy array) to ``digest``."""
    array = np.ascontiguousarray(values.numpy() if hasattr(values, "numpy") else values)
    digest.update(str((array.dtype, array.shape)).encode())
    digest.update(memoryview(array).cast("B"))


def pool_digest(x: Any, y: Any) -> str:
    """Content digest of the audit pool (inputs and labels): a changed data set on disk
    changes it, so stale models are never reused."""
    digest = hashlib.sha256()
    for tensor in (x, y):
        _update(digest, tensor)
    return digest.hexdigest()


def data_identity(data: dict[str, Any], content: str) -> dict[str, Any]:
    """The data part of every identity; ``data_dir`` is left out (the content digest says
    whether the data are the same, wherever they live)."""
    return {**{k: v for k, v in data.items() if k != "data_dir"}, "content": content}


def run_identity(*, data: dict[str, Any], seed: int, protocol: str, model: dict[str, Any],
                 train: dict[str, Any], reference_model: dict[str, Any] | None,
                 reference_train: dict[str, Any] | None) -> str:
    return text_digest({"version": IDENTITY_VERSION, "data": data, "seed": seed,
                        "protocol": protocol, "model": model, "train": train,
                        "reference_model": reference_model,
                        "reference_train": reference_train})


def model_identity(*, data: dict[str, Any], model: dict[str, Any], train: dict[str, Any],
                   model_seed: int, membership: np.ndarray, holdout: np.ndarray,
                   device_kind: str, code: list[str] = (), parent: str | None = None) -> str:
    """``parent``: the identity of the trained model a derived recipe starts from (left out
    when None, so models without one keep their identities)."""
    return text_digest({
        "version": IDENTITY_VERSION, "data": data, "model": model, "train": train,
        "code": list(code),
        "model_seed": model_seed, "device": device_kind,
        "membership": hashlib.sha256(np.packbits(membership).tobytes()).hexdigest(),
        "holdout": hashlib.sha256(np.asarray(holdout, dtype=np.int64).tobytes()).hexdigest(),
        **({} if parent is None else {"parent": parent}),
    })[:32]


def snapshot_identity(model: str, epoch: int) -> str:
    """The weights ``model`` had at the end of ``epoch`` (train.snapshots): queried and stored
    like a model of its own under this identity."""
    return text_digest({"model": model, "snapshot_epoch": int(epoch)})[:32]


def query_identity(model: str, spec: str, stream: str | None = None) -> str:
    """A query's outputs: a stream query's also name its stream (its passes are the stream's
    first n, seeded per batch: not the draws of the one-query-at-a-time layout before it)."""
    identity = {"model": model, "query": spec}
    return text_digest(identity if stream is None else {**identity, "stream": stream})[:24]


def eval_identity(model: str, settings: dict[str, Any]) -> str:
    return text_digest({"model": model, "evaluation": settings})[:24]


def array_digest(array: Any) -> str:
    digest = hashlib.sha256()
    _update(digest, array)
    return digest.hexdigest()
