"""Executor lifecycle on an agent: start, registration timeout, SHUTDOWN with grace, exit handling.

Mirrors what a Mesos agent and its containerizer do (``Slave::launchExecutor``,
``Slave::shutdownExecutor``, ``Slave::executorTerminated``): executors are real processes, a
SHUTDOWN event is followed by SIGKILL of the process group after the shutdown grace period, and
when an executor exits its unfinished tasks become TASK_FAILED (TASK_KILLED if a kill was asked)
and the master is told (ExitedExecutorMessage -> FAILURE event for custom executors). Mixed into
``Agent``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .agent_records import AgentConfig, AgentFramework, AgentTask, Executor
from .executor_process import ExecutorProcess, executor_environment
from .protocol import is_terminal
from .spawner import ExecutorSpawner
from .updates import StatusUpdateManager

if TYPE_CHECKING:
    from .master_link import MasterLink

logger = logging.getLogger(__name__)


class ExecutorLifecycleMixin:
    config: AgentConfig
    frameworks: dict[str, AgentFramework]
    updates: StatusUpdateManager
    master: MasterLink | None
    agent_id: str | None
    removed: bool
    _tasks: set[asyncio.Task]
    spawner: ExecutorSpawner
    # provided by Agent
    host: str
    port: int
    _agent_update: Callable[..., None]
    _give_gpus: Callable[[list[int]], None]

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
            agent_endpoint=f"{self.host}:{self.port}",
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
        user = (command.get("user") or fw.info.get("user") or "") if self.config.switch_user else ""
        try:
            ex.process = await ExecutorProcess.spawn(command, env, ex.directory, self.spawner, user=user)
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
