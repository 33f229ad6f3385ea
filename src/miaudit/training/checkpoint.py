"""Epoch checkpoints: a model whose training is killed (a lost session, a pre-empted node)
resumes from its last checkpoint instead of epoch 0, bit-identical to an uninterrupted run
(tested per recipe).

A checkpoint is one file per model, named by the model's identity (so a changed config never
resumes a stale one), carrying the sha256 of its content (a flipped bit in a tensor loads
without error: the digest finds it, and the model trains from the start), written atomically at
the end of an epoch at most every ``every_seconds`` and removed once the model itself is saved.
It holds, for the ``fit`` call in progress, everything the next epoch reads: weights and
buffers, optimizer and schedule state, the batch-order generator, torch's global random state
(dropout, SDE noise), the recipe's own state (:meth:`Recipe.resume_state`) and the log so far;
and, for the ``fit`` calls a recipe has already completed (ANN stage before conversion, pre-
training before fine-tuning), their end states, so that a resumed recipe replays the code
between them and skips the training.

PyTorch has no trainer-independent checkpoint format to reuse here (Lightning's and
Accelerate's belong to their own training loops), hence this module.
"""

from __future__ import annotations

import io
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from miaudit._runtime.io import read_digested_bytes, write_digested_bytes

FORMAT = 1  # bump when the meaning of a checkpoint's fields changes
SUFFIX = ".pt"


def random_state(device: torch.device) -> dict[str, torch.Tensor]:
    """torch's global random state: the CPU generator, and the device's for CUDA."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_random_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def cpu_copy(value: Any) -> Any:
    """A detached CPU copy of tensors nested in dicts and lists (a snapshot that later
    training steps do not change)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: cpu_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_copy(item) for item in value)
    return value


@dataclass
class Checkpoint:
    """The checkpoint of one model's training (one per model job; shared by every ``fit``
    call of its recipe, which are numbered in call order)."""

    path: Path
    identity: str
    every_seconds: float = 600.0
    completed: list[dict[str, Any]] = field(default_factory=list)  # end states of done fits
    partial: dict[str, Any] | None = None  # the fit in progress, after its last saved epoch
    earlier_seconds: float = 0.0  # training seconds of the attempts before this one
    resumed: list[dict[str, int]] = field(default_factory=list)  # where attempts resumed
    _calls: int = 0
    _written_at: float = field(default_factory=time.monotonic)
    _started_at: float = field(default_factory=time.monotonic)

    @classmethod
    def open(cls, path: Path, identity: str, every_seconds: float = 600.0) -> Checkpoint:
        """The checkpoint at ``path``, or an empty one when there is none. One that cannot be
        read or belongs to another model is set aside with a warning (training starts over:
        never a wrong resume)."""
        checkpoint = cls(Path(path), identity, every_seconds)
        if not checkpoint.path.is_file():
            return checkpoint
        try:
            payload, problem = read_digested_bytes(checkpoint.path)
            if problem is None:  # a flipped bit in a tensor loads fine: the digest finds it
                saved = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
                problem = _problem(saved, identity)
            else:
                problem = f"damaged ({problem})"
        except Exception as error:  # noqa: BLE001 - any unreadable file means: start over
            problem = f"unreadable ({str(error).splitlines()[0][:200]})"
        if problem:
            warnings.warn(f"training checkpoint {checkpoint.path} not used: {problem}; the "
                          "model trains from the start", UserWarning, stacklevel=2)
            checkpoint.discard()
            return checkpoint
        checkpoint.completed = saved["completed"]
        checkpoint.partial = saved["partial"]
        checkpoint.earlier_seconds = float(saved["seconds"])
        checkpoint.resumed = saved["resumed"] + [_position(saved)]
        return checkpoint

    def next_call(self) -> int:
        """The number of the ``fit`` call now starting."""
        self._calls += 1
        return self._calls - 1

    def completed_fit(self, call: int) -> dict[str, Any] | None:
        return self.completed[call] if call < len(self.completed) else None

    def partial_fit(self, call: int) -> dict[str, Any] | None:
        partial = self.partial
        return partial if partial is not None and partial["call"] == call else None

    def epoch_done(self, call: int, snapshot: Any) -> None:
        """After an epoch of fit ``call``: save ``snapshot()`` when ``every_seconds`` passed
        since the last write (the snapshot is only taken then: it copies the weights)."""
        if time.monotonic() - self._written_at < self.every_seconds:
            return
        self.partial = {"call": call, **snapshot()}
        self.write()

    def fit_done(self, call: int, end_state: dict[str, Any]) -> None:
        """Fit ``call`` finished: keep its end state (written with the next epoch's save)."""
        del self.completed[call:]
        self.completed.append(end_state)
        self.partial = None

    def seconds(self) -> float:
        """Training seconds so far, over every attempt."""
        return self.earlier_seconds + time.monotonic() - self._started_at

    def write(self) -> None:
        record = {"format": FORMAT, "identity": self.identity, "completed": self.completed,
                  "partial": self.partial, "seconds": self.seconds(), "resumed": self.resumed}
        buffer = io.BytesIO()
        torch.save(record, buffer)
        write_digested_bytes(self.path, buffer.getvalue())
        self._written_at = time.monotonic()

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def _problem(saved: Any, identity: str) -> str | None:
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        return f"not a miaudit checkpoint of format {FORMAT}"
    if saved.get("identity") != identity:
        return f"it belongs to model {saved.get('identity')!r}, not {identity!r}"
    return None


def _position(saved: dict[str, Any]) -> dict[str, int]:
    """Where a saved checkpoint resumes: the fit call and the epoch it continues after."""
    partial = saved["partial"]
    if partial is None:
        return {"fit": len(saved["completed"]), "after_epoch": -1}
    return {"fit": int(partial["call"]), "after_epoch": int(partial["epoch"])}


@dataclass(frozen=True)
class Checkpointing:
    """Where and how often a train stage's jobs write their checkpoints (picklable: executors
    ship it to workers; on a cluster ``folder`` must be on a file system the nodes share)."""

    folder: str
    every_seconds: float = 600.0

    def path(self, identity: str) -> Path:
        return Path(self.folder) / f"{identity}{SUFFIX}"

    def open(self, identity: str) -> Checkpoint:
        return Checkpoint.open(self.path(identity), identity, self.every_seconds)

    def discard(self, identity: str) -> None:
        """The model is saved: its checkpoint is of no further use."""
        self.path(identity).unlink(missing_ok=True)
