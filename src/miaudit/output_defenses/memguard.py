"""Output defenses: post-processing of the confidence vectors a model releases.

Interface (registered in :data:`miaudit.registry.OUTPUT_DEFENSES`)::

    defense = OUTPUT_DEFENSES.build("memguard", **options)
    released = defense.apply(logits, labels, member_mask, seed=None)

- ``logits``: (N, Q, C) float, one model's outputs on the N pool samples x Q queries.
- ``labels``: (N,) true labels (checked for shape; neither defense here uses them: MemGuard
  protects the predicted label, not the true one).
- ``member_mask``: (N,) bool, the model's own training samples (the defender knows them).
- returns (N, Q, C) float32 log-probabilities of the released vectors; they are valid logits for
  every downstream signal (log-softmax of log-probabilities is the identity).

The audit applies the defense to every model's outputs, target and reference alike, each with its
own ``keep`` row as ``member_mask``: the adaptive attacker knows the defense and its settings.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from miaudit.registry import OUTPUT_DEFENSES


class OutputDefense:
    """Base class of output post-processors (see the module docstring)."""

    #: defenses that calibrate on the defender's held-out data set this: ``apply`` then also
    #: receives ``holdout_mask``, and the config requires ``data.holdout_size``
    needs_holdout: bool = False
    #: True when every released vector keeps the predicted label (both MemGuards): label-only
    #: queries, boundary distances included, then see the undefended model's decisions
    preserves_labels: bool = False

    def apply(self, logits: np.ndarray, labels: np.ndarray, member_mask: np.ndarray,
              seed: int | None = None) -> np.ndarray:
        raise NotImplementedError


def _check_inputs(logits: np.ndarray, labels: np.ndarray,
                  member_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    logits = np.asarray(logits)
    member_mask = np.asarray(member_mask)
    if logits.ndim != 3 or logits.shape[2] < 2:
        raise ValueError(f"logits must be (N, Q, C) with C >= 2, got {logits.shape}")
    if np.asarray(labels).shape != logits.shape[:1]:
        raise ValueError(f"labels {np.shape(labels)} do not match {logits.shape[0]} samples")
    if member_mask.shape != logits.shape[:1] or member_mask.dtype != bool:
        raise ValueError(f"member_mask must be a bool array of shape ({logits.shape[0]},), got "
                         f"{member_mask.dtype} {member_mask.shape}")
    if not np.all(np.isfinite(logits)):
        raise ValueError("logits contain NaN or infinite values")
    return logits, member_mask


@OUTPUT_DEFENSES.register("memguard_label_only")
class LabelOnlyMemGuard(OutputDefense):
    """Choquette-Choo et al. 2021's strongest MemGuard: release 1/C + delta for the predicted
    class and 1/C - delta/(C-1) for the others, so only the label leaks (option delta, 1e-3)."""

    preserves_labels = True

    def __init__(self, delta: float = 1e-3):
        if not delta > 0:
            raise ValueError(f"memguard_label_only option 'delta' must be > 0, got {delta}")
        self.delta = float(delta)

    def apply(self, logits: np.ndarray, labels: np.ndarray, member_mask: np.ndarray,
              seed: int | None = None) -> np.ndarray:
        logits, _ = _check_inputs(logits, labels, member_mask)
        classes = logits.shape[2]
        if self.delta >= (classes - 1) / classes:
            raise ValueError(f"memguard_label_only option 'delta' must be < (C-1)/C = "
                             f"{(classes - 1) / classes:.4f} for C = {classes} classes")
        probs = np.full(logits.shape, 1.0 / classes - self.delta / (classes - 1))
        np.put_along_axis(probs, logits.argmax(-1)[..., None], 1.0 / classes + self.delta, -1)
        return np.log(probs).astype(np.float32)


def _seed_for(base: int, member_mask: np.ndarray, seed: int | None) -> int:
    """The given seed, else one derived from the option seed and the member mask, so each
    model's defense draws its own reproducible randomness without the caller passing one."""
    if seed is not None:
        return int(seed)
    return int(np.random.SeedSequence([base, zlib.crc32(np.packbits(member_mask).tobytes())])
               .generate_state(1)[0])


def _mlp(inputs: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(inputs, size), nn.ReLU()]
        inputs = size
    return nn.Sequential(*layers, nn.Linear(inputs, 1))


@dataclass
class MemGuardStats:
    """What the last :meth:`MemGuard.apply` did (for reports and tests)."""

    defender_acc_before: float  # the defender's own attack classifier on the original outputs
    defender_acc_after: float  # ... on the released outputs
    success_fraction: float  # rows for which phase I found a label-keeping, fooling vector
    released_fraction: float  # rows whose noisy vector was released (phase II)
    mean_l1: float  # mean L1 distance between released and original probability vectors


@OUTPUT_DEFENSES.register("memguard")
class MemGuard(OutputDefense):
    """MemGuard (Jia et al. 2019): the defender trains its own attack classifier g on sorted
    confidence vectors of its members vs non-members, then adds to each released vector the
    label-preserving noise that moves g to its decision boundary, released with probability
    min(eps / L1 distortion, 1). Options: eps (1.0), c1, c2, c3, max_iter, step_size, hidden,
    classifier_steps, classifier_lr, seed.

    Constants (c1 = 1, c2 = 10, c3 from 0.1 up tenfold to 1e5, 300 iterations, step 0.1) follow
    the authors' code. The defender's non-members are the pool samples outside its training set
    (the reference uses a held-out set of the defender's own; here the audit pool plays it).
    Phase I is weak where g is nearly constant (little overfitting): the L1 term then keeps the
    vector at the original and few rows change, as in the reference algorithm.
    """

    def __init__(self, eps: float = 1.0, c1: float = 1.0, c2: float = 10.0, c3: float = 0.1,
                 c3_max: float = 1e5, max_iter: int = 300, step_size: float = 0.1,
                 hidden: tuple[int, ...] | list[int] = (256, 128, 64),
                 classifier_steps: int = 500, classifier_batch: int = 256,
                 classifier_lr: float = 1e-3, seed: int = 0):
        for name, value in (("eps", eps), ("c1", c1), ("c2", c2)):
            if not value >= 0:
                raise ValueError(f"memguard option {name!r} must be >= 0, got {value}")
        for name, value in (("c3", c3), ("c3_max", c3_max), ("step_size", step_size),
                            ("classifier_lr", classifier_lr)):
            if not value > 0:
                raise ValueError(f"memguard option {name!r} must be > 0, got {value}")
        for name, value in (("max_iter", max_iter), ("classifier_steps", classifier_steps),
                            ("classifier_batch", classifier_batch)):
            if int(value) != value or value < 1:
                raise ValueError(f"memguard option {name!r} must be an integer >= 1, got {value}")
        if any(int(h) != h or h < 1 for h in hidden):
            raise ValueError(f"memguard option 'hidden' must be positive integers, got {hidden}")
        self.eps, self.c1, self.c2, self.c3, self.c3_max = eps, c1, c2, c3, c3_max
        self.max_iter, self.step_size = int(max_iter), float(step_size)
        self.hidden = tuple(int(h) for h in hidden)
        self.classifier_steps, self.classifier_batch = int(classifier_steps), int(classifier_batch)
        self.classifier_lr, self.seed = float(classifier_lr), int(seed)
        self.classifier: nn.Module | None = None
        self.stats: MemGuardStats | None = None

    # -- the defender's attack classifier ---------------------------------------------------
    def fit_classifier(self, sorted_probs: torch.Tensor, is_member: torch.Tensor,
                       generator: torch.Generator) -> nn.Module:
        """Binary member/non-member MLP on ascending-sorted probability vectors (Jia et al.'s
        defense model: 256-128-64 ReLU, sigmoid output), class-balanced BCE, Adam, minibatches
        drawn with replacement."""
        with torch.random.fork_rng():  # seeded initialization without touching global RNG
            torch.manual_seed(int(torch.randint(2**31 - 1, (1,), generator=generator)))
            net = _mlp(sorted_probs.shape[1], self.hidden)
        optimizer = torch.optim.Adam(net.parameters(), lr=self.classifier_lr)
        target = is_member.float()
        members = target.sum().clamp_min(1.0)
        pos_weight = (len(target) - members).clamp_min(1.0) / members
        for _ in range(self.classifier_steps):
            index = torch.randint(len(target), (self.classifier_batch,), generator=generator)
            loss = F.binary_cross_entropy_with_logits(net(sorted_probs[index])[:, 0],
                                                      target[index], pos_weight=pos_weight)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return net.eval().requires_grad_(False)

    # -- phase I: label-preserving noise that fools the classifier ----------------------------
    def _search(self, g: nn.Module, z0: torch.Tensor, p0: torch.Tensor,
                side0: torch.Tensor, c3: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalized-gradient descent (step ``step_size``, at most max_iter - 1 steps, as the
        reference) on c1 |g(z)| + c2 ReLU(max_{j != y} z_j - z_y) + c3 ||softmax(z) - p0||_1,
        for all rows at once; a row stops as soon as its label is kept and g's decision is on
        the other side of 1/2 (or exactly at it). Returns (z, success)."""
        label = z0.argmax(1)
        on_label = F.one_hot(label, z0.shape[1]).bool()
        z = z0.clone()
        done = torch.zeros(len(z), dtype=torch.bool)
        for _ in range(self.max_iter - 1):
            active = torch.nonzero(~done).flatten()
            if not len(active):
                break
            za = z[active].requires_grad_(True)
            score = g(F.softmax(za, dim=1))[:, 0]  # pre-sigmoid: 0 is the decision boundary
            correct = za[on_label[active]]
            wrong = za.masked_fill(on_label[active], -torch.inf).amax(1)
            loss = (self.c1 * score.abs() + self.c2 * F.relu(wrong - correct)
                    + c3 * (F.softmax(za, dim=1) - p0[active]).abs().sum(1))
            (grad,) = torch.autograd.grad(loss.sum(), za)  # rows are independent
            grad = grad / grad.norm(dim=1, keepdim=True).clamp_min(1e-12)
            z_new = za.detach() - self.step_size * grad
            z[active] = z_new
            done[active] = self._fooled(g, z_new, label[active], side0[active])
        return z, done

    @staticmethod
    @torch.no_grad()
    def _fooled(g: nn.Module, z: torch.Tensor, label: torch.Tensor,
                side0: torch.Tensor) -> torch.Tensor:
        """Label kept and g's decision score not on its original side of 1/2."""
        side = torch.sign(g(F.softmax(z, dim=1))[:, 0])
        return (z.argmax(1) == label) & (side * side0 <= 0)

    def _phase_one(self, g: nn.Module, z0: torch.Tensor,
                   p0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raise c3 tenfold (smaller distortion) while the search still succeeds; keep the last
        success per row (Jia et al.'s reference code). Rows already at g's boundary
        (|sigmoid - 1/2| <= 1e-5) are successes without noise."""
        with torch.no_grad():
            score0 = g(F.softmax(z0, dim=1))[:, 0]
        side0 = torch.sign(score0)
        best = z0.clone()
        success = torch.sigmoid(score0).sub(0.5).abs() <= 1e-5
        active = torch.nonzero(~success).flatten()
        c3 = self.c3
        first = True
        while len(active) and c3 <= self.c3_max:
            z, ok = self._search(g, z0[active], p0[active], side0[active], c3)
            best[active[ok]] = z[ok]
            if first:
                success[active[ok]] = True
                first = False
            active = active[ok]
            c3 *= 10.0
        return best, success

    # -- phase II and the whole defense -------------------------------------------------------
    #: the defender's classifier needs non-members of its own: the audit's holdout set
    needs_holdout: bool = True

    def apply(self, logits: np.ndarray, labels: np.ndarray, member_mask: np.ndarray,
              seed: int | None = None, holdout_mask: np.ndarray | None = None) -> np.ndarray:
        """Released log-probabilities (N, Q, C); every query's vector is defended separately.
        The defender's classifier learns members (``member_mask``) against ``holdout_mask``
        (held-out non-members that are never evaluated); without it, against every
        non-member (only for standalone use: the audit always passes its holdout set)."""
        logits, member_mask = _check_inputs(logits, labels, member_mask)
        nonmember_mask = ~member_mask if holdout_mask is None else \
            np.asarray(holdout_mask, dtype=bool) & ~member_mask
        if not member_mask.any() or not nonmember_mask.any():
            raise ValueError("memguard needs members and held-out non-members to train the "
                             "defender's attack classifier")
        n, q, c = logits.shape
        generator = torch.Generator().manual_seed(_seed_for(self.seed, member_mask, seed))
        flat = torch.from_numpy(logits.reshape(n * q, c).astype(np.float32))
        order = torch.argsort(flat, dim=1)  # ascending; softmax keeps the order
        z0 = torch.gather(flat, 1, order)
        p0 = F.softmax(z0, dim=1)
        is_member = torch.from_numpy(np.repeat(member_mask, q))
        known = torch.from_numpy(np.repeat(member_mask | nonmember_mask, q))
        g = self.classifier = self.fit_classifier(p0[known], is_member[known], generator)

        noisy, success = self._phase_one(g, z0, p0)
        with torch.no_grad():
            score0 = g(p0)[:, 0].sigmoid()
            p_noisy = F.softmax(noisy, dim=1)
            score_noisy = g(p_noisy)[:, 0].sigmoid()
            distortion = (p_noisy - p0).abs().sum(1)
            # Phase II (the reference's evaluation code): no noise unless it moves g toward 1/2;
            # else release with probability min(eps / distortion, 1), expected L1 <= eps.
            helps = (score0 - 0.5).abs() > (score_noisy - 0.5).abs()
            probability = torch.where(helps, (self.eps / distortion.clamp_min(1e-12)).clamp(max=1),
                                      torch.zeros_like(distortion))
            release = torch.rand(len(z0), generator=generator) < probability
            z_out = torch.where(release[:, None], noisy, z0)
            released_sorted = F.log_softmax(z_out, dim=1)
            released = torch.empty_like(released_sorted).scatter_(1, order, released_sorted)
            score_out = g(released_sorted.exp())[:, 0].sigmoid()
        self.stats = MemGuardStats(
            defender_acc_before=((score0 > 0.5) == is_member).float().mean().item(),
            defender_acc_after=((score_out > 0.5) == is_member).float().mean().item(),
            success_fraction=success.float().mean().item(),
            released_fraction=release.float().mean().item(),
            mean_l1=(released_sorted.exp() - p0).abs().sum(1).mean().item(),
        )
        return released.reshape(n, q, c).numpy().astype(np.float32)
