"""The settings of an empirical DP audit (``miaudit dp-audit``): :class:`DPAuditConfig`, the
canary kinds, threat models and analyses, validated before any training (no torch here, so
the command line checks a config without loading it). The harness that runs an audit is
:mod:`miaudit.dp_audit.canary`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from miaudit._runtime.limits import work_limit
from miaudit.config import DataConfig, ModelConfig, TrainConfig
from miaudit.errors import ConfigError

CANARY_KINDS = ("natural", "mislabelled", "ood", "adversarial")
CanaryKind = Literal["natural", "mislabelled", "ood", "adversarial"]
THREAT_MODELS = ("final_model", "all_iterates")
ANALYSES = ("steinke", "fdp", "gaussian", "clopper_pearson")
Analysis = Literal["steinke", "fdp", "gaussian", "clopper_pearson"]
#: the analyses each protocol supports, in the order reported (the first is the headline)
SUPPORTED = {"one_run": ("steinke", "fdp", "gaussian"),
             "multi_run": ("clopper_pearson", "gaussian"),
             "all_iterates": ("gaussian", "fdp", "steinke", "clopper_pearson")}


class DPAuditConfig(BaseModel):
    """One empirical DP audit: data, model, recipe, canaries, protocol and statistics."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: str = Field(default="dp_audit", pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = 0
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=lambda: ModelConfig(name="mlp"))
    train: TrainConfig = Field(default_factory=lambda: TrainConfig(epochs=20, batch_size=64))
    canary_kind: CanaryKind = "mislabelled"
    canaries: int = Field(default=256, ge=1)  # m (one run; multi-run uses the first only)
    runs: int = Field(default=0, ge=0)  # 0: one-run audit; R >= 2: R runs in + R runs out
    # one run: (k+, k-) pairs searched with Bonferroni; default: k+ = k- in {5, 10, 25, 50}% of m
    guesses: list[tuple[int, int]] | None = None
    selection: Literal["split", "bonferroni"] = "split"  # multi-run threshold selection
    confidence: float = Field(default=0.95, gt=0, lt=1)
    delta: float = Field(default=1e-5, ge=0, lt=1)
    # the claim audited: if given it is used (e.g. an epsilon stated elsewhere, NSDE's theorem,
    # a claim from a mis-configured accountant); otherwise the recipe's accountant's epsilon
    claimed_epsilon: float | None = Field(default=None, ge=0)
    device: str = "cpu"
    threat_model: Literal["final_model", "all_iterates"] = "final_model"
    analyses: list[Analysis] | None = None  # default: every analysis the protocol supports
    gradient_canary: Literal["coordinate", "direction"] = "coordinate"  # all_iterates
    gradient_canary_norm: float = Field(default=1.0, gt=0)  # inserted norm / clipping norm
    fdp_family: Literal["gdp", "dp"] = "gdp"  # trade-off family of the f-DP analysis
    # adversarial canaries (final_model): crafted on this many reference models
    reference_models: int = Field(default=2, ge=1)
    craft_steps: int = Field(default=50, ge=1)
    craft_step_size: float = Field(default=0.02, gt=0)  # a fraction of the data's range
    # audit demonstrations only: a bug planted in DP-SGD (recipes.gradient_canaries)
    planted_bug: Literal["noise_over_batch", "unclipped_layer"] | None = None

    @field_validator("runs")
    @classmethod
    def _runs(cls, runs: int) -> int:
        if runs == 1:
            raise ConfigError("runs must be 0 (one-run audit) or >= 2 (multi-run)")
        return runs

    @field_validator("device")
    @classmethod
    def _device(cls, device: str) -> str:
        from miaudit._runtime.machine import resolve_device

        resolve_device(device)  # one line now, not a traceback after the data is read
        return device

    @model_validator(mode="after")
    def _consistent(self) -> DPAuditConfig:
        if self.train.penalties:
            raise ConfigError("penalties are not supported by the DP audit harness")
        recipe_delta = self.train.recipe_options.get("delta")
        if self.train.recipe == "dpsgd" and recipe_delta is not None \
                and not math.isclose(recipe_delta, self.delta):
            raise ConfigError(f"delta ({self.delta}) differs from the dpsgd recipe's delta "
                             f"({recipe_delta}): audit the guarantee that was claimed")
        for k_pos, k_neg in self.guesses or []:
            if k_pos < 0 or k_neg < 0 or not 0 < k_pos + k_neg <= self.canaries:
                raise ConfigError(f"guesses ({k_pos}, {k_neg}) must be >= 0 with "
                                 f"0 < k+ + k- <= canaries ({self.canaries})")
        if self.runs and self.guesses:
            raise ValueError("guesses apply to the one-run audit (runs 0); the multi-run audit "
                             "(runs >= 2) chooses its threshold by selection "
                             f"({self.selection}): drop guesses or set runs 0")
        trainings = 2 * self.runs * self.train.epochs  # R runs with the canary, R without
        if trainings > (limit := work_limit("dp_audit_epochs", 100_000)):
            raise ValueError(f"runs {self.runs} trains {2 * self.runs:,} models of "
                             f"{self.train.epochs} epochs ({trainings:,} epochs), more than "
                             f"{limit:,.0f}; lower runs (Jagielski et al. use hundreds), or "
                             "raise the bound with MIAUDIT_MAX_DP_AUDIT_EPOCHS")
        if self.runs and self.selection == "split" and self.runs < 2:
            raise ConfigError("selection 'split' needs runs >= 2")
        if self.threat_model == "all_iterates":
            if self.train.recipe != "dpsgd":
                raise ValueError("threat_model all_iterates observes DP-SGD's privatized "
                                 f"updates: it needs recipe dpsgd, not {self.train.recipe!r}")
            if self.runs:
                raise ValueError("threat_model all_iterates is a one-run audit (its m gradient "
                                 "canaries are independent trials): set runs 0")
        elif self.planted_bug is not None:
            raise ValueError("planted_bug is inserted by the all_iterates hook: set "
                             "threat_model all_iterates")
        if self.delta == 0 and "gaussian" in (self.analyses or ()):
            raise ValueError("the gaussian analysis converts mu to eps at delta > 0 (at delta "
                             "= 0 a Gaussian curve has eps = inf): set delta > 0")
        unsupported = sorted(set(self.analyses or ()) - set(SUPPORTED[self.protocol]))
        if unsupported:
            raise ValueError(f"analyses {', '.join(unsupported)} do not apply to the "
                             f"{self.protocol.replace('_', '-')} protocol (it supports "
                             f"{', '.join(SUPPORTED[self.protocol])})")
        return self

    @property
    def protocol(self) -> str:
        if self.threat_model == "all_iterates":
            return "all_iterates"
        return "multi_run" if self.runs else "one_run"

    def analysis_names(self) -> list[str]:
        names = self.analyses or [name for name in SUPPORTED[self.protocol]
                                  if self.delta > 0 or name != "gaussian"]
        return list(dict.fromkeys(names))

    def fdp_families(self) -> list[str]:
        """The f-DP analysis's family first, the other one beside it (GDP needs delta > 0)."""
        if self.delta == 0:
            return ["dp"]
        return [self.fdp_family, "dp" if self.fdp_family == "gdp" else "gdp"]

    def recipe_options(self) -> dict[str, Any]:
        """The recipe's options, with the audit's delta for dpsgd (one delta throughout)."""
        options = dict(self.train.recipe_options)
        if self.train.recipe == "dpsgd":
            options.setdefault("delta", self.delta)
        return options

    def guess_grid(self) -> list[tuple[int, int]]:
        if self.guesses:
            return [tuple(g) for g in self.guesses]
        sizes = sorted({max(1, int(round(f * self.canaries / 2))) for f in (0.05, 0.1, 0.25)})
        grid = [(k, k) for k in sizes if 2 * k <= self.canaries]
        grid.append((self.canaries - self.canaries // 2, self.canaries // 2))  # guess all
        return list(dict.fromkeys(grid))
