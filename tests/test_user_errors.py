"""User errors end a command on one line with exit code 2; anything else is a bug and keeps its
traceback plus one line saying so (exit code 1). The memory estimate is one formula."""

import pytest
import typer
from typer.testing import CliRunner

from miaudit import errors
from miaudit._runtime import machine
from miaudit.cli.errors import BUG_LINE, user_errors


def _app(raise_it):
    app = typer.Typer()

    @app.command()
    @user_errors()
    def run() -> None:
        raise_it()

    @app.command()
    def other() -> None:  # a second command keeps typer from flattening the app
        pass

    return app


@pytest.mark.parametrize("kind", [errors.ConfigError, errors.DataError, errors.InputFileError,
                                  errors.ResourceError, errors.RunDirError,
                                  errors.ExternalOutputsError])
def test_a_user_error_is_one_line_and_exit_2(kind):
    def raise_it():
        raise kind("option 'x' must be > 0; got -1")

    result = CliRunner().invoke(_app(raise_it), ["run"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: option 'x' must be > 0; got -1"
    assert issubclass(kind, errors.UserError) and errors.MiauditError is errors.UserError


@pytest.mark.parametrize("bug", [ValueError("bad internal value"), KeyError("attacks"),
                                 IndexError("out of range")])
def test_anything_else_is_a_bug_with_its_traceback(bug):
    def raise_it():
        raise bug

    result = CliRunner().invoke(_app(raise_it), ["run"])
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.output
    assert type(bug).__name__ in result.output
    assert result.output.strip().endswith(BUG_LINE)


def test_the_accountants_bad_values_are_config_errors_that_stay_value_errors():
    from miaudit.privacy import accounting

    with pytest.raises(errors.ConfigError, match="noise_multiplier"):
        accounting.check_noise(-1.0)
    with pytest.raises(ValueError):  # library callers catching ValueError keep working
        accounting.check_noise(-1.0)


def test_score_memory_is_one_formula_worked_by_hand():
    # 3 models x 10 samples x (1 keep byte + 2 x 5 float32 outputs + 2 x 5 float64 signals)
    assert machine.score_memory_bytes(3, 10, outputs=10, signals=10) == 3 * 10 * (1 + 40 + 80)


def test_too_little_memory_is_a_resource_error(monkeypatch):
    monkeypatch.setattr(machine, "physical_memory_bytes", lambda: 2**30)
    machine.check_score_memory(2**29, "half a GiB", "lower it")  # fits: no error
    with pytest.raises(errors.ResourceError, match=r"half of four GiB needs about 2\.0 GiB.*"
                                                   r"has 1\.0 GiB; lower it"):
        machine.check_score_memory(2**31, "half of four GiB", "lower it")
