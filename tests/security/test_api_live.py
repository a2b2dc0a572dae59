"""The job API's defences on real parts: a live ``Replica`` (uvicorn, file store) on the local
Mesos-compatible cluster with real executor processes. A cross-site text/plain post and an
unauthenticated read are refused, a retried submission is stored once, secrets are redacted,
and a PyTorch (workers-only) job survives a restart of the framework with its task still
running (issue 14, items 1, 7, 8, 11)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import requests

from dl2_mesos.config import load_config
from dl2_mesos.framework.runner import Replica
from dl2_mesos.testing.zookeeper import free_port

from ..framework.test_e2e_local import _wait, cluster  # noqa: F401 - the local cluster fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAKE_EXECUTOR = Path(__file__).parents[1] / "framework" / "fake_executor.py"
AUTH = {"Authorization": "Bearer live-tok"}
TORCH = {"job_type": "resnet-50", "epochs": 10000, "runtime": "pytorch", "name": "torch",
         "worker": {"cpus": 1, "gpus": 0, "mem": 256}, "max_workers": 1,
         "extra": {"db_password": "hunter2", "lr": 0.1}}


def test_live_api_defences_and_a_pytorch_job_across_a_restart(cluster, tmp_path):  # noqa: F811
    port = free_port()
    cfg = load_config(env={}, overrides={
        "master": cluster.master, "zk": "none", "state_dir": str(tmp_path / "state"), "policy": "fifo",
        "slot": "2s", "offer_wait": "1s", "api": f"127.0.0.1:{port}", "api_token": "live-tok",
        "executor_command": f"{sys.executable} {FAKE_EXECUTOR}", "checkpoint_root": f"file://{tmp_path}/ckpt",
        "task_env": {"FAKE_EPS": "0.01"}, "kill_grace": "2s", "online_learning": "false",
    })
    api = f"http://127.0.0.1:{port}"

    def start():
        replica = Replica(cfg)
        t = threading.Thread(target=replica.run, daemon=True)
        t.start()
        _wait(lambda: requests.get(api + "/health", timeout=2).json()["registered"], 30, "registration")
        return replica, t

    replica, runner = start()
    try:
        # a page on another site can send a text/plain POST without a preflight: refused
        r = requests.post(api + "/api/v1/jobs", data=b'{"job_type": "resnet-50", "epochs": 1}',
                          headers={**AUTH, "Content-Type": "text/plain"}, timeout=10)
        assert r.status_code == 415
        assert requests.get(api + "/api/v1/jobs", timeout=5).status_code == 401
        # a retried submission (same Idempotency-Key) is one job
        ids = {requests.post(api + "/api/v1/jobs", json=TORCH, headers={**AUTH, "Idempotency-Key": "torch-1"},
                             timeout=10).json()["id"] for _ in range(2)}
        assert len(ids) == 1
        job_id = ids.pop()
        listed = requests.get(api + "/api/v1/jobs", headers=AUTH, timeout=5).json()["jobs"]
        assert [j["id"] for j in listed] == [job_id]
        job = _wait(lambda: (lambda j: j if j["phase"] == "running" else None)(
            requests.get(f"{api}/api/v1/jobs/{job_id}", headers=AUTH, timeout=2).json()), 40, "the job to run")
        assert job["spec"]["max_ps"] == 0 and job["num_ps"] == 0 and job["num_workers"] == 1
        assert job["spec"]["extra"]["db_password"] == "***" and "hunter2" not in str(job)
        task_ids = [t["task_id"] for t in job["tasks"]]
    finally:
        replica.stop()
        runner.join(20)
    assert not runner.is_alive()
    # a new framework process on the same state: the job is still there, its task was not killed
    replica, runner = start()
    try:
        again = _wait(lambda: (lambda j: j if j["phase"] == "running" else None)(
            requests.get(f"{api}/api/v1/jobs/{job_id}", headers=AUTH, timeout=2).json()), 30, "the job after restart")
        assert [t["task_id"] for t in again["tasks"]] == task_ids
        state = cluster.state()
        tasks = {t["id"]: t["state"] for f in state["frameworks"] for t in f.get("tasks", [])}
        assert all(tasks.get(t) == "TASK_RUNNING" for t in task_ids), tasks
        full = requests.get(f"{api}/api/v1/jobs/{job_id}?full=true", headers=AUTH, timeout=5).json()
        assert full["spec"]["extra"]["db_password"] == "hunter2"
    finally:
        replica.stop()
        runner.join(20)
