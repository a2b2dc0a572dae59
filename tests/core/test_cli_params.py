"""Command-line values checked when the command line is read: output paths writable, numbers finite; file errors are one line."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from dl2_mesos.cli import main
from dl2_mesos.cli_params import FiniteFloatRange, output_file, output_folder


def _blocked(tmp_path):
    """A path under a regular file: no user, root included, can make a folder there."""
    plain = tmp_path / "plain"
    plain.write_text("x")
    return plain / "sub"


def test_a_folder_that_can_be_made_is_made_and_nothing_is_left_in_it(tmp_path):
    assert output_folder(None, None, str(tmp_path / "a" / "b")) == str(tmp_path / "a" / "b")
    assert output_file(None, None, str(tmp_path / "c" / "x.json")) == str(tmp_path / "c" / "x.json")
    assert list((tmp_path / "a" / "b").iterdir()) == [] and list((tmp_path / "c").iterdir()) == []
    assert output_file(None, None, None) is None and output_folder(None, None, None) is None


def test_a_folder_that_cannot_be_made_is_a_bad_parameter(tmp_path):
    with pytest.raises(click.BadParameter, match="cannot write to .*plain/sub/: Not a directory"):
        output_folder(None, None, str(_blocked(tmp_path)))
    with pytest.raises(click.BadParameter, match="Not a directory"):
        output_file(None, None, str(_blocked(tmp_path) / "x.pt"))


@pytest.mark.parametrize(
    "args",
    [
        ["train", "sl", "--preset", "tiny", "--seeds", "1", "--epochs", "1", "--out", "{bad}/x.pt"],
        ["train", "rl", "--preset", "tiny", "--iterations", "1", "--out", "{bad}"],
        ["evaluate", "--preset", "tiny", "--seeds", "1", "--policies", "drf", "--json", "{bad}/e.json"],
        ["simulate", "--preset", "tiny", "--seeds", "1", "-p", "drf", "--json", "{bad}/s.json"],
        ["matrix", "--points", "tiny", "-p", "drf", "--seeds", "1", "--out", "{bad}"],
        ["trace", "generate", "-o", "{bad}/t.csv"],
    ],
)
def test_commands_refuse_an_unwritable_output_before_working(tmp_path, args):
    bad = _blocked(tmp_path)
    res = CliRunner().invoke(main, [a.replace("{bad}", str(bad)) for a in args])
    assert res.exit_code == 2, res.output
    assert "cannot write to" in res.output and "Not a directory" in res.output
    assert "%|" not in res.output  # no progress bar: nothing ran


def test_a_file_error_inside_a_command_is_one_line(tmp_path, monkeypatch):
    missing = tmp_path / "gone" / "f.txt"

    @click.command()
    def reads() -> None:
        missing.read_text()

    @click.command()
    def faults() -> None:
        raise ConnectionRefusedError(111, "Connection refused")  # no file name: not a user's path

    monkeypatch.setattr(type(main), "get_command", lambda self, ctx, name: {"reads": reads, "faults": faults}[name])
    res = CliRunner().invoke(main, ["reads"])
    assert res.exit_code == 1 and res.output == f"Error: {missing}: No such file or directory\n"
    res = CliRunner().invoke(main, ["faults"])
    assert isinstance(res.exception, ConnectionRefusedError)


def test_finite_float_range_refuses_nan_and_inf_and_keeps_its_bounds():
    positive = FiniteFloatRange(min=0, min_open=True)
    assert positive.convert("2.5", None, None) == 2.5
    for bad in ("nan", "inf", "-inf", float("nan"), "NaN"):
        with pytest.raises(click.BadParameter, match="not a finite number"):
            positive.convert(bad, None, None)
    with pytest.raises(click.BadParameter, match="not in the range x>0"):
        positive.convert("0", None, None)
    with pytest.raises(click.BadParameter, match="not a valid float"):
        positive.convert("fast", None, None)


@pytest.mark.parametrize(
    "args, msg",
    [
        (["local-cluster", "--cpus", "nan"], "not a finite number"),
        (["local-cluster", "--heartbeat-interval", "0"], "not in the range x>0"),
        (["local-cluster", "--status-update-retry-interval", "inf"], "not a finite number"),
        (["local-cluster", "--port-base", "0"], "not in the range 1<=x<=65535"),
        (["local-cluster", "--agents", "3", "--port-base", "64000"], "do not fit in 1-65535"),
        (["simulate", "--preset", "tiny", "--slot-seconds", "inf"], "not a finite number"),
        (["train", "sl", "--lr", "nan"], "not a finite number"),
        (["train", "rl", "--lr-actor", "nan"], "not a finite number"),
        (["train", "rl", "--entropy-start", "-1"], "not in the range x>=0"),
        (["demo", "--epochs-scale", "nan"], "not a finite number"),
        (["submit", "--type", "dssm", "--epochs", "inf"], "not a finite number"),
    ],
)
@pytest.mark.timeout(60)  # a value let through would start a local cluster that runs until signalled
def test_commands_refuse_numbers_that_are_not_finite_before_starting(args, msg):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and msg in res.output, res.output
