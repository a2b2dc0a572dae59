"""Task calls of the local master: ACCEPT/LAUNCH validation, KILL, ACKNOWLEDGE and RECONCILE.

Follows the "Scheduler HTTP API" document (ACCEPT, KILL, ACKNOWLEDGE, RECONCILE), Mesos's
``validation::offer`` / ``validation::task`` rules and the "Reconciliation" document. The master
delegates these calls to a :class:`TaskCalls` over its registry and allocator.
"""

from __future__ import annotations

import logging
from typing import Any

from .allocator import Allocator
from .protocol import CallError, SchedulerCall, TaskInfo, is_terminal, now
from .resources import ResourceBag, ResourceError
from .state import Framework, MasterRegistry, Offer, Task

logger = logging.getLogger(__name__)


class TaskCalls:
    """ACCEPT, KILL, ACKNOWLEDGE and RECONCILE against ``registry``; offers go back through ``allocator``."""

    def __init__(self, registry: MasterRegistry, allocator: Allocator) -> None:
        self.registry = registry
        self.allocator = allocator

    def accept(self, fw: Framework, call: SchedulerCall, raw: dict[str, Any]) -> None:
        acc = call.accept
        assert acc is not None
        for op in acc.operations:
            if op.type != "LAUNCH":
                raise CallError(
                    400, f"Offer operation {op.type} is not supported by the local Mesos stand-in"
                )
        raw_tasks = [
            t
            for op in raw["accept"].get("operations") or []
            for t in ((op.get("launch") or {}).get("task_infos") or [])
        ]
        # validation::offer::validate: offers must exist, belong to the framework, be on one agent.
        error = None
        offers: list[Offer] = []
        seen: set[str] = set()
        for oid in acc.offer_ids:
            offer = self.registry.offers.get(oid.value)
            if oid.value in seen:
                error = f"Duplicate offer {oid.value} in accept"
            elif offer is None:
                error = f"Offer {oid.value} is no longer valid"
            elif offer.framework_id != fw.id:
                error = f"Offer {oid.value} has invalid framework"
            else:
                if offers and offers[0].agent_id != offer.agent_id:
                    error = "Aggregated offers must belong to one single agent"
                offers.append(offer)
            seen.add(oid.value)
        if not acc.offer_ids:
            error = "No offers specified"
        for offer in offers:
            self.allocator.remove_offer(offer.offer_id, rescind=False)
        if error is not None:
            reason = "REASON_INVALID_OFFERS"
            state = "TASK_DROPPED" if fw.partition_aware else "TASK_LOST"
            for raw in raw_tasks:
                self._master_update(fw, raw, state, reason, f"Task launched with invalid offers: {error}")
            self.allocator.trigger()
            return
        agent_id = offers[0].agent_id
        rec = self.registry.agents[agent_id]
        remaining = ResourceBag()
        for offer in offers:
            remaining = remaining + offer.resources
        new_executors: set[str] = set()
        for model, raw in zip(
            [t for op in acc.operations for t in (op.launch.task_infos if op.launch else [])], raw_tasks
        ):
            err, consumed, eid = self._validate_task(fw, model, raw, agent_id, remaining, new_executors)
            if err is not None:
                self._master_update(fw, raw, "TASK_ERROR", "REASON_TASK_INVALID", err)
                continue
            remaining = remaining - consumed
            task_res = ResourceBag.from_json(raw.get("resources") or [])
            if model.executor is not None and eid not in fw.executors.get(agent_id, {}):
                ex_raw = dict(raw["executor"])
                ex_raw["framework_id"] = {"value": fw.id}
                fw.executors.setdefault(agent_id, {})[eid] = (
                    ex_raw,
                    ResourceBag.from_json(ex_raw.get("resources") or []),
                )
                new_executors.add(eid)
            task = Task(
                task_id=model.task_id.value,
                framework_id=fw.id,
                agent_id=agent_id,
                executor_id=eid if model.executor is not None else "",
                name=model.name,
                resources=task_res,
                role=fw.role,
            )
            task.statuses.append({"state": "TASK_STAGING", "timestamp": now()})
            fw.tasks[task.task_id] = task
            rec.agent.run_task(fw.info, raw)
        refuse = acc.filters.refuse_seconds if acc.filters else 5.0
        self.allocator.add_filter(fw, agent_id, remaining, refuse)
        self.allocator.trigger()

    def _validate_task(
        self,
        fw: Framework,
        model: TaskInfo,
        raw: dict[str, Any],
        agent_id: str,
        available: ResourceBag,
        new_executors: set[str],
    ) -> tuple[str | None, ResourceBag, str]:
        """validation::task::validate (the subset used here); returns (error, consumed, executor id)."""
        tid = model.task_id.value
        eid = model.executor.executor_id.value if model.executor else tid
        if (
            not tid
            or tid in (".", "..")
            or "/" in tid
            or any(c.isspace() or ord(c) < 32 for c in tid)
            or len(tid) > 255
        ):
            return f"TaskID '{tid}' contains invalid characters", ResourceBag(), eid
        if tid in fw.tasks:
            return f"Task has duplicate ID: {tid}", ResourceBag(), eid
        if model.agent_id.value != agent_id:
            return f"Task uses invalid agent: {model.agent_id.value}", ResourceBag(), eid
        if (model.executor is None) == (model.command is None):
            return (
                "Task should have at least one (but not both) of CommandInfo or ExecutorInfo present",
                ResourceBag(),
                eid,
            )
        command = model.command if model.executor is None else model.executor.command
        if command is None or not command.value:
            return "CommandInfo must have a 'value' (the command or executable to run)", ResourceBag(), eid
        try:
            consumed = ResourceBag.from_json(raw.get("resources") or [])
            if consumed.is_empty():
                return "Task uses no resources", ResourceBag(), eid
            if model.executor is not None:
                ex_fid = model.executor.framework_id
                if ex_fid is not None and ex_fid.value != fw.id:
                    return "ExecutorInfo has an invalid FrameworkID", ResourceBag(), eid
                existing = fw.executors.get(agent_id, {}).get(eid)
                if existing is not None:
                    if existing[0].get("command") != raw["executor"].get("command") or existing[
                        1
                    ] != ResourceBag.from_json(raw["executor"].get("resources") or []):
                        return (
                            f"ExecutorInfo is not compatible with existing ExecutorInfo of executor {eid}",
                            ResourceBag(),
                            eid,
                        )
                else:
                    consumed = consumed + ResourceBag.from_json(raw["executor"].get("resources") or [])
        except ResourceError as exc:
            return f"Task uses invalid resources: {exc}", ResourceBag(), eid
        if not available.contains(consumed):
            return f"Task uses more resources {consumed} than available {available}", ResourceBag(), eid
        return None, consumed, eid

    def _master_update(
        self, fw: Framework, raw_task: dict[str, Any], state: str, reason: str, message: str
    ) -> None:
        """A master-generated status update (no uuid, so schedulers do not acknowledge it)."""
        status: dict[str, Any] = {
            "task_id": raw_task.get("task_id") or {"value": ""},
            "state": state,
            "reason": reason,
            "source": "SOURCE_MASTER",
            "message": message,
            "timestamp": now(),
        }
        if isinstance(raw_task.get("agent_id"), dict):
            status["agent_id"] = raw_task["agent_id"]
        logger.info("task %s of %s: %s (%s)", status["task_id"].get("value"), fw.id, state, message)
        fw.send({"type": "UPDATE", "update": {"status": status}})

    def kill(self, fw: Framework, task_id: str) -> None:
        task = fw.tasks.get(task_id)
        if task is None:
            # Mesos: unknown task -> reconcile it, so the scheduler learns its state.
            self.reconcile(fw, [(task_id, None)])
            return
        rec = self.registry.agents.get(task.agent_id)
        if rec is not None:
            rec.agent.kill_task(fw.id, task_id)

    def acknowledge(self, fw: Framework, agent_id: str, task_id: str, uuid_b64: str) -> None:
        rec = self.registry.agents.get(agent_id)
        task = fw.tasks.get(task_id)
        if task is not None and task.status_update_uuid == uuid_b64 and is_terminal(task.status_update_state):
            fw.tasks.pop(task_id, None)
            fw.completed_tasks.append(task)
        if rec is None:
            logger.warning("acknowledgement for task %s on unknown agent %s dropped", task_id, agent_id)
            return
        rec.agent.acknowledge(fw.id, task_id, uuid_b64)

    def reconcile(self, fw: Framework, tasks: list[tuple[str, str | None]]) -> None:
        """ "Reconciliation" document: explicit (listed tasks) or implicit (empty list) reconciliation."""
        pa = fw.partition_aware
        statuses = []
        if not tasks:
            for known in fw.tasks.values():
                statuses.append(self._reconcile_status(known.task_id, known.agent_id, known.state, known))
        for tid, aid in tasks:
            task = fw.tasks.get(tid)
            if task is not None:
                statuses.append(self._reconcile_status(tid, task.agent_id, task.state, task))
            elif aid is not None and aid in self.registry.agents:
                statuses.append(self._reconcile_status(tid, aid, "TASK_GONE" if pa else "TASK_LOST"))
            elif aid is not None and aid in self.registry.removed_agent_ids:
                statuses.append(
                    self._reconcile_status(tid, aid, "TASK_GONE_BY_OPERATOR" if pa else "TASK_LOST")
                )
            else:
                statuses.append(self._reconcile_status(tid, aid, "TASK_UNKNOWN" if pa else "TASK_LOST"))
        for status in statuses:
            fw.send({"type": "UPDATE", "update": {"status": status}})

    @staticmethod
    def _reconcile_status(tid: str, aid: str | None, state: str, task: Task | None = None) -> dict[str, Any]:
        status: dict[str, Any] = {
            "task_id": {"value": tid},
            "state": state,
            "source": "SOURCE_MASTER",
            "reason": "REASON_RECONCILIATION",
            "message": "Reconciliation",
            "timestamp": now(),
        }
        if aid is not None:
            status["agent_id"] = {"value": aid}
        if task is not None and task.executor_id:
            status["executor_id"] = {"value": task.executor_id}
        if task is not None and task.last_status and "data" in task.last_status:
            status["data"] = task.last_status["data"]
        return status
