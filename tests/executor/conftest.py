"""Fixtures for executor tests: a recording sink, LaunchSpec builders and a JobRunner driver."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from dl2_mesos.executor.job_runner import JobRunner, RunnerConfig
from dl2_mesos.job_runtime import read_events
from dl2_mesos.messages import ClusterSpec, Endpoint, LaunchSpec, RescaleRequest
from dl2_mesos.storage import RetryPolicy
from dl2_mesos.services.zookeeper import free_port

PY_ARGS = ("--batch-sleep", "0.02", "--batches-per-epoch", "20")


@dataclass
class RecordingSink:
    """Collects status updates and framework messages like the Mesos adapter would send them."""

    statuses: list[tuple[str, str, str]] = field(default_factory=list)
    messages: list[object] = field(default_factory=list)

    def status(self, task_id: str, state: str, message: str = "") -> None:
        self.statuses.append((task_id, state, message))

    def send(self, msg: object) -> None:
        self.messages.append(msg)

    def of(self, cls: type) -> list:
        return [m for m in self.messages if isinstance(m, cls)]

    def states(self, task_id: str) -> list[str]:
        return [s for t, s, _ in self.statuses if t == task_id]


def cluster_spec(gen: int, servers: int, workers: int, runtime: str = "mxnet", job: str = "j") -> ClusterSpec:
    ep = lambda tid: Endpoint(tid, "127.0.0.1", free_port())  # noqa: E731
    return ClusterSpec(
        generation=gen,
        scheduler=ep(f"{job}-sched") if runtime == "mxnet" else None,
        servers=tuple(ep(f"{job}-ps-{i}") for i in range(servers)),
        workers=tuple(ep(f"{job}-worker-{i}") for i in range(workers)),
    )


def launch_specs(job_id: str, cluster: ClusterSpec, checkpoint_uri: str, runtime: str = "mxnet",
                 only: set[str] | None = None, epochs: float = 1000.0) -> list[LaunchSpec]:
    program = "dl2_mesos.programs.mxnet_mlp" if runtime == "mxnet" else "dl2_mesos.programs.torch_mlp"
    out = []
    for role, eps in (("ps", cluster.servers), ("worker", cluster.workers)):
        for rank, ep in enumerate(eps):
            if only is not None and ep.task_id not in only:
                continue
            out.append(LaunchSpec(
                job_id=job_id, task_id=ep.task_id, role=role, rank=rank, runtime=runtime, job_type="mlp",
                epochs=epochs, command=("python", "-m", program, *PY_ARGS), checkpoint_uri=checkpoint_uri,
                cluster=cluster, progress_interval_s=0.5,
            ))
    return out


def rescale_request(job_id: str, old: ClusterSpec, new: ClusterSpec) -> tuple[RescaleRequest, list[str]]:
    """Keep the old tasks' ids where the new generation still has that role/rank; return the new task ids."""
    old_ids = {("ps", i): ep.task_id for i, ep in enumerate(old.servers)}
    old_ids.update({("worker", i): ep.task_id for i, ep in enumerate(old.workers)})
    assignments, new_ids = [], []
    servers, workers = [], []
    for role, eps, out in (("ps", new.servers, servers), ("worker", new.workers, workers)):
        for rank, ep in enumerate(eps):
            tid = old_ids.get((role, rank), ep.task_id)
            out.append(Endpoint(tid, ep.host, ep.port))
            if (role, rank) in old_ids:
                assignments.append((tid, role, rank))
            else:
                new_ids.append(tid)
    cluster = ClusterSpec(new.generation, new.scheduler if new.scheduler is None or not old.scheduler
                          else Endpoint(old.scheduler.task_id, old.scheduler.host, old.scheduler.port),
                          tuple(servers), tuple(workers))
    return RescaleRequest(job_id=job_id, cluster=cluster, assignments=tuple(assignments)), new_ids


def wait_until(runner: JobRunner | list[JobRunner], cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll the runner (or each of several, as the executors of one job's agents) until ``cond``."""
    runners = runner if isinstance(runner, list) else [runner]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in runners:
            r.poll()
        if cond():
            return
        time.sleep(0.1)
    logs = "\n".join(f"--- {p.name}: {p.log_tail(800)}" for r in runners for p in r.procs.values())
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def make_runner(tmp_path, sink):
    """Factory: a JobRunner for a first LaunchSpec; every runner is closed (processes killed) at teardown."""
    runners: list[JobRunner] = []

    def make(first: LaunchSpec, **cfg) -> JobRunner:
        config = RunnerConfig(workdir=cfg.pop("workdir", tmp_path / "work"), grace_s=cfg.pop("grace_s", 15.0),
                              retry=cfg.pop("retry", RetryPolicy(attempts=8, base_delay=0.5, max_delay=2.0)),
                              usage_interval_s=cfg.pop("usage_interval_s", 1.0), **cfg)
        r = JobRunner(first, config, sink)
        runners.append(r)
        return r

    yield make
    for r in runners:
        for p in r.procs.values():
            if p.alive():
                p.kill()
        r.close()


class AsideCall:
    """A runner call made on another thread (as another agent's executor loop would make it)."""

    def __init__(self, fn: Callable[..., object], args: tuple, release: threading.Event) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._body, args=(fn, args, release), daemon=True)
        self._thread.start()

    def _body(self, fn: Callable[..., object], args: tuple, release: threading.Event) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread by join()
            self.error = exc
        finally:
            self.done.set()
            release.wait()  # live on: processes started here die with this thread

    def join(self, timeout: float) -> None:
        """Wait for the call to return; re-raise what it raised."""
        assert self.done.wait(timeout), f"the call did not return within {timeout}s"
        if self.error is not None:
            raise self.error


@pytest.fixture
def aside():
    """``aside(fn, *args)`` runs a runner call on a thread that lives until the test ends, like the
    executor loop thread that owns a runner in production. The thread must outlive the call:
    the job processes it starts are tied to it (PR_SET_PDEATHSIG fires when the *thread* that
    forked a child ends, not the process), so a plain thread that returns after a rescale kills
    the new generation it just launched, with SIGKILL."""
    release = threading.Event()
    yield lambda fn, *args: AsideCall(fn, args, release)
    release.set()


@pytest.fixture
def kit():
    """The helper functions above, for test modules (importlib mode has no sibling imports)."""
    return SimpleNamespace(cluster_spec=cluster_spec, launch_specs=launch_specs, rescale_request=rescale_request,
                           wait_until=wait_until, events=events)


def events(p) -> list[dict]:
    """Every event a (possibly exited) ManagedProcess wrote."""
    return read_events(p.progress_file)[0]


@pytest.fixture
def job_id() -> str:
    return f"job-{uuid.uuid4().hex[:6]}"
