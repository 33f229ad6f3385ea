"""Several runs side by side, as the papers tabulate them: one row per run (labelled by what
differs between the runs' configs: model, defense, latency, ...), its target models' train and
test accuracy and generalization gap, and per chosen attack TPR at 0.1% FPR [95% CI], TPR at
1% FPR and AUC. Rendered as a rich table, Markdown, or a self-contained HTML page with a
privacy-utility plot (test accuracy against TPR at 0.1% FPR).

With more than ``WIDE_MAX_ATTACKS`` attacks the table is long (one row per run and attack), so
it stays readable; the content is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from rich.markup import escape as rich_escape
from rich.table import Table

from miaudit._runtime.io import write_bytes
from miaudit.errors import InputFileError
from miaudit.reporting import figures
from miaudit.reporting.html_parts import CSS, pct
from miaudit.reporting.run_view import Metric, RunView

WIDE_MAX_ATTACKS = 3
# Config fields that never describe the audited system, so they never label a run (where and on
# how many threads the jobs ran is not part of a model's identity either).
IGNORED_KEYS = ("name", "output_dir", "data.data_dir", "device", "executor", "threads", "attacks",
                "share_models", "memorization_attack")
ATTACK_COLUMNS = ("TPR@0.1% [CI]", "TPR@1%", "AUC")
MODEL_COLUMNS = ("train acc", "test acc", "gap")


class CompareError(InputFileError, ValueError):
    """Runs that cannot be compared (e.g. an attack missing from one of them)."""


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def _short(key: str) -> str:
    """model.name -> model, train.recipe -> recipe, model.options.timesteps -> timesteps."""
    parts = key.split(".")
    return parts[-2] if parts[-1] == "name" and len(parts) > 1 else parts[-1]


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(map(_text, value)) or "[]"
    if isinstance(value, dict):
        return ",".join(f"{k}:{_text(v)}" for k, v in value.items()) or "{}"
    return "none" if value is None else str(value)


def run_labels(configs: Sequence[dict[str, Any]], names: Sequence[str]) -> list[str]:
    """A label per run from the config fields whose values differ between the runs (e.g.
    "model=resnet14, recipe=dpsgd"); the run name when nothing differs. Duplicate labels get
    the run name appended."""
    flats = [_flatten(c) for c in configs]
    keys = list(dict.fromkeys(k for flat in flats for k in flat))
    differing = [k for k in keys if not any(k == i or k.startswith(i + ".") for i in IGNORED_KEYS)
                 and len({_text(flat.get(k, "-")) for flat in flats}) > 1]
    # A field a run does not have (an option of another recipe) says nothing about it.
    labels = [", ".join(f"{_short(k)}={_text(flat[k])}" for k in differing if k in flat) or name
              for flat, name in zip(flats, names)]
    if len(set(labels)) < len(labels):
        labels = [f"{label} ({name})" if label != name else label
                  for label, name in zip(labels, names)]
    return labels


def choose_attacks(views: Sequence[RunView], attacks: Sequence[str] | None) -> list[str]:
    """The requested attack labels (each must be in every run), or by default every attack
    the runs have in common, in the first run's order."""
    if attacks:
        for view in views:
            missing = [a for a in attacks if a not in view.attacks]
            if missing:
                raise CompareError(f"run {view.name} ({view.root}) has no attack "
                                   f"{', '.join(missing)}; it has {', '.join(view.attacks)}")
        return list(attacks)
    common = [a for a in views[0].attacks if all(a in v.attacks for v in views[1:])]
    if not common:
        raise CompareError("the runs have no attack in common; choose with --attacks")
    return common


def _ci_cell(metric: Metric) -> str:
    if not metric.measurable:
        return "n/m"
    if metric.ci is None:
        return pct(metric.value)
    return f"{pct(metric.value)} [{pct(metric.ci[0])}, {pct(metric.ci[1])}]"


def _value_cell(metric: Metric) -> str:
    return pct(metric.value) if metric.measurable else "n/m"


@dataclass(frozen=True)
class Comparison:
    """The table as text cells: ``header`` and ``rows`` (both lists of strings)."""

    header: list[str]
    rows: list[list[str]]
    views: list[RunView]
    labels: list[str]
    attacks: list[str]
    notes: list[str]  # what the reader must know before comparing the rows

    @property
    def wide(self) -> bool:
        """One row per run with every attack's columns (few attacks), else a row per attack."""
        return len(self.attacks) <= WIDE_MAX_ATTACKS


def load_views(run_dirs: Sequence[Path]) -> list[RunView]:
    """Run directories (or results.json files) as views."""
    if not run_dirs:
        raise CompareError("give at least one run directory")
    return [RunView(Path(p)) for p in run_dirs]


def comparison(views: Sequence[RunView], attacks: Sequence[str] | None = None) -> Comparison:
    """The runs ``views`` side by side on ``attacks`` (default: every attack they share)."""
    chosen = choose_attacks(views, attacks)
    labels = run_labels([v.config for v in views], [v.name for v in views])
    wide = len(chosen) <= WIDE_MAX_ATTACKS
    header = ["run", *MODEL_COLUMNS]
    header += ([f"{a} {c}" for a in chosen for c in ATTACK_COLUMNS] if wide
               else ["attack", *ATTACK_COLUMNS])
    rows = []
    for number, (view, label) in enumerate(zip(views, labels), start=1):
        acc = view.accuracy
        model = [f"{number}. {label}", pct(acc.train, 1), pct(acc.test, 1), pct(acc.gap, 1)]
        cells = [[_ci_cell(view.attacks[a].tpr("0.1%")), _value_cell(view.attacks[a].tpr("1%")),
                  pct(view.attacks[a].auc)] for a in chosen]
        if wide:
            rows.append(model + [c for group in cells for c in group])
        else:
            rows.extend(model + [a, *group] for a, group in zip(chosen, cells))
    notes = reference_notes(views, chosen) + ([] if attacks else left_out_notes(views, chosen))
    return Comparison(header, rows, list(views), labels, chosen, notes)


def left_out_notes(views: Sequence[RunView], chosen: Sequence[str]) -> list[str]:
    """A note naming the attacks that only some runs have (the default comparison keeps the
    common ones), so that a reader of the table knows those results exist and where."""
    runs_of: dict[str, list[int]] = {}
    for number, view in enumerate(views, start=1):
        for attack in view.attacks:
            if attack not in chosen:
                runs_of.setdefault(attack, []).append(number)
    if not runs_of:
        return []
    listed = "; ".join(f"{attack} (run{'s' if len(numbers) > 1 else ''} "
                       f"{', '.join(map(str, numbers))})" for attack, numbers in runs_of.items())
    return [f"not in every run, so not in this table: {listed}; each run's own report and "
            "results.json have them"]


def reference_notes(views: Sequence[RunView], attacks: Sequence[str]) -> list[str]:
    """A note per attack whose runs calibrated it on different numbers of reference models:
    their leakage rows differ by attack strength too (:func:`miaudit.results.reference_models`)."""
    notes = []
    for attack in attacks:
        counts = [view.summary.reference_models(attack) for view in views]
        if len(set(counts) - {None}) > 1:
            listed = ", ".join(f"{number}. {count}" for number, count
                               in enumerate(counts, start=1))
            notes.append(f"{attack}: the runs differ in reference models per target ({listed}); "
                         "an attack calibrated on more is stronger, so compare runs with equal "
                         "num_models")
    return notes


CAPTION = ("Percent (AUC too); attacks pooled over each run's targets, TPR@0.1% "
           "with its 95% interval (bootstrap over samples and targets: covers a rerun with new "
           "models; one fixed target: over samples only, model randomness not covered); n/m: "
           "not measurable; accuracies are the target models' means.")


def rich_table(table: Comparison) -> Table:
    """The comparison as a rich table; every cell escaped (rich reads [..] as markup)."""
    out = Table(title="run comparison", caption=" ".join([CAPTION, *table.notes]))
    for index, name in enumerate(table.header):
        out.add_column(rich_escape(name), justify="left" if index == 0 or name == "attack"
                       else "right", overflow="fold")  # full labels, never cut with "…"
    for row in table.rows:
        out.add_row(*(rich_escape(cell) for cell in row))
    return out


def markdown(table: Comparison) -> str:
    """The comparison as a Markdown table, its caption first and its notes after."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    body = [line(table.header), "|" + "---|" * len(table.header)]
    body += [line(row) for row in table.rows]
    notes = "".join(f"\nNote: {note}.\n" for note in table.notes)
    return CAPTION + "\n\n" + "\n".join(body) + "\n" + notes


def compare_markdown(run_dirs: Sequence[Path], attacks: Sequence[str] | None = None) -> str:
    """The comparison of ``run_dirs`` (run directories or results.json files) as a Markdown
    table; ``attacks`` None compares every attack the runs have in common."""
    return markdown(comparison(load_views(run_dirs), attacks))


def privacy_utility_points(table: Comparison) -> list[dict[str, Any]]:
    """One point per run and attack for the privacy-utility plot: the targets' test accuracy
    against the TPR at 0.1% FPR (with its interval), where that TPR is measurable."""
    points = []
    for number, view in enumerate(table.views, start=1):
        for attack in table.attacks:
            low = view.attacks[attack].tpr("0.1%")
            if not low.measurable:
                continue
            points.append({"run": str(number), "attack": attack, "accuracy": view.accuracy.test,
                           "accuracy_std": view.accuracy.test_std, "tpr": low.value,
                           "ci": low.ci})
    return points


#: the comparison's tables scroll sideways inside the page, the run column stays in view
COMPARE_CSS = (".scroll{overflow-x:auto;max-width:100%}"
               ".scroll table{border-collapse:separate;border-spacing:0}"
               ".scroll td:first-child,.scroll th:first-child{position:sticky;left:0;"
               "background:#fff;z-index:1}"
               ".scroll th{white-space:normal;overflow-wrap:anywhere;min-width:6em}")


def render_compare_html(table: Comparison, paired: str = "") -> str:
    """The page; ``paired``: the paired-differences table's HTML (``--paired``), or ""."""
    from miaudit.reporting.leakage_over_training import compare_section

    head = "".join(f"<th>{escape(h)}</th>" for h in table.header)
    numeric = [i > 0 and name != "attack" for i, name in enumerate(table.header)]
    rows = "".join("<tr>" + "".join(
        f'<td class="{"n" if numeric[i] else "t"}">{escape(c)}</td>' for i, c in enumerate(row))
        + "</tr>" for row in table.rows)
    svg = figures.to_svg(figures.privacy_utility(privacy_utility_points(table)), "pu")
    runs = "".join(f"<li><b>{escape(label)}</b>: {escape(v.name)} <code>{escape(str(v.root))}"
                   f"</code></li>" for v, label in zip(table.views, table.labels))
    note = "Points are numbered as the table's rows."
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>miaudit: run '
            f"comparison</title><style>{CSS}{COMPARE_CSS}</style></head><body><main>"
            f"<h1>Run comparison</h1><p class=\"sub\">{len(table.views)} runs · "
            f"{escape(', '.join(table.attacks))}</p>"
            f'<div class="scroll"><table id="compare"><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>"
            f'<p class="note">{escape(CAPTION)}</p>'
            + "".join(f'<p class="note"><b>Note</b>: {escape(n)}.</p>' for n in table.notes)
            + (f"<h2>Paired differences (run - run 1)</h2>{paired}" if paired else "")
            + '<h2>Privacy-utility</h2>'
            f'<figure class="pu">{svg}<figcaption>{note}</figcaption></figure>'
            + compare_section(table.views, table.labels, table.attacks)
            + f"<h2>Runs</h2><ol>{runs}</ol></main></body></html>\n")


def write_compare_html(table: Comparison, out: Path, paired: str = "") -> Path:
    """Write the comparison page (``paired``: the paired-differences section) to ``out``."""
    write_bytes(Path(out), render_compare_html(table, paired).encode("utf-8"))
    return Path(out)


def compare(sources: Sequence[str | Path], attacks: Sequence[str] | None = None, *,
            html: str | Path | None = None) -> str:
    """What ``miaudit compare`` prints, as a function: the runs ``sources`` (run directories
    or results.json files, e.g. an experiment's committed outputs) side by side, each run's
    accuracy beside every shared attack's TPR at 0.1% FPR (with its 95% interval), TPR at 1%
    FPR and AUC, as a Markdown table with the notes a reader needs (runs calibrated on
    different numbers of reference models, attacks left out). ``attacks``: the labels to
    compare (default: every attack the runs share); ``html``: also write the comparison page
    there (the table and the privacy-utility plot)."""
    table = comparison(load_views([Path(source) for source in sources]), attacks)
    if html is not None:
        write_compare_html(table, Path(html))
    return markdown(table)
