"""What the cluster holds in all, as the framework can know it: every agent's total resources.

A Mesos framework only sees the resources it is *offered* (plus its own tasks), so held offers
alone understate the cluster (a 24-CPU cluster showed "0 of 16 cpus" while offers were out).
Two sources, best first:

* the master's agent list (``GET /master/slaves``, the ``slaves`` of ``/master/state``: each
  agent's ``resources`` in all, ``used_resources`` by every framework, ``offered_resources``),
  read by :mod:`dl2_mesos.framework.master_inventory` and handed to the loop as an event;
* agents seen in offers: the most an agent has ever offered plus what dl2 ran there at the same
  time (a lower bound; used until the master answers, or where it cannot be asked).

The loop thread owns the :class:`CapacityBook`; the API reads its :meth:`CapacityBook.snapshot`
from the published view, e.g. to refuse a job whose single task no agent could ever hold
(:func:`unfit_reason`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dl2_mesos.jobs import JobSpec
from dl2_mesos.resources import Resources

UNITS = {"cpus": "cpus", "gpus": "gpus", "mem": "MiB"}


@dataclass(frozen=True)
class AgentCapacity:
    """One agent as the master reports it (``used``/``offered`` cover every framework)."""

    agent_id: str
    hostname: str
    total: Resources
    used: Resources = Resources()
    offered: Resources = Resources()
    active: bool = True


def fmt(r: Resources | Mapping[str, Any]) -> str:
    """``2 cpus, 1 gpu, 8 GiB``: a demand or an amount as people read it."""
    d = r.to_dict() if isinstance(r, Resources) else dict(r)
    cpus, gpus, mem = float(d.get("cpus", 0) or 0), float(d.get("gpus", 0) or 0), float(d.get("mem", 0) or 0)
    mem_s = f"{mem / 1024:g} GiB" if mem >= 1024 else f"{mem:g} MiB"
    return f"{cpus:g} cpus, {gpus:g} gpu{'' if gpus == 1 else 's'}, {mem_s}"


class CapacityBook:
    """Agents' totals from the master (when it answered) or estimated from offers; lost agents."""

    def __init__(self) -> None:
        self.from_master: dict[str, AgentCapacity] = {}
        self.master_at: float | None = None  # when the master's list was last read
        self.master: str = ""  # the master address it was read from
        self.master_error: str = ""
        self.estimated: dict[str, AgentCapacity] = {}  # from offers + dl2's tasks (lower bounds)
        self.lost: dict[str, tuple[str, float, tuple[str, ...]]] = {}  # agent -> (hostname, at, jobs hit)

    # -- updates (loop thread) ----------------------------------------------------------------
    def master_agents(self, agents: Iterable[AgentCapacity], master: str, at: float) -> None:
        """The master's current agent list (agents missing from it are gone)."""
        self.from_master = {a.agent_id: a for a in agents if a.active}
        self.master, self.master_at, self.master_error = master, at, ""
        for aid in self.from_master:
            self.lost.pop(aid, None)

    def master_failed(self, master: str, error: str) -> None:
        """The master could not be asked; the last list (if any) stays, marked with its age."""
        self.master, self.master_error = master, error[:300]

    def observe(self, agent_id: str, hostname: str, offered: Resources, dl2_used: Resources) -> None:
        """An agent's held offers and dl2's tasks on it: its capacity is at least their sum."""
        seen = offered + dl2_used
        old = self.estimated.get(agent_id)
        if old is not None:
            seen = Resources(max(seen.cpus, old.total.cpus), max(seen.gpus, old.total.gpus),
                             max(seen.mem, old.total.mem))
        self.estimated[agent_id] = AgentCapacity(agent_id, hostname, seen)

    def agent_lost(self, agent_id: str, hostname: str, at: float, jobs_hit: Sequence[str]) -> None:
        self.from_master.pop(agent_id, None)
        self.estimated.pop(agent_id, None)
        self.lost[agent_id] = (hostname, at, tuple(jobs_hit))

    # -- reading ------------------------------------------------------------------------------
    def agents(self) -> list[AgentCapacity]:
        """Every known agent: the master's, plus agents only seen in offers (newer than its list)."""
        out = dict(self.estimated)
        out.update(self.from_master)
        return [out[k] for k in sorted(out)]

    @property
    def source(self) -> str:
        if self.from_master:
            return "master"
        return "offers" if self.estimated else "none"

    def snapshot(self) -> dict[str, Any]:
        """JSON for the view: agents with totals, the sum, where it came from."""
        agents = self.agents()
        total = Resources()
        used = Resources()
        for a in agents:
            total = total + a.total
            used = used + a.used
        return {
            "source": self.source, "master": self.master, "master_read_at": self.master_at,
            "master_error": self.master_error,
            "agents": [{"agent_id": a.agent_id, "hostname": a.hostname, "total": a.total.to_dict(),
                        "used": a.used.to_dict() if a.agent_id in self.from_master else None,
                        "offered": a.offered.to_dict() if a.agent_id in self.from_master else None,
                        "from": "master" if a.agent_id in self.from_master else "offers"} for a in agents],
            "total": total.to_dict(),
            "used_all_frameworks": used.to_dict() if self.from_master else None,
            "lost_agents": [{"agent_id": aid, "hostname": h, "at": at, "jobs": list(jobs)}
                            for aid, (h, at, jobs) in sorted(self.lost.items(), key=lambda x: x[1][1])][-20:],
        }


def _res(d: Any) -> Resources:
    try:
        return Resources.from_dict(d) if isinstance(d, dict) else Resources()
    except (TypeError, ValueError, KeyError):
        return Resources()


_agents_memo: tuple[Any, tuple[tuple[str, str, Resources], ...]] = (None, ())


def agents_of(snapshot: Mapping[str, Any] | None) -> tuple[tuple[str, str, Resources], ...]:
    """(agent id, hostname, total) of every agent in a :meth:`CapacityBook.snapshot`.

    Published snapshots are never mutated, so the answer for the latest one is kept: every
    submission checks its spec against the same published agent list (parsing 500 agents per
    submission was a tenth of the framework's CPU during a burst).
    """
    global _agents_memo
    listed = (snapshot or {}).get("agents") or []
    memo = _agents_memo  # one read: another thread may replace it meanwhile
    if memo[0] is listed and listed:  # the memo holds the list, so its identity cannot be reused
        return memo[1]
    out = tuple((str(a.get("agent_id", "")), str(a.get("hostname", "")), _res(a.get("total")))
                for a in listed if isinstance(a, dict))
    _agents_memo = (listed, out)
    return out


def _short_of(demand: Resources, have: Resources) -> list[str]:
    return [k for k in UNITS if getattr(demand, k) > getattr(have, k) + 1e-9]


def unfit_reason(spec: JobSpec, agents: Sequence[tuple[str, str, Resources]], overhead: Resources) -> dict[str, Any] | None:
    """Why no known agent could ever hold one task of ``spec`` (None: some agent could, or no
    agent is known at all).

    A task needs its demand plus the executor's own share (``overhead``, charged once per job and
    agent). Returns ``{"error", "field", "rule", "resource", "largest_agent"}`` for a 422 answer.
    """
    if not agents:
        return None
    roles = [("worker", spec.worker)] + ([("ps", spec.ps)] if spec.min_ps > 0 else [])
    for role, demand in roles:
        assert demand is not None
        need = demand + overhead
        if any(need.fits_in(total) for _aid, _h, total in agents):
            continue
        # name the resource: the one that the agent closest to fitting lacks
        best = min(agents, key=lambda a: (len(_short_of(need, a[2])), -a[2].cpus, -a[2].gpus, -a[2].mem))
        lacking = _short_of(need, best[2])
        res = lacking[0] if lacking else "cpus"
        biggest = max(agents, key=lambda a: (getattr(a[2], res), a[2].cpus, a[2].mem))
        have = getattr(biggest[2], res)
        unit = UNITS[res]
        parts = f"{fmt(demand)} plus {fmt(overhead)} for the executor" if not overhead.is_zero() else fmt(demand)
        msg = (f"no known agent can ever hold one {role} of this job: a {role} needs {getattr(need, res):g} {unit}"
               f" ({parts}), the largest agent "
               f"{biggest[1] or biggest[0]} has {have:g} {unit} in all ({len(agents)} agent"
               f"{'' if len(agents) == 1 else 's'} known)")
        if len(lacking) > 1:
            msg += f"; {', '.join(lacking[1:])} too short on that agent as well"
        return {"error": msg, "field": f"{role}.{res}", "rule": "fits no agent", "resource": res,
                "largest_agent": {"agent_id": biggest[0], "hostname": biggest[1], "total": biggest[2].to_dict()}}
    # the job's minimum size must fit the whole cluster at least
    total = Resources()
    for _aid, _h, t in agents:
        total = total + t
    assert spec.worker is not None and spec.ps is not None
    minimum = spec.worker.scale(spec.min_workers) + spec.ps.scale(spec.min_ps)
    if not minimum.fits_in(total):
        res = _short_of(minimum, total)[0]
        return {"error": f"the job's minimum ({spec.min_workers} workers, {spec.min_ps} PS) needs "
                         f"{getattr(minimum, res):g} {UNITS[res]} but all {len(agents)} known agents together have "
                         f"{getattr(total, res):g} {UNITS[res]}", "field": "min_workers", "rule": "fits no cluster",
                "resource": res, "largest_agent": None}
    return None


def submission_refusal(spec: JobSpec, cluster: Mapping[str, Any]) -> dict[str, Any] | None:
    """The 422 answer for a job no known agent could ever hold one task of (None: accept).

    ``cluster`` is the published view's cluster section (its ``capacity`` and
    ``executor_overhead``). With no agent known yet (a framework that just started has seen no
    offer and may not have read the master's agent list) the job is accepted: agents may still
    register, and refusing then would turn every submission made at start-up into an error. Such
    a job shows the reason ``no_agents``, or ``fits_no_agent`` once agents are known. Only the
    master's agent list can refuse a job (see the comment below).
    """
    capacity = cluster.get("capacity") or {}
    if capacity.get("source") != "master":
        # agents seen only in offers: their capacities are lower bounds (another framework may hold
        # the rest), so they can show that a job fits but never that it cannot; such a job waits
        # with the reason ``fits_no_agent`` instead
        return None
    agents = agents_of(capacity)
    if not agents:
        return None
    over = cluster.get("executor_overhead") or {}
    overhead = Resources(float(over.get("cpus", 0) or 0), 0.0, float(over.get("mem", 0) or 0))
    return unfit_reason(spec, agents, overhead)
