"""The status page against the cluster's capacity, with job times, reasons, folded "no change" rows
and explained rollbacks; the job page; the local cluster's default agents fit every job type."""

from __future__ import annotations

from fastapi.testclient import TestClient

from dl2_mesos.framework.api import create_app
from dl2_mesos.framework.cluster_capacity import AgentCapacity, CapacityBook, unfit_reason
from dl2_mesos.framework.history import History
from dl2_mesos.framework.job_page import render_job_page
from dl2_mesos.framework.status_page import fold_unchanged, render_status_page
from dl2_mesos.framework.views import job_times
from dl2_mesos.jobs import JobSpec
from dl2_mesos.job_types import all_job_types
from dl2_mesos.resources import Resources

from .test_status_page import EVIL, _decision, _job, _parse, _report, _state, _view

T0 = 1_700_000_000.0


def _capacity(used_cpus: float = 0.0) -> dict:
    book = CapacityBook()
    book.master_agents([AgentCapacity(f"a{i}", f"h{i}", Resources(8, 2, 16384), used=Resources(used_cpus, 0, 0))
                        for i in (1, 2, 3)], "m:5050", T0)
    return book.snapshot()


def _text(page: str) -> str:
    return " ".join(" ".join(_parse(page).text).split())


def test_utilisation_is_against_the_masters_capacity_not_the_held_offers():
    h = History()
    h.record_slot(_state(1, {"j1": (1, 2, 1.0)}), {**_decision(1, {"j1": [1, 2]}), "capacity": _capacity()["total"]})
    view = _view(h, {"j1": _job("j1")})
    page = render_status_page(view)
    assert "5 of 16 cpus" in _text(page)  # without the master's list: held offers + dl2's tasks
    view["cluster"]["capacity"] = _capacity(used_cpus=4.0)  # 3 x 8 cpus; 12 used by all frameworks
    text = _text(render_status_page(view))
    assert "5 of 24 cpus" in text and "21% allocated by dl2" in text
    assert "7 used by other frameworks" in text  # 12 used in all, 5 of them by dl2
    assert "capacity: 3 agents in the master's agent list" in text and "3 agents (24 cpus, 6 gpus, from the master)" in text
    assert text.count("h2") >= 1  # agents known only from the master are listed too


def test_job_times_and_pending_reason_on_the_status_page():
    done = {**_job("done", "finished"), "submitted_at": T0, "started_at": T0 + 30,
            "phase_times": {"finished": T0 + 630}}
    done.update(job_times(done, T0 + 700))
    assert (done["queue_wait_seconds"], done["jct_seconds"], done["finished_at"]) == (30, 630, T0 + 630)
    waiting = {**_job("waiting", "pending"), "submitted_at": T0 + 600, "phase_times": {"pending": T0 + 600},
               "pending_reason": {"code": "waiting_for_capacity", "short": "x", "message": "waiting for capacity: " + EVIL}}
    waiting.update(job_times(waiting, T0 + 700))
    assert waiting["queue_wait_seconds"] == 100 and waiting["jct_seconds"] is None
    page = render_status_page(_view(History(), {"done": done, "waiting": waiting}))
    text = _text(page)
    for head in ("submitted", "started", "finished", "queue wait", "JCT", "why pending"):
        assert head in text
    assert "10m30s" in text and "30s" in text and "1m40s" in text
    assert "waiting for capacity: " + EVIL in text and "<script" not in page  # shown, escaped
    assert "href='/jobs/done'" in page


def test_no_change_rows_are_folded():
    recs = [{"slot": i, "changes": [{"job_id": "j", "from": [0, 0], "to": [1, 1]}] if i in (3, 7) else []}
            for i in range(10)]
    folded = fold_unchanged(recs)
    shape = [len(x) if isinstance(x, list) else x["slot"] for x in folded]
    assert shape == [3, 3, 3, 7, 2]  # slots 0-2 folded, 3, 4-6 folded, 7, 8-9 folded
    assert fold_unchanged([{"slot": 1, "changes": []}]) == [{"slot": 1, "changes": []}]  # one stays a row
    h = History()
    for s in range(1, 9):
        h.record_slot(_state(s, {"j1": (1, 1, float(s))}), _decision(s, {"j1": [1, 1]}))
    h.record_slot(_state(9, {"j1": (1, 1, 9.0)}), _decision(9, {"j1": [1, 2]}))
    text = _text(render_status_page(_view(h, {"j1": _job("j1")})))
    assert "no change in 8 slots" in text and "1–8" in text
    assert text.count("no change") == 1


def test_rollbacks_are_explained():
    policy = {"name": "dl2", "online_learning": True, "learnable": True, "model_version": 3, "history": [1, 3],
              "window": 10, "rollback_margin": 0.2, "recent_rewards": [0.1],
              "rollbacks": [{"from": 4, "to": 3, "reason": "mean reward 0.0100 over the last 10 slots is below 80% "
                             "of the starting model's 0.0500"}]}
    page = render_status_page(_view(History(), {}, policy=policy))
    text = _text(page)
    assert "id='rollback-explained'" in page and "id='rollbacks'" in page
    assert "the mean reward of the last 10 slots fell below 80%" in text
    assert "4 → 3" in text and "mean reward 0.0100 over the last 10 slots" in text
    assert "jobs keep running" in text and "not bad in itself" in text and "--no-online-learning" in text
    quiet = _text(render_status_page(_view(History(), {}, policy={**policy, "rollbacks": []})))
    assert "No rollback so far" in quiet
    baseline = render_status_page(_view(History(), {}, policy={"name": "drf", "online_learning": False,
                                                                "learnable": False}))
    assert "rollback-explained" not in baseline  # nothing to roll back without a model


def _full_job(jid: str = "j1", **kw) -> dict:
    out = {**_job(jid), "generation": 2, "restart_count": 0, "submitted_at": T0, "started_at": T0 + 5,
           "phase_times": {"running": T0 + 5}, "spec": {"min_ps": 1, "min_workers": 1, "max_ps": 4, "max_workers": 8},
           "tasks": [{"task_id": f"{jid}.worker.3", "role": "worker", "rank": 0, "agent_id": "a1", "hostname": EVIL,
                      "ports": [31000, 31001], "state": "TASK_RUNNING", "killing": False}],
           "pending_reason": None}
    out.update(kw)
    out.update(job_times(out, T0 + 60))
    return out


def test_job_page_shows_tasks_logs_progress_rescales_and_reason():
    h = History()
    h.record_slot(_state(1, {"j1": (0, 0, 0.0)}), _decision(1, {"j1": [1, 1]}))
    h.record_slot(_state(2, {"j1": (1, 1, 1.5)}), _decision(2, {"j1": [1, 2]}))
    h.record_slot(_state(3, {"j1": (1, 2, 4.0)}), _decision(3, {"j1": [1, 2]}))
    h.record_rescale("j1", "ex-a1", _report("j1", 2), at=T0 + 20)
    h.record_rescale("other", "ex-b", _report("other", 5), at=T0 + 21)
    page = render_job_page(_full_job(), _view(h, {}))
    text = _text(page)
    for part in ("Summary", "Progress", "Tasks", "Rescale history", "queue wait", "5s"):
        assert part in text, part
    assert "href='/jobs/j1/tasks/j1.worker.3/stdout'" in page and "href='/jobs/j1/tasks/j1.worker.3/stderr'" in page
    assert "0 PS / 0 w → 1 PS / 1 w" in text and "1 PS / 1 w → 1 PS / 2 w" in text
    assert "0.00 → 4.00 of 10 epochs over slots 1–3" in text
    assert "ex-a1" in text and "ex-b" not in text  # only this job's rescale reports
    assert "<script" not in page and "&lt;script&gt;" in page and "Why it is pending" not in text
    pending = render_job_page(_full_job(phase="pending", tasks=[], pending_reason={
        "code": "below_minimum", "short": "s", "message": "cannot reach its minimum workers: " + EVIL}), _view(h, {}))
    assert "Why it is pending" in _text(pending) and "below_minimum" in pending and "<script" not in pending


def test_job_page_route_reads_need_the_token_and_unknown_jobs_are_404():
    class Backend:
        def view(self):
            return {"jobs": {"j1": _full_job()}, "cluster": {}, "policy": {}, "history": {}}

        def is_leader(self):
            return True

        def leader_url(self):
            return None

    c = TestClient(create_app(Backend(), api_token="tok"))
    assert c.get("/jobs/j1").status_code == 401
    r = c.get("/jobs/j1", headers={"Authorization": "Bearer tok"})
    assert r.status_code == 200 and "j1.worker.3" in r.text
    assert c.get("/jobs/nope", headers={"Authorization": "Bearer tok"}).status_code == 404
    assert c.get("/jobs/j1/tasks/j1.worker.3/secrets", headers={"Authorization": "Bearer tok"}).status_code == 404
    assert c.get("/jobs/j1/tasks/j2.worker.3/stdout", headers={"Authorization": "Bearer tok"}).status_code == 404
    no_master = c.get("/jobs/j1/tasks/j1.worker.3/stdout", headers={"Authorization": "Bearer tok"})
    assert no_master.status_code == 503 and "dl2 logs" in no_master.json()["error"]


def test_local_cluster_default_agents_hold_every_job_type():
    from dl2_mesos.localmesos.local_cluster_cli import build_config, local_cluster

    defaults = {p.name: p.default for p in local_cluster.params}
    assert defaults["gpus"] >= 1
    cfg = build_config(**{k: defaults[k] for k in ("agents", "cpus", "gpus", "mem", "disk", "host", "port", "zk",
                                                    "work_dir", "heartbeat_interval", "allocation_interval",
                                                    "port_base")})
    agents = [(f"a{i}", "h", Resources(a.cpus, a.gpus, a.mem)) for i, a in enumerate(cfg.agents)]
    for jt in all_job_types():
        spec = JobSpec(job_type=jt.name, epochs=1)
        assert unfit_reason(spec, agents, Resources(0.1, 0, 32)) is None, jt.name
        # a worker and a PS together fit one agent (placement co-locates them as a bundle)
        assert (spec.worker + spec.ps + Resources(0.1, 0, 32)).fits_in(agents[0][2]), jt.name


def test_rollbacks_and_folded_rows_in_a_real_browser(tmp_path):
    """The rendered page (rollbacks, folded rows, capacity, reasons) as Chromium shows it."""
    from pathlib import Path

    import pytest

    from ..demo.test_demo import ARTIFACTS, CHROMIUM, _screenshot

    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run `bash scripts/install_services.sh` (CI does)")
    h = History()
    for s in range(1, 7):
        h.record_slot(_state(s, {"j1": (1, 1, float(s))}), {**_decision(s, {"j1": [1, 1]}), "capacity": _capacity()["total"]})
    h.record_slot(_state(7, {"j1": (1, 1, 7.0)}), {**_decision(7, {"j1": [1, 2]}), "capacity": _capacity()["total"]})
    waiting = {**_job("j2", "pending"), "submitted_at": T0, "phase_times": {"pending": T0},
               "pending_reason": {"code": "below_minimum", "short": "s",
                                  "message": "cannot reach its minimum workers: only 1 worker fits, it needs 2"}}
    policy = {"name": "dl2", "online_learning": True, "learnable": True, "model_version": 3, "history": [1, 3],
              "window": 10, "rollback_margin": 0.2, "recent_rewards": [0.05, 0.01],
              "rollbacks": [{"from": 4, "to": 3, "reason": "mean reward 0.0100 over the last 10 slots is below 80% "
                             "of the starting model's 0.0500"}]}
    view = _view(h, {"j1": _full_job(), "j2": {**waiting, **job_times(waiting, T0 + 90)}}, policy=policy)
    view["cluster"]["capacity"] = _capacity(used_cpus=2.0)
    page = tmp_path / "status.html"
    page.write_text(render_status_page(view, refresh_seconds=0))
    text = " ".join(_screenshot(page.as_uri(), ARTIFACTS / "status-page-rollbacks.png").split())
    assert "no change in 6 slots" in text and "4 → 3" in text and "what triggered it" in text
    assert "not bad in itself" in text and "of 24 cpus" in text
    assert "cannot reach its minimum workers" in text
