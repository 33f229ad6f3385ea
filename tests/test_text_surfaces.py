"""What a text audit reports (issue 76): next-token accuracy and perplexity, named as such,
in the terminal, results.json and the HTML; no per-class table; a headline ranked by a level
that some attack measures, and saying which."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from miaudit.cli import app


def test_text_scores_report_perplexity_and_a_measurable_headline(tmp_path):
    rng = np.random.default_rng(0)
    models, texts, tokens = 6, 200, 10
    keep = np.zeros((models, texts), dtype=bool)
    for i in range(texts):
        keep[rng.permutation(models)[:3], i] = True
    log_p = np.minimum(-rng.gamma(2.0, 1.0, (models, texts, tokens)) + 0.8 * keep[..., None],
                       -1e-3)
    correct = (rng.uniform(size=log_p.shape) < np.exp(log_p)).astype(np.float32)
    bundle = tmp_path / "lm.npz"
    np.savez(bundle, keep=keep, token_logprobs=log_p, token_correct=correct)
    out = tmp_path / "scored"
    result = CliRunner().invoke(app, ["score", str(bundle), "--out", str(out)],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "results.json").read_text())
    stats = summary["target_models"]
    assert stats["accuracy_kind"] == "next-token top-1 accuracy"
    nll = -np.mean([np.nanmean(log_p[m][~keep[m]].mean(1)) for m in range(models)])
    assert abs(np.log(stats["test_perplexity"]) - nll) < 0.05
    # 600 pooled non-members cannot resolve 0.1% FPR: the headline ranks by TPR@1% and says so
    assert not any(a["pooled"]["tpr@0.1%_measurable"] for a in summary["attacks"].values())
    assert "strongest attack (largest TPR@1%; TPR@0.1% is not measurable" in result.output
    assert "next-token accuracy train" in result.output
    assert f"perplexity train {stats['train_perplexity']:.2f}" in result.output
    report = CliRunner().invoke(app, ["report", str(out), "--html"])
    assert report.exit_code == 0, report.output
    html = (out / "report.html").read_text()
    assert "next-token accuracy" in html and "perplexity (test)" in html
    assert "Per-class leakage" not in html
    assert "largest TPR at 1% FPR; TPR at 0.1% FPR is not measurable" in html
