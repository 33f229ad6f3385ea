"""The results schema: what ``results.json`` holds, as typed records (:class:`Summary`, one
:class:`AttackRecord` per attack, :class:`TargetModels`, :class:`Timing`, :class:`Privacy`,
:class:`NsdeGuarantee`), shared by the score stage (which validates a summary before writing
it), the report, the comparison and :class:`~miaudit.results.Results` (which read it). Metric
keys come from :mod:`miaudit.stats.metrics` (``metrics.tpr_key(level)``, FPR levels defined
there once).

Units: every rate (TPR, FPR, accuracy, AUC) is a fraction in [0, 1] in results.json and in
this API (``Results.metric``, ``AttackRecord.tpr_at``, ``Results.table``); only the displays
(the terminal table, the HTML report, the markdown tables) print percent, and say so.

The records declare every key results.json carries (an unknown key is refused). The file on
disk is the JSON of the dict the score stage built, written unchanged: its bytes, and the
digest inside them, do not depend on these models.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from miaudit.errors import ConfigError
from miaudit.results.record import Record
from miaudit.results.target_models import TargetModels
from miaudit.stats import metrics

EXTERNAL_SOURCE = "external outputs"  # config["source"] of a `miaudit score` run

Interval = list[float]  # [low, high]; lists as in the JSON, so a record compares to its file
#: one entry of a metrics mapping (``metrics.summarize``): a rate, a count, an interval,
#: whether a level is measurable, or what an interval covers
MetricValue = bool | int | float | Interval | str | None


class Machine(Record):
    """What this run's seconds depend on besides the load: where it ran
    (:func:`miaudit._runtime.machine.describe`)."""

    cpus: int
    cpu_capability: str  # the vector instruction set torch used on the CPU (AVX2, AVX512, ...)
    # the training device's (None: torch cannot say): without them bf16 trains in slow
    # fallback code
    bf16_kernels: bool | None
    gpu: str | None = None  # the CUDA device's name
    # glibc's malloc thresholds raised (miaudit._runtime.allocator); None: recorded before they were
    freed_memory_kept: bool | None = None

    def text(self) -> str:
        """One line for the terminal: the device, its kernels and the memory setting."""
        kernels = {True: "bfloat16 kernels", False: "no bfloat16 kernels",
                   None: "bfloat16 kernels unknown"}[self.bf16_kernels]
        memory = {True: ["freed memory kept"], False: ["malloc defaults"], None: []}
        return ", ".join([*([self.gpu] if self.gpu else []),
                          f"{self.cpus} CPUs {self.cpu_capability}", kernels,
                          *memory[self.freed_memory_kept]])


class Timing(Record):
    """Wall-clock seconds of this run (an audit resumed or grown counts only its own work)."""

    train_seconds_this_run: float
    query_seconds_this_run: float | None = None  # layout 1 did not time the queries
    attack_seconds: float
    total_seconds_this_run: float
    device: str
    machine: Machine | None = None  # not recorded before 2026-12-01, nor on Ray (other hosts)


class Privacy(Record):
    """The DP-SGD guarantee of the targets (largest epsilon over targets)."""

    epsilon: float
    delta: float
    noise_multiplier: float
    sample_rate: float
    epsilon_per_epoch: list[float]
    note: str


class NsdeGuarantee(Record):
    """Paper A's Theorem 4.1 guarantee of SDE targets
    (:func:`miaudit.privacy.nsde.nsde_guarantee`)."""

    theorem: str
    form: str
    sigma: float
    T: float
    lipschitz: float
    l_eps: float
    delta: float
    sensitivity: float
    epsilon_implied: float
    in_range: bool
    n_sde_blocks: int
    blocks: str
    lipschitz_source: str
    sde_convention: str | None = None
    accountant_epsilon: float | None = None


class EmpiricalEpsilon(Record):
    """An attack's empirical lower bound on epsilon
    (:func:`miaudit.privacy.bounds.empirical_epsilon`)."""

    epsilon_lower: float
    threshold: float
    fpr: float
    fnr: float
    fpr_upper: float
    fnr_upper: float
    delta: float
    confidence: float
    correction: str
    thresholds_tried: int
    claimed_epsilon: float | None = None
    verdict: str | None = None  # "contradicted" | "consistent" | None (no claim)


class Difference(Record):
    """This attack minus another of the same run on one metric, with its paired-bootstrap 95%
    interval (:func:`miaudit.stats.intervals.add_paired_differences`)."""

    value: float
    ci: list[float]


class AttackRecord(Record):
    """One attack's results. ``pooled``, ``per_target`` and ``per_class`` are
    ``metrics.summarize`` mappings: one key per metric, among them one per FPR level
    (``tpr@0.1%``, ``tpr@0.1%_ci``, ``tpr@0.1%_measurable``, ...), so they stay mappings;
    read them through :meth:`value`, :meth:`tpr_at`, :meth:`interval` and :meth:`measurable`.
    ``mean`` / ``std`` / ``min`` / ``max``: over targets
    (:func:`miaudit.stats.metrics.aggregate`)."""

    attack: str  # the registry name
    options: dict[str, Any]
    pooled: dict[str, MetricValue]
    mean: dict[str, float]
    std: dict[str, float]
    min: dict[str, float]
    max: dict[str, float]
    per_target: list[dict[str, MetricValue]]
    per_class: dict[int, dict[str, MetricValue]]  # class label -> metrics (or counts only)
    info: list[dict[str, Any]] | None = None  # per target: what the attack chose (its own keys)
    caveats: list[str] = []  # the attack's warnings about its own numbers
    empirical_epsilon: EmpiricalEpsilon | None = None
    # other attack's label -> metric -> this minus that (paired bootstrap); absent before
    differences: dict[str, dict[str, Difference]] | None = None
    # metric -> this attack minus the blind baseline (text with texts; paired bootstrap)
    over_blind: dict[str, Difference] | None = None

    def measurable(self, key: str) -> bool:
        """False when no threshold reaches that FPR (``metrics.summarize``)."""
        return metrics.is_measurable(self.pooled, key)

    def value(self, key: str, view: str = "pooled") -> float | None:
        """``key`` (e.g. "auc", "tpr@0.1%") pooled, or its mean / std / min / max over
        targets; None for a level that cannot be measured, never a TPR at zero FPR."""
        if not self.measurable(key):
            return None
        return self.pooled[key] if view == "pooled" else getattr(self, view).get(key)

    def tpr_at(self, fpr: float, view: str = "pooled") -> float | None:
        """TPR (a fraction) at FPR ``fpr`` (e.g. 0.001), or None where not measurable."""
        return self.value(metrics.tpr_key(fpr), view)

    def interval(self, key: str, kind: str = "") -> Interval | None:
        """The pooled 95% interval of ``key``; ``kind`` "" (what ci_method says),
        "conditional" (on these trained models) or "simultaneous" (over all attacks)."""
        return self.pooled.get(metrics.MetricKeys(key).interval(kind))

    @property
    def auc(self) -> float:
        """The pooled AUC (a fraction)."""
        return float(self.pooled["auc"])

    @property
    def ci_method(self) -> str | None:
        """What the pooled intervals cover; None in results written before issue 23."""
        return self.pooled.get("ci_method")


class BlindBaseline(Record):
    """The model-free classifier of members from the texts alone
    (:mod:`miaudit.analysis.blind_baseline`): its pooled metrics (``metrics.summarize`` keys
    with intervals), what it is, and the distribution-shift warning (None when its AUC
    interval covers 0.5)."""

    pooled: dict[str, MetricValue]
    method: str
    warning: str | None = None

    @property
    def auc(self) -> float:
        """The pooled AUC (a fraction)."""
        return float(self.pooled["auc"])


#: the metric that picks the strongest attack (terminal summary, HTML report, exposed samples)
STRONGEST_KEY = "tpr@0.1%"


class Summary(Record):
    """The contents of results.json (without its digest)."""

    layout: int = 1  # layout 1 wrote no layout key
    name: str
    run_dir: str
    run_identity: str | None = None  # absent from `miaudit score` runs
    training_hash: str | None = None  # layout 1 only
    protocol: str
    targets: list[int]
    num_models: int
    pool_size: int
    audited_size: int | None = None  # these four: every layout 2 record
    population_size: int | None = None
    holdout_size: int | None = None
    queries: list[str]
    scores_dir: str | None = None
    target_models: TargetModels
    attacks: dict[str, AttackRecord]
    privacy: Privacy | None = None
    nsde: NsdeGuarantee | None = None
    config: dict[str, Any]  # the resolved AuditConfig, or EXTERNAL_SOURCE's description
    timing: Timing | None = None
    reference_planner: dict[str, Any] | None = None  # reference_planner.plan_references
    blind_baseline: BlindBaseline | None = None  # text outputs with their texts
    # warnings about the whole run (e.g. targets that learned nothing): terminal, report
    caveats: list[str] = []
    # train.snapshots: epoch -> {"attacks": {label: {"pooled": ...}}, "target_models": ...}
    snapshots: dict[str, dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _layout_fields(self) -> Summary:
        missing = [name for name in ("audited_size", "population_size", "holdout_size",
                                     "scores_dir") if getattr(self, name) is None]
        if self.layout >= 2 and missing:
            raise ValueError(f"layout {self.layout} needs {', '.join(missing)}")
        return self

    @property
    def external(self) -> bool:
        """Scored from outputs made elsewhere (``miaudit score``): no config, no inputs."""
        return self.config.get("source") == EXTERNAL_SOURCE

    def reference_models(self, label: str) -> int | None:
        """:func:`reference_models` of attack ``label``."""
        attack = self.attacks[label]
        return reference_models(attack.attack, attack.options, self.num_models)

    def model_line(self) -> str:
        """One line on the targets' utility (percent): accuracy and generalization gap, or a
        language model's next-token accuracy and perplexity."""
        stats = self.target_models

        def percent(value: float) -> str:
            return f"{100 * value:.2f}"

        if stats.test_perplexity is not None:  # a language model: what text users read
            return (f"target models: next-token accuracy train {percent(stats.train_accuracy)}%"
                    f", test {percent(stats.test_accuracy)}%, gap "
                    f"{percent(stats.generalization_gap)} points; perplexity train "
                    f"{stats.train_perplexity:.2f}, test {stats.test_perplexity:.2f}")
        return (f"target models: train acc {percent(stats.train_accuracy)}%, "
                f"test acc {percent(stats.test_accuracy)}%, "
                f"generalization gap {percent(stats.generalization_gap)} points"
                + (f" ({stats.accuracy_note})" if stats.accuracy_note else ""))

    def privacy_line(self) -> str:
        """The claimed DP guarantee beside the largest empirical lower bound of any attack
        (a run of DP-SGD targets only)."""
        privacy = self.privacy
        bounds = {label: attack.empirical_epsilon.epsilon_lower
                  for label, attack in self.attacks.items()
                  if attack.empirical_epsilon is not None}
        best = max(bounds, key=bounds.get) if bounds else None
        line = (f"DP-SGD targets: epsilon {privacy.epsilon:.3g} at delta {privacy.delta:.0e} "
                f"(noise multiplier {privacy.noise_multiplier:.3g})")
        if best is not None:
            verdict = self.attacks[best].empirical_epsilon.verdict
            line += (f"; largest empirical lower bound {bounds[best]:.3g} ({best}): "
                     f"guarantee {verdict}")
        return line

    def caveat_lines(self) -> list[str]:
        """One line per warning an attack gave about its own numbers (marked * in tables)."""
        labels: dict[str, list[str]] = {}  # caveat -> the attacks that gave it
        for label, attack in self.attacks.items():
            for caveat in attack.caveats:
                labels.setdefault(caveat, []).append(label)
        return [f"* {', '.join(names)}: {caveat}" for caveat, names in labels.items()]

    def strongest(self, key: str = STRONGEST_KEY, *, measurable_only: bool = False) -> str | None:
        """The strongest attack, the one rule the terminal and the HTML report share: largest
        pooled ``key`` (ties: larger AUC), attacks for which ``key`` is not measurable ranked
        last; with ``measurable_only``, None when no attack measures ``key``."""
        if not self.attacks:
            return None
        label = max(self.attacks, key=lambda name: (
            self.attacks[name].measurable(key), self.attacks[name].pooled.get(key) or 0.0,
            self.attacks[name].auc))
        if measurable_only and not self.attacks[label].measurable(key):
            return None
        return label


def reference_models(attack: str, options: dict[str, Any], num_models: int) -> int | None:
    """How many reference models attack ``attack`` (registry name, ``options``) calibrated each
    target's scores with in a run of ``num_models`` models: every model but the target, under
    either protocol; None for an attack that uses none (LOSS, Attack-P, ...) or one this
    session cannot build (a user's attack not importable here). An attack with more
    references is stronger (paper A's SDENet at the floor, the same 8 targets: LiRA AUC 0.520
    with 7, 0.530 with 15), so two runs compare on leakage only at equal numbers."""
    from miaudit.auditor.components import build_attack  # the registry: imported when asked

    try:
        built = build_attack({"name": attack, **options}, "attacks")
    except ConfigError:
        return None
    return num_models - 1 if built.min_references else None
