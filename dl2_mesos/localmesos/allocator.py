"""Resource offers: the allocation cycle, refuse filters, suppress/revive and rescinds.

Follows the behaviour of Mesos's hierarchical DRF allocator as the "Scheduler HTTP API" document
describes it for OFFERS/DECLINE/SUPPRESS/REVIVE: every ``allocation_interval`` (and soon after
events that free resources or add frameworks) each agent's unallocated resources are offered, as
one offer, to the active, non-suppressed framework with the smallest dominant share that has no
refuse filter covering them. Agents with GPUs are offered only to frameworks with the
``GPU_RESOURCES`` capability (Mesos's ``--filter_gpu_resources`` default).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

from .protocol import now
from .resources import ResourceBag
from .state import AgentRecord, Framework, MasterRegistry, Offer, RefuseFilter

logger = logging.getLogger(__name__)
MAX_REFUSE_SECONDS = 365 * 86400.0
BATCH_SECONDS = 0.05  # shortest wait between triggered allocation cycles


class Allocator:
    """Creates offers from ``registry`` (the master's); runs as an asyncio task on the master's loop."""

    def __init__(self, registry: MasterRegistry, interval: float) -> None:
        self.registry = registry
        self.interval = interval
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._offer_seq = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="allocator")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def trigger(self) -> None:
        """Run an allocation soon (resources freed, framework added, REVIVE ...)."""
        self._wake.set()

    async def _run(self) -> None:
        # Plain polling instead of wait_for(event): cancelling a wait_for can hang on Python 3.11.
        loop = asyncio.get_running_loop()
        next_cycle = loop.time() + self.interval
        pause = BATCH_SECONDS
        while True:
            await asyncio.sleep(pause)  # also batches bursts of triggers, as the Mesos allocator batches
            if not self._wake.is_set() and loop.time() < next_cycle:
                continue
            self._wake.clear()
            next_cycle = loop.time() + self.interval
            t0 = loop.time()
            try:
                self.allocate()
            except Exception:  # keep offering even if one cycle hits a bug
                logger.exception("allocation cycle failed")
            # a cycle is O(agents + tasks): on a big cluster under a stream of triggers (every
            # DECLINE and terminal update is one) back-to-back cycles would starve the calls
            # and streams on this loop; batch triggers for a few cycles' worth of time instead
            pause = min(self.interval, max(BATCH_SECONDS, 4 * (loop.time() - t0)))

    # ---- accounting -----------------------------------------------------------------------
    def used(self, agent_id: str) -> ResourceBag:
        """Resources of live tasks and executors on an agent."""
        return self.used_by_agent().get(agent_id, ResourceBag())

    def offered(self, agent_id: str) -> ResourceBag:
        total = ResourceBag()
        for oid in self.registry.agents[agent_id].offers:
            total = total + self.registry.offers[oid].resources
        return total

    def available(self, agent: AgentRecord) -> ResourceBag:
        return agent.total - self.used(agent.agent_id) - self.offered(agent.agent_id)

    def used_by_agent(self) -> dict[str, ResourceBag]:
        """Resources of live tasks and executors, per agent: one pass over every framework's tasks
        (a cycle used to rescan all tasks for each agent: O(agents x tasks), seconds at 500 agents)."""
        used: dict[str, ResourceBag] = {}
        for fw in self.registry.frameworks.values():
            for task in fw.tasks.values():
                if task.uses_resources:
                    used[task.agent_id] = used.get(task.agent_id, ResourceBag()) + task.resources
            for agent_id, executors in fw.executors.items():
                for _info, res in executors.values():
                    used[agent_id] = used.get(agent_id, ResourceBag()) + res
        return used

    _SHARE_KINDS = ("cpus", "mem", "gpus")

    def _allocated(self, fw: Framework) -> dict[str, float]:
        """The scalars a framework holds (live tasks plus outstanding offers): all a dominant share
        needs. Summing whole ResourceBags merged every task's port ranges, quadratic in tasks."""
        alloc = dict.fromkeys(self._SHARE_KINDS, 0.0)
        bags = [t.resources for t in fw.tasks.values() if t.uses_resources]
        bags += [self.registry.offers[oid].resources for oid in fw.offers]
        for bag in bags:
            for k in self._SHARE_KINDS:
                alloc[k] += bag.scalar(k)
        return alloc

    def _totals(self) -> dict[str, float]:
        totals = dict.fromkeys(self._SHARE_KINDS, 0.0)
        for agent in self.registry.agents.values():
            for k in self._SHARE_KINDS:
                totals[k] += agent.total.scalar(k)
        return totals

    @classmethod
    def _share_of(cls, alloc: dict[str, float], totals: dict[str, float]) -> float:
        shares = [alloc[k] / totals[k] for k in cls._SHARE_KINDS if totals[k] > 0]
        return max(shares, default=0.0)

    def _share(self, fw: Framework) -> float:
        """``fw``'s dominant share of the cluster (DRF)."""
        return self._share_of(self._allocated(fw), self._totals())

    # ---- the cycle ------------------------------------------------------------------------
    def allocate(self) -> None:
        registry = self.registry
        at = now()
        candidates = [f for f in registry.frameworks.values() if f.connected and not f.suppressed]
        if not candidates:
            return
        totals = self._totals()
        # per-cycle tables, kept up to date as offers are made (same result as recomputing the
        # used resources and dominant shares for every agent, without rescanning every task)
        used = self.used_by_agent()
        allocated = {f.id: self._allocated(f) for f in candidates}
        shares = {fid: self._share_of(a, totals) for fid, a in allocated.items()}
        new_offers: dict[str, list[Offer]] = defaultdict(list)
        for agent in list(registry.agents.values()):
            avail = agent.total - used.get(agent.agent_id, ResourceBag()) - self.offered(agent.agent_id)
            if not avail.allocatable():
                continue
            for fw in sorted(candidates, key=lambda f: (shares[f.id], f.registered_time)):
                if agent.has_gpus and not fw.has_capability("GPU_RESOURCES"):
                    continue
                if fw.filtered(agent.agent_id, avail, at):
                    continue
                new_offers[fw.id].append(self._make_offer(fw, agent, avail))
                for k in self._SHARE_KINDS:
                    allocated[fw.id][k] += avail.scalar(k)
                shares[fw.id] = self._share_of(allocated[fw.id], totals)
                break
        for fid, offers in new_offers.items():
            fw = registry.frameworks[fid]
            fw.send({"type": "OFFERS", "offers": {"offers": [self.offer_json(o) for o in offers]}})
            logger.debug("offered %d offers to %s", len(offers), fid)

    def _make_offer(self, fw: Framework, agent: AgentRecord, resources: ResourceBag) -> Offer:
        self._offer_seq += 1
        offer = Offer(f"{self.registry.master_id}-O{self._offer_seq}", fw.id, agent.agent_id, resources)
        self.registry.offers[offer.offer_id] = offer
        fw.offers.add(offer.offer_id)
        agent.offers.add(offer.offer_id)
        return offer

    def offer_json(self, offer: Offer) -> dict[str, Any]:
        """mesos.proto ``Offer``."""
        registry = self.registry
        agent = registry.agents[offer.agent_id]
        fw = registry.frameworks[offer.framework_id]
        executor_ids = [{"value": eid} for eid in sorted(fw.executors.get(offer.agent_id, {}))]
        return {
            "id": {"value": offer.offer_id},
            "framework_id": {"value": offer.framework_id},
            "agent_id": {"value": offer.agent_id},
            "hostname": agent.hostname,
            "url": {
                "scheme": "http",
                "address": {"hostname": agent.hostname, "ip": agent.agent.host, "port": agent.agent.port},
                "path": "/slave(1)",
            },
            "resources": offer.resources.to_json(allocation_role=fw.role),
            "attributes": agent.agent.attributes_json(),
            "executor_ids": executor_ids,
            "allocation_info": {"role": fw.role},
        }

    # ---- removal --------------------------------------------------------------------------
    def remove_offer(self, offer_id: str, rescind: bool) -> Offer | None:
        """Drop an outstanding offer (its resources become available again)."""
        registry = self.registry
        offer = registry.offers.pop(offer_id, None)
        if offer is None:
            return None
        fw = registry.frameworks.get(offer.framework_id)
        if fw is not None:
            fw.offers.discard(offer_id)
            if rescind:
                fw.send({"type": "RESCIND", "rescind": {"offer_id": {"value": offer_id}}})
        agent = registry.agents.get(offer.agent_id)
        if agent is not None:
            agent.offers.discard(offer_id)
        return offer

    @staticmethod
    def add_filter(fw: Framework, agent_id: str, resources: ResourceBag, refuse_seconds: float) -> None:
        """Install a refuse filter the way the Mesos allocator does for DECLINE / unused ACCEPT resources."""
        if refuse_seconds < 0:
            refuse_seconds = 5.0  # Mesos: negative -> the default, with a warning
        refuse_seconds = min(refuse_seconds, MAX_REFUSE_SECONDS)
        if refuse_seconds == 0 or resources.is_empty():
            return
        fw.filters.setdefault(agent_id, []).append(RefuseFilter(resources, now() + refuse_seconds))
