"""The pymesos ``Executor``: callbacks only translate and enqueue; one thread owns all state.

One executor process serves one job on one agent (the framework gives every task of a job on an
agent the same ``ExecutorInfo``), but the loop keeps a runner per job id so nothing breaks if a
framework shares executors differently.
"""

from __future__ import annotations

import logging
import os
import queue
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymesos import Executor

from dl2_mesos.errors import MessageSchemaError
from dl2_mesos.executor.job_runner import JobRunner, RunnerConfig
from dl2_mesos.messages import LaunchSpec, RescaleRequest, decode_b64, encode_b64

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    kind: str  # registered | launch | kill | message | shutdown | disconnected
    payload: Any = None


class QueueingExecutor(Executor):
    """pymesos callbacks -> :class:`Event` on a queue (never blocks, never raises into the driver)."""

    def __init__(self, events: queue.Queue[Event]) -> None:
        self.events = events

    def registered(self, driver, executor_info, framework_info, agent_info):  # noqa: N802 - pymesos API
        self.events.put(Event("registered", dict(agent_info or {})))

    def reregistered(self, driver, agent_info):  # noqa: N802
        self.events.put(Event("registered", dict(agent_info or {})))

    def disconnected(self, driver):
        self.events.put(Event("disconnected"))

    def launchTask(self, driver, task):  # noqa: N802
        self.events.put(Event("launch", task))

    def launchTaskGroup(self, driver, task_group):  # noqa: N802
        for task in task_group:
            self.events.put(Event("launch", task))

    def killTask(self, driver, task_id):  # noqa: N802
        self.events.put(Event("kill", (task_id or {}).get("value", "")))

    def frameworkMessage(self, driver, message):  # noqa: N802
        self.events.put(Event("message", message))

    def shutdown(self, driver):
        self.events.put(Event("shutdown"))

    def error(self, driver, message):
        logger.error("executor error from the agent: %s", message)


class DriverSink:
    """Sink over a pymesos executor driver: status updates and base64 JSON framework messages."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def status(self, task_id: str, state: str, message: str = "") -> None:
        update: dict[str, Any] = {"task_id": {"value": task_id}, "state": state, "message": message[:4000]}
        executor_id = getattr(self.driver, "executor_id", None)
        if executor_id:
            update["executor_id"] = executor_id
        try:
            self.driver.sendStatusUpdate(update)
        except Exception as exc:  # noqa: BLE001 - the agent may be restarting; Mesos re-reconciles
            logger.error("status update %s for %s not sent: %s", state, task_id, exc)

    def send(self, msg: Any) -> None:
        try:
            self.driver.sendFrameworkMessage(encode_b64(msg))
        except Exception as exc:  # noqa: BLE001 - framework messages are best effort by contract
            logger.warning("framework message %s not sent: %s", type(msg).__name__, exc)


def grace_of(task: dict, default: float) -> float:
    """The task's kill-policy grace period in seconds, else ``default``."""
    try:
        ns = task["kill_policy"]["grace_period"]["nanoseconds"]
        return max(0.0, float(ns) / 1e9)
    except (KeyError, TypeError, ValueError):
        return default


class ExecutorLoop:
    """Owns every JobRunner; handles queued events and polls runners. Not thread-safe by design:
    only :meth:`run` (one thread) touches state."""

    def __init__(self, events: queue.Queue[Event], sink: Any, config: RunnerConfig,
                 exit_when_idle_s: float = 5.0) -> None:
        self.events = events
        self.sink = sink
        self.config = config
        self.runners: dict[str, JobRunner] = {}
        self.task_job: dict[str, str] = {}
        self.exit_when_idle_s = exit_when_idle_s
        self.stopped = False
        self._idle_since: float | None = None
        self._ever_launched = False

    def run(self, poll_s: float = 0.2) -> None:
        while not self.stopped:
            try:
                ev = self.events.get(timeout=poll_s)
            except queue.Empty:
                ev = None
            if ev is not None:
                self.handle(ev)
            for r in list(self.runners.values()):
                r.poll()
            self._maybe_exit()

    def _maybe_exit(self) -> None:
        busy = any(r.tasks or r.held for r in self.runners.values())
        if busy or not self._ever_launched:
            self._idle_since = None
            return
        self._idle_since = self._idle_since or time.monotonic()
        if time.monotonic() - self._idle_since >= self.exit_when_idle_s:
            logger.info("no tasks left; executor exits")
            self.shutdown()

    def handle(self, ev: Event) -> None:
        try:
            if ev.kind == "registered":
                host = (ev.payload or {}).get("hostname")
                if host and not os.environ.get("DL2_NODE_HOST"):
                    self.config.host = host
            elif ev.kind == "launch":
                self._launch(ev.payload)
            elif ev.kind == "kill":
                kills = [ev.payload]
                # take every kill already queued: a job's tasks are stopped together (workers first)
                rest = []
                while not self.events.empty():
                    nxt = self.events.get_nowait()
                    (kills if nxt.kind == "kill" else rest).append(nxt.payload if nxt.kind == "kill" else nxt)
                for r in rest:
                    self.events.put(r)
                self._kill(kills)
            elif ev.kind == "message":
                self._message(ev.payload)
            elif ev.kind == "shutdown":
                self.shutdown()
            elif ev.kind == "disconnected":
                logger.warning("disconnected from the agent")
        except Exception:  # noqa: BLE001 - one bad event must not take the executor down
            logger.exception("event %s failed", ev.kind)

    def _launch(self, task: dict) -> None:
        task_id = (task.get("task_id") or {}).get("value", "")
        try:
            spec = decode_b64(task.get("data", ""))
            if not isinstance(spec, LaunchSpec):
                raise MessageSchemaError(f"TaskInfo.data holds a {spec.KIND!r} message, not a launch")
        except MessageSchemaError as exc:
            logger.warning("task %s: bad LaunchSpec: %s", task_id, exc)
            self.sink.status(task_id, "TASK_FAILED", f"malformed LaunchSpec in TaskInfo.data: {exc}")
            return
        if spec.task_id != task_id:
            spec = spec.__class__(**{**spec.__dict__, "task_id": task_id})
        self._ever_launched = True
        try:
            runner = self.runners.get(spec.job_id)
            if runner is None or runner.finished:
                runner = JobRunner(spec, self.config, self.sink)
                self.runners[spec.job_id] = runner
            self.task_job[task_id] = spec.job_id
            runner.launch(spec, grace_s=grace_of(task, self.config.grace_s))
        except Exception as exc:  # noqa: BLE001 - only this task fails, never silently (no TASK_STARTING forever)
            logger.exception("task %s could not be launched", task_id)
            self.sink.status(task_id, "TASK_FAILED", f"launch failed: {type(exc).__name__}: {exc}")

    def _kill(self, task_ids: list[str]) -> None:
        by_job: dict[str, list[str]] = {}
        for t in task_ids:
            job = self.task_job.get(t)
            if job is None or job not in self.runners:
                self.sink.status(t, "TASK_KILLED", "unknown task (already gone)")
                continue
            by_job.setdefault(job, []).append(t)
        for job, ids in by_job.items():
            self.runners[job].kill(ids)

    def _message(self, data: Any) -> None:
        try:
            msg = decode_b64(data if isinstance(data, (str, bytes)) else "")
        except MessageSchemaError as exc:
            logger.warning("malformed framework message dropped: %s", exc)
            return
        if not isinstance(msg, RescaleRequest):
            logger.warning("framework message of kind %r is not for executors; dropped", msg.KIND)
            return
        runner = self.runners.get(msg.job_id)
        if runner is None:
            logger.warning("rescale for job %s, which has no tasks here; dropped", msg.job_id)
            return
        runner.rescale(msg)

    def shutdown(self) -> None:
        for r in self.runners.values():
            r.close()
        self.stopped = True


def default_config() -> RunnerConfig:
    """Runner settings from the environment (sandbox folder, grace period, retries)."""
    from pymesos.utils import parse_duration

    grace = os.environ.get("DL2_KILL_GRACE_S") or ""
    if not grace and os.environ.get("MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD"):
        grace = str(parse_duration(os.environ["MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD"]))
    workdir = Path(os.environ.get("DL2_EXECUTOR_WORKDIR") or os.environ.get("MESOS_SANDBOX") or os.getcwd())
    return RunnerConfig(
        workdir=workdir / "dl2-jobs",
        host=os.environ.get("DL2_NODE_HOST", "127.0.0.1"),
        grace_s=float(grace or 10.0),
        max_restarts=int(os.environ.get("DL2_MAX_RESTARTS", "3")),
        restore_wait_s=float(os.environ.get("DL2_RESTORE_WAIT_S", "60")),
        usage_interval_s=float(os.environ.get("DL2_USAGE_INTERVAL_S", "5")),
    )
