"""A local agent: runs executors as processes and serves the v1 Executor HTTP API state machine.

Follows the "Executor HTTP API" document and ``mesos/v1/executor/executor.proto``: executors
SUBSCRIBE, receive SUBSCRIBED, LAUNCH, KILL, ACKNOWLEDGED, MESSAGE, SHUTDOWN (and HEARTBEAT),
and send UPDATE and MESSAGE calls. Tasks without an ExecutorInfo run like Mesos's command
executor: the command itself is the process, and the agent reports RUNNING/FINISHED/FAILED/KILLED.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .launcher import ExecutorProcess, executor_environment, sandbox_path
from .protocol import ExecutorCall, is_terminal, new_uuid_b64, now
from .recordio import EventStream
from .resources import ResourceBag
from .state import Task
from .updates import StatusUpdateManager

if TYPE_CHECKING:
    from .master import Master

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentConfig:
    """Resources and behaviour of one agent (Mesos agent flags ``--resources``, ``--attributes`` ...)."""

    cpus: float = 8.0
    mem: float = 16384.0  # MiB
    disk: float = 65536.0  # MiB
    gpus: int = 0
    ports: tuple[int, int] = (31000, 31999)
    attributes: tuple[tuple[str, str | float], ...] = ()
    hostname: str = "127.0.0.1"
    executor_shutdown_grace_period: float = 5.0  # --executor_shutdown_grace_period
    executor_registration_timeout: float = 60.0  # --executor_registration_timeout
    status_update_retry_min: float = 10.0  # STATUS_UPDATE_RETRY_INTERVAL_MIN
    status_update_retry_max: float = 600.0  # STATUS_UPDATE_RETRY_INTERVAL_MAX
    heartbeat_interval: float = 30.0
    mesos_local: bool = True  # set MESOS_LOCAL=1 for executors (see launcher.py)

    def resources(self) -> ResourceBag:
        return ResourceBag.of(
            cpus=self.cpus,
            mem=self.mem,
            disk=self.disk,
            gpus=self.gpus,
            ports=[self.ports] if self.ports else [],
        )


@dataclass
class AgentTask:
    info: dict[str, Any]
    resources: ResourceBag
    gpus: list[int] = field(default_factory=list)
    state: str = "TASK_STAGING"
    kill_requested: bool = False

    @property
    def task_id(self) -> str:
        return self.info["task_id"]["value"]


@dataclass
class Executor:
    framework_id: str
    executor_id: str
    info: dict[str, Any]
    command_task: bool
    container_id: str
    directory: Path
    resources: ResourceBag
    gpus: list[int] = field(default_factory=list)
    state: str = "REGISTERING"  # REGISTERING -> RUNNING -> TERMINATING -> TERMINATED
    stream: EventStream | None = None
    queued: dict[str, AgentTask] = field(default_factory=dict)
    launched: dict[str, AgentTask] = field(default_factory=dict)
    process: ExecutorProcess | None = None
    shutdown_reason: str | None = None
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    exit_status: int | None = None

    def tasks(self) -> list[AgentTask]:
        return list(self.queued.values()) + list(self.launched.values())

    def find(self, task_id: str) -> AgentTask | None:
        return self.queued.get(task_id) or self.launched.get(task_id)


@dataclass
class AgentFramework:
    info: dict[str, Any]
    executors: dict[str, Executor] = field(default_factory=dict)
    completed_executors: deque = field(default_factory=lambda: deque(maxlen=100))
    removed: bool = False


class Agent:
    """One agent. ``master`` is the master instance it is registered with (swapped on restarts)."""

    def __init__(self, index: int, config: AgentConfig, work_dir: Path) -> None:
        self.index = index
        self.config = config
        self.work_dir = work_dir
        self.host = "127.0.0.1"
        self.port = 0
        self.agent_id: str | None = None
        self.master: Master | None = None
        self.total = config.resources()
        self.gpu_free: list[int] = list(range(int(config.gpus)))
        self.frameworks: dict[str, AgentFramework] = {}
        self.removed = False
        self.start_time = now()
        self.updates = StatusUpdateManager(
            self._forward_update,
            config.status_update_retry_min,
            config.status_update_retry_max,
            self._task_done,
        )
        self._tasks: set[asyncio.Task] = set()

    @property
    def hostname(self) -> str:
        return self.config.hostname

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    # ---- registration -------------------------------------------------------------------------
    def register(self, master: Master) -> None:
        """Register (first time) or re-register (after a master restart) with ``master``."""
        self.master = master
        if self.agent_id is None:
            self.agent_id = master.register_agent(self)
        else:
            master.reregister_agent(self)
            self.updates.resend_all()

    def attributes_json(self) -> list[dict[str, Any]]:
        """mesos.proto ``Attribute`` list (TEXT or SCALAR)."""
        out = []
        for name, value in self.config.attributes:
            if isinstance(value, (int, float)):
                out.append({"name": name, "type": "SCALAR", "scalar": {"value": float(value)}})
            else:
                out.append({"name": name, "type": "TEXT", "text": {"value": str(value)}})
        return out

    def info_json(self) -> dict[str, Any]:
        """mesos.proto ``AgentInfo``."""
        return {
            "hostname": self.hostname,
            "port": self.port,
            "id": {"value": self.agent_id or ""},
            "resources": self.total.to_json(),
            "attributes": self.attributes_json(),
        }

    def snapshot(
        self,
    ) -> list[tuple[str, dict[str, Any], dict[str, tuple[dict[str, Any], ResourceBag]], list[Task]]]:
        """What a re-registering agent tells a new master: frameworks, executors and tasks."""
        out = []
        for fid, fw in self.frameworks.items():
            if fw.removed:
                continue
            executors: dict[str, tuple[dict[str, Any], ResourceBag]] = {}
            tasks: list[Task] = []
            for ex in fw.executors.values():
                if ex.state == "TERMINATED":
                    continue
                if not ex.command_task:
                    executors[ex.executor_id] = (ex.info, ex.resources)
                for t in ex.tasks():
                    task = Task(
                        task_id=t.task_id,
                        framework_id=fid,
                        agent_id=self.agent_id or "",
                        executor_id="" if ex.command_task else ex.executor_id,
                        name=t.info.get("name", ""),
                        resources=t.resources,
                        state=t.state,
                    )
                    head = self.updates.head(fid, t.task_id)
                    if head is not None:
                        task.status_update_state, task.status_update_uuid = head["state"], head.get("uuid")
                    tasks.append(task)
            out.append((fid, fw.info, executors, tasks))
        return out

    # ---- GPUs ---------------------------------------------------------------------------------
    def _take_gpus(self, count: float) -> list[int]:
        n = int(count)
        taken, self.gpu_free = self.gpu_free[:n], self.gpu_free[n:]
        if len(taken) < n:
            logger.error("agent %s: asked for %d GPUs, only %d free", self.agent_id, n, len(taken))
        return taken

    def _give_gpus(self, gpus: list[int]) -> None:
        self.gpu_free = sorted(set(self.gpu_free) | set(gpus))
        gpus.clear()

    # ---- master -> agent ----------------------------------------------------------------------
    def update_framework(self, fid: str, info: dict[str, Any]) -> None:
        if fid in self.frameworks:
            self.frameworks[fid].info = info

    def run_task(self, framework_info: dict[str, Any], task: dict[str, Any]) -> None:
        """RunTaskMessage: start the executor if needed and hand it the task."""
        fid = framework_info["id"]["value"]
        fw = self.frameworks.setdefault(fid, AgentFramework(framework_info))
        fw.info, fw.removed = framework_info, False
        tid = task["task_id"]["value"]
        agent_task = AgentTask(task, ResourceBag.from_json(task.get("resources") or []))
        if "executor" in task and task["executor"] is not None:
            einfo = dict(task["executor"])
            eid = einfo["executor_id"]["value"]
            einfo["executor_id"] = {"value": eid}
            einfo["framework_id"] = {"value": fid}
            command_task = False
        else:
            eid = tid
            einfo = {
                "executor_id": {"value": tid},
                "framework_id": {"value": fid},
                "command": task.get("command"),
                "name": f"Command Executor (Task: {tid})",
                "source": tid,
            }
            command_task = True
        ex = fw.executors.get(eid)
        if ex is None or ex.state == "TERMINATED":
            eres = ResourceBag.from_json(einfo.get("resources") or [])
            cid = str(uuid.uuid4())
            ex = Executor(
                fid,
                eid,
                einfo,
                command_task,
                cid,
                sandbox_path(self.work_dir, self.agent_id or "agent", fid, eid, cid),
                eres,
            )
            ex.gpus = self._take_gpus(eres.scalar("gpus"))
            agent_task.gpus = self._take_gpus(agent_task.resources.scalar("gpus"))
            ex.queued[tid] = agent_task
            fw.executors[eid] = ex
            self._spawn(self._launch(fw, ex, agent_task))
            return
        agent_task.gpus = self._take_gpus(agent_task.resources.scalar("gpus"))
        if ex.state == "REGISTERING":
            ex.queued[tid] = agent_task
        elif ex.state == "RUNNING" and not ex.command_task:
            ex.launched[tid] = agent_task
            ex.stream and ex.stream.send({"type": "LAUNCH", "launch": {"task": task}})
        else:
            ex.launched[tid] = agent_task
            self._agent_update(
                fid, ex, agent_task, "TASK_DROPPED", "REASON_EXECUTOR_TERMINATED", "Executor is terminating"
            )

    def kill_task(self, fid: str, task_id: str) -> None:
        """KillTaskMessage."""
        fw = self.frameworks.get(fid)
        for ex in fw.executors.values() if fw else []:
            task = ex.find(task_id)
            if task is None or is_terminal(task.state):
                continue
            task.kill_requested = True
            if task_id in ex.queued:  # not yet given to the executor: the agent answers itself
                del ex.queued[task_id]
                ex.launched[task_id] = task
                self._agent_update(
                    fid,
                    ex,
                    task,
                    "TASK_KILLED",
                    "REASON_TASK_KILLED_DURING_LAUNCH",
                    "Killed before delivery to the executor",
                )
                if not ex.tasks() or all(is_terminal(t.state) for t in ex.tasks()):
                    self.shutdown_executor(fid, ex.executor_id)
            elif ex.command_task:
                grace = _kill_grace(task.info)
                self._terminate(ex, grace)
            elif ex.stream is not None:
                event: dict[str, Any] = {"task_id": {"value": task_id}}
                if task.info.get("kill_policy"):
                    event["kill_policy"] = task.info["kill_policy"]
                ex.stream.send({"type": "KILL", "kill": event})
            return
        logger.info("agent %s: kill of unknown task %s ignored", self.agent_id, task_id)

    def framework_message(self, fid: str, executor_id: str, data: str) -> None:
        """FrameworkToExecutorMessage (at-most-once: dropped if the executor is not subscribed)."""
        fw = self.frameworks.get(fid)
        ex = fw.executors.get(executor_id) if fw else None
        if (
            ex is None
            or ex.stream is None
            or not ex.stream.send({"type": "MESSAGE", "message": {"data": data}})
        ):
            logger.warning("message for executor %s of %s dropped (not subscribed)", executor_id, fid)

    def acknowledge(self, fid: str, task_id: str, uuid_b64: str) -> None:
        self.updates.acknowledge(fid, task_id, uuid_b64)

    def shutdown_framework(self, fid: str) -> None:
        """ShutdownFrameworkMessage: shut down every executor of the framework."""
        fw = self.frameworks.get(fid)
        if fw is None:
            return
        fw.removed = True
        self.updates.drop_framework(fid)
        for ex in list(fw.executors.values()):
            self._shutdown(ex, "framework_removed")

    def shutdown_executor(self, fid: str, executor_id: str) -> None:
        fw = self.frameworks.get(fid)
        ex = fw.executors.get(executor_id) if fw else None
        if ex is not None:
            self._shutdown(ex, "shutdown")

    # ---- executor lifecycle -------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _launch(self, fw: AgentFramework, ex: Executor, first: AgentTask) -> None:
        grace = self._grace(ex)
        gpus = ex.gpus + first.gpus if self.config.gpus > 0 else None
        command = ex.info.get("command") or {}
        env = executor_environment(
            agent_endpoint=self.endpoint,
            agent_id=self.agent_id or "",
            framework_id=ex.framework_id,
            executor_id=ex.executor_id,
            directory=ex.directory,
            checkpoint=bool(fw.info.get("checkpoint")),
            grace_period=grace,
            gpus=gpus,
            mesos_local=self.config.mesos_local,
            command=command,
        )
        try:
            ex.process = await ExecutorProcess.spawn(command, env, ex.directory)
        except OSError as exc:
            logger.warning("agent %s: could not start executor %s: %s", self.agent_id, ex.executor_id, exc)
            self._executor_gone(ex, None, f"Failed to launch container: {exc}")
            return
        if ex.state == "TERMINATING":  # killed while starting
            ex.process.signal_group(signal.SIGKILL)
        elif ex.command_task:
            ex.state = "RUNNING"
            ex.launched.update(ex.queued)
            ex.queued.clear()
            self._agent_update(
                ex.framework_id, ex, first, "TASK_RUNNING", None, None, source="SOURCE_EXECUTOR"
            )
        else:
            loop = asyncio.get_running_loop()
            ex.timers.append(
                loop.call_later(self.config.executor_registration_timeout, self._registration_timeout, ex)
            )
        status = await ex.process.wait()
        self._executor_gone(ex, status, None)

    def _grace(self, ex: Executor) -> float:
        sgp = ex.info.get("shutdown_grace_period") or {}
        ns = sgp.get("nanoseconds") if isinstance(sgp, dict) else None
        return ns / 1e9 if isinstance(ns, int) and ns >= 0 else self.config.executor_shutdown_grace_period

    def _registration_timeout(self, ex: Executor) -> None:
        if ex.state == "REGISTERING":
            logger.warning(
                "executor %s did not subscribe within %.0fs",
                ex.executor_id,
                self.config.executor_registration_timeout,
            )
            self._shutdown(ex, "registration_timeout")

    def _shutdown(self, ex: Executor, reason: str) -> None:
        if ex.state in ("TERMINATING", "TERMINATED"):
            return
        ex.shutdown_reason = reason
        subscribed = ex.state == "RUNNING" and ex.stream is not None and not ex.command_task
        ex.state = "TERMINATING"
        if subscribed:
            ex.stream.send({"type": "SHUTDOWN"})  # type: ignore[union-attr]
            self._terminate(ex, self._grace(ex), sigterm=False)
        elif ex.command_task:
            self._terminate(ex, self._grace(ex))
        elif ex.process is not None:
            ex.process.signal_group(signal.SIGKILL)

    def _terminate(self, ex: Executor, grace: float, sigterm: bool = True) -> None:
        """SIGTERM (optionally) now, SIGKILL of the process group after ``grace`` seconds."""
        if ex.process is None:
            return
        if sigterm:
            ex.process.signal_group(signal.SIGTERM)
        proc = ex.process
        ex.timers.append(asyncio.get_running_loop().call_later(grace, proc.signal_group, signal.SIGKILL))

    def _executor_gone(self, ex: Executor, status: int | None, message: str | None) -> None:
        """The executor process exited (or never started): fail its remaining tasks, tell the master."""
        ex.state = "TERMINATED"
        ex.exit_status = status
        for timer in ex.timers:
            timer.cancel()
        if ex.stream is not None:
            stream, ex.stream = ex.stream, None
            stream.close()
        self._give_gpus(ex.gpus)
        fw = self.frameworks.get(ex.framework_id)
        if self.removed or fw is None:
            return
        for task in ex.tasks():
            if is_terminal(task.state):
                continue
            if fw.removed:
                task.state = "TASK_KILLED"
                continue
            if ex.command_task and status is not None:
                code, sig = status >> 8, status & 0x7F
                if task.kill_requested:
                    state, reason, msg = "TASK_KILLED", None, "Command terminated by a kill request"
                elif sig == 0 and code == 0:
                    state, reason, msg = "TASK_FINISHED", None, "Command exited with status 0"
                else:
                    state, reason = "TASK_FAILED", "REASON_COMMAND_EXECUTOR_FAILED"
                    msg = (
                        f"Command terminated with signal {sig}"
                        if sig
                        else f"Command exited with status {code}"
                    )
                self._agent_update(
                    fw.info["id"]["value"], ex, task, state, reason, msg, source="SOURCE_EXECUTOR"
                )
                continue
            if task.kill_requested or ex.shutdown_reason == "shutdown":
                state, reason = "TASK_KILLED", "REASON_EXECUTOR_TERMINATED"
            elif ex.shutdown_reason == "registration_timeout":
                state, reason = "TASK_FAILED", "REASON_EXECUTOR_REGISTRATION_TIMEOUT"
            else:
                state, reason = "TASK_FAILED", "REASON_EXECUTOR_TERMINATED"
            self._agent_update(
                ex.framework_id,
                ex,
                task,
                state,
                reason,
                message or f"Executor terminated (wait status {status})",
            )
        if fw.removed:
            fw.executors.pop(ex.executor_id, None)
            fw.completed_executors.append(ex)
        if self.master is not None and self.master.running and self.agent_id:
            self.master.executor_exited(
                self.agent_id,
                ex.framework_id,
                ex.executor_id,
                status if status is not None else -1,
                ex.command_task,
            )
        self._maybe_forget(ex)

    def _maybe_forget(self, ex: Executor) -> None:
        fw = self.frameworks.get(ex.framework_id)
        if fw is None or ex.state != "TERMINATED":
            return
        if all(self.updates.head(ex.framework_id, t.task_id) is None for t in ex.tasks()):
            if fw.executors.get(ex.executor_id) is ex:
                del fw.executors[ex.executor_id]
                fw.completed_executors.append(ex)

    def _task_done(self, fid: str, task_id: str) -> None:
        fw = self.frameworks.get(fid)
        for ex in list(fw.executors.values()) if fw else []:
            if ex.find(task_id) is not None:
                self._maybe_forget(ex)

    # ---- status updates -----------------------------------------------------------------------
    def _agent_update(
        self,
        fid: str,
        ex: Executor,
        task: AgentTask,
        state: str,
        reason: str | None,
        message: str | None,
        source: str = "SOURCE_AGENT",
    ) -> None:
        status: dict[str, Any] = {
            "task_id": {"value": task.task_id},
            "state": state,
            "source": source,
            "uuid": new_uuid_b64(),
            "timestamp": now(),
        }
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
        self.status_update(fid, ex, status)

    def status_update(self, fid: str, ex: Executor, status: dict[str, Any]) -> bool:
        """Accept a status update (from the executor or the agent) into the update manager."""
        status = dict(status)
        status["agent_id"] = {"value": self.agent_id or ""}
        status["executor_id"] = {"value": ex.executor_id}
        status.setdefault("source", "SOURCE_EXECUTOR")
        status.setdefault("timestamp", now())
        task = ex.find(status["task_id"]["value"])
        accepted = self.updates.update(fid, status)
        if accepted and task is not None:
            task.state = status["state"]
            if is_terminal(task.state):
                self._give_gpus(task.gpus)
        return accepted

    def _forward_update(self, fid: str, status: dict[str, Any], latest_state: str) -> bool:
        master = self.master
        if self.removed or master is None or not master.running or self.agent_id not in master.agents:
            return False
        master.status_update(self.agent_id, fid, status, latest_state)  # type: ignore[arg-type]
        return True

    # ---- executor HTTP API (called by executor_api.py) ----------------------------------------
    def find_executor(self, fid: str, eid: str) -> tuple[AgentFramework | None, Executor | None]:
        fw = self.frameworks.get(fid)
        return fw, (fw.executors.get(eid) if fw else None)

    def executor_subscribe(self, ex: Executor, call: ExecutorCall) -> EventStream:
        stream = EventStream(self.config.heartbeat_interval, name=f"executor:{ex.executor_id}")
        if ex.state in ("TERMINATING", "TERMINATED"):
            stream.send({"type": "SHUTDOWN"})
            stream.close()
            return stream
        if ex.stream is not None:
            old, ex.stream = ex.stream, None
            old.close()
        ex.stream = stream
        ex.state = "RUNNING"
        fw = self.frameworks[ex.framework_id]
        stream.send(
            {
                "type": "SUBSCRIBED",
                "subscribed": {
                    "executor_info": ex.info,
                    "framework_info": fw.info,
                    "agent_info": self.info_json(),
                    "container_id": {"value": ex.container_id},
                },
            }
        )
        for upd in call.subscribe.unacknowledged_updates if call.subscribe else []:
            st = upd.get("status") if isinstance(upd, dict) else None
            if (
                isinstance(st, dict)
                and isinstance(st.get("task_id"), dict)
                and isinstance(st.get("uuid"), str)
                and isinstance(st.get("state"), str)
            ):
                self.status_update(ex.framework_id, ex, st)
        for tid, task in list(ex.queued.items()):
            del ex.queued[tid]
            ex.launched[tid] = task
            stream.send({"type": "LAUNCH", "launch": {"task": task.info}})
        stream.on_close(lambda s: self._executor_stream_closed(ex, s))
        return stream

    def _executor_stream_closed(self, ex: Executor, stream: EventStream) -> None:
        if ex.stream is stream:
            ex.stream = None  # the executor may re-subscribe; its process exit ends it otherwise
            logger.info("executor %s disconnected from agent %s", ex.executor_id, self.agent_id)

    def executor_update(self, ex: Executor, status: dict[str, Any]) -> None:
        accepted = self.status_update(ex.framework_id, ex, status)
        if ex.stream is not None:
            # Mesos acknowledges to the executor once the update manager has the update.
            ex.stream.send(
                {
                    "type": "ACKNOWLEDGED",
                    "acknowledged": {"task_id": status["task_id"], "uuid": status["uuid"]},
                }
            )
        if not accepted:
            logger.debug("executor %s sent an update that was not accepted", ex.executor_id)

    def executor_message(self, ex: Executor, data: str) -> None:
        if self.master is not None and self.master.running and self.agent_id:
            self.master.executor_message(self.agent_id, ex.framework_id, ex.executor_id, data)

    # ---- stop / fault injection ---------------------------------------------------------------
    def kill_all(self) -> None:
        """SIGKILL every executor process group now (the machine vanished)."""
        self.removed = True
        self.updates.close()
        for fw in self.frameworks.values():
            for ex in fw.executors.values():
                if ex.process is not None:
                    ex.process.signal_group(signal.SIGKILL)

    async def shutdown(self, grace: float) -> None:
        """Orderly stop: SHUTDOWN every executor, SIGKILL what is left after ``grace`` seconds."""
        for fw in self.frameworks.values():
            for ex in list(fw.executors.values()):
                if ex.state != "TERMINATED":
                    ex.shutdown_reason = ex.shutdown_reason or "agent_stopping"
                    if ex.stream is not None and not ex.command_task:
                        ex.stream.send({"type": "SHUTDOWN"})
                    elif ex.process is not None:
                        ex.process.signal_group(signal.SIGTERM)
        deadline = asyncio.get_running_loop().time() + grace
        while self._live_processes() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        self.kill_all()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
        for fw in self.frameworks.values():
            for ex in fw.executors.values():
                if ex.stream is not None:
                    ex.stream.close()

    def _live_processes(self) -> list[ExecutorProcess]:
        return [
            ex.process
            for fw in self.frameworks.values()
            for ex in fw.executors.values()
            if ex.process is not None and ex.process.running
        ]

    def executor_pids(self) -> list[int]:
        """PIDs of running executor processes (tests use this to check clean-up)."""
        return [p.pid for p in self._live_processes()]

    def state_json(self) -> dict[str, Any]:
        """A small subset of Mesos's agent ``/state``."""
        frameworks = []
        for fid, fw in self.frameworks.items():
            frameworks.append(
                {
                    "id": fid,
                    "name": fw.info.get("name"),
                    "executors": [
                        {
                            "id": ex.executor_id,
                            "container": ex.container_id,
                            "directory": str(ex.directory),
                            "state": ex.state,
                            "pid": ex.process.pid if ex.process else None,
                            "gpus": list(ex.gpus),
                            "tasks": [
                                {
                                    "id": t.task_id,
                                    "state": t.state,
                                    "gpus": list(t.gpus),
                                    "resources": t.resources.summary(),
                                }
                                for t in ex.tasks()
                            ],
                        }
                        for ex in fw.executors.values()
                    ],
                }
            )
        return {
            "id": self.agent_id,
            "hostname": self.hostname,
            "port": self.port,
            "version": "1.11.0",
            "resources": self.total.summary(),
            "attributes": dict(self.config.attributes),
            "free_gpus": list(self.gpu_free),
            "start_time": self.start_time,
            "frameworks": frameworks,
            "pending_status_updates": sum(len(st.pending) for st in self.updates.streams.values()),
        }


def _kill_grace(task_info: dict[str, Any]) -> float:
    """KillPolicy.grace_period of a command task; Mesos's command executor defaults to 3 s."""
    gp = ((task_info.get("kill_policy") or {}).get("grace_period") or {}).get("nanoseconds")
    return gp / 1e9 if isinstance(gp, int) and gp >= 0 else 3.0
