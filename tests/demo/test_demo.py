"""The demo path end to end, reduced (2 agents, 3 short jobs), and its status page in a real browser."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil
import pytest
import requests

from dl2_mesos.demo import run_demo

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("DL2_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "runs" / "test-artifacts"))


def _screenshot(url: str, path: Path) -> str:
    """Load ``url`` in headless Chromium, save a screenshot, return the page's visible text."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900}, java_script_enabled=False)
            page.goto(url, wait_until="load", timeout=30_000)
            path.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(path), full_page=True)
            return page.inner_text("body")
        finally:
            browser.close()


def _leftovers(workdir: Path) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            env = proc.info["environ"] or {}
        except (psutil.Error, OSError):
            continue
        if str(workdir) in cmd or any(str(workdir) in v for v in env.values()):
            out.append(proc)
    return out


def test_demo_runs_jobs_to_completion_and_serves_the_status_page(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run `bash scripts/install_services.sh` (CI does)")
    workdir = tmp_path / "demo"
    seen: dict[str, str] = {}
    lines: list[str] = []

    def look(api: str) -> None:
        seen["history"] = requests.get(api + "/api/v1/history", timeout=5).json()
        seen["policy"] = requests.get(api + "/api/v1/policy", timeout=5).json()
        seen["text"] = _screenshot(api + "/", ARTIFACTS / "status-page.png")  # at least as new as the JSON
        # the last slot's reward (its jobs were active at its start) may still update the model
        # while the page loads: the page shows a version between these two
        seen["policy_after"] = requests.get(api + "/api/v1/policy", timeout=5).json()

    result = run_demo(policy=os.environ.get("DL2_DEMO_TEST_POLICY", "dl2"), agents=2, num_jobs=3, epochs_scale=0.3, slot="6s", timeout=420, workdir=str(workdir),
                      echo=lines.append, on_finished=look)
    assert len(result.jobs) == 3
    for job in result.jobs:
        assert job["phase"] == "finished", (job, "\n".join(lines))
        assert job["jct_seconds"] is not None and job["jct_seconds"] > 0
    assert result.avg_jct is not None
    assert any("average JCT" in line for line in lines)
    text = seen["text"]
    for job in result.jobs:
        assert job["id"] in text
    assert "finished" in text
    assert "dl2" in text.lower()
    # the status page's sections, backed by the framework's bounded history (GET /api/v1/history)
    for heading in ("Jobs", "PS / workers over time", "Cluster utilisation", "Policy", "Recent decisions",
                    "Rescale events"):
        assert heading in text, heading
    history, policy = seen["history"], seen["policy"]
    slots = history["slots"]
    assert slots and all(s["policy_seconds"] is not None for s in slots)
    for job in result.jobs:  # every job got workers in some decided slot: its allocation history
        assert any(s["jobs"].get(job["id"], {}).get("workers", 0) >= 1 for s in slots), job["id"]
    changes = [c for s in slots for c in s["changes"]]
    assert changes, "no decision ever changed an allocation"
    assert f"{changes[-1]['job_id']} {changes[-1]['from'][0]} PS" in " ".join(text.split()) or len(slots) > 25
    # utilisation: the jobs used some of what the agents offered
    assert any(0 < s["utilisation"]["allocated"]["cpus"] <= s["utilisation"]["known"]["cpus"] for s in slots)
    assert "% allocated" in text and "offered free" in text
    # the policy in use and its model version
    assert policy["name"] in text and policy.get("model_version")
    versions = (policy["model_version"], seen["policy_after"]["model_version"])
    shown = range(min(versions), max(versions) + 1)
    assert any(f"model version {v}" in " ".join(text.split()) for v in shown), list(shown)
    # rescales (if the policy rescaled a running job) with the executor's measured phase times
    # A job runs again after a rescale only once its executors reported it; a job whose last
    # rescale was overtaken by its own end (it finished mid-rescale) has no report to show.
    reported = {r["job_id"] for r in history["rescales"]}
    for job in result.jobs:
        times = job["phase_times"]
        if job["rescales"] and times.get("running", 0) > times.get("rescaling", float("inf")):
            assert job["id"] in reported, (job, history["rescales"])
    for r in history["rescales"]:
        if r["ok"]:
            assert r["phases"].get("total", 0) > 0 and "relaunch" in r["phases"], r
    if history["rescales"]:
        assert "relaunch" in text and "total" in text
    assert (ARTIFACTS / "status-page.png").stat().st_size > 10_000
    # everything the demo started is gone
    assert not _leftovers(workdir), [p.info["cmdline"] for p in _leftovers(workdir)]
