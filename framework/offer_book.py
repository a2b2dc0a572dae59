"""The offer book: Mesos offers held per agent, their parsed resources, and carving tasks out of them.

An offer is the v1 JSON dict pymesos hands over (``id``, ``agent_id``, ``hostname``,
``resources``: ``[{"name": "cpus", "type": "SCALAR", "scalar": {"value": 4}, "role": ...}]``,
``ports`` as ``RANGES``). Offers of one agent are pooled: a launch on an agent accepts all of
that agent's held offers at once.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from dl2_mesos.resources import Resources

#: refuse_seconds per decline reason: short when we may want the resources soon, long when
#: there is nothing to do (REVIVE clears the filter anyway when work appears).
REFUSE_SECONDS = {
    "idle": 600.0,  # nothing pending; we also SUPPRESS
    "expired": 1.0,  # held too long; give it back briefly so the allocator can re-offer fresh state
    "leftover": 1.0,  # remainder of an accepted offer
    "unusable": 300.0,  # no cpus or mem at all
    "not_leader": 3600.0,
    "suspended": 5.0,  # ZooKeeper blip: we may lead again in a moment
    "rescinded": 0.0,
}

# Metadata copied from an offered resource entry onto the task's resources (same role,
# allocation and reservation as offered; Mesos rejects anything else).
_META_KEYS = ("role", "allocation_info", "reservation", "reservations", "disk", "provider_id")


def offer_id(offer: dict[str, Any]) -> str:
    return offer["id"]["value"]


def agent_id_of(offer: dict[str, Any]) -> str:
    return offer["agent_id"]["value"]


def parse_resources(entries: list[dict[str, Any]]) -> tuple[Resources, list[tuple[int, int]]]:
    """Scalar (cpus, gpus, mem) and the port ranges of a resource list."""
    cpus = gpus = mem = 0.0
    ports: list[tuple[int, int]] = []
    for r in entries or []:
        name = r.get("name")
        if r.get("type", "SCALAR") == "SCALAR" and name in ("cpus", "gpus", "mem"):
            v = float(r.get("scalar", {}).get("value", 0.0))
            if name == "cpus":
                cpus += v
            elif name == "gpus":
                gpus += v
            else:
                mem += v
        elif name == "ports" and r.get("type") == "RANGES":
            for rng in r.get("ranges", {}).get("range", []):
                ports.append((int(rng["begin"]), int(rng["end"])))
    return Resources(cpus, gpus, mem), sorted(ports)


@dataclass
class AgentOffers:
    """All held offers of one agent, with what is still unclaimed in them."""

    agent_id: str
    hostname: str
    offers: dict[str, dict[str, Any]] = field(default_factory=dict)  # offer id -> offer
    received: dict[str, float] = field(default_factory=dict)  # offer id -> time held since
    free: Resources = Resources()
    ports: list[tuple[int, int]] = field(default_factory=list)
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)  # resource name -> metadata
    attributes: tuple[tuple[str, str], ...] = ()

    def add(self, offer: dict[str, Any], now: float) -> None:
        self.offers[offer_id(offer)] = offer
        self.received[offer_id(offer)] = now
        self._recompute()

    def remove(self, oid: str) -> bool:
        if oid not in self.offers:
            return False
        del self.offers[oid]
        del self.received[oid]
        self._recompute()
        return True

    def _recompute(self) -> None:
        total = Resources()
        ports: list[tuple[int, int]] = []
        self.meta = {}
        for o in self.offers.values():
            r, p = parse_resources(o.get("resources", []))
            total = total + r
            ports.extend(p)
            for e in o.get("resources", []):
                self.meta.setdefault(e.get("name"), {k: e[k] for k in _META_KEYS if k in e})
            attrs = []
            for a in o.get("attributes", []) or []:
                val = a.get("text", {}).get("value") if a.get("type") == "TEXT" else a.get("scalar", {}).get("value")
                attrs.append((str(a.get("name")), str(val)))
            self.attributes = tuple(sorted(attrs))
        self.free = total
        self.ports = sorted(ports)

    def oldest(self) -> float:
        return min(self.received.values()) if self.received else 0.0


class OfferBook:
    """Every offer the framework holds, pooled per agent, and the agents' hostnames."""

    def __init__(self) -> None:
        self.agents: dict[str, AgentOffers] = {}  # held offers per agent
        self.hostnames: dict[str, str] = {}  # every agent ever offered (tasks outlive offers)

    def __bool__(self) -> bool:
        return bool(self.agents)

    def add(self, offer: dict[str, Any], now: float) -> None:
        aid = agent_id_of(offer)
        self.hostnames[aid] = offer.get("hostname", aid)
        self.agents.setdefault(aid, AgentOffers(aid, offer.get("hostname", aid))).add(offer, now)

    def get(self, agent_id: str) -> AgentOffers | None:
        return self.agents.get(agent_id)

    def hostname(self, agent_id: str) -> str:
        return self.hostnames.get(agent_id, agent_id)

    def rescind(self, oid: str) -> bool:
        """Forget a rescinded offer; True if it was held."""
        for aid, ag in list(self.agents.items()):
            if ag.remove(oid):
                if not ag.offers:
                    del self.agents[aid]
                return True
        return False

    def forget_agent(self, agent_id: str) -> None:
        self.agents.pop(agent_id, None)

    def take(self, agent_id: str) -> list[str]:
        """Hand over every offer held on ``agent_id`` (to be accepted); returns their ids."""
        return list(self.agents.pop(agent_id).offers)

    def release_all(self) -> list[str]:
        """Forget every held offer (to decline them, or because the connection died with them)."""
        ids = [o for ag in self.agents.values() for o in ag.offers]
        self.agents.clear()
        return ids

    def expire(self, now: float, hold: float) -> list[str]:
        """Forget offers held ``hold`` seconds or longer; returns their ids (to decline)."""
        stale = []
        for aid, ag in list(self.agents.items()):
            for oid, since in list(ag.received.items()):
                if now - since >= hold:
                    ag.remove(oid)
                    stale.append(oid)
            if not ag.offers:
                del self.agents[aid]
        return stale


class OfferClaim:
    """Scratch accounting while matching tasks to one agent's held offers in a round.

    Ports are handed out round-robin per agent (continuing after the last port given on that
    agent, wrapping around), not lowest-first: a port a finished task has just released may sit
    in TIME_WAIT, and a new MXNet scheduler that gets it straight back cannot bind it.
    """

    #: agent id -> last port handed out there (only the loop thread uses claims)
    _cursor: dict[str, int] = {}

    def __init__(self, agent: AgentOffers) -> None:
        self.agent = agent
        self.free = agent.free
        self._ports = [list(r) for r in agent.ports]  # mutable [begin, end] ranges

    def checkpoint(self) -> tuple[Resources, list[list[int]]]:
        """What is still free, to :meth:`rollback` to if a later claim of the same round fails."""
        return self.free, [list(r) for r in self._ports]

    def rollback(self, checkpoint: tuple[Resources, list[list[int]]]) -> None:
        self.free, self._ports = checkpoint[0], [list(r) for r in checkpoint[1]]

    def _pick(self, n: int) -> list[int]:
        """The first ``n`` free ports after this agent's cursor, wrapping around."""
        last = self._cursor.get(self.agent.agent_id, -1)
        got: list[int] = []
        for lo_bound in (last + 1, None):  # ports after the cursor, then from the start
            for b, e in self._ports:
                lo = b if lo_bound is None else max(b, lo_bound)
                hi = e if lo_bound is None else e
                if lo_bound is None:
                    hi = min(e, last)
                p = lo
                while p <= hi and len(got) < n:
                    got.append(p)
                    p += 1
                if len(got) == n:
                    return got
        return got

    def take(self, demand: Resources, num_ports: int) -> list[int] | None:
        """Claim ``demand`` and ``num_ports`` ports; None (no change) if they are not there."""
        if not demand.fits_in(self.free):
            return None
        avail = sum(e - b + 1 for b, e in self._ports)
        if avail < num_ports:
            return None
        got: list[int] = []
        if num_ports:
            got = self._pick(num_ports)
            taken = set(got)
            remaining: list[list[int]] = []
            for b, e in self._ports:
                start = b
                for p in sorted(q for q in taken if b <= q <= e):
                    if p > start:
                        remaining.append([start, p - 1])
                    start = p + 1
                if start <= e:
                    remaining.append([start, e])
            self._ports = remaining
            self._cursor[self.agent.agent_id] = got[-1]
        self.free = self.free - demand
        return got


def _copy_meta(meta: dict[str, Any]) -> dict[str, Any]:
    # role is a string; allocation_info / reservations are small nested JSON: copy one level deep
    # (deepcopy was a hot spot when launching thousands of tasks)
    return {k: (copy.deepcopy(v) if isinstance(v, (dict, list)) else v) for k, v in meta.items()}


def scalar(name: str, value: float, meta: dict[str, Any]) -> dict[str, Any]:
    d = {"name": name, "type": "SCALAR", "scalar": {"value": round(value, 6)}}
    d.update(_copy_meta(meta))
    return d


def task_resources(demand: Resources, ports: list[int], meta: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Mesos resource list for a task: cpus, mem, gpus (when > 0) and its ports."""
    out = [scalar("cpus", demand.cpus, meta.get("cpus", {})), scalar("mem", demand.mem, meta.get("mem", {}))]
    if demand.gpus > 0:
        out.append(scalar("gpus", demand.gpus, meta.get("gpus", {})))
    if ports:
        d = {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": p, "end": p} for p in ports]}}
        d.update(_copy_meta(meta.get("ports", {})))
        out.append(d)
    return out


def decline_filters(reason: str) -> dict[str, float]:
    return {"refuse_seconds": REFUSE_SECONDS.get(reason, 5.0)}
