"""Fakes for the framework's unit tests: a recording driver, offers, scriptable policies."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from dl2_mesos.allocation import Allocation
from dl2_mesos.config import Config
from dl2_mesos.framework.core import SchedulerCore
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.kv import MemoryKV
from dl2_mesos.framework.state_store import StateStore

_ids = itertools.count(1)


def make_offer(agent: str = "a1", cpus: float = 8, gpus: float = 2, mem: float = 49152,
               ports: tuple[int, int] = (31000, 31099), hostname: str | None = None) -> dict[str, Any]:
    res = [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}, "role": "*"},
        {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}, "role": "*"},
        {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": ports[0], "end": ports[1]}]}, "role": "*"},
    ]
    if gpus:
        res.append({"name": "gpus", "type": "SCALAR", "scalar": {"value": gpus}, "role": "*"})
    return {"id": {"value": f"o{next(_ids)}"}, "agent_id": {"value": agent}, "hostname": hostname or f"{agent}.host",
            "framework_id": {"value": "fw"}, "resources": res}


class FakeDriver:
    """Records every driver call; can check that acks come after persistence."""

    def __init__(self, store: StateStore | None = None) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.store = store
        self.acked_persisted: list[bool] = []
        self.framework_id = "fw-1"

    def __getattr__(self, name: str):  # any driver method
        def record(*args: Any) -> None:
            self.calls.append((name, args))
        return record

    def acknowledgeStatusUpdate(self, status: dict) -> None:  # noqa: N802
        self.calls.append(("acknowledgeStatusUpdate", (status,)))
        if self.store is not None:
            tid = status["task_id"]["value"]
            jobs = self.store.load_jobs()
            ok = any(tid in j.tasks and j.tasks[tid].state == status["state"] for j in jobs.values())
            self.acked_persisted.append(ok)

    def named(self, name: str) -> list[tuple]:
        return [a for n, a in self.calls if n == name]

    def launched(self) -> list[dict]:
        return [t for a in self.named("launchTasks") for t in a[1]]

    def clear(self) -> None:
        self.calls.clear()


class ScriptedPolicy:
    """Returns the allocation set in ``counts`` (job index in arrival order -> (ps, workers));
    jobs beyond the script get ``default``."""

    name = "scripted"

    def __init__(self, default: tuple[int, int] = (1, 1)) -> None:
        self.default = default
        self.counts: dict[int, tuple[int, int]] = {}
        self.states = []

    def decide(self, state):
        self.states.append(state)
        out = {}
        for i, j in enumerate(state.jobs):
            out[j.job_id] = self.counts.get(i, self.default)
        return Allocation({k: v for k, v in out.items() if v != (0, 0)})


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def status(task_id: str, state: str, agent: str = "a1", message: str = "", uuid: str = "u", **kw) -> ev.StatusUpdate:
    st = {"task_id": {"value": task_id}, "state": state, "agent_id": {"value": agent}, "uuid": uuid, "message": message}
    st.update(kw)
    return ev.StatusUpdate(st)


class Harness:
    """A SchedulerCore wired to fakes."""

    def __init__(self, policy=None, cfg: Config | None = None, kv=None) -> None:
        self.cfg = cfg or Config(slot=10.0, offer_wait=1.0, launch_timeout=5.0, offer_hold=30.0, policy="fifo",
                                 executor_command="python -m dl2_mesos.executor")
        self.kv = kv or MemoryKV()
        self.store = StateStore(self.kv)
        self.clock = FakeClock()
        self.policy = policy or ScriptedPolicy()
        self.core = SchedulerCore(self.cfg, self.policy, self.store, clock=self.clock)
        self.core.restore()
        self.driver = FakeDriver(StateStore(self.kv))

    def register(self, fid: str = "fw-1") -> None:
        self.core.handle(ev.Registered(self.driver, fid, "m:5050", False))

    def offer(self, *offers) -> None:
        self.core.handle(ev.Offers(tuple(offers)))

    def submit(self, job_type: str = "resnet-50", epochs: float = 10, **kw):
        from dl2_mesos.jobs import JobSpec

        return self.core.submit(JobSpec(job_type=job_type, epochs=epochs, **kw))

    def tick(self, advance: float = 0.0) -> None:
        self.clock.advance(advance)
        self.core.tick()

    def next_slot(self) -> None:
        slot = self.core.current_slot()
        self.clock.t = self.core.epoch + (slot + 1) * self.cfg.slot + 0.01
        self.core.tick()

    def run_all(self, job) -> None:
        for t in list(job.tasks.values()):
            if t.live and t.state != "TASK_RUNNING":
                self.core.handle(status(t.task_id, "TASK_RUNNING", t.agent_id))


@pytest.fixture
def harness():
    return Harness()


def reap_under(root) -> list[int]:
    """SIGKILL processes whose working directory lies under ``root`` (a test's Mesos sandbox).

    Job processes run in their own sessions; when an executor dies with the cluster they can
    outlive it. Only processes this test started have their cwd in its sandbox.
    """
    import os
    import signal
    from pathlib import Path

    root = str(Path(root).resolve())
    killed = []
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(pid_dir / "cwd")
        except OSError:
            continue
        if cwd.startswith(root + "/"):
            try:
                os.kill(int(pid_dir.name), signal.SIGKILL)
                killed.append(int(pid_dir.name))
            except OSError:
                pass
    return killed


def random_port_base() -> int:
    """Agent port ranges away from the default 31000 (other suites' leftovers may hold those) and
    below the kernel's ephemeral range (32768+), so job processes never race for a port."""
    import random

    return random.randrange(10, 29) * 1000
