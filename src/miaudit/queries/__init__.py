"""Query augmentations: how each model is queried on each pool sample.

A query maps a batch-forward function and an input batch to logits. The audit stores the logits
of every (model, sample, query). Stochastic queries (input dropout) return the log of the mean
softmax over their passes, which is a valid logit vector for every downstream signal. Queries
that differ only in their number of passes share a *draw stream* (``dropout:p=0.01,n=4``'s
passes are ``dropout:p=0.01,n=8``'s first four): one run of the largest count serves them all.
Presets (LiRA/RMIA code): ``augs2`` = identity + flip, ``augs18`` = 2 flips x 3x3 shifts of
+-1 pixel, ``augs50`` = 2 flips x 5x5 shifts of +-2 pixels (reflect padding); ``labels2``,
``labels18``, ``labels50`` are the same transforms releasing the label only
(:mod:`miaudit.queries.labels`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np
import torch

from miaudit.errors import ConfigError
from miaudit.registry import QUERIES, parse_spec
from miaudit.training.augment import shift

Forward = Callable[[torch.Tensor], torch.Tensor]


class Query:
    """Deterministic transform of the input, then one forward pass."""

    #: forward passes per sample (stochastic and search queries take more), for progress and
    #: time estimates
    n: int = 1
    #: name of the random draws this query's passes come from (None: deterministic). Queries of
    #: one stream differ only in ``n`` and use the stream's first ``n`` passes
    stream: str | None = None

    def __init__(self, flip: bool = False, dx: int = 0, dy: int = 0):
        for name, value in (("dx", dx), ("dy", dy)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"option {name!r} must be an integer, got {value!r}")
        if not isinstance(flip, bool):
            raise ValueError(f"option 'flip' must be true or false, got {flip!r}")
        self.flip, self.dx, self.dy = flip, dx, dy

    @property
    def applies_to_tabular(self) -> bool:
        """Tabular inputs have no geometry: only the identity transform applies."""
        return not (self.flip or self.dx or self.dy)

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:  # tabular inputs have no geometry: only the identity applies
            if self.flip or self.dx or self.dy:
                raise ValueError("flip/shift queries need image inputs (N x C x H x W)")
            return x
        x = shift(x, self.dx, self.dy)
        return x.flip(-1) if self.flip else x

    def __call__(self, forward: Forward, x: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        return forward(self.transform(x))


@QUERIES.register("identity")
def identity() -> Query:
    """The sample as it is."""
    return Query()


@QUERIES.register("flip")
def flip() -> Query:
    """Horizontal mirror image."""
    return Query(flip=True)


@QUERIES.register("shift")
def shifted(dx: int = 0, dy: int = 0, flip: bool = False) -> Query:
    """Translate by (dx, dy) pixels with reflect padding, optionally mirrored."""
    return Query(flip=flip, dx=dx, dy=dy)


class InputDropout(Query):
    """Bernoulli input dropout (spiking-network MI study): zero each input element with
    probability ``p``, ``n`` stochastic passes, mean softmax. A model with an attribute
    ``input_dropout_p`` masks its own input instead (spiking nets draw the mask after the T-step
    repetition, as the study's code does); the query then only repeats and averages."""

    def __init__(self, p: float = 0.01, n: int = 10):
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or isinstance(n, bool) \
                or not isinstance(n, int):
            raise ValueError(f"input dropout needs a number p and an integer n, got p={p!r}, "
                             f"n={n!r}")
        if not 0.0 <= p < 1.0 or n < 1:
            raise ValueError(f"input dropout needs 0 <= p < 1 and n >= 1, got p={p}, n={n}")
        self.p, self.n = p, n

    @property
    def stream(self) -> str:
        return f"dropout:p={float(self.p)!r}"

    def __call__(self, forward: Forward, x: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        return self.running_means(forward, x, [self.n], generator)[0]

    def running_means(self, forward: Forward, x: torch.Tensor, counts: list[int],
                      generator: torch.Generator | None = None) -> list[torch.Tensor]:
        """Log mean softmax after the first ``count`` passes, for each of ``counts``, from one
        run of ``max(counts)`` passes (the outputs of every query of this stream)."""
        masks_inside_model = getattr(forward, "input_dropout_p", None) is not None
        probs, means = torch.zeros((), dtype=torch.float64), {}
        try:
            for done in range(1, max(counts) + 1):
                if masks_inside_model:
                    forward.input_dropout_p = self.p
                    logits = forward(x)
                else:
                    keep = torch.rand(x.shape, generator=generator) >= self.p
                    logits = forward(x * keep.to(x.device))
                probs = probs + torch.softmax(logits.double(), dim=-1)
                if done in counts:
                    means[done] = (probs / done).clamp_min(1e-300).log().float()
        finally:
            if masks_inside_model:
                forward.input_dropout_p = 0.0
        return [means[count] for count in counts]


@QUERIES.register("dropout")
def input_dropout(p: float = 0.01, n: int = 10) -> Query:
    """Input dropout: zero each element with probability p, average softmax over n passes."""
    return InputDropout(p=p, n=n)


def shift_grid(radius: int) -> list[str]:
    """2 flips x (2r+1)^2 shifts, as query spec strings."""
    return [
        f"shift:dx={dx},dy={dy},flip={mirror}"
        for mirror in (False, True)
        for dx in range(-radius, radius + 1)
        for dy in range(-radius, radius + 1)
    ]


PRESETS: dict[str, list[str]] = {
    "augs2": ["identity", "flip"],
    "augs18": shift_grid(1),
    "augs50": shift_grid(2),
    # label-only versions (miaudit.queries.labels): the augmentation attack's flips and shifts
    "labels2": ["label", "label:flip=True"],
    "labels18": [spec.replace("shift:", "label:") for spec in shift_grid(1)],
    "labels50": [spec.replace("shift:", "label:") for spec in shift_grid(2)],
}


def expand_queries(specs: list[str]) -> list[str]:
    """Replace preset names by their query lists (order kept, duplicates rejected)."""
    expanded: list[str] = []
    for spec in specs:
        expanded.extend(PRESETS.get(spec, [spec]))
    if len(set(expanded)) != len(expanded):
        raise ValueError(f"duplicate query augmentations in {expanded}")
    return expanded


def build_query(spec: str) -> Query:
    name, options = parse_spec(spec)
    return QUERIES.build(name, **options)


def check_fits(spec: str, height: int, width: int) -> None:
    """Raise ConfigError when the query's shift does not fit images of this size (reflect
    padding needs a shift smaller than the image's height and width)."""
    query = build_query(spec)
    largest = max(abs(query.dx), abs(query.dy))
    if largest >= min(height, width):
        raise ConfigError(f"queries: query {spec!r} shifts by {largest} pixels, but the images are "
                         f"{height}x{width}; shift by less than {min(height, width)}")


CLEAN_QUERY = "identity"  # queried besides the configured ones when none of them is clean


def is_clean(spec: str) -> bool:
    """Whether ``spec`` shows the model the sample as it is (``identity``, ``shift`` by 0
    without flip, as in ``augs18``): the query that accuracy is measured on. Names that are
    no query spec (outputs made elsewhere, e.g. ``query3``) are not known to be clean."""
    try:
        query = build_query(spec)
    except Exception:  # an unknown name or option: not a query this package can vouch for
        return False
    return type(query) is Query and not (query.flip or query.dx or query.dy)


def clean_column(specs: list[str]) -> int | None:
    """Index of the first clean query in ``specs`` (see :func:`is_clean`), or None."""
    return next((index for index, spec in enumerate(specs) if is_clean(spec)), None)


def stored_queries(specs: list[str]) -> list[str]:
    """The queries an audit stores: ``specs``, plus the clean one when none of them is clean
    (accuracy and the generalization gap are measured on clean inputs, never on an
    augmentation)."""
    return list(specs) if clean_column(specs) is not None else [*specs, CLEAN_QUERY]


@torch.no_grad()
def query_outputs(model: torch.nn.Module, x: torch.Tensor, specs: list[str],
                  device: torch.device, seed: int, batch_size: int = 512) -> torch.Tensor:
    """Eval-mode logits of ``model`` for every sample and query: (N, Q, C) float32 on CPU.
    Seeded, so stochastic models and queries give reproducible outputs. A draw stream's
    queries are computed together, each batch's draws seeded by (seed, stream, batch), so a
    query's outputs do not depend on which other queries of its stream were asked for."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    forward = _Forward(model, device)
    queries = [build_query(spec) for spec in specs]
    columns: dict[int, torch.Tensor] = {}
    for index, query in enumerate(queries):
        if index in columns:
            continue
        if query.stream is None:
            columns[index] = torch.cat([query(forward, x[start : start + batch_size], generator)
                                        for start in range(0, len(x), batch_size)])
            continue
        members = [j for j, other in enumerate(queries) if other.stream == query.stream]
        counts = sorted({queries[j].n for j in members})
        per_count = stream_outputs(query, forward, x, counts, seed, batch_size)
        columns.update({j: per_count[queries[j].n] for j in members})
    return torch.stack([columns[index] for index in range(len(specs))], dim=1)


def stream_outputs(query: InputDropout, forward: Forward, x: torch.Tensor, counts: list[int],
                   seed: int, batch_size: int) -> dict[int, torch.Tensor]:
    """Outputs after each of ``counts`` passes of ``query``'s stream. Each batch reseeds the
    mask generator and torch's own (a model that masks its input itself draws from it), so
    the first n passes are the same whatever the largest count."""
    generator, batches = torch.Generator(), []
    for start in range(0, len(x), batch_size):
        batch_seed = int(np.random.SeedSequence(
            [seed, zlib.crc32(query.stream.encode()), start]).generate_state(1)[0])
        generator.manual_seed(batch_seed)
        torch.manual_seed(batch_seed)
        batches.append(query.running_means(forward, x[start : start + batch_size], counts,
                                           generator))
    return {count: torch.cat([means[k] for means in batches]) for k, count in enumerate(counts)}


class _Forward:
    """Batch forward on ``device``; exposes the model's own input-dropout switch."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        return self.model(batch.to(self.device)).float().cpu()

    @property
    def input_dropout_p(self) -> float | None:
        return getattr(self.model, "input_dropout_p", None)

    @input_dropout_p.setter
    def input_dropout_p(self, p: float) -> None:
        self.model.input_dropout_p = p


def draws_of(spec: str) -> str:
    """What a query's passes are computed under: its draw stream, shared with the stream's other
    queries, else the spec itself (a stream is named like the spec of its default count)."""
    return build_query(spec).stream or spec


def num_passes(specs: list[str]) -> int:
    """Forward passes per sample that ``specs`` costs (for progress and time estimates): a
    draw stream costs its largest count once."""
    passes: dict[str, int] = {}
    for spec in specs:
        key = draws_of(spec)
        passes[key] = max(passes.get(key, 0), build_query(spec).n)
    return sum(passes.values())


