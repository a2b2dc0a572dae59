"""Bounded histories the status page and ``GET /api/v1/history`` show.

The scheduler core owns one :class:`History` and updates it on the loop thread: after every
slot decision (:meth:`History.record_slot`: the allocation per job, the utilisation of the
cluster, the decision's latency and what it changed) and for every accepted
:class:`~dl2_mesos.messages.RescaleReport` (:meth:`History.record_rescale`: the executor's
measured phase times). Records are plain dicts that are never mutated once appended, so
:meth:`History.snapshot` can hand out shallow copies to the API thread without locks.
Only the last ``max_slots`` slots and ``max_rescales`` rescale reports are kept.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from dl2_mesos.resources import Resources

DEFAULT_MAX_SLOTS = 200
DEFAULT_MAX_RESCALES = 200

#: The executor's rescale phases in the order they happen (``total`` excludes ``save``, which
#: overlaps ``stop``); ``wait_checkpoint`` replaces save/upload on executors whose workers restore a checkpoint
#: worker 0 saved elsewhere.
RESCALE_PHASES = ("stop", "save", "upload", "wait_checkpoint", "download", "relaunch", "first_batch", "total")


def _res(r: Resources) -> dict[str, float]:
    return {"cpus": round(float(r.cpus), 4), "gpus": round(float(r.gpus), 4), "mem": round(float(r.mem), 1)}


class History:
    """Per-slot and per-rescale records, bounded (oldest dropped first).

    Args:
        max_slots: slots kept (decisions, allocations, utilisation).
        max_rescales: rescale reports kept.
    """

    def __init__(self, max_slots: int = DEFAULT_MAX_SLOTS, max_rescales: int = DEFAULT_MAX_RESCALES) -> None:
        if max_slots < 1 or max_rescales < 1:
            raise ValueError("history bounds must be at least 1")
        self.max_slots = max_slots
        self.max_rescales = max_rescales
        self._slots: deque[dict[str, Any]] = deque(maxlen=max_slots)
        self._rescales: deque[dict[str, Any]] = deque(maxlen=max_rescales)

    def record_slot(self, state: Any, decision: dict[str, Any]) -> dict[str, Any]:
        """Record one slot decision.

        Args:
            state: the :class:`~dl2_mesos.cluster.ClusterState` the policy decided on (its jobs'
                counts and its tasks are what ran until this decision; its agents' ``available`` is
                what the framework knew of: held offers plus its own tasks).
            decision: the core's ``last_decision`` (slot, at, policy_seconds, round_seconds,
                allocation, granted, reward).

        Returns the stored record.
        """
        granted = {k: list(v) for k, v in (decision.get("granted") or {}).items()}
        jobs: dict[str, dict[str, Any]] = {}
        changes = []
        for j in state.jobs:
            now_ps, now_w = int(j.num_ps), int(j.num_workers)
            to = granted.get(j.job_id, [0, 0])
            jobs[j.job_id] = {"ps": int(to[0]), "workers": int(to[1]), "running_ps": now_ps,
                              "running_workers": now_w, "epochs_done": round(float(j.epochs_done), 4)}
            if [now_ps, now_w] != [int(to[0]), int(to[1])]:
                changes.append({"job_id": j.job_id, "from": [now_ps, now_w], "to": [int(to[0]), int(to[1])]})
        allocated = Resources()
        for t in state.tasks:
            allocated = allocated + t.resources
        known = Resources()
        for a in state.agents:
            known = known + a.available
        record = {
            "slot": int(decision.get("slot", state.slot)),
            "at": float(decision.get("at", 0.0)),
            "policy_seconds": decision.get("policy_seconds"),
            "round_seconds": decision.get("round_seconds"),
            "reward": decision.get("reward"),
            "jobs": jobs,
            "changes": changes,
            "utilisation": {"allocated": _res(allocated), "known": _res(known),
                            "offered": _res(_minus(known, allocated)), "agents": len(state.agents),
                            # the cluster's capacity then (the master's agent list, else agents seen in offers)
                            "capacity": decision.get("capacity")},
        }
        self._slots.append(record)
        return record

    def record_rescale(self, job_id: str, executor_id: str, report: Any, at: float) -> dict[str, Any]:
        """Record one executor's :class:`~dl2_mesos.messages.RescaleReport` (its measured phases)."""
        phases: dict[str, float] = {}
        for name, seconds in report.phases:
            phases[str(name)] = phases.get(str(name), 0.0) + round(float(seconds), 4)
        record = {"at": float(at), "job_id": job_id, "executor_id": executor_id, "task_id": report.task_id,
                  "generation": int(report.generation), "ok": bool(report.ok), "reason": report.reason,
                  "phases": phases}
        self._rescales.append(record)
        return record

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy for the API thread (the records themselves are never mutated)."""
        return {"max_slots": self.max_slots, "max_rescales": self.max_rescales,
                "slots": list(self._slots), "rescales": list(self._rescales)}

    def __len__(self) -> int:
        return len(self._slots)


def _minus(a: Resources, b: Resources) -> Resources:
    """``a - b`` clamped at zero per dimension (rounding must not show negative free space)."""
    return Resources(max(0.0, a.cpus - b.cpus), max(0, a.gpus - b.gpus), max(0.0, a.mem - b.mem))
