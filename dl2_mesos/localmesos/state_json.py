"""The master's read-only endpoints as JSON shaped like Mesos's: ``/master/state`` and the parts of
it that Mesos also serves alone (``/master/frameworks``, ``/master/slaves``, ``/master/tasks``), plus
``/metrics/snapshot`` and ``/flags``. Only fields Mesos has appear (GPU indices are the agent's
business: its ``/state`` lists ``free_gpus``; suppression shows as a per-framework metric)."""

from __future__ import annotations

from typing import Any

from .master import BUILD_USER, MESOS_API_VERSION, Master
from .protocol import now
from .resources import ResourceBag
from .state import Framework


def version_json() -> dict[str, Any]:
    """``GET /version`` (pymesos reads ``version``)."""
    return {
        "version": MESOS_API_VERSION,
        "build_user": BUILD_USER,
        "build_date": "",
        "build_time": 0,
        "git_sha": "",
        "git_tag": "",
    }


def _framework_json(master: Master, fw: Framework, active: bool) -> dict[str, Any]:
    used = ResourceBag()
    for task in fw.tasks.values():
        if task.uses_resources:
            used = used + task.resources
    for execs in fw.executors.values():
        for _info, res in execs.values():
            used = used + res
    offered = ResourceBag()
    for oid in fw.offers:
        offered = offered + master.offers[oid].resources
    info = fw.info
    executors = [
        {
            "executor_id": eid,
            "agent_id": aid,
            "slave_id": aid,
            "resources": res.summary(),
            "name": einfo.get("name", ""),
        }
        for aid, execs in fw.executors.items()
        for eid, (einfo, res) in execs.items()
    ]
    return {
        "id": fw.id,
        "name": info.get("name"),
        "user": info.get("user"),
        "hostname": info.get("hostname", ""),
        "webui_url": info.get("webui_url", ""),
        "role": fw.role,
        "roles": info.get("roles") or [fw.role],
        "principal": info.get("principal"),
        "checkpoint": bool(info.get("checkpoint")),
        "failover_timeout": fw.failover_timeout,
        "capabilities": [c.get("type") for c in info.get("capabilities") or [] if isinstance(c, dict)],
        # Mesos: a framework that suppressed offers stays active (it is still subscribed).
        "active": active and fw.connected,
        "connected": fw.connected,
        "recovered": fw.recovered,
        "registered_time": fw.registered_time,
        "reregistered_time": fw.reregistered_time,
        "unregistered_time": fw.unregistered_time or 0,
        "used_resources": used.summary(),
        "offered_resources": offered.summary(),
        "resources": (used + offered).summary(),
        "tasks": [t.to_json() for t in fw.tasks.values()],
        "completed_tasks": [t.to_json() for t in fw.completed_tasks],
        "offers": [
            {
                "id": o,
                "framework_id": fw.id,
                "slave_id": master.offers[o].agent_id,
                "resources": master.offers[o].resources.summary(),
            }
            for o in sorted(fw.offers)
        ],
        "executors": executors,
    }


def slaves_json(master: Master) -> list[dict[str, Any]]:
    """The ``slaves`` array of ``/master/state`` and ``/master/slaves``."""
    slaves = []
    used_by_agent = master.allocator.used_by_agent()  # one pass over the tasks, not one per agent
    for rec in master.agents.values():
        used = used_by_agent.get(rec.agent_id, ResourceBag())
        offered = master.allocator.offered(rec.agent_id)
        agent = rec.agent
        slaves.append(
            {
                "id": rec.agent_id,
                "pid": f"slave(1)@{agent.host}:{agent.port}",
                "hostname": agent.hostname,
                "port": agent.port,
                "registered_time": rec.registered_time,
                "reregistered_time": rec.reregistered_time,
                "resources": rec.total.summary(),
                "used_resources": used.summary(),
                "offered_resources": offered.summary(),
                "unreserved_resources": rec.total.summary(),
                "reserved_resources": {},
                "attributes": dict(agent.config.attributes),
                "active": True,
                "version": MESOS_API_VERSION,
                "capabilities": ["MULTI_ROLE", "HIERARCHICAL_ROLE", "RESERVATION_REFINEMENT"],
            }
        )
    return slaves


def frameworks_json(master: Master) -> dict[str, Any]:
    """``GET /master/frameworks``."""
    return {
        "frameworks": [_framework_json(master, fw, True) for fw in master.frameworks.values()],
        "completed_frameworks": [_framework_json(master, fw, False) for fw in master.completed_frameworks],
        "unregistered_frameworks": [],
    }


def flags_json(master: Master, zk: str | None = None) -> dict[str, str]:
    """The master's flags as strings (Mesos's ``/flags`` and the ``flags`` of ``/master/state``)."""
    c = master.config
    return {
        "hostname": c.hostname,
        "ip": c.host,
        "port": str(c.port),
        "registry": "in_memory",
        "zk": zk or "",
        "quorum": "1",
        "allocation_interval": f"{master.allocator.interval:g}secs",
        "local_stand_in": "true",
    }


def master_state_json(master: Master, zk: str | None = None) -> dict[str, Any]:
    info = master.master_info()
    slaves = slaves_json(master)
    return {
        **version_json(),
        "id": master.id,
        "pid": info["pid"],
        "hostname": info["hostname"],
        "start_time": master.start_time,
        "elected_time": master.start_time,
        "activated_slaves": len(slaves),
        "deactivated_slaves": 0,
        "unreachable_slaves": 0,
        "leader": info["pid"],
        "leader_info": info,
        "flags": flags_json(master, zk),
        "slaves": slaves,
        "orphan_tasks": [],
        **frameworks_json(master),
    }


TASK_ORDER = ("asc", "des")


def tasks_json(master: Master, *, limit: int = 100, offset: int = 0, order: str = "des",
               framework_id: str | None = None, task_id: str | None = None) -> dict[str, Any]:
    """``GET /master/tasks``: live and completed tasks of every framework, newest first by default
    (``order=asc|des`` on the task's first status time), paged by ``limit`` and ``offset``."""
    tasks = []
    for fw in list(master.frameworks.values()) + list(master.completed_frameworks):
        if framework_id and fw.id != framework_id:
            continue
        for t in list(fw.tasks.values()) + list(fw.completed_tasks):
            if task_id and t.task_id != task_id:
                continue
            tasks.append(t.to_json())

    def started(t: dict[str, Any]) -> float:
        stamps = [s.get("timestamp", 0.0) for s in t.get("statuses") or [] if isinstance(s, dict)]
        return min(stamps) if stamps else 0.0

    tasks.sort(key=started, reverse=order == "des")
    return {"tasks": tasks[offset : offset + limit]}


def metrics_json(master: Master) -> dict[str, float]:
    """``GET /metrics/snapshot``: the master's main gauges and counters under Mesos's names."""
    out: dict[str, float] = {
        "master/elected": 1.0,
        "master/uptime_secs": max(0.0, now() - master.start_time),
        "master/slaves_active": float(len(master.agents)),
        "master/slaves_connected": float(len(master.agents)),
        "master/slaves_disconnected": 0.0,
        "master/slaves_inactive": 0.0,
        "master/outstanding_offers": float(len(master.offers)),
    }
    fws = list(master.frameworks.values())
    out["master/frameworks_active"] = float(sum(1 for f in fws if f.connected))
    out["master/frameworks_connected"] = out["master/frameworks_active"]
    out["master/frameworks_disconnected"] = float(sum(1 for f in fws if not f.connected))
    out["master/frameworks_inactive"] = out["master/frameworks_disconnected"]
    counts: dict[str, int] = {}
    for fw in fws + list(master.completed_frameworks):
        for t in list(fw.tasks.values()) + list(fw.completed_tasks):
            counts[t.state] = counts.get(t.state, 0) + 1
    for state in ("STAGING", "STARTING", "RUNNING", "KILLING", "FINISHED", "FAILED", "KILLED", "LOST",
                  "ERROR", "DROPPED", "UNREACHABLE", "GONE"):
        out[f"master/tasks_{state.lower()}"] = float(counts.get(f"TASK_{state}", 0))
    total = ResourceBag()
    for rec in master.agents.values():
        total = total + rec.total
    used = ResourceBag()
    for bag in master.allocator.used_by_agent().values():
        used = used + bag
    for name in ("cpus", "mem", "disk", "gpus"):
        t, u = total.scalar(name), used.scalar(name)
        out[f"master/{name}_total"] = t
        out[f"master/{name}_used"] = u
        out[f"master/{name}_percent"] = u / t if t else 0.0
    for fw in fws:  # Mesos's per-framework metric: 1 while the framework suppresses offers for a role
        name = (fw.info.get("name") or "").replace("/", "%2F")
        out[f"master/frameworks/{name}/{fw.id}/roles/{fw.role}/suppressed"] = 1.0 if fw.suppressed else 0.0
    return out
