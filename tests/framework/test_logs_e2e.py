"""``dl2 logs`` end to end: a real framework replica runs a job on the local Mesos-compatible
cluster; the CLI finds the job's tasks in the master's state, their sandboxes in the agents' state,
and reads the files through the agents' ``/files`` API (the same calls Apache Mesos answers)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import requests
from click.testing import CliRunner

from dl2_mesos.allocation import Allocation
from dl2_mesos.config import load_config
from dl2_mesos.framework.client_cli import logs
from dl2_mesos.framework.runner import Replica
from dl2_mesos.services.zookeeper import free_port

from .test_e2e_local import FAKE_EXECUTOR, TINY, _wait, cluster  # noqa: F401 (the local cluster fixture)

pytestmark = pytest.mark.integration
AUTH = {"Authorization": "Bearer tok"}


class OnePsTwoWorkers:
    name = "fixed"

    def decide(self, state):
        return Allocation({j.job_id: (1, 2) for j in state.jobs})


@pytest.fixture
def running_framework(cluster, tmp_path):  # noqa: F811
    port = free_port()
    # the executor command writes a line to each of its sandbox's stdout and stderr first
    command = (
        f"echo hello-stdout-$MESOS_EXECUTOR_ID; echo hello-stderr >&2; exec {sys.executable} {FAKE_EXECUTOR}"
    )
    cfg = load_config(
        env={},
        overrides={
            "master": cluster.master,
            "zk": "none",
            "state_dir": str(tmp_path / "state"),
            "policy": "fifo",
            "slot": "3s",
            "offer_wait": "1s",
            "api": f"127.0.0.1:{port}",
            "api_token": "tok",
            "executor_command": command,
            "checkpoint_root": f"file://{tmp_path}/ckpt",
            "task_env": {"FAKE_EPS": "0.5"},
            "kill_grace": "2s",
        },
    )
    replica = Replica(cfg, policy_factory=lambda c: OnePsTwoWorkers())
    runner = threading.Thread(target=replica.run, daemon=True)
    runner.start()
    api = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: requests.get(api + "/health", timeout=2).json()["registered"], 20, "registration")
        yield cluster, api
    finally:
        replica.stop()
        runner.join(20)


def test_logs_reads_and_follows_a_jobs_sandbox(running_framework):
    cluster, api = running_framework  # noqa: F811
    r = requests.post(
        api + "/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 4, **TINY}, headers=AUTH, timeout=10
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    _wait(
        lambda: (
            requests.get(f"{api}/api/v1/jobs/{job_id}", headers=AUTH, timeout=2).json()["num_workers"] == 2
        ),
        30,
        "two running workers",
    )
    common = ["--master", cluster.master, "--api", api]
    run = CliRunner().invoke

    # --follow while the job runs (the installed CLI in its own process): it returns once the task
    # has ended and its file is read to the end
    follower = subprocess.Popen(
        [sys.executable, "-m", "dl2_mesos.cli", "logs", job_id, "--follow", "--task", "worker-0", *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def read_until(args, needle):
        """Read the logs until ``needle`` shows: "running" means launched, and on a busy machine
        the executor may not have written its first line yet (each read must succeed)."""
        seen = {}

        def attempt():
            res = run(logs, args)
            assert res.exit_code == 0, res.output
            seen["res"] = res
            return needle in res.stdout

        _wait(attempt, 20, f"{needle!r} in the sandbox")
        return seen["res"]

    out = read_until([job_id, *common], "hello-stdout-")
    assert "==> task " in out.stderr and ".worker." in out.stderr
    err = read_until([job_id, "--stream", "stderr", "--task", "ps-0", *common], "hello-stderr")
    assert ".ps." in err.stderr

    job = _wait(
        lambda: (lambda j: j if j["phase"] in ("finished", "failed") else None)(
            requests.get(f"{api}/api/v1/jobs/{job_id}", headers=AUTH, timeout=2).json()
        ),
        60,
        "the job to finish",
    )
    assert job["phase"] == "finished"
    try:
        f_out, f_err = follower.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        follower.kill()
        raise AssertionError("--follow did not stop after the task ended") from None
    assert follower.returncode == 0, f_err
    assert b"hello-stdout-" in f_out and b"==> task " in f_err

    # after the job ended its tasks are completed ones in the master's state: still readable
    done = run(logs, [job_id, "--task", "worker-1", "--stream", "stderr", *common])
    assert done.exit_code == 0 and "hello-stderr" in done.stdout, done.output
    assert "TASK_FINISHED" in done.stderr or "TASK_KILLED" in done.stderr

    # dl2 jobs shows the finished job's JCT; dl2 cancel of it says it already finished (API: 409)
    from dl2_mesos.framework.client_cli import cancel, jobs

    listing = run(jobs, ["--api", api, "--token", "tok"])
    row = next(ln for ln in listing.output.splitlines() if ln.startswith(job_id))
    assert listing.exit_code == 0 and row.split()[-1] != "-" and row.split()[-1].endswith("s"), listing.output
    again = run(cancel, [job_id, "--api", api, "--token", "tok"])
    assert again.exit_code == 1 and f"{job_id} already finished: nothing to cancel" in again.output

    # clear errors for what does not exist
    bad = run(logs, [job_id, "--task", "worker-9", *common])
    assert bad.exit_code != 0 and "no task 'worker-9'" in bad.output and "worker-0" in bad.output
    missing = run(logs, ["no-such-job", *common])
    assert missing.exit_code != 0 and "knows no task of job no-such-job" in missing.output
    proc = run(logs, [job_id, "--stream", "process", *common])  # the fake executor starts no process
    assert proc.exit_code != 0 and "not found" in proc.output
    zk = run(logs, [job_id, "--master", "zk://127.0.0.1:2181/mesos", "--api", api])
    assert zk.exit_code != 0 and "zk://" in zk.output
