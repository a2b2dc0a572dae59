"""End to end: the Pollux and Tiresias baselines drive the real framework (real pymesos against the
local Mesos-compatible cluster, executor processes, the HTTP API over a socket); Pollux's optimiser
is the real adaptdl-sched in its own process, killed mid-run once."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading

import pytest
import requests

from dl2_mesos.config import load_config
from dl2_mesos.framework.runner import Replica, make_policy
from dl2_mesos.services.zookeeper import free_port

from .test_e2e_local import FAKE_EXECUTOR, READ, TINY, _wait, cluster  # noqa: F401 (cluster: a fixture)

pytestmark = pytest.mark.integration
EPOCHS = 12


def _decision_errors(api: str) -> float:
    text = requests.get(api + "/metrics", timeout=2).text
    m = re.search(r"^dl2_decision_errors_total ([0-9.]+)$", text, re.M)
    assert m, "no dl2_decision_errors_total in /metrics"
    return float(m.group(1))


def _submit(api: str, name: str) -> str:
    # long enough (>= 10 s at the fake executor's speed) that slots with jobs follow the kill below
    spec = {"job_type": "resnet-50", "epochs": EPOCHS, "name": name, **TINY}
    answer = requests.post(api + "/api/v1/jobs", json=spec, headers=READ, timeout=10)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


@pytest.mark.parametrize(
    "policy_name, policy_args", [("pollux", {}), ("tiresias", {})]
)
def test_baseline_runs_every_job_to_the_end(cluster, tmp_path, policy_name, policy_args):  # noqa: F811
    built = []

    def factory(cfg):
        policy = make_policy(cfg)  # the framework's own: by name from the registry
        built.append(policy)
        return policy

    port = free_port()
    cfg = load_config(env={}, overrides={
        "master": cluster.master, "zk": "none", "state_dir": str(tmp_path / "state"), "policy": policy_name,
        "policy_args": policy_args, "slot": "3s", "offer_wait": "1s", "api": f"127.0.0.1:{port}",
        "api_token": "tok", "executor_command": f"{sys.executable} {FAKE_EXECUTOR}",
        "checkpoint_root": f"file://{tmp_path}/ckpt", "task_env": {"FAKE_EPS": "0.4"}, "rescale_resend": "1s",
        "kill_grace": "2s",
    })
    replica = Replica(cfg, policy_factory=factory)
    runner = threading.Thread(target=replica.run, daemon=True)
    runner.start()
    api = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: requests.get(api + "/health", timeout=2).json()["registered"], 20, "registration")
        ids = [_submit(api, f"b{i}") for i in range(2)]
        try:
            running = _wait(lambda: next((j for j in requests.get(f"{api}/api/v1/jobs", headers=READ, timeout=2).json()["jobs"]
                                          if j["phase"] == "running" and j["num_workers"] >= 1), None), 90, "a running job")
        except AssertionError as exc:
            cl = requests.get(api + "/api/v1/cluster", headers=READ, timeout=2).json()
            jobs = requests.get(f"{api}/api/v1/jobs", headers=READ, timeout=2).json()["jobs"]
            raise AssertionError(f"{exc}; last decision {cl.get('last_decision')}; jobs {jobs}") from None
        assert running["num_ps"] >= 1  # a PS job: Pollux's replica is a worker plus its PS
        assert built and getattr(built[0], "name", policy_name) == policy_name
        if policy_name == "pollux":
            # the optimiser process dies: the framework keeps the jobs' sizes, counts the failed
            # decision, and a later slot starts a new optimiser
            before = built[0].pid
            os.kill(before, signal.SIGKILL)
            _wait(lambda: _decision_errors(api) >= 1, 30, "the failed decision to be counted")
            _wait(lambda: built[0].pid not in (None, before), 30, "a new Pollux optimiser process")
        for jid in ids:
            j = _wait(lambda: (lambda j: j if j["phase"] in ("finished", "failed") else None)(
                requests.get(f"{api}/api/v1/jobs/{jid}", headers=READ, timeout=2).json()), 150, f"{jid} to finish")
            assert j["phase"] == "finished" and j["epochs_done"] == EPOCHS, j
        if policy_name == "tiresias":
            assert _decision_errors(api) == 0
            # non-elastic: every job ran at its one fixed size, never rescaled
            for jid in ids:
                assert requests.get(f"{api}/api/v1/jobs/{jid}", headers=READ, timeout=2).json()["rescales"] == 0
    finally:
        replica.stop()
        runner.join(20)
        for p in built:
            close = getattr(p, "close", None)
            if close:
                close()
    assert not runner.is_alive()
