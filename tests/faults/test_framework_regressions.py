"""Regressions found by the fault suite, pinned on the scheduler core (no Mesos, memory store)."""

from __future__ import annotations

from dl2_mesos.config import Config
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.core import SchedulerCore
from dl2_mesos.framework.kv import MemoryKV
from dl2_mesos.framework.records import TaskRecord
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.registry import make_policy
from dl2_mesos.resources import Resources


class _Driver:
    def __getattr__(self, name):
        return lambda *a, **k: None


def _task(job_id: str, n: int, role: str, generation: int, state: str) -> TaskRecord:
    return TaskRecord(task_id=f"{job_id}.{role}.{n}", job_id=job_id, role=role, rank=0, agent_id="a1",
                      hostname="h", ports=[31000 + n], resources=Resources(1, 0, 256), executor_id="e",
                      generation=generation, state=state)


def test_job_finishes_when_current_workers_finish_despite_an_earlier_failed_worker():
    """An executor SIGKILL leaves a TASK_FAILED worker record of generation 0; after the relaunch
    the generation-1 workers finish: the job must be finished, not relaunched forever."""
    core = SchedulerCore(Config(policy="fifo"), make_policy("fifo"), StateStore(MemoryKV()))
    core.restore()
    core.handle(ev.Registered(_Driver(), "fw-1", "m:5050", False))
    job = core.submit(JobSpec(job_type="resnet-50", epochs=2))
    old = _task(job.job_id, 1, "worker", 0, "TASK_FAILED")
    ps = _task(job.job_id, 2, "ps", 1, "TASK_RUNNING")
    new = _task(job.job_id, 3, "worker", 1, "TASK_RUNNING")
    for t in (old, ps, new):
        job.tasks[t.task_id] = t
        core.book.task_index[t.task_id] = job.job_id
    job.generation = 1
    core.handle(ev.StatusUpdate({"task_id": {"value": new.task_id}, "state": "TASK_FINISHED",
                                 "agent_id": {"value": "a1"}, "uuid": "u"}))
    assert core.jobs[job.job_id].phase.value == "finished"


def test_executor_does_not_restart_locally_when_the_job_spans_other_agents(tmp_path):
    """A crashed process of a job with peers on other agents cannot be restarted alone (the peers
    keep the dead one's connections): the executor fails its tasks at once, without restarts."""
    import time

    from dl2_mesos.executor.job_runner import JobRunner, RunnerConfig
    from dl2_mesos.messages import ClusterSpec, Endpoint, LaunchSpec

    class Sink:
        def __init__(self):
            self.statuses = []

        def status(self, task_id, state, message=""):
            self.statuses.append((task_id, state, message))

        def send(self, msg):
            pass

    cluster = ClusterSpec(0, None, (), (Endpoint("w0", "127.0.0.1", 31000), Endpoint("w1", "127.0.0.2", 31000)))
    spec = LaunchSpec(job_id="j", task_id="w0", role="worker", rank=0, runtime="pytorch", job_type="resnet-50",
                      epochs=1.0, command=("python", "-c", "import sys; sys.exit(3)"),
                      checkpoint_uri=f"file://{tmp_path}/ckpt", cluster=cluster)
    sink = Sink()
    runner = JobRunner(spec, RunnerConfig(workdir=tmp_path / "work", max_restarts=3, grace_s=1.0), sink)
    runner.launch(spec)
    deadline = time.monotonic() + 30
    while not runner.finished and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.1)
    assert runner.restarts == 0
    failed = [m for t, s, m in sink.statuses if t == "w0" and s == "TASK_FAILED"]
    assert failed and "other agents" in failed[0]


def test_job_processes_die_with_a_sigkilled_executor(tmp_path):
    """Job processes run in their own process group; when their executor is SIGKILLed (agent
    removed, container destroyed) they must not survive it holding ports (they did)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    script = tmp_path / "exec.py"
    script.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from dl2_mesos.executor.launch_env import ProcSpec\n"
        "from dl2_mesos.executor.processes import ManagedProcess\n"
        "spec = ProcSpec('server-0', 't', 'server', 0, (sys.executable, '-c', 'import time; time.sleep(60)'), ())\n"
        "p = ManagedProcess(spec, Path(sys.argv[1]), {})\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n")
    ex = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    child = int(ex.stdout.readline())
    assert psutil.pid_exists(child)
    os.kill(ex.pid, signal.SIGKILL)
    ex.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the job process outlived its SIGKILLed executor")
