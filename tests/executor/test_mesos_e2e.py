"""End to end: the real pymesos MesosSchedulerDriver + the local Mesos-compatible cluster launch
``python -m dl2_mesos.executor`` via ExecutorInfo; a real MXNet job runs, reports progress as
framework messages, gets a rescale request and is killed."""

from __future__ import annotations

import base64
import sys
import threading
import time
import uuid

import psutil
import pytest
from pymesos import MesosSchedulerDriver, Scheduler

from dl2_mesos.executor.launch_env import job_python
from dl2_mesos.messages import (
    ClusterSpec,
    Endpoint,
    LaunchSpec,
    ProgressReport,
    RescaleReport,
    RescaleRequest,
    decode_b64,
    encode_b64,
)
from dl2_mesos.services.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _scalar(name: str, value: float) -> dict:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


def _ports_of(offer: dict) -> list[int]:
    out = []
    for r in offer.get("resources", []):
        if r["name"] == "ports":
            for rng in r["ranges"]["range"]:
                out.extend(range(rng["begin"], rng["end"] + 1))
    return out


class TinyScheduler(Scheduler):
    """Launches one MXNet job (1 PS + 2 workers) on the first offer; records what comes back."""

    def __init__(self, job_id: str, checkpoint_uri: str) -> None:
        self.job_id = job_id
        self.checkpoint_uri = checkpoint_uri
        self.launched = False
        self.lock = threading.Lock()
        self.updates: list[tuple[str, str, str]] = []
        self.messages: list[object] = []
        self.executor_ids: list[dict] = []
        self.agent_id: dict | None = None
        self.cluster: ClusterSpec | None = None

    def executor_info(self, agent_id: str) -> dict:
        return {
            "type": "CUSTOM",
            "executor_id": {"value": f"dl2-{self.job_id}@{agent_id}"},
            "name": f"dl2 executor for {self.job_id}",
            "command": {
                "value": f"{sys.executable} -m dl2_mesos.executor",
                "shell": True,
                "environment": {"variables": [
                    {"name": "DL2_JOB_PYTHON", "value": job_python()},
                    {"name": "DL2_USAGE_INTERVAL_S", "value": "1"},
                ]},
            },
            "resources": [_scalar("cpus", 0.1), _scalar("mem", 64)],
        }

    def resourceOffers(self, driver, offers):  # noqa: N802 - pymesos API
        for offer in offers:
            ports = _ports_of(offer)
            if self.launched or len(ports) < 4:
                driver.declineOffer(offer["id"], {"refuse_seconds": 3600})
                continue
            self.launched = True
            agent = offer["agent_id"]["value"]
            host = offer["hostname"]
            ep = lambda tid, port: Endpoint(tid, host, port)  # noqa: E731
            self.cluster = ClusterSpec(0, ep("sched", ports[0]), (ep(f"{self.job_id}-ps-0", ports[1]),),
                                       (ep(f"{self.job_id}-w-0", ports[2]), ep(f"{self.job_id}-w-1", ports[3])))
            tasks = []
            for role, rank, e in [("ps", 0, self.cluster.servers[0]), ("worker", 0, self.cluster.workers[0]),
                                  ("worker", 1, self.cluster.workers[1])]:
                spec = LaunchSpec(job_id=self.job_id, task_id=e.task_id, role=role, rank=rank, runtime="mxnet",
                                  job_type="mlp", epochs=1000.0,
                                  command=("python", "-m", "dl2_mesos.programs.mxnet_mlp", "--batch-sleep", "0.02"),
                                  checkpoint_uri=self.checkpoint_uri, cluster=self.cluster, progress_interval_s=0.5)
                my_ports = [ports[0], e.port] if (role, rank) == ("ps", 0) else [e.port]
                tasks.append({
                    "name": f"{self.job_id} {role} {rank}",
                    "task_id": {"value": e.task_id},
                    "agent_id": {"value": agent},
                    "resources": [_scalar("cpus", 0.5), _scalar("mem", 256),
                                  {"name": "ports", "type": "RANGES",
                                   "ranges": {"range": [{"begin": p, "end": p} for p in my_ports]}}],
                    "executor": self.executor_info(agent),
                    "data": encode_b64(spec),
                    "kill_policy": {"grace_period": {"nanoseconds": int(15e9)}},
                })
            self.agent_id = offer["agent_id"]
            driver.launchTasks(offer["id"], tasks)

    def statusUpdate(self, driver, update):  # noqa: N802
        with self.lock:
            self.updates.append((update["task_id"]["value"], update["state"], update.get("message", "")))

    def frameworkMessage(self, driver, executor_id, agent_id, message):  # noqa: N802
        with self.lock:
            self.messages.append(decode_b64(message))
            self.executor_ids.append(executor_id)

    def state_of(self, task_id: str) -> str | None:
        with self.lock:
            states = [s for t, s, _ in self.updates if t == task_id]
        return states[-1] if states else None

    def of(self, cls: type) -> list:
        with self.lock:
            return [m for m in self.messages if isinstance(m, cls)]


def wait_for(cond, timeout: float, what: str, sched: TinyScheduler) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; updates={sched.updates[-10:]}")


def test_executor_under_local_mesos_launch_progress_rescale_kill(hdfs, tmp_path):
    job_id = f"e2e-{uuid.uuid4().hex[:6]}"
    sched = TinyScheduler(job_id, f"{hdfs.url}/dl2/checkpoints/{job_id}")
    with LocalCluster(agents=1, cpus=4, mem="4GiB", work_dir=str(tmp_path / "mesos"),
                      executor_shutdown_grace_period=20.0) as cluster:
        driver = MesosSchedulerDriver(sched, {"user": "", "name": "dl2-executor-e2e"}, cluster.mesos_master,
                                      use_addict=False)
        driver.start()
        try:
            task_ids = [f"{job_id}-ps-0", f"{job_id}-w-0", f"{job_id}-w-1"]
            wait_for(lambda: all(sched.state_of(t) == "TASK_RUNNING" for t in task_ids), 60, "TASK_RUNNING", sched)
            wait_for(lambda: max((m.batch for m in sched.of(ProgressReport)), default=0) >= 20, 90,
                     "progress messages", sched)
            rep = sched.of(ProgressReport)[-1]
            assert rep.job_id == job_id and rep.samples_per_second > 0 and rep.loss is not None
            executor_pids = cluster.executor_pids()
            assert len(executor_pids) == 1, "one executor for all tasks of the job on the agent"
            # malformed framework messages to the executor are dropped; it keeps working
            driver.sendFrameworkMessage(sched.executor_ids[0], sched.agent_id, base64.b64encode(b"{garbage").decode())
            driver.sendFrameworkMessage(sched.executor_ids[0], sched.agent_id, encode_b64(rep))
            # a rescale to generation 1 with the same shape (checkpoint -> stop -> relaunch -> restore)
            c = sched.cluster
            req = RescaleRequest(job_id=job_id, cluster=ClusterSpec(1, c.scheduler, c.servers, c.workers),
                                 assignments=((task_ids[0], "ps", 0), (task_ids[1], "worker", 0),
                                              (task_ids[2], "worker", 1)))
            driver.sendFrameworkMessage(sched.executor_ids[0], sched.agent_id, encode_b64(req))
            wait_for(lambda: sched.of(RescaleReport), 90, "the rescale report", sched)
            report = sched.of(RescaleReport)[0]
            assert report.ok and report.generation == 1 and "first_batch" in dict(report.phases)
            wait_for(lambda: any(m.generation == 1 for m in sched.of(ProgressReport)), 60, "generation 1 progress",
                     sched)
            job_pids = [p.pid for p in psutil.Process(executor_pids[0]).children(recursive=True)]
            assert len(job_pids) >= 4  # scheduler, server, two workers
            for t in task_ids:
                driver.killTask({"value": t})
            wait_for(lambda: all(sched.state_of(t) == "TASK_KILLED" for t in task_ids), 60, "TASK_KILLED", sched)
            # the executor exits by itself once it has no task left; no job process survives
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (cluster.executor_pids() or any(psutil.pid_exists(p) and
                                                   psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                                                   for p in job_pids)):
                time.sleep(0.3)
            assert not cluster.executor_pids()
            assert not [p for p in job_pids if psutil.pid_exists(p)
                        and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        finally:
            driver.stop()
