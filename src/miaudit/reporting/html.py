"""The self-contained HTML audit report of one run.

One file, no network: inline CSS, figures as inline SVG, thumbnails as base64 PNG, no script.
Sections: settings and provenance, headline, log-log ROC curves per attack family (pooled curve,
range over targets shaded), the attack table, target-model accuracy, per-class leakage, the DP
bound and empirical epsilon (when the targets were trained with DP-SGD), the memorization
analysis (when memorization.json exists), the most exposed members (when exposed.npz exists),
the per-record risk (when records.csv exists), dataset usage (when usage.json exists)
and the reference planner's curves (when ``miaudit plan`` has run).
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from miaudit._runtime.io import write_bytes
from miaudit.auditor.modality import TEXT
from miaudit.auditor.runfiles import REPORT_FILE
from miaudit.reporting import figures
from miaudit.reporting.html_parts import (
    CSS,
    array_png,
    kv_table,
    metric_cell,
    pct,
    png_data_uri,
    section,
)
from miaudit.reporting.planner import planner_section
from miaudit.reporting.rocs import family_curves
from miaudit.reporting.run_view import AttackView, Metric, RunView
from miaudit.results import Summary
from miaudit.results.target_models import shown_rows

TABLE_LEVELS = ("0.001%", "0.1%", "1%")

# -- sections -------------------------------------------------------------------------------
def headline(view: RunView) -> str:
    best = view.best_attack()
    low, one, acc = best.tpr("0.1%"), best.tpr("1%"), view.accuracy
    chance = ("at chance level: no member is found more often than a non-member"
              if low.value <= 0.001 else f"{low.value / 0.001:.1f}× the chance rate"
              + ("; its 95% band reaches down to the chance rate, so this run cannot tell it "
                 "from chance" if low.ci_simultaneous and low.ci_simultaneous[0] <= 0.001
                 else ""))
    auc = best.metric("auc")
    kpis = [
        ("strongest attack", best.label, figures.family(best.name)),
        ("TPR at 0.1% FPR", _kpi_value(low), band(low)),
        ("TPR at 1% FPR", _kpi_value(one), band(one)),
        ("AUC", f"{best.auc:.3f}", "" if auc.ci_simultaneous is None else
         f"[{auc.ci_simultaneous[0]:.3f}, {auc.ci_simultaneous[1]:.3f}]"),
        ("next-token accuracy (test)" if view.modality is TEXT else "test accuracy (gap)",
         pct(acc.test, 1) + "%", f"gap {pct(acc.gap, 1)} points"),
    ]
    if view.modality is TEXT:
        stats = view.summary.target_models
        kpis.append(("perplexity (test)", f"{stats.test_perplexity:.2f}",
                     f"train {stats.train_perplexity:.2f}"))
    cards = "".join(f'<div class="kpi"><div class="l">{escape(label)}</div>'
                    f'<div class="v">{escape(value)}</div><div class="ci">{escape(ci)}</div>'
                    f"</div>" for label, value, ci in kpis)
    finding = (f"At a 0.1% false-positive rate it identifies {pct(low.value)}% of the "
               f"training members ({escape(chance)})" if low.measurable else
               "TPR at 0.1% FPR is not measurable in this run (below 1/non-members, or tied "
               "top scores)")
    level = view.headline_level
    ranked = ("TPR at 0.1% FPR" if level == "0.1%" else
              f"TPR at {level} FPR; TPR at 0.1% FPR is not measurable for any attack"
              if level else "AUC; no TPR level is measurable for any attack")
    sentence = (f"Strongest attack (largest {ranked}, of {len(view.attacks)}): "
                f"<b>{escape(best.label)}</b>. {finding}; pooled over {len(view.targets)} "
                f"target model(s). In brackets: 95% bands simultaneous over all "
                f"{len(view.attacks)} attacks (max-type percentile bootstrap band, Mandel & "
                f"Betensky 2008), so they hold for the attack picked after looking; each "
                f"comes from the {escape(view.interval_method)}.")
    warnings = "".join(f'<p class="caveat"><b>Caveat:</b> {escape(c)}</p>'
                       for c in view.summary.caveats)
    return f'<div class="headline">{cards}</div>{warnings}<p>{sentence}</p>'


def band(metric: Metric) -> str:
    """The simultaneous band (the marginal interval for runs written before it existed)."""
    if not metric.measurable:
        return ""
    chosen = metric.ci_simultaneous or metric.ci
    return "" if chosen is None else f"[{pct(chosen[0])}, {pct(chosen[1])}]"


def _kpi_value(metric: Metric) -> str:
    return pct(metric.value) + "%" if metric.measurable else "n/m"


def settings_section(view: RunView) -> str:
    config = yaml.safe_dump(view.config, sort_keys=False) if view.config else "n/a"
    return (f'<div class="cols"><div><h3>settings</h3>{kv_table(view.settings())}</div>'
            f'<div><h3>provenance</h3>{kv_table(view.provenance())}</div></div>'
            f"<details><summary>resolved config</summary><pre>{escape(config)}</pre></details>")


Curves = tuple[dict[str, list[dict[str, Any]]], float] | None


def roc_section(view: RunView, curves: Curves) -> str:
    if curves is None:
        return '<p class="note">per-sample scores are absent: no ROC curves.</p>'
    panels, floor = curves
    spread = (" Shaded: the 25th to 75th percentile of the per-target curves (from 10 false "
              "positives per target up)." if len(view.targets) > 1 else "")
    blocks = []
    for index, (name, curves) in enumerate(panels.items()):
        svg = figures.to_svg(figures.roc_panel(name, curves, floor), f"roc{index}")
        blocks.append(f"<figure>{svg}<figcaption>{escape(name)}: pooled over "
                      f"{len(view.targets)} target(s).{escape(spread)}</figcaption></figure>")
    return (f'<div class="figs">{"".join(blocks)}</div><p class="note">Log-log axes '
            f"(Carlini et al. 2022): the low-FPR corner is where an attack is trustworthy. "
            f"FPRs below 1/(non-members) = {floor:.1e} are not measurable.</p>")


def attack_table(view: RunView) -> str:
    rotation = len(view.targets) > 1
    head = ("<tr><th>attack</th><th>family</th>"
            + "".join(f"<th>TPR@{level} FPR</th>" for level in TABLE_LEVELS)
            + "<th>AUC</th><th>balanced acc.</th></tr>")
    rows, best = [], view.best_attack().label
    for attack in view.attacks.values():
        css = "attack best" if attack.label == best else "attack"
        cells = "".join(metric_cell(attack.tpr(level), rotation) for level in TABLE_LEVELS)
        cells += metric_cell(attack.metric("auc"), rotation)
        cells += metric_cell(attack.metric("balanced_accuracy"), rotation)
        marker = " *" if attack.caveats else ""
        rows.append(f'<tr class="{css}"><td>{escape(attack.label)}{marker}</td>'
                    f"<td>{escape(figures.family(attack.name))}</td>{cells}</tr>")
    note = (f"Percent, pooled over targets [95% CI: {view.interval_method}]. "
            + ("It covers what a rerun with new target models and samples would see. "
               if rotation else "One fixed target: model randomness is not covered. ")
            + "The exact Clopper-Pearson intervals (results.json tpr@X_ci_conditional) are "
            "conditional on these trained models. n/m: not measurable (below 1/non-members, "
            "or tied top scores exceed the FPR)."
            + (" Second line: mean ± std across targets." if rotation else ""))
    caveats = "".join(f'<p class="note">{escape(line)}</p>' for line in view.summary.caveat_lines())
    caveats += blind_section(view.summary)
    return (f'<table id="attacks"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'
            f'<p class="note">{note}</p>{caveats}')


def blind_section(summary: Any) -> str:
    """The blind baseline (texts alone) and every attack's AUC advantage over it."""
    from miaudit.reporting.terminal import blind_line, over_blind_cell

    line = blind_line(summary)
    if line is None:
        return ""
    rows = "".join(f"<tr><td>{escape(label)}</td><td>{over_blind_cell(attack)}</td></tr>"
                   for label, attack in summary.attacks.items())
    lines = "".join(f'<p class="note">{escape(part)}</p>' for part in line.split("\n"))
    return (f'{lines}<table id="over-blind"><thead><tr><th>attack</th><th>AUC minus blind '
            f"baseline, points [paired 95% CI]</th></tr></thead><tbody>{rows}</tbody></table>")


def models_section(view: RunView) -> str:
    acc = view.accuracy
    kind = view.modality.accuracy_kind
    rows = {
        f"train {kind} (targets)": _mean_std(acc.train, acc.train_std),
        f"test {kind} (targets)": _mean_std(acc.test, acc.test_std),
        "generalization gap": f"{pct(acc.gap)} points",
    }
    if view.modality is TEXT:
        stats = view.summary.target_models
        rows["perplexity (train / test)"] = (f"{stats.train_perplexity:.2f} / "
                                             f"{stats.test_perplexity:.2f}")
    rows.update(shown_rows(view.summary.target_models))  # each statistic under its title
    models = view.model_accuracies()
    if models:
        for split in ("train", "test"):
            values = np.array([m[split] for m in models])
            rows[f"all {len(models)} models, {split}"] = (
                f"{pct(values.mean())}% (min {pct(values.min())}, max {pct(values.max())})")
    return kv_table(rows)


def _mean_std(mean: float, std: float | None) -> str:
    return f"{pct(mean)}%" + ("" if std is None else f" ± {pct(std)}")


def per_class_section(view: RunView, attack: AttackView) -> str:
    names = view.class_names()
    rows = []
    for label, row in sorted(attack.per_class.items()):
        name = names[label] if names and label < len(names) else str(label)
        counts = f'{row.get("n_members", "?")} / {row.get("n_nonmembers", "?")}'
        auc = attack.class_metric(row, "auc")
        if auc is None:
            rows.append(f"<tr><td>{escape(name)}</td><td class=\"n\">{counts}</td>"
                        f'<td colspan="3" class="note">needs members and non-members</td></tr>')
            continue
        width = max(0.0, auc.value - 0.5) * 200  # px: AUC 1.0 -> 100 px
        cells = (f'<td class="n">{auc.value:.3f}<span class="bar" style="width:{width:.0f}px">'
                 f"</span></td>")
        cells += "".join(metric_cell(attack.class_metric(row, f"tpr@{level}"), False)
                         for level in ("0.1%", "1%"))
        rows.append(f'<tr><td>{escape(name)}</td><td class="n">{counts}</td>{cells}</tr>')
    head = ("<tr><th>class</th><th>members / non-members</th><th>AUC</th>"
            "<th>TPR@0.1% FPR</th><th>TPR@1% FPR</th></tr>")
    return (f"<p>Attack <b>{escape(attack.label)}</b>, ROC within each class (pooled over "
            f"targets).</p><table>{head}{''.join(rows)}</table>")


def privacy_section(view: RunView, curves: Curves) -> str:
    from miaudit.privacy.bounds import roc_bound

    privacy = view.privacy
    epsilon, delta = privacy.epsilon, privacy.delta
    claim = kv_table({
        "claimed epsilon (largest over targets)": f"{epsilon:.3g}",
        "delta": f"{delta:g}",
        "noise multiplier": f"{privacy.noise_multiplier:.3g}",
        "sample rate": f"{privacy.sample_rate:.3g}",
    })
    rows = []
    for attack in view.attacks.values():
        audit = attack.empirical_epsilon
        if audit is None:
            continue
        verdict = audit.verdict or "n/a"
        css = "bad" if verdict == "contradicted" else "ok"
        rows.append(f"<tr><td>{escape(attack.label)}</td><td class=\"n\">"
                    f"{audit.epsilon_lower:.3g}</td><td class=\"n\">{epsilon:.3g}</td>"
                    f'<td class="{css}">{escape(verdict)}</td></tr>')
    table = ("<table><tr><th>attack</th><th>empirical ε lower bound (95%)</th>"
             f"<th>claimed ε</th><th>verdict</th></tr>{''.join(rows)}</table>")
    figure = ""
    if curves is not None:
        panels, floor = curves
        # One panel of all attacks, without the bands: they would hide the bound.
        pooled = [{**c, "band_low": None} for group in panels.values() for c in group]
        grid = pooled[0]["grid"]
        bound = {"fpr": grid, "tpr": roc_bound(grid, epsilon, delta),
                 "label": f"({epsilon:.3g}, {delta:g})-DP bound"}
        svg = figures.to_svg(figures.roc_panel("pooled ROCs under the claimed DP bound", pooled,
                                               floor, bound), "dpbound")
        # The first constraint reaches TPR 1 at FPR (1 - delta) e^-eps: beyond it the bound
        # says nothing, which is why a large epsilon bounds nothing an attack can show.
        full = (1 - delta) * np.exp(-epsilon)
        figure = (f"<figure>{svg}<figcaption>No attack's ROC may rise above the dotted bound "
                  "TPR ≤ min(e^ε FPR + δ, 1 − e^−ε (1 − δ − FPR)) (Kairouz et al. 2015, "
                  f"Thm. 2.1); it allows TPR 1 from FPR {full:.1e} on.</figcaption></figure>")
    note = escape(privacy.note)
    return (f'<div class="cols"><div>{claim}<h3>claimed vs empirical ε</h3>{table}'
            f'<p class="note">{note}</p></div><div>{figure}</div></div>')


def memorization_section(view: RunView) -> str:
    table = view.memorization
    rho, mean = table["spearman_loss_mem"], table["mean_memorization"]
    summary = kv_table({
        "attack": str(table.get("attack", "?")), "target": str(table["target"]),
        "mean memorization, members / non-members": f"{mean['train']:.3f} / {mean['test']:.3f}",
        "Spearman(loss, mem), members": f"{rho['train']['rho']:.3f} (n {rho['train']['n']})",
        "Spearman(loss, mem), non-members": f"{rho['test']['rho']:.3f} (n {rho['test']['n']})",
    })
    rows = "".join(_bin_row(b) for b in table["bins"] if b["n_members"] + b["n_nonmembers"])
    bins = ("<table><tr><th>memorization bin</th><th>members / non-members</th>"
            "<th>train acc</th><th>test acc</th><th>TPR@0.1% FPR (members)</th></tr>"
            f"{rows}</table>")
    image = view.file_bytes("memorization.png")
    figure = (f'<figure><img alt="memorization analysis" src="{png_data_uri(image)}" '
              'style="width:100%"></figure>') if image else ""
    return (f'<p>Feldman & Zhang (2020) memorization estimated from the run\'s own models; '
            f'bins as in the DeMem paper\'s Figure 1.</p><div class="cols"><div>{summary}'
            f'<h3>per bin (non-empty)</h3>{bins}</div><div>{figure}</div></div>')


def _bin_row(row: dict[str, Any]) -> str:
    span = "≤ 0" if row["bin"] == 0 else f"({row['low']:.2f}, {row['high']:.2f}]"
    return (f'<tr><td>{span}</td><td class="n">{row["n_members"]} / {row["n_nonmembers"]}</td>'
            f'<td class="n">{pct(row["train_acc"], 1)}</td>'
            f'<td class="n">{pct(row["test_acc"], 1)}</td>'
            f'<td class="n">{pct(row["tpr@0.1%"])}</td></tr>')


def exposed_section(view: RunView, exposed: dict[str, Any]) -> str:
    names = [str(c) for c in exposed["class_names"]]
    attack = str(exposed["attack"]) or "?"
    has_images = "thumbnails" in exposed
    items = []
    for i, index in enumerate(exposed["indices"]):
        label = int(exposed["labels"][i])
        name = names[label] if label < len(names) else str(label)
        caption = (f"#{int(index)} · {escape(name)}<br>score {exposed['scores'][i]:.3g}<br>"
                   f"flagged {int(exposed['flagged'][i])}/{int(exposed['member_targets'][i])}")
        image = ""
        if "texts" in exposed:  # a language model's training text, shown as text
            image = f'<pre class="text">{escape(str(exposed["texts"][i])[:400])}</pre>'
        if has_images:
            uri = png_data_uri(array_png(exposed["thumbnails"][i]))
            image = f'<img alt="sample {int(index)}" src="{uri}">'
        items.append(f'<div class="thumb">{image}{caption}</div>')
    return (f"<p>The {len(items)} members with the highest mean score of <b>{escape(attack)}</b> "
            "over the targets they trained: pool index, class, score, and in how many of those "
            "targets they lie above the pooled threshold of 0.1% FPR.</p>"
            f'<div class="thumbs">{"".join(items)}</div>')


# -- the page -------------------------------------------------------------------------------
def render_html(view: RunView) -> str:
    """The whole report page as a string."""
    from miaudit.version import __version__

    best = view.best_attack()
    curves = family_curves(view) if view.has_scores() else None  # for the ROC and DP panels
    parts = [
        section("Headline", headline(view), "headline"),
        section("Settings and provenance", settings_section(view), "settings"),
        section("ROC curves by attack family", roc_section(view, curves), "roc"),
        section("Attacks", attack_table(view), "table"),
        section("Target models: accuracy and generalization gap", models_section(view),
                "models"),
    ]
    if view.modality.has_classes:  # a language model's texts have no classes
        parts.append(section("Per-class leakage", per_class_section(view, best), "classes"))
    from miaudit.reporting.leakage_over_training import leakage_section

    if (over_training := leakage_section(view.summary.snapshots)) is not None:
        parts.append(section("Leakage over training", over_training, "snapshots"))
    if view.privacy:
        parts.append(section("Differential privacy: claimed vs empirical",
                             privacy_section(view, curves), "privacy"))
    planner = view.summary.reference_planner
    if planner and planner.get("attacks"):
        parts.append(section("How many reference models", planner_section(planner), "planner"))
    if view.memorization is not None:
        parts.append(section("Memorization", memorization_section(view), "memorization"))
    from miaudit.reporting.record_risk import record_risk_section

    records = record_risk_section(view.root)
    if records is not None:
        parts.append(section("Per-record risk across retrainings", records, "records"))
    from miaudit.reporting.dataset_usage import dataset_usage_section

    usage = dataset_usage_section(view.root)
    if usage is not None:
        parts.append(section("Dataset usage inference", usage, "usage"))
    exposed = view.exposed()
    if exposed is not None and len(exposed["indices"]):
        parts.append(section("Most exposed members", exposed_section(view, exposed), "exposed"))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>miaudit: {escape(view.name)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>Membership-inference audit: {escape(view.name)}</h1>"
            f'<p class="sub">{len(view.attacks)} attacks, {len(view.targets)} target(s), '
            f"{view.num_models} models · report by miaudit {escape(__version__)}, {stamp}</p>"
            + "".join(parts) + "</main></body></html>\n")


def write_html_report(run_dir: Path, summary: Summary | None = None, *,
                      out: Path | None = None) -> Path:
    """Write the self-contained HTML report of the run in ``run_dir`` (``summary``: its
    results.json contents, read from disk when None) to ``out`` (default
    ``run_dir/report.html``), atomically. Returns the path."""
    view = RunView(Path(run_dir), summary)
    path = Path(out) if out is not None else view.root / REPORT_FILE
    write_bytes(path, render_html(view).encode("utf-8"))
    return path
