"""The evaluation matrix's run cache (``dl2 matrix --cache``) and its decision-cost column.

The cache lets the head-to-head table keep its costly baseline rows (Pollux) and re-run only the
DL2 rows when a new model is shipped.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.sim import matrix as mx
from dl2_mesos.policy.simulate_cli import matrix as matrix_cmd


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_runs_are_appended_as_they_finish_and_reused(tmp_path):
    path = tmp_path / "runs.jsonl"
    first = mx.evaluate_matrix(["drf", "fifo"], [1, 2], ["tiny"], workers=1, cache=mx.RunCache(path))
    recs = _lines(path)
    assert len(recs) == 4 and {r["policy"] for r in recs} == {"drf", "fifo"}
    assert all(r["format"] == mx.CACHE_FORMAT and r["max_slots"] is None for r in recs)
    assert first["config"]["cache"] == {"path": str(path), "reused": 0, "ran": 4}

    seen = []
    again = mx.evaluate_matrix(["drf", "fifo"], [1, 2], ["tiny"], workers=1, cache=mx.RunCache(path),
                               progress=lambda *a: seen.append(a))
    assert again["config"]["cache"]["reused"] == 4 and again["config"]["cache"]["ran"] == 0
    assert again["points"] == first["points"]
    assert len(seen) == 4  # the progress bar still counts the reused runs
    assert len(_lines(path)) == 4  # nothing new written


def test_another_seed_or_slot_cap_is_another_run(tmp_path):
    path = tmp_path / "runs.jsonl"
    mx.evaluate_matrix(["drf"], [1], ["tiny"], workers=1, cache=mx.RunCache(path))
    doc = mx.evaluate_matrix(["drf"], [1, 2], ["tiny"], workers=1, cache=mx.RunCache(path))
    assert doc["config"]["cache"] == {"path": str(path), "reused": 1, "ran": 1}
    doc = mx.evaluate_matrix(["drf"], [1], ["tiny"], workers=1, max_slots=3, cache=mx.RunCache(path))
    assert doc["config"]["cache"]["ran"] == 1
    assert [r["max_slots"] for r in _lines(path)] == [None, None, 3]


def test_a_new_dl2_model_reruns_only_the_dl2_rows(tmp_path):
    from dl2_mesos.policy.dl2.checkpoint import load_checkpoint, save_checkpoint, shipped_model_path

    path = tmp_path / "runs.jsonl"
    mx.evaluate_matrix(["dl2", "drf"], [1], ["tiny"], workers=1, cache=mx.RunCache(path))
    # the same weights under another name: the same identity, reused
    same = tmp_path / "copy.pt"
    same.write_bytes(shipped_model_path().read_bytes())
    doc = mx.evaluate_matrix(["dl2", "drf"], [1], ["tiny"], workers=1, model_path=str(same),
                             cache=mx.RunCache(path))
    assert doc["config"]["cache"]["ran"] == 0
    # another model (other bytes): dl2 runs again, drf comes from the cache
    loaded = load_checkpoint()
    other = save_checkpoint(tmp_path / "other.pt", loaded.net, version=loaded.version + 1)
    doc = mx.evaluate_matrix(["dl2", "drf"], [1], ["tiny"], workers=1, model_path=str(other),
                             cache=mx.RunCache(path))
    assert doc["config"]["cache"] == {"path": str(path), "reused": 1, "ran": 1}
    recs = _lines(path)
    assert [r["policy"] for r in recs] == ["dl2", "drf", "dl2"]
    assert recs[0]["identity"] != recs[2]["identity"] and recs[2]["identity"].startswith("dl2@sha256:")
    assert doc["config"]["model_identity"] == recs[2]["identity"]


def test_rerun_runs_a_policy_again_and_the_later_line_wins(tmp_path):
    path = tmp_path / "runs.jsonl"
    mx.evaluate_matrix(["drf", "fifo"], [1], ["tiny"], workers=1, cache=mx.RunCache(path))
    # doctor the cached fifo row: a rerun must replace it, a reuse must show it
    recs = _lines(path)
    for r in recs:
        if r["policy"] == "fifo":
            r["summary"]["avg_jct"] = 1.0
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    reused = mx.evaluate_matrix(["drf", "fifo"], [1], ["tiny"], workers=1, cache=mx.RunCache(path))
    assert reused["points"][0]["policies"]["fifo"]["avg_jct"] == 1.0
    fresh = mx.evaluate_matrix(["drf", "fifo"], [1], ["tiny"], workers=1, cache=mx.RunCache(path),
                               rerun=["fifo"])
    assert fresh["config"]["cache"]["ran"] == 1
    assert fresh["points"][0]["policies"]["fifo"]["avg_jct"] > 1.0
    assert mx.RunCache(path).get("tiny", "fifo", 1, None)["avg_jct"] > 1.0  # the appended line wins


def test_an_interrupted_matrix_keeps_its_finished_runs(tmp_path, monkeypatch):
    path = tmp_path / "runs.jsonl"
    real = mx.run_one
    calls = []

    def dies_on_the_third(task):
        calls.append(task)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(mx, "run_one", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        mx.evaluate_matrix(["drf", "fifo"], [1, 2], ["tiny"], workers=1, cache=mx.RunCache(path))
    assert len(_lines(path)) == 2
    monkeypatch.setattr(mx, "run_one", real)
    doc = mx.evaluate_matrix(["drf", "fifo"], [1, 2], ["tiny"], workers=1, cache=mx.RunCache(path))
    assert doc["config"]["cache"]["reused"] == 2 and doc["config"]["cache"]["ran"] == 2


def test_a_torn_last_line_is_ignored_and_the_file_stays_usable(tmp_path):
    path = tmp_path / "runs.jsonl"
    mx.evaluate_matrix(["drf"], [1, 2], ["tiny"], workers=1, cache=mx.RunCache(path))
    text = path.read_text()
    path.write_text(text + text.splitlines()[0][:40])  # a writer killed mid-line
    cache = mx.RunCache(path)
    assert len(cache) == 2
    doc = mx.evaluate_matrix(["drf"], [1, 2, 3], ["tiny"], workers=1, cache=cache)
    assert doc["config"]["cache"]["ran"] == 1
    assert len(mx.RunCache(path)) == 3  # the new record was not glued to the torn line


@pytest.mark.parametrize(
    "content, msg",
    [
        ("not json\n{}\n", "line 1"),
        ('{"format": "something-else", "point": "tiny"}\n', "not a dl2-matrix-run/1 record"),
        ('{"format": "dl2-matrix-run/1", "point": "tiny", "policy": "drf", "seed": 1, "max_slots": null, '
         '"identity": "drf", "summary": {"avg_jct": "x", "num_jobs": 1, "num_finished": 1}}\n', "line 1"),
        ('{"format": "dl2-matrix-run/1", "point": "tiny"}\n', "line 1"),
    ],
)
def test_a_bad_cache_is_a_clear_error_and_is_left_alone(tmp_path, content, msg):
    path = tmp_path / "runs.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError, match=msg):
        mx.RunCache(path)
    assert path.read_text() == content


def test_decision_cost_counts_the_policys_own_process():
    class Fake:
        name = "fake"

        def __init__(self):
            self.cpu_seconds = []

        def decide(self, state):
            self.cpu_seconds.append(0.25)  # what an optimiser process reports per decision
            return state

    timed = mx._TimedPolicy(Fake())
    assert timed.decide("s") == "s" and timed.decide("t") == "t"
    cost = timed.cost()
    assert cost["decisions"] == 2 and 0.5 <= cost["decision_cpu_s"] < 1.0


def test_matrix_reports_the_decision_cost_per_slot(tmp_path):
    doc = mx.evaluate_matrix(["drf"], [1], ["tiny"], workers=1)
    r = doc["points"][0]["policies"]["drf"]
    assert r["decision_cpu_ms"] >= 0.0
    assert "ms/slot" in mx.format_matrix(doc)
    # a run cached before the cost was recorded: the column says "-"
    del r["decision_cpu_ms"]
    row = [x for x in mx.format_matrix(doc).splitlines() if "drf" in x][0]
    assert row.rstrip().endswith("-")


def test_matrix_command_cache_options(tmp_path):
    cache = tmp_path / "runs.jsonl"
    base = ["--points", "tiny", "--policies", "drf", "--seeds", "1", "--workers", "1", "--no-progress"]
    res = CliRunner().invoke(matrix_cmd, [*base, "--out", str(tmp_path / "a"), "--cache", str(cache)])
    assert res.exit_code == 0, res.output
    assert "0 runs reused, 1 run" in res.output
    res = CliRunner().invoke(matrix_cmd, [*base, "--out", str(tmp_path / "b"), "--cache", str(cache)])
    assert res.exit_code == 0 and "1 runs reused, 0 run" in res.output
    res = CliRunner().invoke(matrix_cmd, [*base, "--out", str(tmp_path / "c"), "--rerun", "drf"])
    assert res.exit_code != 0 and "--rerun needs --cache" in res.output
    res = CliRunner().invoke(matrix_cmd, [*base, "--out", str(tmp_path / "c"), "--cache", str(cache),
                                          "--rerun", "fifo"])
    assert res.exit_code != 0 and "not among the policies run" in res.output
    cache.write_text("garbage\n")
    res = CliRunner().invoke(matrix_cmd, [*base, "--out", str(tmp_path / "d"), "--cache", str(cache)])
    assert res.exit_code == 1 and "line 1" in res.output and res.exception.__class__ is SystemExit
    assert not (tmp_path / "d" / "matrix.json").exists() and cache.read_text() == "garbage\n"


def test_versus_prints_the_ratio_of_the_means_and_per_seed():
    doc = mx.evaluate_matrix(["drf", "fifo"], [1, 2], ["tiny"], workers=1)
    pt = doc["points"][0]["policies"]
    text = mx.format_versus(doc, "fifo", "drf")
    assert text.splitlines()[0] == "fifo vs drf (avg JCT ratio of the means; per seed):"
    assert f"{pt['fifo']['avg_jct'] / pt['drf']['avg_jct']:.3f}" in text
    assert f"2: {pt['fifo']['per_seed']['2'] / pt['drf']['per_seed']['2']:.3f}" in text
    with pytest.raises(ConfigError, match="not among the policies run"):
        mx.format_versus(doc, "dl2", "drf")


@pytest.mark.parametrize("versus", ["drf", "drf:dl2", "drf:fifo:srtf"])
def test_matrix_command_rejects_a_bad_versus(tmp_path, versus):
    args = ["--points", "tiny", "--policies", "drf,fifo", "--seeds", "1", "--workers", "1", "--no-progress",
            "--out", str(tmp_path), "--versus", versus]
    res = CliRunner().invoke(matrix_cmd, args)
    assert res.exit_code != 0 and "want A:B" in res.output
    assert not (tmp_path / "matrix.json").exists()


def test_matrix_command_prints_versus(tmp_path):
    args = ["--points", "tiny", "--policies", "drf,fifo", "--seeds", "1", "--workers", "1", "--no-progress",
            "--out", str(tmp_path), "--versus", "fifo:drf"]
    res = CliRunner().invoke(matrix_cmd, args)
    assert res.exit_code == 0, res.output
    assert "fifo vs drf (avg JCT ratio of the means; per seed):" in res.output and "  tiny " in res.output
