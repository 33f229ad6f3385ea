"""The report stage: plots, the most exposed samples and the HTML report."""

from __future__ import annotations

from miaudit.auditor.rundir import RunDir, read_scores
from miaudit.auditor.stages.plan import Audit
from miaudit.results import Summary


def report_stage(run: RunDir, planned: Audit, summary: Summary) -> None:
    """The report stage: plots, the most exposed samples and the HTML report."""
    from miaudit.reporting import write_exposed_samples, write_html_report
    from miaudit.reporting.run_view import RunView
    from miaudit.reporting.terminal import render_plots

    render_plots(run.root, summary)
    audited, pool = planned.plan.split.audited, planned.pool
    best = RunView(run.root, summary).best_attack().label
    write_exposed_samples(run.root, read_scores(run.root, summary.scores_dir, best),
                          planned.plan.keep[summary.targets][:, audited],
                          pool.x.numpy()[audited] if pool.is_image else None,
                          pool.y.numpy()[audited], pool.class_names, attack=best,
                          texts=[pool.texts[i] for i in audited] if pool.is_text else None)
    write_html_report(run.root, summary)
