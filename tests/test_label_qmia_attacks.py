"""Label-only attacks (Choquette-Choo et al. 2021) and QMIA (Bertran et al. 2023): hand-worked
values, the label-only input contract, HopSkipJump against an exact boundary, and the rotation
null test / positive control of tests/test_attacks_null.py on label-only and feature views of
the same synthetic world (references memorize, the target does not)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from miaudit.attacks import AttackInput
from miaudit.attacks.qmia import hinge_score, pinball_loss
from miaudit.queries import build_query, expand_queries
from miaudit.queries.labels import boundary_distances, hop_skip_jump, is_label_only
from miaudit.registry import ATTACKS, parse_spec
from miaudit.stats import metrics
from test_attacks_null import MODELS, SAMPLES, World


def one_hot(labels: np.ndarray, classes: int) -> np.ndarray:
    return np.eye(classes, dtype=np.float32)[labels]


# -- hand-worked ----------------------------------------------------------------------------
def test_label_augmentation_hand_worked():
    """Sec. 4.1 counting attack: 3 label queries, sample 0 correct on 3/3, sample 1 on 1/3,
    sample 2 on 0/3; calibrated: minus the mean over OUT references (model 1 is OUT for
    samples 0 and 2, model 2 for sample 1 and 2)."""
    labels = np.array([0, 1, 1])
    predicted = np.array([  # (models, samples, queries)
        [[0, 0, 0], [1, 0, 0], [0, 0, 0]],
        [[0, 1, 1], [1, 1, 1], [1, 1, 1]],
        [[1, 1, 1], [0, 0, 1], [1, 0, 0]],
    ])
    logits = one_hot(predicted, 2)
    keep = np.array([[True, True, False], [False, True, False], [True, False, False]])
    names = ["label", "label:flip=True", "label:dx=1"]
    data = AttackInput(logits, labels, keep, names)
    plain = ATTACKS.build("label_augmentation").score(data, 0, np.array([1, 2]))
    np.testing.assert_allclose(plain, [1.0, 1 / 3, 0.0])
    calibrated = ATTACKS.build("label_augmentation", calibrate=True).evaluate(
        data, 0, np.array([1, 2]))
    # OUT refs: sample 0 -> model 1 (correct 1/3); sample 1 -> model 2 (1/3);
    # sample 2 -> models 1 and 2 (3/3 and 1/3: mean 2/3)
    np.testing.assert_allclose(calibrated.scores, [1 - 1 / 3, 1 / 3 - 1 / 3, 0 - 2 / 3])


def test_boundary_distance_hand_worked():
    """Sec. 4.2: score = the stored distance where the label is right, 0 where it is wrong."""
    labels = np.array([0, 1, 2])
    predicted = np.array([[0, 1, 0]])
    distances = np.array([[0.5, 2.0, 3.0]], dtype=np.float32)
    logits = (one_hot(predicted, 3) * (1 + distances[..., None]))[:, :, None, :]
    data = AttackInput(logits, labels, np.array([[True, False, True]]), ["boundary:budget=50"])
    np.testing.assert_allclose(boundary_distances(logits[0, :, 0]), [0.5, 2.0, 3.0], rtol=1e-6)
    scores = ATTACKS.build("boundary_distance").score(data, 0, np.array([], dtype=np.int64))
    np.testing.assert_allclose(scores, [0.5, 2.0, 0.0], rtol=1e-6)


def test_label_attacks_read_labels_only():
    """A label attack refuses score columns; score attacks skip label columns by default."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 2, 3)).astype(np.float32)
    keep = np.array([[True] * 2 + [False] * 3, [False] * 2 + [True] * 3])
    data = AttackInput(logits, rng.integers(0, 3, 5), keep, ["identity", "label"])
    with pytest.raises(ValueError, match="not 'label' queries"):
        ATTACKS.build("label_augmentation", queries=["identity"]).score(data, 0, np.array([1]))
    only_scores = AttackInput(logits[:, :, :1], data.labels, keep, ["identity"])
    with pytest.raises(ValueError, match="needs 'label' queries"):
        ATTACKS.build("label_augmentation").score(only_scores, 0, np.array([1]))
    np.testing.assert_array_equal(data.query_index(None), [0])
    np.testing.assert_allclose(ATTACKS.build("loss").score(data, 0, np.array([1])),
                               ATTACKS.build("loss").score(only_scores, 0, np.array([1])))


def test_label_query_releases_the_label_only():
    assert is_label_only("label:flip=True") and is_label_only("boundary:budget=10")
    assert not is_label_only("shift:dx=1")
    assert len(expand_queries(["labels18"])) == 18
    model = torch.nn.Linear(4, 3)
    x = torch.randn(16, 4)
    out = build_query("label")(lambda b: model(b), x)
    expected = torch.nn.functional.one_hot(model(x).argmax(-1), 3).float()
    assert torch.equal(out, expected)


# -- HopSkipJump on a linear classifier, whose boundary distance is known exactly ------------
def test_hop_skip_jump_finds_the_linear_boundary():
    """Two classes split by w.x + b = 0: the L2 distance to the boundary is |w.x + b| / |w|.
    HopSkipJump, with labels only, must get within a few percent in 2,000 queries, and never
    report less than the true distance by more than its tolerance (every point it returns is
    adversarial)."""
    torch.manual_seed(0)
    dims = 20
    w, b = torch.randn(dims), 0.3
    x = torch.randn(64, dims) * 0.5

    def decide(batch):
        return (batch @ w + b > 0).long()

    truth = (x @ w + b).abs() / w.norm()
    found = hop_skip_jump(decide, x, decide(x), budget=2000, init_tries=20, num_evals=100,
                          max_evals=10_000, max_halvings=12,
                          rng=torch.Generator().manual_seed(1))
    # the value range clip: uniform noise over [x.min(), x.max()] finds the other side
    assert torch.all(found >= truth * 0.999)
    assert float((found / truth).median()) < 1.05, (found / truth)


def test_boundary_query_respects_its_budget():
    calls = []
    model = torch.nn.Linear(6, 3)

    def forward(batch):
        calls.append(len(batch))
        return model(batch)

    build_query("boundary:budget=300")(forward, torch.randn(8, 6),
                                       torch.Generator().manual_seed(0))
    assert len(calls) - 1 <= 300  # one call for the labels, then at most 300 label queries


# -- QMIA --------------------------------------------------------------------------------------
def test_hinge_score_and_pinball_loss_hand_worked():
    """s = z_y - max_{j != y} z_j: logits (2, 5, 1), y = 1 -> 5 - 2 = 3; y = 0 -> 2 - 5 = -3.
    Pinball at tau = 0.9 (Eq. 2): residuals s - q = +1 and -2 -> (0.9 * 1 + 0.1 * 2) / 2."""
    logits = np.array([[2.0, 5.0, 1.0], [2.0, 5.0, 1.0]])
    np.testing.assert_allclose(hinge_score(logits, np.array([1, 0])), [3.0, -3.0])
    loss = pinball_loss(torch.tensor([0.0, 0.0]), torch.tensor([1.0, -2.0]), 0.9)
    assert float(loss) == pytest.approx((0.9 * 1 + 0.1 * 2) / 2)


def test_qmia_learns_a_conditional_quantile():
    """Non-member scores s ~ N(3 f, 1) with f a feature: the pinball regressor's coverage on
    fresh non-members is near 1 - alpha, and s - q ranks a member shift of +1.5 better than a
    global threshold on s (the point of a per-example quantile)."""
    rng = np.random.default_rng(0)
    n, pop = 4000, 4000
    f = rng.normal(size=n + pop)
    member = np.r_[rng.uniform(size=n) < 0.5, np.zeros(pop, dtype=bool)]
    s = 3 * f + rng.normal(size=n + pop) + 1.5 * member
    logits = np.zeros((1, n + pop, 1, 2), dtype=np.float32)
    logits[0, :, 0, 1] = s  # label 1: hinge = s
    labels = np.ones(n + pop, dtype=np.int64)
    data = AttackInput(logits, labels, member[None], ["identity"],
                       population=np.arange(n, n + pop), features=f[:, None])
    result = ATTACKS.build("qmia", alpha=0.1, epochs=30).evaluate(data, 0, np.array([], int))
    fresh = ~member[:n]
    assert abs(float((result.scores[:n][fresh] <= 0).mean()) - 0.9) < 0.03
    auc_q = metrics.summarize(result.scores[:n], member[:n])["auc"]
    auc_s = metrics.summarize(s[:n], member[:n])["auc"]
    assert auc_q > auc_s + 0.1, (auc_q, auc_s)


# -- rotation null test and positive control ----------------------------------------------------
LABEL_SPECS = ["label_augmentation", "label_augmentation:calibrate=true", "boundary_distance",
               "boundary_distance:calibrate=true", "qmia", "qmia:loss=gaussian"]
LABEL_QUERIES = ["identity", "label", "label:flip=True", "boundary:budget=100"]


def label_view(world: World, target: int, memorizing_target: bool) -> AttackInput:
    """The world's logits plus what label-only queries release: the labels of both query
    columns, and a boundary distance (|margin| of the identity column, a linear model's
    distance up to scale). Features: the sample's difficulty (what an attacker's view of x
    would predict), with noise."""
    base = world.attack_input(target, memorizing_target)
    logits = base.logits
    classes = logits.shape[-1]
    labels = one_hot(logits.argmax(-1), classes)
    margin = np.abs(hinge_score(logits[:, :, 0], logits[:, :, 0].argmax(-1)))
    boundary = labels[:, :, 0] * (1 + margin[..., None]).astype(np.float32)
    stacked = np.concatenate([logits[:, :, :1], labels, boundary[:, :, None]], axis=2)
    rng = np.random.default_rng(1)
    features = world.difficulty[:, 0] + 0.3 * rng.normal(size=world.difficulty[:, 0].shape)
    return AttackInput(stacked, base.labels, base.keep, list(LABEL_QUERIES),
                       population=base.population, features=features)


@pytest.fixture(scope="module")
def world() -> World:
    return World(seed=0)


def pooled(spec, world, memorizing_target: bool) -> dict:
    name, options = parse_spec(spec)
    scores, truth = [], []
    targets = [0] if memorizing_target else range(MODELS)
    for target in targets:
        data = label_view(world, target, memorizing_target)
        refs = np.array([m for m in range(MODELS) if m != target])
        scores.append(ATTACKS.build(name, **options).score(data, target, refs)[:SAMPLES])
        truth.append(world.keep[target, :SAMPLES])
    return metrics.summarize(np.concatenate(scores), np.concatenate(truth))


@pytest.mark.parametrize("spec", LABEL_SPECS)
def test_rotation_null(spec, world):
    result = pooled(spec, world, memorizing_target=False)
    assert abs(result["auc"] - 0.5) <= 0.015, result["auc"]
    assert result["tpr@1%"] <= 0.02, result["tpr@1%"]


@pytest.mark.parametrize("spec", LABEL_SPECS)
def test_rotation_positive_control(spec, world):
    assert pooled(spec, world, memorizing_target=True)["auc"] > 0.6


def test_names_and_declared_requirements():
    """Scripts rely on these names; QMIA uses no reference model but needs population data
    and the attacker's features, and says so clearly when either is missing."""
    assert {"label_augmentation", "boundary_distance", "qmia"} <= set(ATTACKS.names())
    qmia = ATTACKS.build("qmia")
    assert (qmia.min_references, qmia.needs_population, qmia.needs_features) == (0, True, True)
    assert ATTACKS.build("label_augmentation", calibrate=True).min_references == 1
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 10, 1, 3)).astype(np.float32)
    keep = np.array([[True] * 5 + [False] * 5, [False] * 5 + [True] * 5])
    bare = AttackInput(logits, rng.integers(0, 3, 10), keep, ["identity"])
    with pytest.raises(ValueError, match="data.population_size"):
        qmia.score(bare, 0, np.array([], dtype=np.int64))
    keep[:, 8:] = False
    no_features = AttackInput(logits, bare.labels, keep, ["identity"], population=np.arange(8, 10))
    with pytest.raises(ValueError, match="features"):
        qmia.score(no_features, 0, np.array([], dtype=np.int64))


def test_whitebox_boundary_matches_the_linear_distance():
    """method=whitebox (DeepFool, then a label-only binary search): on a linear 3-class model
    the distance to the nearest of the two other classes' boundaries, computed in closed form
    (min over k of (z_y - z_k) / |w_y - w_k|), to within 0.1%."""
    torch.manual_seed(0)
    model = torch.nn.Linear(10, 3)
    x = torch.randn(32, 10)
    with torch.no_grad():
        logits = model(x)
        labels = logits.argmax(-1)
        weight = model.weight
        gaps = logits.gather(1, labels[:, None]) - logits  # (N, C) z_y - z_k
        norms = (weight[labels][:, None, :] - weight[None]).norm(dim=-1)
        truth = torch.where(gaps > 0, gaps / norms.clamp_min(1e-12), torch.inf).min(1).values
    out = build_query("boundary:method=whitebox,budget=50")(lambda b: model(b), x)
    found = out.max(-1).values - 1
    assert torch.equal(out.argmax(-1), labels)
    torch.testing.assert_close(found, truth, rtol=1e-3, atol=1e-5)


# -- QMIA's population, held-out coverage and input scaling (issue 76) -------------------------
def test_qmia_refuses_target_nonmembers_as_population():
    """Fitted on the non-members it then scores, the regressor's quantile sits above them by
    construction: under a null target TPR@1% read 6-10% instead of 1%."""
    from miaudit.config import build_attack
    from miaudit.errors import ConfigError

    with pytest.raises(ConfigError, match="target_nonmembers"):
        build_attack("qmia:population=target_nonmembers")


def test_qmia_reports_coverage_on_population_it_never_fitted():
    """s ~ N(3 f, 1) on non-members: the held-out fifth's coverage of the 90% quantile is near
    0.9 (the fitted part's would read higher when the MLP overfits: it is the one reported)."""
    rng = np.random.default_rng(2)
    n, pop = 400, 3000
    f = rng.normal(size=n + pop)
    member = np.r_[np.arange(n) % 2 == 0, np.zeros(pop, dtype=bool)]
    logits = np.zeros((1, n + pop, 1, 2), dtype=np.float32)
    logits[0, :, 0, 1] = 3 * f + rng.normal(size=n + pop)
    data = AttackInput(logits, np.ones(n + pop, dtype=np.int64), member[None], ["identity"],
                       population=np.arange(n, n + pop), features=f[:, None])
    info = ATTACKS.build("qmia", alpha=0.1, epochs=200).evaluate(data, 0, np.array([], int)).info
    assert info["holdout_size"] == 600 and info["population_size"] == 3000
    assert abs(info["holdout_coverage"] - 0.9) < 0.04, info


def test_qmia_input_scaling_has_a_spread_floor_and_sigma_is_bounded():
    from miaudit.attacks.qmia import SIGMA_BOUNDS, log_sigma_bounds, standardize

    rng = np.random.default_rng(0)
    inputs = np.c_[rng.normal(size=200), rng.normal(size=200),
                   np.r_[np.zeros(199), 1.0] * 1e-3]  # a near-constant third feature
    inputs[-1, 2] = 0.5  # outside the fitted rows it varies
    scaled = standardize(inputs, np.arange(199))
    assert np.abs(scaled).max() < 10  # without the floor: 0.5 / 1e-12
    low, high = log_sigma_bounds(torch.tensor([0.0, 2.0, 4.0]))
    spread = float(torch.tensor([0.0, 2.0, 4.0]).std())
    assert np.exp(low) == pytest.approx(SIGMA_BOUNDS[0] * spread)
    assert np.exp(high) == pytest.approx(SIGMA_BOUNDS[1] * spread)
