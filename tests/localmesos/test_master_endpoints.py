"""The master's read-only endpoints the Mesos UI and tools use, shaped as Mesos answers them, and
the master's own web UI (checked in headless Chromium, screenshot in runs/test-artifacts/)."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from .conftest import RecordingScheduler, command_task, executor_task


@pytest.fixture
def busy(cluster, make_driver):
    """One running executor task and one finished command task of a real pymesos framework."""
    sched = RecordingScheduler()
    sched.queue(executor_task("ep-run", {}), command_task("ep-done", "echo hello-from-ep-done"))
    make_driver(sched, name="endpoints-fw")
    sched.wait_state("ep-run", "TASK_RUNNING")
    sched.wait_state("ep-done", "TASK_FINISHED")
    return sched


def get(cluster, endpoint: str, **params) -> httpx.Response:
    return httpx.get(cluster.master_url + endpoint, params=params or None, timeout=10, follow_redirects=False)


def test_frameworks_slaves_state_without_non_mesos_fields(cluster, busy):
    state = get(cluster, "/master/state").json()
    assert "agents" not in state  # Mesos calls them slaves in /master/state
    assert all("free_gpu_indices" not in s for s in state["slaves"])
    frameworks = get(cluster, "/master/frameworks").json()
    assert set(frameworks) == {"frameworks", "completed_frameworks", "unregistered_frameworks"}
    fw = frameworks["frameworks"][0]
    assert fw["id"] == busy.framework_id and fw["name"] == "endpoints-fw" and fw["active"] is True
    assert "suppressed" not in fw
    assert [f["id"] for f in state["frameworks"]] == [busy.framework_id]
    slaves = get(cluster, "/master/slaves").json()
    assert {s["id"] for s in slaves["slaves"]} == set(cluster.agent_ids) and slaves["recovered_slaves"] == []
    assert slaves["slaves"][0]["pid"].startswith("slave(1)@")


def test_tasks_endpoint_pages_orders_and_filters(cluster, busy):
    tasks = get(cluster, "/master/tasks").json()["tasks"]
    by_id = {t["id"]: t for t in tasks}
    assert by_id["ep-run"]["state"] == "TASK_RUNNING" and by_id["ep-done"]["state"] == "TASK_FINISHED"
    assert (
        by_id["ep-run"]["framework_id"] == busy.framework_id
        and by_id["ep-run"]["slave_id"] in cluster.agent_ids
    )
    assert len(get(cluster, "/master/tasks", limit=1).json()["tasks"]) == 1
    asc = [t["id"] for t in get(cluster, "/master/tasks", order="asc").json()["tasks"]]
    des = [t["id"] for t in get(cluster, "/master/tasks", order="des").json()["tasks"]]
    assert asc == list(reversed(des))
    assert [t["id"] for t in get(cluster, "/master/tasks", task_id="ep-done").json()["tasks"]] == ["ep-done"]
    assert get(cluster, "/master/tasks", framework_id="nope").json()["tasks"] == []
    assert get(cluster, "/master/tasks", offset=5).json()["tasks"] == []
    for bad in ({"limit": "x"}, {"limit": -1}, {"order": "sideways"}):
        assert get(cluster, "/master/tasks", **bad).status_code == 400


def test_metrics_flags_redirect(cluster, busy):
    m = get(cluster, "/metrics/snapshot").json()
    assert m["master/elected"] == 1.0 and m["master/slaves_active"] == 2.0
    assert m["master/cpus_total"] == 8.0 and m["master/gpus_total"] == 2.0
    assert m["master/tasks_running"] == 1.0 and m["master/tasks_finished"] == 1.0
    assert 0 < m["master/cpus_used"] < 8 and m["master/cpus_percent"] == m["master/cpus_used"] / 8
    assert m["master/frameworks_active"] == 1.0
    assert m[f"master/frameworks/endpoints-fw/{busy.framework_id}/roles/*/suppressed"] == 0.0
    flags = get(cluster, "/flags").json()["flags"]
    assert flags["allocation_interval"] == "0.2secs" and flags["registry"] == "in_memory"
    r = get(cluster, "/master/redirect")
    host, port = cluster.master.split(":")
    assert r.status_code == 307 and r.headers["location"] == f"//{host}:{port}"


def test_web_ui_lists_frameworks_agents_tasks_and_opens_sandboxes(cluster, busy):
    page = get(cluster, "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "endpoints-fw" in html and busy.framework_id in html
    assert all(aid in html for aid in cluster.agent_ids)
    assert "ep-run" in html and "ep-done" in html and "TASK_FINISHED" in html
    # the finished command task's stdout, through the UI's sandbox view
    links = [unescape(h) for h in re.findall(r"href='([^']+)'", html)]
    sandbox_files = [
        (h, parse_qs(urlsplit(h).query)["path"][0]) for h in links if h.startswith("/ui/sandbox?")
    ]
    link = next(h for h, p in sandbox_files if "/executors/ep-done/" in p and p.endswith("/stdout"))
    shown = get(cluster, link)
    assert shown.status_code == 200 and "hello-from-ep-done" in shown.text
    # the agent's own files API is linked too (what Mesos tools call)
    raw = next(h for h in links if "/files/browse?" in h and "ep-done" in h)
    assert httpx.get(raw, timeout=10).status_code == 200
    # the sandbox listing links its files; outside paths are refused like missing files
    q = parse_qs(urlsplit(link).query)
    listing = get(cluster, "/ui/sandbox", agent=q["agent"][0], path=str(Path(q["path"][0]).parent))
    assert listing.status_code == 200 and "stdout" in listing.text and "stderr" in listing.text
    assert get(cluster, "/ui/sandbox", agent=q["agent"][0], path="/etc/passwd").status_code == 404
    escape = q["path"][0] + "/../../../../../../../../../../../../etc/passwd"
    assert get(cluster, "/ui/sandbox", agent=q["agent"][0], path=escape).status_code == 404
    assert get(cluster, "/ui/sandbox", agent="nope", path=q["path"][0]).status_code == 404


def test_web_ui_in_headless_chromium(cluster, busy):
    from ..demo.test_demo import ARTIFACTS, CHROMIUM, _screenshot

    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run `bash scripts/install_services.sh` (CI does)")
    text = _screenshot(cluster.master_url + "/", ARTIFACTS / "local-master-ui.png")
    assert "Frameworks (1 active" in text and "Agents (2)" in text and "endpoints-fw" in text
    assert "ep-run" in text and "TASK_RUNNING" in text and "sandbox" in text
    assert (ARTIFACTS / "local-master-ui.png").stat().st_size > 10_000
