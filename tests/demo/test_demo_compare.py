"""``dl2 demo --compare POLICY``: the same workload under two policies, both averages side by side."""

from __future__ import annotations

from click.testing import CliRunner
import pytest

from dl2_mesos.demo import DemoResult, comparison_lines, demo, run_comparison


def _result(policy: str, jcts: list[float | None]) -> DemoResult:
    jobs = tuple({"id": f"j{i}", "job_type": "dssm", "phase": "finished" if j is not None else "failed",
                  "epochs": 10.0, "submitted_after": float(i), "jct_seconds": j, "rescales": 0, "phase_times": {}}
                 for i, j in enumerate(jcts))
    return DemoResult(policy, jobs, "http://x/", 100.0)


def test_comparison_lines_put_both_averages_and_the_ratio_side_by_side():
    lines = comparison_lines(_result("dl2", [10.0, 30.0]), _result("drf", [20.0, 40.0]))
    text = "\n".join(lines)
    assert "average JCT: dl2 20.0s (2/2 finished" in text and "| drf 30.0s (2/2 finished" in text
    assert "ratio dl2/drf: 0.67" in text
    assert any(line.split()[-2:] == ["10.0", "20.0"] for line in lines)  # per job, both JCTs


def test_comparison_says_when_a_job_did_not_finish():
    text = "\n".join(comparison_lines(_result("dl2", [10.0, None]), _result("drf", [20.0, 40.0])))
    assert "(1/2 finished" in text and "failed" in text


def test_compare_rejects_an_unknown_policy_before_starting_anything():
    out = CliRunner().invoke(demo, ["--compare", "no-such-policy"])
    assert out.exit_code == 2 and "unknown policy 'no-such-policy'" in out.output and "--compare" in out.output


@pytest.mark.integration
@pytest.mark.slow
def test_compare_runs_the_same_workload_under_both_policies(tmp_path):
    lines: list[str] = []
    first, second = run_comparison("dl2", "drf", echo=lines.append, workdir=str(tmp_path), agents=2, num_jobs=2,
                                   epochs_scale=0.2, slot="6s", timeout=300)
    assert (first.policy, second.policy) == ("dl2", "drf")
    for result in (first, second):
        assert len(result.jobs) == 2
        assert all(job["phase"] == "finished" and job["jct_seconds"] > 0 for job in result.jobs), result.jobs
    # the same submissions, at the same offsets (within the poll's resolution)
    assert [(j["job_type"], j["epochs"]) for j in first.jobs] == [(j["job_type"], j["epochs"]) for j in second.jobs]
    assert all(abs(a["submitted_after"] - b["submitted_after"]) < 1.0 for a, b in zip(first.jobs, second.jobs))
    summary = [line for line in lines if line.startswith("average JCT: dl2 ")]
    assert summary, "\n".join(lines)
    assert f"dl2 {first.avg_jct:.1f}s (2/2 finished" in summary[-1]
    assert f"drf {second.avg_jct:.1f}s (2/2 finished" in summary[-1]
    assert any(line.startswith("ratio dl2/drf: ") for line in lines)
