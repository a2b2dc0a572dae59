"""A local agent: runs executors as processes and serves the v1 Executor HTTP API state machine.

Follows the "Executor HTTP API" document and ``mesos/v1/executor/executor.proto``: executors
SUBSCRIBE, receive SUBSCRIBED, LAUNCH, KILL, ACKNOWLEDGED, MESSAGE, SHUTDOWN (and HEARTBEAT),
and send UPDATE and MESSAGE calls. Tasks without an ExecutorInfo run like Mesos's command
executor: the command itself is the process, and the agent reports RUNNING/FINISHED/FAILED/KILLED.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .agent_executors import ExecutorLifecycleMixin
from .agent_records import AgentConfig, AgentFramework, AgentTask, Executor, kill_grace
from .executor_process import sandbox_path
from .protocol import ExecutorCall, is_terminal, new_uuid_b64, now
from .recordio import EventStream
from .resources import ResourceBag
from .spawner import ExecutorSpawner
from .state import Task
from .updates import StatusUpdateManager

if TYPE_CHECKING:
    from .master_link import MasterLink

logger = logging.getLogger(__name__)


class Agent(ExecutorLifecycleMixin):
    """One agent. ``master`` is the master instance it is registered with (swapped on restarts)."""

    def __init__(self, index: int, config: AgentConfig, work_dir: Path, spawner: ExecutorSpawner) -> None:
        self.index = index
        self.spawner = spawner  # starts the executors, from a helper process (shared by the agents)
        self.config = config
        self.work_dir = work_dir
        self.host = "127.0.0.1"
        self.port = 0
        self.agent_id: str | None = None
        self.master: MasterLink | None = None
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

    def sandbox_root(self) -> Path:
        """The folder holding this agent's sandboxes; its files API serves nothing outside it."""
        return self.work_dir / "slaves" / (self.agent_id or "agent")

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    # ---- registration -------------------------------------------------------------------------
    def register(self, master: MasterLink) -> None:
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
                grace = kill_grace(task.info)
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
        if self.removed or master is None or not master.running or self.agent_id is None or not master.is_registered(self.agent_id):
            return False
        master.status_update(self.agent_id, fid, status, latest_state)
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

    @staticmethod
    def _executor_json(ex: Executor) -> dict[str, Any]:
        return {
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

    def state_json(self) -> dict[str, Any]:
        """A small subset of Mesos's agent ``/state`` (executors carry their sandbox ``directory``,
        as in Mesos; ended executors are under ``completed_executors``)."""
        frameworks = [
            {
                "id": fid,
                "name": fw.info.get("name"),
                "executors": [self._executor_json(ex) for ex in fw.executors.values()],
                "completed_executors": [self._executor_json(ex) for ex in fw.completed_executors],
            }
            for fid, fw in self.frameworks.items()
        ]
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
