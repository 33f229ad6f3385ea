"""The report's dataset usage section, from the run's usage.json
(:mod:`miaudit.analysis.dataset_usage`): DUCI's estimates on candidate sets of known fractions,
their intervals, bias and per-target error, and the error of every attack."""

from __future__ import annotations

from html import escape
from pathlib import Path

from miaudit._runtime.io import read_json
from miaudit.analysis.dataset_usage import USAGE_FILE


def dataset_usage_section(run_dir: Path) -> str | None:
    """The section's HTML, or None when the run has no usage.json."""
    path = Path(run_dir) / USAGE_FILE
    if not path.exists():
        return None
    report = read_json(path)
    evaluation, chosen = report["evaluation"], report["chosen"]
    rows = "".join(
        f'<tr><td class="n">{c["fraction"]:g}</td><td class="n">{c["estimate"]:.3f} '
        f'[{c["interval"][0]:.3f}, {c["interval"][1]:.3f}]</td>'
        f'<td class="{"ok" if c["covered"] else "bad"}">{"yes" if c["covered"] else "no"}</td>'
        f'<td class="n">{c["bias"]:+.3f}</td><td class="n">{c["mean_absolute_error"]:.3f}</td>'
        "</tr>" for c in evaluation["fractions"])
    attacks = "".join(
        f'<tr><td>{escape(label)}</td><td class="n">{e["mean_absolute_error"]:.3f}</td>'
        f'<td class="n">{e["max_abs_bias"]:.3f}</td></tr>'
        for label, e in sorted(report["attacks"].items(),
                               key=lambda item: item[1]["mean_absolute_error"]))
    return ("<p>How much of a candidate set did a target train on? DUCI (Tong et al., ICLR "
            "2025) debiases an attack's guesses by the reference models' error rates; here on "
            "candidate sets of known fractions built from each target's memberships, with "
            f"<b>{escape(chosen)}</b> (the attack with the smallest error per target). "
            f"Mean absolute error per target <b>{evaluation['mean_absolute_error']:.3f}</b>; "
            f"pooled intervals covering the truth {100 * evaluation['coverage']:.0f}%.</p>"
            '<div class="cols"><div><table><tr><th>true fraction</th><th>pooled estimate '
            "[95% CI]</th><th>covered</th><th>bias</th><th>MAE per target</th></tr>"
            f"{rows}</table></div><div><table><tr><th>attack</th><th>MAE per target</th>"
            f"<th>largest pooled bias</th></tr>{attacks}</table></div></div>"
            '<p class="note">Your own candidate set: <code>miaudit usage RUN --candidates '
            "idx.npy</code>.</p>")
