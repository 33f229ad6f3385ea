"""Dirac gradient canaries for the ``all_iterates`` threat model of a DP-SGD audit (Nasr, Hayes,
Steinke, Balle, Tramer, Jagielski, Carlini & Terzis 2023, "Tight auditing of differentially
private machine learning", Sec. 4: the auditor sees every privatized update and may insert
arbitrary gradients).

Each of m canaries is a unit direction u_i of the flattened parameter vector (a coordinate, or
a random direction; the m directions are orthonormal) whose per-example gradient is
``norm * C * u_i`` (C: the clipping norm). A canary is *in* with probability 1/2 (the audit's
coin); an in canary is a record of the training set, so each step samples it with the Poisson
rate q like every other record, and its gradient row joins Opacus's per-sample gradients before
clipping. Training, noise and accountant are Opacus's own; this module only adds the rows and
records, per step and canary,

    y_t,i = <privatized sum of clipped gradients, u_i> / C - <clipped sum of the data's
            gradients, u_i> / C,

i.e. the canary's clipped contribution (1 when sampled, 0 otherwise) plus N(0, z^2). Subtracting
the data's part is within the threat model the accountant covers: the auditor may know the rest
of the data set and the iterates, and the other records' Poisson draws say nothing about the
canary's. The statistics turn y into a bound (:mod:`miaudit.privacy.gaussian_audit`).

Planted bugs (``planted_bug``; for showing that an audit catches them, never for training):

- ``noise_over_batch``: the noise std divided by the expected batch size once more before the
  update is averaged (noise scaled by the batch size twice); the accountant still counts z;
- ``unclipped_layer``: per-example clipping skipped on the first parameter tensor (its rows are
  summed unclipped; the norm used for the other tensors' clip factors still includes it).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from opacus.optimizers import DPOptimizer

GradientCanaryKind = Literal["coordinate", "direction"]
PlantedBug = Literal["noise_over_batch", "unclipped_layer"]
PLANTED_BUGS = ("noise_over_batch", "unclipped_layer")


class GradientCanaries:
    """m Dirac gradient canaries inserted into a :class:`DPOptimizer`, and the per-step
    canary-aligned observations (``observations``: steps x m, in units of C)."""

    def __init__(self, included: np.ndarray, seed: int, kind: GradientCanaryKind = "coordinate",
                 norm: float = 1.0, planted_bug: PlantedBug | None = None):
        if kind not in ("coordinate", "direction"):
            raise ValueError(f"gradient canary kind must be coordinate or direction; got {kind!r}")
        if not norm > 0:
            raise ValueError(f"gradient canary norm must be > 0 (in clipping norms); got {norm!r}")
        if planted_bug is not None and planted_bug not in PLANTED_BUGS:
            raise ValueError(f"planted_bug must be one of {', '.join(PLANTED_BUGS)}; "
                             f"got {planted_bug!r}")
        self.included = np.asarray(included, dtype=bool).ravel()
        self.kind, self.norm, self.planted_bug = kind, float(norm), planted_bug
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 0xD12AC]))
        self.rows: list[np.ndarray] = []
        self.sampled: list[np.ndarray] = []
        self.sample_rate = float("nan")
        self.noise_multiplier = float("nan")

    # -- directions ------------------------------------------------------------------------------
    def _directions(self, size: int) -> None:
        m = self.included.size
        if m > size:
            raise ValueError(f"{m} gradient canaries need at least as many parameters; the "
                             f"model has {size}")
        if self.kind == "coordinate":
            self.coordinates = torch.from_numpy(np.sort(self.rng.choice(size, m, replace=False)))
            self.basis = None
        else:  # orthonormal rows from the QR of a Gaussian matrix (Haar-random directions)
            generator = torch.Generator().manual_seed(int(self.rng.integers(2**31)))
            gaussian = torch.randn((size, m), generator=generator, dtype=torch.float64)
            self.basis = torch.linalg.qr(gaussian)[0].T.contiguous().float()  # (m, size)
            self.coordinates = None

    def project(self, flat: torch.Tensor) -> np.ndarray:
        """<flat, u_i> for every canary (float64)."""
        flat = flat.detach().cpu()
        if self.basis is None:
            return flat[self.coordinates].double().numpy()
        return (self.basis.double() @ flat.double()).numpy()

    def _rows(self, chosen: np.ndarray, size: int, scale: float) -> torch.Tensor:
        if self.basis is None:
            rows = torch.zeros((chosen.size, size))
            rows[torch.arange(chosen.size), self.coordinates[torch.from_numpy(chosen)]] = scale
            return rows
        return scale * self.basis[torch.from_numpy(chosen)]

    # -- the optimizer hooks -----------------------------------------------------------------------
    def attach(self, optimizer: DPOptimizer, sample_rate: float) -> None:
        """Insert the canaries into every step of ``optimizer`` and record the observations.
        Called by the dpsgd recipe right after Opacus's ``make_private``."""
        params = list(optimizer.params)
        sizes = [p.numel() for p in params]
        total = sum(sizes)
        self._directions(total)
        self.sample_rate, self.noise_multiplier = float(sample_rate), optimizer.noise_multiplier
        if self.planted_bug is not None:
            plant_bug(optimizer, self.planted_bug)
        clip = optimizer.clip_and_accumulate
        clip_norm = optimizer.max_grad_norm
        pending: dict[str, np.ndarray] = {}

        def flat(attribute: str) -> torch.Tensor:
            return torch.cat([getattr(p, attribute).reshape(-1) for p in params])

        def clip_with_canaries() -> None:
            clip()  # the data's rows, as Opacus would
            pending["data"] = self.project(flat("summed_grad")) / clip_norm
            draws = self.included & (self.rng.random(self.included.size) < self.sample_rate)
            self.sampled.append(draws)
            chosen = np.flatnonzero(draws)
            if chosen.size:
                rows = self._rows(chosen, total, self.norm * clip_norm)
                for p, piece in zip(params, torch.split(rows, sizes, dim=1), strict=True):
                    p.grad_sample = piece.reshape(chosen.size, *p.shape).to(p.device, p.dtype)
                clip()  # clipping is per row, so clipping the canaries apart is the same

        hook = optimizer.step_hook

        def observe(opt: DPOptimizer) -> None:
            # p.grad = (sum of clipped rows + noise) / (expected batch size x accumulation)
            scale = opt.expected_batch_size * opt.accumulated_iterations \
                if opt.loss_reduction == "mean" else 1.0
            noisy = self.project(flat("grad")) * scale / clip_norm
            self.rows.append(noisy - pending.pop("data"))
            if hook is not None:
                hook(opt)

        optimizer.clip_and_accumulate = clip_with_canaries
        optimizer.step_hook = observe

    @property
    def observations(self) -> np.ndarray:
        """y[t, i] (steps x canaries), in units of the clipping norm."""
        if not self.rows:
            return np.zeros((0, self.included.size))
        return np.stack(self.rows)


def plant_bug(optimizer: DPOptimizer, bug: PlantedBug) -> None:
    """Break ``optimizer`` in the named way (see the module docstring); for audit tests only."""
    if bug == "noise_over_batch":
        add_noise = optimizer.add_noise

        def noise_over_batch() -> None:
            claimed = optimizer.noise_multiplier
            optimizer.noise_multiplier = claimed / optimizer.expected_batch_size
            try:
                add_noise()
            finally:
                optimizer.noise_multiplier = claimed  # what the accountant reads

        optimizer.add_noise = noise_over_batch
    elif bug == "unclipped_layer":
        optimizer.clip_and_accumulate = lambda: _clip_except_first(optimizer)
    else:
        raise ValueError(f"planted_bug must be one of {', '.join(PLANTED_BUGS)}; got {bug!r}")


def _clip_except_first(optimizer: DPOptimizer) -> None:
    """Opacus's ``clip_and_accumulate`` with the first parameter tensor left unclipped."""
    samples = [optimizer._get_flat_grad_sample(p) for p in optimizer.params]
    count = len(samples[0])
    if count:
        norms = torch.stack([g.reshape(count, -1).norm(2, dim=-1) for g in samples], dim=1)
        factor = (optimizer.max_grad_norm / (norms.norm(2, dim=1) + 1e-6)).clamp(max=1.0)
    else:
        factor = torch.zeros((0,), device=samples[0].device)
    for index, (p, grad_sample) in enumerate(zip(optimizer.params, samples, strict=True)):
        used = torch.ones_like(factor) if index == 0 else factor
        grad = torch.einsum("i,i...", used.to(grad_sample.dtype), grad_sample.to(p.dtype))
        p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
