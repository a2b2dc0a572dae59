"""On real parts (pymesos against the local Mesos-compatible cluster, real executor processes, the API
over a socket, headless Chromium): the cluster's capacity from the master's agent list, 422 for jobs
no agent can hold, a pending job's reason in the API, ``dl2 jobs`` and the status page, and the job
page with its tasks' logs. Screenshots: runs/test-artifacts/status-page-capacity.png and job-page.png."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import requests

from dl2_mesos.allocation import Allocation
from dl2_mesos.config import load_config
from dl2_mesos.services.localcluster import LocalCluster
from dl2_mesos.services.zookeeper import free_port
from dl2_mesos.framework.runner import Replica

from ..demo.test_demo import ARTIFACTS, CHROMIUM
from .conftest import random_port_base, reap_under
from .test_e2e_local import FAKE_EXECUTOR, TINY, _wait

pytestmark = pytest.mark.integration
AUTH = {"Authorization": "Bearer tok"}


class FirstJobOnly:
    """1 PS + 1 worker for the first job; every later job is held back."""

    name = "first-only"

    def decide(self, state):
        return Allocation({j.job_id: (1, 1) for j in state.jobs[:1]})


def _page(url: str, path: Path) -> tuple[str, list[str]]:
    """Load ``url`` (with the read token as Basic credentials) in headless Chromium; screenshot; return
    the visible text and the page's links."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            ctx = browser.new_context(viewport={"width": 1400, "height": 900}, java_script_enabled=False,
                                      http_credentials={"username": "me", "password": "tok"})
            page = ctx.new_page()
            page.goto(url, wait_until="load", timeout=30_000)
            path.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(path), full_page=True)
            links = [a.get_attribute("href") or "" for a in page.query_selector_all("a")]
            return page.inner_text("body"), links
        finally:
            browser.close()


@pytest.fixture
def cluster(tmp_path):
    work = tmp_path / "mesos"
    try:  # 3 agents x 8 cpus = 24 cpus, no GPU
        with LocalCluster(agents=3, cpus=8, gpus=0, mem="4GiB", status_update_retry_interval=1.0,
                          executor_shutdown_grace_period=2.0, port_base=random_port_base(), work_dir=str(work)) as c:
            yield c
    finally:
        reap_under(work)


def test_capacity_reasons_and_pages_in_a_browser(cluster, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run `bash scripts/install_services.sh` (CI does)")
    port = free_port()
    cfg = load_config(env={}, overrides={
        "master": cluster.master, "zk": "none", "state_dir": str(tmp_path / "state"), "policy": "fifo",
        "slot": "3s", "offer_wait": "1s", "api": f"127.0.0.1:{port}", "api_token": "tok",
        "executor_command": f"{sys.executable} {FAKE_EXECUTOR}", "checkpoint_root": f"file://{tmp_path}/ckpt",
        "task_env": {"FAKE_EPS": "0.02"}, "kill_grace": "2s",
    })
    replica = Replica(cfg, policy_factory=lambda c: FirstJobOnly())
    runner = threading.Thread(target=replica.run, daemon=True)
    runner.start()
    api = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: requests.get(api + "/health", timeout=2).json()["registered"], 20, "registration")
        # the capacity comes from the master's agent list: all 24 cpus, not only what is offered
        cap = _wait(lambda: (lambda c: c if c and c["source"] == "master" else None)(
            requests.get(api + "/api/v1/cluster", headers=AUTH, timeout=2).json().get("capacity")), 30, "capacity")
        assert cap["total"]["cpus"] == 24 and len(cap["agents"]) == 3
        # impossible jobs are refused, naming the resource and the largest agent
        r = requests.post(api + "/api/v1/jobs", json={"job_type": "dssm", "epochs": 1,
                                                      "worker": {"cpus": 1, "gpus": 99, "mem": 64}},
                          headers=AUTH, timeout=10)
        assert r.status_code == 422 and r.json()["resource"] == "gpus" and "largest agent" in r.json()["error"]
        r = requests.post(api + "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 1}, headers=AUTH, timeout=10)
        assert r.status_code == 422 and "1 gpus" in r.json()["error"], r.text  # CPU-only agents
        ids = []
        for name in ("runs", "waits"):
            r = requests.post(api + "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 50, "name": name, **TINY},
                              headers=AUTH, timeout=10)
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        _wait(lambda: requests.get(f"{api}/api/v1/jobs/{ids[0]}", headers=AUTH, timeout=2).json()["phase"]
              == "running", 40, "the first job to run")
        held = _wait(lambda: (lambda j: j if (j["pending_reason"] or {}).get("code") == "held_by_policy" else None)(
            requests.get(f"{api}/api/v1/jobs/{ids[1]}", headers=AUTH, timeout=2).json()), 20, "a reason")
        assert "held back by the policy at slot" in held["pending_reason"]["message"]
        listed = {j["id"]: j for j in requests.get(api + "/api/v1/jobs", headers=AUTH, timeout=2).json()["jobs"]}
        assert listed[ids[1]]["pending_reason"]["code"] == "held_by_policy"
        assert listed[ids[0]]["started_at"] and listed[ids[0]]["queue_wait_seconds"] >= 0

        from click.testing import CliRunner

        from dl2_mesos.framework.client_cli import jobs, submit

        refused = CliRunner().invoke(submit, ["--type", "resnet-50", "--epochs", "1", "--api", api, "--token", "tok"])
        assert refused.exit_code != 0 and "422" in refused.output and "gpus" in refused.output
        out = CliRunner().invoke(jobs, ["--api", api, "--token", "tok"]).output
        row = next(line for line in out.splitlines() if line.startswith(ids[1]))
        assert row.rstrip().endswith("held back by the policy (slot " + row.rsplit("(slot ", 1)[1])
        assert "REASON" in out.splitlines()[0]

        _wait(lambda: requests.get(api + "/api/v1/cluster", headers=AUTH, timeout=2).json()["last_decision"]["slot"]
              >= 4, 30, "a few slots that change nothing")
        text, links = _page(api + "/", ARTIFACTS / "status-page-capacity.png")
        flat = " ".join(text.split())
        assert "of 24 cpus" in flat and "capacity: 3 agents in the master's agent list" in flat
        assert ids[0] in flat and "held back by the policy at slot" in flat
        for heading in ("submitted", "started", "queue wait", "JCT", "why pending"):
            assert heading in flat, heading
        assert "no change in" in flat  # the slots after the first job started changed nothing: folded
        assert f"/jobs/{ids[0]}" in links

        text, links = _page(f"{api}/jobs/{ids[0]}", ARTIFACTS / "job-page.png")
        flat = " ".join(text.split())
        for part in ("Summary", "Progress", "Tasks", "Rescale history", "queue wait", f"{ids[0]}.worker"):
            assert part in flat, part
        log_links = [h for h in links if "/tasks/" in h and h.endswith(("/stdout", "/stderr"))]
        assert len(log_links) == 4  # stdout and stderr of the PS and the worker
        log = requests.get(api + log_links[1], headers=AUTH, timeout=10)
        assert log.status_code == 200 and log.text.startswith(f"==> {ids[0]}.") and "bytes)" in log.text
        assert log.headers["x-content-type-options"] == "nosniff"
        assert requests.get(api + log_links[1].rsplit("/", 1)[0] + "/passwd", headers=AUTH, timeout=5).status_code == 404
        assert requests.get(f"{api}/jobs/{ids[0]}/tasks/{ids[1]}.worker.1/stdout", headers=AUTH,
                            timeout=5).status_code == 404  # another job's task
        assert requests.get(api + log_links[1], timeout=5).status_code == 401  # reads need the token

        text, _ = _page(f"{api}/jobs/{ids[1]}", ARTIFACTS / "job-page-pending.png")
        assert "Why it is pending" in text and "held_by_policy" in text
        assert requests.get(f"{api}/jobs/nosuch", headers=AUTH, timeout=5).status_code == 404
    finally:
        replica.stop()
        runner.join(20)
    assert not runner.is_alive()
    assert (ARTIFACTS / "status-page-capacity.png").stat().st_size > 10_000
    assert (ARTIFACTS / "job-page.png").stat().st_size > 10_000
