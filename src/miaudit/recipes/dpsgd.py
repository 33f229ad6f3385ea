"""DP-SGD (Abadi et al. 2016) through Opacus: per-sample gradient clipping, Gaussian noise,
Poisson sampling and privacy accounting, for any registry model that Opacus supports.

Recipe ``dpsgd`` options:

- ``target_epsilon`` (with ``delta``) *or* ``noise_multiplier``: the budget at the end of
  ``epochs``, turned into a noise multiplier by the accountant (Opacus's
  ``get_noise_multiplier``), or the noise multiplier itself;
- ``delta`` (1e-5), ``max_grad_norm`` (clipping norm C, 1.0), ``accountant`` prv (Opacus's
  default) | rdp | gdp, ``poisson`` (True: Opacus's Poisson ``DPDataLoader``, q = 1 / number of
  batches; False: shuffled fixed-size batches, for which the subsampled-Gaussian accounting is
  *not* a proof, see Chua et al. 2024), ``secure_mode`` (Opacus's CSPRNG noise; needs
  torchcsprng);
- ``base``: the inner recipe spec (``"standard"``, ``"pgd_at:eps=0.03"``, ``{"name": "trades",
  ...}``) whose per-sample losses are privatized, so DP composes with adversarial training.
  Only bases whose loss for sample i depends on sample i alone keep the guarantee; the known ones
  are allowed (:data:`PER_SAMPLE_BASES`), others need ``trust_base=True``. Bases that replace the
  training loop are refused. Attacks inside a base's ``sample_losses`` must switch Opacus's hooks
  off (``defenses.adversarial.attack_mode`` does) so that only the training pass is recorded.

Penalties are refused: Opacus replaces the gradient by the noisy sum of clipped per-sample
gradients, so a weight penalty would be silently dropped, and a penalty on the batch's losses
(DeMem's variance) couples the samples, voiding the per-sample sensitivity bound. Use the
optimizer's ``weight_decay`` (data-independent, applied after privatization) for L2.

Models: BatchNorm mixes the samples of a batch (no per-sample gradient exists); it is replaced by
GroupNorm (Opacus's ``ModuleValidator.fix``) with a warning, in :meth:`DPSGD.architecture`, so
the saved weights are those of the GroupNorm model. Models whose per-sample gradients Opacus
cannot compute are refused with :class:`DPIncompatibleModelError`: adaptive ODE solvers (one step
size per batch couples the samples), adjoint back-propagation, torchsde integrators, or any
module declaring a ``dp_incompatibility`` reason (the convention of ``miaudit.models``).

Epsilon spent is recorded after every epoch (``log["epsilon"]``, with the delta, noise
multiplier and sample rate), from the Opacus accountant that counted the steps.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from opacus import PrivacyEngine
from opacus.grad_sample import GradSampleModule
from opacus.optimizers import DPOptimizer
from opacus.validators import ModuleValidator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from miaudit.privacy.accounting import ACCOUNTANT_NAMES, check_delta
from miaudit.privacy.accounting import noise_multiplier as solve_noise_multiplier
from miaudit.registry import RECIPES, parse_spec
from miaudit.training.engine import FitState, Penalty, Recipe, TrainEnv, TrainParams, fit

#: base recipes whose ``sample_losses`` give sample i a loss that depends on sample i alone.
PER_SAMPLE_BASES = ("standard", "pgd_at", "trades", "lora")
#: torchdiffeq's adaptive-step methods (torchdiffeq.odeint's SOLVERS with adaptive steps).
ADAPTIVE_SOLVERS = ("dopri5", "dopri8", "bosh3", "fehlberg2", "adaptive_heun", "tsit5",
                    "scipy_solver")


class DPIncompatibleModelError(ValueError):
    """The model's per-sample gradients cannot be computed by Opacus (no DP training)."""


# -- model checks -------------------------------------------------------------------------------
def _solver_name(module: nn.Module) -> str | None:
    for attribute in ("solver", "method", "odeint_method"):
        value = getattr(module, attribute, None)
        value = getattr(value, "method", value)  # a solver object with a .method string
        if isinstance(value, str):
            return value
    return None


def dp_incompatibilities(model: nn.Module) -> list[str]:
    """Why Opacus cannot give correct per-sample gradients for ``model`` (empty if it can)."""
    reasons: list[str] = []
    for name, module in model.named_modules():
        where = name or type(model).__name__
        declared = getattr(module, "dp_incompatibility", None)
        if isinstance(declared, str) and declared:
            reasons.append(f"{where}: {declared}")
            continue
        solver = _solver_name(module)
        if solver in ADAPTIVE_SOLVERS:
            reasons.append(f"{where}: adaptive ODE solver {solver!r} takes one step size per "
                           "batch, which couples the samples")
        if getattr(module, "adjoint", False) is True:
            reasons.append(f"{where}: adjoint=True: Opacus cannot compute per-sample gradients "
                           "through the adjoint ODE")
        if type(module).__module__.split(".")[0] == "torchsde":
            reasons.append(f"{where}: torchsde integrators are not supported by Opacus's "
                           "per-sample gradients")
    return list(dict.fromkeys(reasons))


def check_dp_compatible(model: nn.Module) -> None:
    reasons = dp_incompatibilities(model)
    if reasons:
        raise DPIncompatibleModelError(
            "dpsgd refuses this model (it would not be trained with differential privacy): "
            + "; ".join(reasons)
            + ". Use a fixed-step solver (euler, rk4) without adjoint.")


def replace_batchnorm(model: nn.Module) -> nn.Module:
    """GroupNorm instead of BatchNorm (Opacus's fixer, gcd(32, C) groups), with a warning;
    then any remaining Opacus validation error is raised."""
    names = [n for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if names:
        warnings.warn(
            f"dpsgd: replacing {len(names)} BatchNorm layer(s) ({', '.join(names[:4])}"
            f"{', ...' if len(names) > 4 else ''}) by GroupNorm: BatchNorm mixes the samples of "
            "a batch, so per-sample gradients (and DP) do not exist with it. The trained and "
            "saved model is the GroupNorm variant.", UserWarning, stacklevel=3)
        model = ModuleValidator.fix(model)
    training = model.training
    model.train()  # Opacus's validator also requires training mode
    errors = ModuleValidator.validate(model, strict=False)
    model.train(training)
    if errors:
        raise DPIncompatibleModelError(
            "dpsgd: Opacus cannot train this model privately: "
            + "; ".join(str(e) for e in errors))
    return model


# -- the recipe ---------------------------------------------------------------------------------
def _build_base(base: str | dict[str, Any], trust_base: bool) -> Recipe:
    name, options = parse_spec(base)
    if name == "dpsgd":
        raise ValueError("dpsgd option 'base' cannot be dpsgd itself")
    if name == "lm":
        raise ValueError("dpsgd option 'base': full fine-tuning of a causal LM (lm) is not "
                         "supported: Opacus cannot compute per-sample gradients of GPT-2's tied "
                         "input/output embedding; use base lora (DP-SGD on the LoRA adapters)")
    if name not in PER_SAMPLE_BASES and not trust_base:
        raise ValueError(
            f"dpsgd option 'base': {name!r} is not known to compute per-sample losses that "
            f"depend on one sample each (known: {', '.join(PER_SAMPLE_BASES)}); a base that "
            "mixes samples (mixup, batch statistics) voids the DP guarantee. Pass "
            "trust_base=True to use it anyway.")
    if "penalties" in options:
        raise ValueError("dpsgd option 'base' must not carry penalties (see the dpsgd docs)")
    recipe = RECIPES.build(name, penalties=[], **options)
    if type(recipe).train is not Recipe.train:
        raise ValueError(f"dpsgd option 'base': {name!r} replaces the training loop, which "
                         "dpsgd cannot privatize")
    return recipe


@RECIPES.register("dpsgd")
class DPSGD(Recipe):
    """DP-SGD via Opacus: per-sample clipping + Gaussian noise + Poisson sampling; records
    epsilon per epoch. Options: target_epsilon or noise_multiplier, delta, max_grad_norm,
    accountant (prv|rdp|gdp), poisson, base (inner recipe), secure_mode, trust_base."""

    # Not resumable from epoch checkpoints: Opacus's accountant history, its Poisson sampler
    # and the wrapped model and optimizer are state the checkpoint does not carry.
    resumable = False

    # Opacus 1.6 runs under bfloat16 autocast but then computes the per-sample gradients, their
    # norms and the clipping in bfloat16 (8 mantissa bits): the clip bound that the accountant's
    # epsilon rests on would hold only to about 0.4 %.
    fp32_only = ("Opacus computes per-sample gradients and their clipping in bfloat16 under "
                 "autocast, so the clip bound behind epsilon would hold only approximately")

    def __init__(self, penalties: Sequence[Penalty] = (), target_epsilon: float | None = None,
                 noise_multiplier: float | None = None, delta: float = 1e-5,
                 max_grad_norm: float = 1.0, accountant: str = "prv", poisson: bool = True,
                 base: str | dict[str, Any] = "standard", secure_mode: bool = False,
                 trust_base: bool = False):
        if penalties:
            raise ValueError(
                "dpsgd does not take penalties: Opacus privatizes the gradients of per-sample "
                "losses only, so a weight penalty would be silently dropped and a penalty on "
                "the batch's losses (e.g. demem) couples the samples and voids the guarantee. "
                "Use option weight_decay for L2.")
        super().__init__(())
        if (target_epsilon is None) == (noise_multiplier is None):
            raise ValueError("dpsgd needs exactly one of options 'target_epsilon' and "
                             "'noise_multiplier'")
        if target_epsilon is not None and not target_epsilon > 0:
            raise ValueError(f"dpsgd option 'target_epsilon' must be > 0; got {target_epsilon!r}")
        if noise_multiplier is not None and not noise_multiplier >= 0:
            raise ValueError(f"dpsgd option 'noise_multiplier' must be >= 0; "
                             f"got {noise_multiplier!r}")
        if not max_grad_norm > 0:
            raise ValueError(f"dpsgd option 'max_grad_norm' must be > 0; got {max_grad_norm!r}")
        if accountant not in ACCOUNTANT_NAMES:
            raise ValueError(f"dpsgd option 'accountant' must be one of "
                             f"{', '.join(ACCOUNTANT_NAMES)}; got {accountant!r}")
        self.delta = check_delta(delta)
        self.target_epsilon = target_epsilon
        self.noise_option = noise_multiplier
        self.noise = noise_multiplier  # the noise multiplier of the current run
        self.max_grad_norm = float(max_grad_norm)
        self.accountant = accountant
        self.poisson = bool(poisson)
        self.secure_mode = bool(secure_mode)
        self.base = _build_base(base, trust_base)
        self.needs_validation = self.base.needs_validation
        self.language_model = self.base.language_model
        self.engine: PrivacyEngine | None = None
        self.sample_rate = math.nan
        # An audit instrument (e.g. recipes.gradient_canaries.GradientCanaries) given the
        # private optimizer after make_private: it may insert canary rows and record updates;
        # the noise and the accountant stay Opacus's.
        self.observer: Any = None

    # -- hooks ----------------------------------------------------------------------------------
    def architecture(self, model: nn.Module) -> nn.Module:
        model = self.base.architecture(model)
        check_dp_compatible(model)
        return replace_batchnorm(model)

    def train(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: TrainParams,
              env: TrainEnv, x_val: torch.Tensor | None = None,
              y_val: torch.Tensor | None = None) -> tuple[nn.Module, dict[str, list[Any]]]:
        if not self.poisson:
            warnings.warn("dpsgd: poisson=False trains on shuffled fixed-size batches, but the "
                          "accountants analyse Poisson sampling; the reported epsilon is not a "
                          "proven guarantee for this run", UserWarning, stacklevel=2)
        model = self.architecture(model)  # idempotent; the pipeline may have called it already
        model, log = fit(model, x, y, params, self, env, x_val, y_val)
        return unwrap(model), log

    def prepare(self, state: FitState) -> None:
        self.base.prepare(state)
        seed = state.env.seed
        loader = DataLoader(TensorDataset(state.x, state.y), batch_size=state.params.batch_size,
                            shuffle=not self.poisson,
                            generator=torch.Generator().manual_seed(seed + 0x5A17))
        # Opacus samples at q = 1 / len(loader) but takes int(1 / q) steps per epoch (float
        # round-off makes it len(loader) - 1 for 93, 99, 105, ... batches) and its accountant
        # then counts the rate 1 / steps-per-epoch >= q (conservative). The noise is solved for
        # exactly what the accountant will count.
        per_epoch = int(1 / (1 / len(loader))) if self.poisson else len(loader)
        self.sample_rate = 1 / per_epoch
        self.noise = self.noise_option if self.noise_option is not None else \
            solve_noise_multiplier(self.target_epsilon, self.delta, self.sample_rate,
                                   steps=state.params.epochs * per_epoch,
                                   accountant=self.accountant)
        self.engine = PrivacyEngine(accountant=self.accountant, secure_mode=self.secure_mode)
        noise_generator = None if self.secure_mode else torch.Generator(
            device=state.env.device).manual_seed(seed + 0x401)
        model, optimizer, dp_loader = self.engine.make_private(
            module=state.model, optimizer=state.optimizer, data_loader=loader,
            noise_multiplier=self.noise, max_grad_norm=self.max_grad_norm,
            poisson_sampling=self.poisson, noise_generator=noise_generator)
        state.model, state.optimizer = model, optimizer
        if self.observer is not None:
            self.observer.attach(optimizer, self.sample_rate)
        state.batches = self._batches(dp_loader, optimizer)
        state.steps_per_epoch = len(dp_loader)

    def _batches(self, loader: DataLoader, optimizer: DPOptimizer):
        def epoch_batches(epoch: int) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
            for xb, yb in loader:
                if len(yb) == 0:
                    noise_only_step(optimizer)
                yield xb, yb

        return epoch_batches

    def sample_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.base.sample_losses(model, x, y)

    def objective(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # The mean matches Opacus's loss_reduction="mean" (per-sample grads = n * backprops).
        losses = self.sample_losses(model, x, y)
        if losses.shape != y.shape:
            raise ValueError(f"dpsgd base recipe returned losses of shape {tuple(losses.shape)}, "
                             f"expected one per sample {tuple(y.shape)}")
        return losses.mean()

    def end_epoch(self, state: FitState, epoch: int) -> None:
        self.base.end_epoch(state, epoch)
        state.record(epsilon=self.epsilon_spent(), delta=self.delta,
                     noise_multiplier=self.noise, sample_rate=self.sample_rate)

    def epsilon_spent(self) -> float:
        """Epsilon at ``delta`` of the steps taken so far (Opacus's accountant)."""
        if self.engine is None or not len(self.engine.accountant.history):
            return 0.0
        if self.noise == 0:
            return math.inf
        return float(self.engine.accountant.get_epsilon(delta=self.delta))


def noise_only_step(optimizer: DPOptimizer) -> None:
    """The DP-SGD step of an empty Poisson batch: no gradients, only the Gaussian noise.

    The engine skips empty batches; the mechanism the accountants analyse still releases
    0 + N(0, (z C)^2 I) at that step (and counts it), so the recipe performs it here."""
    optimizer.zero_grad(set_to_none=True)
    for p in optimizer.params:
        p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside Opacus's GradSampleModule, hooks and per-sample state removed
    (so its state_dict loads into a freshly built architecture)."""
    if not isinstance(model, GradSampleModule):
        return model
    model.remove_hooks()
    inner = model._module
    for p in inner.parameters():
        for attribute in ("grad_sample", "_current_grad_sample", "summed_grad",
                          "_forward_counter"):
            if hasattr(p, attribute):
                delattr(p, attribute)
    for module in inner.modules():
        for attribute in ("activations", "max_batch_len"):
            if attribute in module.__dict__:
                delattr(module, attribute)
    return inner


def trained_epsilon(log: dict[str, list[Any]]) -> float | None:
    """Final epsilon recorded by a dpsgd run (None for other recipes)."""
    values = log.get("epsilon")
    return float(values[-1]) if values else None
