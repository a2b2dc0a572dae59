"""The status page (rendered from a fake view, no JavaScript) and the bounded history behind it."""

from __future__ import annotations

import html.parser
import re

import pytest

from dl2_mesos.cluster import AgentView, ClusterState, JobView, TaskView
from dl2_mesos.jobs import JobSpec
from dl2_mesos.messages import RescaleReport
from dl2_mesos.resources import Resources
from dl2_mesos.framework.history import History
from dl2_mesos.framework.status_page import render_standby_page, render_status_page, sparkline

EVIL = "<script>alert('x')</script>"


def _state(slot: int, counts: dict[str, tuple[int, int, float]]) -> ClusterState:
    jobs, tasks = [], []
    for jid, (ps, w, ep) in counts.items():
        jobs.append(JobView(job_id=jid, spec=JobSpec(job_type="resnet-50", epochs=10), arrival_slot=0,
                            arrival_time=0.0, epochs_done=ep, num_ps=ps, num_workers=w, slots_run=slot,
                            slots_since_rescale=0, rescales=0))
        for i in range(ps):
            tasks.append(TaskView(f"{jid}.ps.{i}", jid, "ps", "a1", Resources(1, 0, 1024)))
        for i in range(w):
            tasks.append(TaskView(f"{jid}.worker.{i}", jid, "worker", "a1", Resources(2, 1, 2048)))
    agents = (AgentView("a1", "h1", Resources(8, 2, 16384), Resources(8, 2, 16384)),
              AgentView("a2", "h2", Resources(8, 2, 16384), Resources(8, 2, 16384)))
    return ClusterState(slot=slot, slot_seconds=6.0, now=slot * 6.0, jobs=tuple(jobs), agents=agents,
                        tasks=tuple(tasks))


def _decision(slot: int, granted: dict[str, list[int]], reward: float | None = 0.1) -> dict:
    return {"slot": slot, "at": 1_700_000_000.0 + slot * 6, "policy_seconds": 0.0123, "round_seconds": 0.004,
            "allocation": granted, "granted": granted, "reward": reward}


def _report(job_id: str, gen: int, ok: bool = True, reason: str = "") -> RescaleReport:
    phases = (("stop", 1.5), ("save", 0.4), ("upload", 0.3), ("download", 0.2), ("relaunch", 0.6),
              ("first_batch", 2.0), ("total", 4.6))
    return RescaleReport(job_id=job_id, task_id=f"{job_id}.worker.1", generation=gen, ok=ok, phases=phases,
                         reason=reason)


def _job(jid: str, phase: str = "running", *, name: str = "", message: str = "", ps: int = 1, w: int = 2) -> dict:
    return {"id": jid, "name": name or jid, "job_type": "resnet-50", "phase": phase, "epochs": 10,
            "epochs_done": 4.0, "progress": 0.4, "num_ps": ps, "num_workers": w, "rescales": 1,
            "measured_epochs_per_second": 0.25, "submitted_at": 1_700_000_000.0, "message": message}


def _view(history: History, jobs: dict | None = None, policy: dict | None = None) -> dict:
    return {
        "jobs": jobs or {},
        "cluster": {"framework_id": "fw-1", "registered": True, "suspended": False, "slot": 3, "slot_seconds": 6.0,
                    "policy": "dl2", "agents": [{"agent_id": "a1", "hostname": "h1", "offered": {"cpus": 4, "gpus": 1, "mem": 8192},
                                                 "used_by_dl2": {"cpus": 4, "gpus": 1, "mem": 4096}, "tasks": ["t1"]}],
                    "jobs_by_phase": {"running": len(jobs or {})}},
        "policy": policy or {"name": "dl2", "online_learning": True, "online_teacher": "srpt-elastic-a1",
                             "learnable": True, "model_version": 7,
                             "history": [5, 6, 7], "baseline_reward": 0.05, "recent_rewards": [0.04, 0.06, 0.05],
                             "rollbacks": []},
        "history": history.snapshot(),
    }


class _TextAndTags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        self.tags.append(tag)

    def handle_data(self, data):  # noqa: ANN001
        self.text.append(data)


def _parse(page: str) -> _TextAndTags:
    p = _TextAndTags()
    p.feed(page)
    return p


# -- history ---------------------------------------------------------------------------------
def test_history_records_allocation_changes_utilisation_and_latency():
    h = History()
    rec = h.record_slot(_state(1, {"j1": (1, 1, 0.5)}), _decision(1, {"j1": [1, 3]}))
    assert rec["jobs"]["j1"] == {"ps": 1, "workers": 3, "running_ps": 1, "running_workers": 1, "epochs_done": 0.5}
    assert rec["changes"] == [{"job_id": "j1", "from": [1, 1], "to": [1, 3]}]
    assert rec["policy_seconds"] == pytest.approx(0.0123)
    # one PS (1 cpu, 1 GiB) + one worker (2 cpus, 1 gpu, 2 GiB) of 2 x (8 cpus, 2 gpus, 16 GiB)
    assert rec["utilisation"]["allocated"] == {"cpus": 3.0, "gpus": 1.0, "mem": 3072.0}
    assert rec["utilisation"]["known"] == {"cpus": 16.0, "gpus": 4.0, "mem": 32768.0}
    assert rec["utilisation"]["offered"] == {"cpus": 13.0, "gpus": 3.0, "mem": 29696.0}
    same = h.record_slot(_state(2, {"j1": (1, 3, 1.5)}), _decision(2, {"j1": [1, 3]}))
    assert same["changes"] == []
    stopped = h.record_slot(_state(3, {"j1": (1, 3, 2.5)}), _decision(3, {}))
    assert stopped["changes"] == [{"job_id": "j1", "from": [1, 3], "to": [0, 0]}]


def test_history_is_bounded_and_keeps_the_newest():
    h = History(max_slots=5, max_rescales=3)
    for s in range(12):
        h.record_slot(_state(s, {"j1": (1, 1, 0.0)}), _decision(s, {"j1": [1, 1]}))
    for g in range(1, 8):
        h.record_rescale("j1", "ex1", _report("j1", g), at=100.0 + g)
    snap = h.snapshot()
    assert [r["slot"] for r in snap["slots"]] == [7, 8, 9, 10, 11]
    assert [r["generation"] for r in snap["rescales"]] == [5, 6, 7]
    assert len(h) == 5
    # a snapshot is a copy: later records do not show up in it
    h.record_slot(_state(12, {}), _decision(12, {}))
    assert [r["slot"] for r in snap["slots"]] == [7, 8, 9, 10, 11]
    with pytest.raises(ValueError):
        History(max_slots=0)


def test_history_keeps_the_measured_rescale_phases():
    h = History()
    rec = h.record_rescale("j1", "ex-a1", _report("j1", 3), at=123.0)
    assert rec["phases"] == {"stop": 1.5, "save": 0.4, "upload": 0.3, "download": 0.2, "relaunch": 0.6,
                             "first_batch": 2.0, "total": 4.6}
    assert (rec["job_id"], rec["executor_id"], rec["generation"], rec["ok"]) == ("j1", "ex-a1", 3, True)


# -- page -------------------------------------------------------------------------------------
def test_page_shows_every_section_with_content():
    h = History()
    h.record_slot(_state(1, {"j1": (0, 0, 0.0)}), _decision(1, {"j1": [1, 1]}, reward=None))
    h.record_slot(_state(2, {"j1": (1, 1, 1.0)}), _decision(2, {"j1": [1, 2]}))
    h.record_slot(_state(3, {"j1": (1, 2, 2.5)}), _decision(3, {"j1": [1, 2]}))
    h.record_rescale("j1", "ex-a1", _report("j1", 2), at=1_700_000_010.0)
    page = render_status_page(_view(h, {"j1": _job("j1")}), {"role": "leader"})
    p = _parse(page)
    text = " ".join(p.text)
    for section in ("jobs", "utilisation", "policy", "decisions", "rescales"):
        assert f'id="{section}"' in page
    assert "script" not in p.tags  # the page works without JavaScript
    assert p.tags.count("svg") >= 6  # PS/workers, 3 utilisation charts, rewards, latency, phase bars
    assert "running" in text and "4.00 / 10" in text
    assert "model version" in text and "7" in text and "online learning on" in " ".join(text.split())
    assert "imitating srpt-elastic-a1" in " ".join(text.split()) and "simulated futures" not in text
    twin = {**_view(h)["policy"], "online_twin": True}
    twin_text = " ".join(" ".join(_parse(render_status_page(_view(h, {"j1": _job("j1")}, twin), {"role": "leader"})).text).split())
    assert "imitating srpt-elastic-a1 on simulated futures of the workload" in twin_text
    assert "j1 1 PS / 1 w → 1 PS / 2 w" in " ".join(text.split())  # the decision of slot 2
    assert "12.3" in text  # policy latency in ms
    assert "5 of 16 cpus" in text and "31% allocated" in text  # 1 PS + 2 workers at the last decision
    for phase, value in (("stop", "1.50"), ("upload", "0.30"), ("download", "0.20"), ("relaunch", "0.60"),
                         ("first_batch", "2.00"), ("total", "4.60")):
        assert phase in text and value in text
    assert "meta http-equiv='refresh'" in page


def test_user_text_is_escaped_everywhere():
    h = History()
    h.record_slot(_state(1, {EVIL: (1, 1, 0.0)}), _decision(1, {EVIL: [1, 2]}))
    h.record_rescale(EVIL, EVIL, _report(EVIL, 2, ok=False, reason=EVIL), at=1.0)
    view = _view(h, {EVIL: _job(EVIL, name=EVIL, message=EVIL, phase="running")},
                 policy={"name": EVIL, "online_learning": False, "rollbacks": [{"from": 2, "to": 1, "reason": EVIL}]})
    view["cluster"]["agents"][0]["hostname"] = EVIL
    view["cluster"]["framework_id"] = EVIL
    page = render_status_page(view, {"role": EVIL})
    assert "<script" not in page
    assert page.count("&lt;script&gt;") >= 8
    assert "script" not in _parse(page).tags


def test_page_with_zero_jobs_and_no_history():
    view = {"jobs": {}, "cluster": {"policy": "drf", "agents": []}, "policy": {"name": "drf", "online_learning": False}}
    page = render_status_page(view, {"role": "leader"}, refresh_seconds=0)
    text = " ".join(_parse(page).text)
    assert "no jobs yet" in text and "no slot decided yet" in text and "no rescale yet" in text
    assert "drf" in text and "n/a" in text
    assert "http-equiv" not in page


def test_standby_page_links_only_http_urls():
    assert '<a href="http://leader:8080">' in render_standby_page("http://leader:8080")
    page = render_standby_page("javascript:alert(1)")
    assert "<a " not in page.split("<main>")[1]
    assert "unknown" in render_standby_page(None)


def test_sparkline_scales_points_into_the_box():
    svg = sparkline([([0, 5, 10], "#000")], width=100, height=20, ymax=10)
    pts = re.search(r'points="([^"]+)"', svg).group(1).split()
    ys = [float(p.split(",")[1]) for p in pts]
    assert ys[0] == pytest.approx(18.0) and ys[-1] == pytest.approx(2.0)
    assert "no data yet" in sparkline([([], "#000")])
    assert "no data yet" in sparkline([([None, float("nan")], "#000")])


# -- wired into the core and the API -------------------------------------------------------------
def test_core_records_slots_and_rescale_reports_and_the_api_serves_them():
    from fastapi.testclient import TestClient

    from dl2_mesos.framework import events as ev
    from dl2_mesos.framework.api import create_app
    from dl2_mesos.messages import RescaleRequest, decode_b64, encode_b64

    from .conftest import Harness, ScriptedPolicy, make_offer

    policy = ScriptedPolicy()
    h = Harness(policy)
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    policy.counts[0] = (1, 2)
    h.offer(make_offer("a1", cpus=3, gpus=1, mem=30000, ports=(32000, 32010)))
    h.next_slot()
    msgs = [m for m in h.driver.named("sendFrameworkMessage") if isinstance(decode_b64(m[2]), RescaleRequest)]
    ex_id, agent = msgs[0][0]["value"], msgs[0][1]["value"]
    rep = RescaleReport(job.job_id, "t", job.generation, True, (("stop", 0.7), ("relaunch", 0.2), ("total", 0.9)))
    h.core.handle(ev.FrameworkMessage(ex_id, agent, encode_b64(rep)))
    h.core.handle(ev.FrameworkMessage(ex_id, agent, encode_b64(rep)))  # a duplicate is not recorded twice

    view = h.core.view()
    slots = view["history"]["slots"]
    assert [s["jobs"][job.job_id]["workers"] for s in slots] == [1, 2]
    assert slots[-1]["changes"] == [{"job_id": job.job_id, "from": [1, 1], "to": [1, 2]}]
    assert slots[-1]["utilisation"]["known"]["cpus"] > slots[-1]["utilisation"]["allocated"]["cpus"] > 0
    assert all(isinstance(s["policy_seconds"], float) for s in slots)
    assert [(r["job_id"], r["executor_id"], r["phases"]["stop"]) for r in view["history"]["rescales"]] == [
        (job.job_id, ex_id, 0.7)]

    class Backend:
        def view(self):
            return view

        def is_leader(self):
            return True

        def leader_url(self):
            return None

        def health(self):
            return {"role": "leader"}

    c = TestClient(create_app(Backend()))
    got = c.get("/api/v1/history").json()
    assert got["slots"][-1]["jobs"][job.job_id]["workers"] == 2 and got["rescales"][0]["phases"]["relaunch"] == 0.2
    page = c.get("/").text
    assert job.job_id in page and "0.70" in page and "scripted" in page
