"""The report stage: plots, the most exposed samples and the HTML report."""

from __future__ import annotations

from miaudit.auditor.modality import modality_of
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
                          texts=modality_of(pool).texts(pool, audited))
    write_run_records(run.root, summary, pool.y.numpy()[audited], list(pool.class_names))
    write_run_usage(run.root, summary)
    write_html_report(run.root, summary)


def write_run_usage(run_root, summary: Summary) -> None:
    """usage.json: dataset usage inference evaluated on candidate sets of known fractions
    (:func:`miaudit.analysis.dataset_usage.usage_report`); runs of one target have no
    references to debias with and get none."""
    from miaudit._runtime.io import write_json
    from miaudit.analysis.dataset_usage import USAGE_FILE, usage_report
    from miaudit.auditor.rundir import audited_members

    members = audited_members(run_root, summary.targets)
    in_and_out = members.any(1) & (~members).any(1)
    if members.shape[0] < 3 or not in_and_out.all():  # a target and two references, each
        return  # with members and non-members among the audited records
    scores = {label: read_scores(run_root, summary.scores_dir, label) for label in summary.attacks}
    write_json(run_root / USAGE_FILE, usage_report(scores, members))


def write_run_records(run_root, summary: Summary, labels, class_names: list | None) -> None:
    """records.csv: the per-record risk of the strongest attack at the default FPR
    (:mod:`miaudit.analysis.record_risk`) with every attack's per-record score summaries."""
    from miaudit.analysis import record_risk as rr
    from miaudit.auditor.rundir import audited_members

    members = audited_members(run_root, summary.targets)
    if members.shape[0] < 2:  # one target: no record is both IN and OUT
        return
    scores = {label: read_scores(run_root, summary.scores_dir, label) for label in summary.attacks}
    attack = rr.strongest_attack(summary.attacks)
    risk = rr.record_risk(scores[attack], members, attack=attack)
    indices = RunDir(run_root).read_split()["audited"]
    rr.write_records(run_root, rr.records_table(risk, indices, labels, class_names, scores,
                                                members), risk)
