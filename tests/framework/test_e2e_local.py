"""End to end on real parts: real pymesos against the local Mesos-compatible cluster, real
executor processes, the HTTP API over a real socket."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from dl2_mesos.allocation import Allocation
from dl2_mesos.config import load_config
from dl2_mesos.services.localcluster import LocalCluster
from dl2_mesos.services.zookeeper import free_port
from dl2_mesos.framework.runner import GIL_SWITCH_SECONDS, Replica

from .conftest import random_port_base, reap_under

READ = {"Authorization": "Bearer tok"}  # reads need the token too (ignored where none is set)

pytestmark = pytest.mark.integration

FAKE_EXECUTOR = Path(__file__).with_name("fake_executor.py")
TINY = {"worker": {"cpus": 1, "gpus": 0, "mem": 256}, "ps": {"cpus": 0.5, "gpus": 0, "mem": 128}}


class GrowAfterFirstSlot:
    """1 PS + 1 worker when a job starts, 1 PS + 2 workers at the next slot (forces a rescale)."""

    name = "grow"

    def decide(self, state):
        return Allocation({j.job_id: (1, 1 if j.num_workers == 0 else 2) for j in state.jobs})


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = pred()
        except (requests.RequestException, ValueError, KeyError):
            v = None
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def cluster(tmp_path):
    work = tmp_path / "mesos"
    try:
        with LocalCluster(agents=2, cpus=4, gpus=0, mem="4GiB", status_update_retry_interval=1.0,
                          executor_shutdown_grace_period=2.0, port_base=random_port_base(), work_dir=str(work)) as c:
            yield c
    finally:
        reap_under(work)


def test_submit_launch_rescale_finish(cluster, tmp_path):
    port = free_port()
    cfg = load_config(env={}, overrides={
        "master": cluster.master, "zk": "none", "state_dir": str(tmp_path / "state"), "policy": "fifo",
        "slot": "3s", "offer_wait": "1s", "api": f"127.0.0.1:{port}", "api_token": "tok",
        "executor_command": f"{sys.executable} {FAKE_EXECUTOR}", "checkpoint_root": f"file://{tmp_path}/ckpt",
        "task_env": {"FAKE_EPS": "0.4"}, "rescale_resend": "1s", "kill_grace": "2s",
    })
    replica = Replica(cfg, policy_factory=lambda c: GrowAfterFirstSlot())
    runner = threading.Thread(target=replica.run, daemon=True)
    runner.start()
    api = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer tok"}
    try:
        _wait(lambda: requests.get(api + "/health", timeout=2).json()["registered"], 20, "registration")
        # the framework process switches threads often enough for its master calls (see runner)
        assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_SECONDS)
        ids = []
        for i in range(2):
            r = requests.post(api + "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 5, "name": f"e2e{i}", **TINY},
                              headers=auth, timeout=10)
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        assert requests.post(api + "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 3}, timeout=5).status_code == 401
        # tasks show up in the master's state, under our framework with our executor
        state = cluster.wait_until(lambda s: s if any(
            len(f.get("tasks", [])) >= 4 for f in s["frameworks"] if f["name"] == "dl2") else None, timeout=30)
        fw = next(f for f in state["frameworks"] if f["name"] == "dl2")
        assert fw["checkpoint"] is True and fw["webui_url"].startswith(api)
        # the job is rescaled at a slot boundary: generation 1 with two workers
        job = _wait(lambda: (lambda j: j if j["generation"] >= 1 and j["num_workers"] == 2 else None)(
            requests.get(f"{api}/api/v1/jobs/{ids[0]}", headers=READ, timeout=2).json()), 30, "rescale to 2 workers")
        assert job["rescales"] >= 1
        # every job finishes
        for jid in ids:
            j = _wait(lambda: (lambda j: j if j["phase"] in ("finished", "failed") else None)(
                requests.get(f"{api}/api/v1/jobs/{jid}", headers=READ, timeout=2).json()), 60, f"{jid} to finish")
            assert j["phase"] == "finished", j
            assert j["epochs_done"] == 5
        cl = requests.get(api + "/api/v1/cluster", headers=READ, timeout=2).json()
        assert cl["last_decision"]["slot"] >= 1 and cl["framework_id"]
        pol = requests.get(api + "/api/v1/policy", headers=READ, timeout=2).json()
        assert pol["recent_rewards"] and max(pol["recent_rewards"]) > 0
        metrics = requests.get(api + "/metrics", timeout=2).text
        assert 'dl2_jobs{phase="finished"} 2.0' in metrics
        _client_cli(api, ids, tmp_path)
    finally:
        replica.stop()
        runner.join(20)
    assert not runner.is_alive()


def _client_cli(api, ids, tmp_path):
    """dl2 submit / jobs / job / cancel against the live API."""
    import json

    from click.testing import CliRunner

    from dl2_mesos.framework.client_cli import cancel, job, jobs, submit

    run = CliRunner().invoke
    r = run(jobs, ["--api", api, "--token", "tok"])
    assert r.exit_code == 0 and ids[0] in r.output and "finished" in r.output
    r = run(job, [ids[1], "--api", api, "--token", "tok"])
    assert r.exit_code == 0 and json.loads(r.output)["phase"] == "finished"
    r = run(submit, ["--type", "resnet-50", "--epochs", "100", "--api", api])
    assert r.exit_code != 0 and "401" in r.output
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"job_type": "resnet-50", "epochs": 100, **TINY}))
    r = run(submit, [str(spec), "--api", api, "--token", "tok"])
    assert r.exit_code == 0, r.output
    new_id = r.output.strip()
    r = run(cancel, [new_id, "--api", api, "--token", "tok"])
    assert r.exit_code == 0 and "cancelled" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    r = run(submit, [str(bad), "--api", api, "--token", "tok"])
    assert r.exit_code != 0 and "not valid JSON" in r.output
    r = run(submit, ["--type", "nosuch", "--epochs", "1", "--api", api, "--token", "tok"])
    assert r.exit_code != 0 and "job_type" in r.output
    r = run(job, ["missing", "--api", api, "--token", "tok"])
    assert r.exit_code != 0 and "404" in r.output


def test_real_executor_mxnet_job_rescaled_and_finished(cluster, tmp_path):
    """The project's executor (``python -m dl2_mesos.executor``) running a real MXNet PS job."""
    port = free_port()
    cfg = load_config(env={}, overrides={
        "master": cluster.master, "zk": "none", "state_dir": str(tmp_path / "state"), "policy": "fifo",
        "slot": "4s", "offer_wait": "1s", "api": f"127.0.0.1:{port}",
        "executor_command": f"{sys.executable} -m dl2_mesos.executor", "checkpoint_root": f"file://{tmp_path}/ckpt",
        "rescale_resend": "2s", "kill_grace": "5s", "progress_interval": "0.5s",
    })
    replica = Replica(cfg, policy_factory=lambda c: GrowAfterFirstSlot())
    runner = threading.Thread(target=replica.run, daemon=True)
    runner.start()
    api = f"http://127.0.0.1:{port}"
    program = ["python", "-m", "dl2_mesos.programs.mxnet_mlp", "--batch-sleep", "0.02", "--batches-per-epoch", "20"]
    try:
        _wait(lambda: requests.get(api + "/health", timeout=2).json()["registered"], 20, "registration")
        r = requests.post(api + "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 12, "command": program,
                                                      "runtime": "mxnet", **TINY}, timeout=10)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        job = _wait(lambda: (lambda j: j if j["generation"] >= 1 and j["num_workers"] == 2 else None)(
            requests.get(f"{api}/api/v1/jobs/{jid}", headers=READ, timeout=2).json()), 40, "rescale to 2 workers")
        seen_progress = job["epochs_done"]
        job = _wait(lambda: (lambda j: j if j["phase"] in ("finished", "failed") else None)(
            requests.get(f"{api}/api/v1/jobs/{jid}", headers=READ, timeout=2).json()), 120, "the job to finish")
        assert job["phase"] == "finished", job
        assert job["rescales"] >= 1 and job["epochs_done"] == 12 and seen_progress >= 0
        assert job["measured_epochs_per_second"] > 0  # from the executor's progress reports
        # the real executor's rescale phases reach Prometheus (test_metrics_e2e.py checks the rest)
        scraped = requests.get(api + "/metrics", timeout=2).text
        assert all(f'dl2_rescale_phase_seconds_count{{phase="{p}"}}' in scraped for p in ("stop", "relaunch", "total"))
    finally:
        replica.stop()
        runner.join(30)
    assert not runner.is_alive()


def test_dl2_policy_learns_online_and_versions_survive_restart(cluster, tmp_path):
    """`--policy dl2` with online learning: model versions grow in the state store, rewards come
    from reported progress, and a restarted replica resumes the latest version.

    DL2 starts each slot from the counts jobs run and only adds, so once the cluster is full it
    has no decision to learn from until a job finishes. Short jobs keep arriving here, so
    finishing and arriving jobs give it decisions (experience) in several slots."""
    import torch  # noqa: F401  (a hard dependency: fail, never skip, if it is missing)
    from dl2_mesos.policy.dl2.checkpoint import save_checkpoint
    from dl2_mesos.policy.dl2.model_config import DL2Config
    from dl2_mesos.policy.dl2.network import ActorCritic

    model = save_checkpoint(tmp_path / "start.pt", ActorCritic(DL2Config()), version=0)
    port = free_port()
    overrides = {
        "master": cluster.master, "zk": "none", "state_dir": str(tmp_path / "state"), "policy": "dl2",
        "policy_args": {"model_path": str(model)},
        "slot": "2s", "offer_wait": "1s", "api": f"127.0.0.1:{port}",
        "executor_command": f"{sys.executable} {FAKE_EXECUTOR}", "checkpoint_root": f"file://{tmp_path}/ckpt",
        "task_env": {"FAKE_EPS": "0.5"}, "online_window": 3, "kill_grace": "2s",
    }
    api = f"http://127.0.0.1:{port}"

    def run_replica():
        replica = Replica(load_config(env={}, overrides=overrides))
        t = threading.Thread(target=replica.run, daemon=True)
        t.start()
        _wait(lambda: requests.get(api + "/health", timeout=2).json()["registered"], 30, "registration")
        return replica, t

    submitted = []

    def submit():
        r = requests.post(api + "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 3, **TINY}, timeout=10)
        assert r.status_code == 201, r.text
        submitted.append(r.json()["id"])

    def learned():
        pol = requests.get(api + "/api/v1/policy", headers=READ, timeout=2).json()
        if (pol["model_version"] or 0) >= 3 and any(x > 0 for x in pol["recent_rewards"]):
            return pol
        phases = requests.get(api + "/api/v1/cluster", headers=READ, timeout=2).json()["jobs_by_phase"]
        if phases["pending"] + phases["running"] + phases["rescaling"] < 2 and len(submitted) < 12:
            submit()  # keep work arriving: new jobs are what DL2 decides about
        return None

    replica, runner = run_replica()
    try:
        for _ in range(3):
            submit()
        try:
            pol = _wait(learned, 240, "online updates")
        except AssertionError as exc:  # say what the framework saw
            raise AssertionError(f"{exc}; policy: {requests.get(api + '/api/v1/policy', headers=READ, timeout=2).text}; "
                                 f"cluster: {requests.get(api + '/api/v1/cluster', headers=READ, timeout=2).text[:2000]}") from None
        assert pol["name"] == "dl2" and pol["online_learning"] and pol["learnable"]
        assert pol["history"][0] == 1 and pol["model_version"] in pol["history"]
    finally:
        replica.stop()
        runner.join(20)
    version = pol["model_version"]
    replica, runner = run_replica()
    try:
        resumed = requests.get(api + "/api/v1/policy", headers=READ, timeout=2).json()
        assert resumed["model_version"] >= version
    finally:
        replica.stop()
        runner.join(20)
