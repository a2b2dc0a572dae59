"""``GET /master/state``: the master's state as JSON shaped like Mesos's ``/master/state`` endpoint."""

from __future__ import annotations

from typing import Any

from .master import BUILD_USER, MESOS_API_VERSION, Master
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
        "active": active and fw.connected and not fw.suppressed,
        "connected": fw.connected,
        "recovered": fw.recovered,
        "suppressed": fw.suppressed,
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


def master_state_json(master: Master, zk: str | None = None) -> dict[str, Any]:
    info = master.master_info()
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
                "free_gpu_indices": list(agent.gpu_free),
            }
        )
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
        "flags": {
            "registry": "in_memory",
            "zk": zk or "",
            "allocation_interval": f"{master.allocator.interval:g}secs",
            "local_stand_in": "true",
        },
        "slaves": slaves,
        "agents": slaves,
        "frameworks": [_framework_json(master, fw, True) for fw in master.frameworks.values()],
        "completed_frameworks": [_framework_json(master, fw, False) for fw in master.completed_frameworks],
        "orphan_tasks": [],
        "unregistered_frameworks": [],
    }
