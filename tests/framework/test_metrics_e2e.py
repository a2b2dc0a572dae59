"""Prometheus metrics of a real running framework: pymesos against the local Mesos-compatible
cluster, executor processes, ``/metrics`` scraped over a real socket after a job was rescaled and
finished."""

from __future__ import annotations

import sys
import threading

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from dl2_mesos.config import load_config
from dl2_mesos.framework.runner import Replica
from dl2_mesos.services.zookeeper import free_port

from .test_e2e_local import FAKE_EXECUTOR, TINY, GrowAfterFirstSlot, _wait, cluster  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration


def _scrape(api: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = requests.get(api + "/metrics", timeout=5).text
    assert "_created" not in text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _total(samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def test_metrics_of_a_running_framework_after_a_job_finished(cluster, tmp_path):  # noqa: F811
    port = free_port()
    cfg = load_config(env={}, overrides={
        "master": cluster.master, "zk": "none", "state_dir": str(tmp_path / "state"), "policy": "fifo",
        "slot": "3s", "offer_wait": "1s", "api": f"127.0.0.1:{port}", "api_token": "tok",
        "executor_command": f"{sys.executable} {FAKE_EXECUTOR}", "checkpoint_root": f"file://{tmp_path}/ckpt",
        "task_env": {"FAKE_EPS": "0.5"}, "rescale_resend": "1s", "kill_grace": "2s",
    })
    replica = Replica(cfg, policy_factory=lambda c: GrowAfterFirstSlot())
    runner = threading.Thread(target=replica.run, daemon=True)
    runner.start()
    api = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer tok"}
    try:
        _wait(lambda: requests.get(api + "/health", timeout=2).json()["registered"], 20, "registration")
        # two refused submissions: no token, and an unknown job type
        assert requests.post(api + "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 3},
                             timeout=5).status_code == 401
        assert requests.post(api + "/api/v1/jobs", json={"job_type": "nosuch", "epochs": 3}, headers=auth,
                             timeout=5).status_code == 422
        r = requests.post(api + "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 4, "name": "m", **TINY},
                          headers=auth, timeout=10)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        job = _wait(lambda: (lambda j: j if j["phase"] in ("finished", "failed") else None)(
            requests.get(f"{api}/api/v1/jobs/{jid}", headers=auth, timeout=2).json()), 90, "the job to finish")
        assert job["phase"] == "finished" and job["rescales"] >= 1, job
        s = _scrape(api)
        # the job's times, observed once
        assert s[("dl2_job_queue_wait_seconds_count", (("job_type", "resnet-50"),))] == 1
        assert s[("dl2_job_completion_seconds_count", (("job_type", "resnet-50"),))] == 1
        jct = s[("dl2_job_completion_seconds_sum", (("job_type", "resnet-50"),))]
        wait = s[("dl2_job_queue_wait_seconds_sum", (("job_type", "resnet-50"),))]
        assert 0 <= wait < jct
        assert jct == pytest.approx(job["phase_times"]["finished"] - job["submitted_at"], abs=1e-6)
        # every executor of the rescaled job reported its phases
        assert _total(s, "dl2_rescale_phase_seconds_count") >= 1
        # the cluster (2 agents x 4 CPUs) and what the policy holds (nothing once the job ended)
        assert s[("dl2_cluster_capacity", (("resource", "cpus"),))] == 8
        assert ("dl2_policy_allocation", (("policy", "grow"), ("resource", "cpus"))) in s
        # refused submissions by status
        assert _total(s, "dl2_submissions_refused_total", code="401") == 1
        assert _total(s, "dl2_submissions_refused_total", code="422") == 1
        assert _total(s, "dl2_model_rollbacks_total") == 0
    finally:
        replica.stop()
        runner.join(20)
    assert not runner.is_alive()
