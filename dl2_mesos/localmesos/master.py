"""The local master: framework lifecycle, task launch, status updates, reconciliation, agents.

Behaviour follows Apache Mesos 1.x's master as described in its "Scheduler HTTP API" document
(calls and events), "Reconciliation" and "High Availability Framework Guide" (failover
timeout, partition awareness) and the messages of ``mesos/v1/scheduler/scheduler.proto``.
Everything here runs on one asyncio loop, so no locking is needed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from .master_tasks import TaskCalls
from .allocator import Allocator
from .protocol import CallError, SchedulerCall, is_terminal, now
from .recordio import EventStream
from .state import COMPLETED_FRAMEWORKS_KEPT, AgentLink, AgentRecord, Framework, MasterRegistry, Offer

logger = logging.getLogger(__name__)

# /version reports a Mesos 1.x version so pymesos adds the GPU_RESOURCES capability (it parses the
# string as dotted integers); build_user says what actually answers.
MESOS_API_VERSION = "1.11.0"
BUILD_USER = "dl2-mesos localmesos (a Mesos-API-compatible test stand-in, not Apache Mesos)"


@dataclass(frozen=True)
class MasterConfig:
    host: str = "127.0.0.1"
    port: int = 5050
    hostname: str = "127.0.0.1"
    heartbeat_interval: float = 15.0  # Mesos DEFAULT_HEARTBEAT_INTERVAL
    allocation_interval: float = 1.0  # Mesos --allocation_interval default


def _ip_as_uint32(ip: str) -> int:
    try:
        return struct.unpack("<I", socket.inet_aton(ip))[0]
    except OSError:
        return 0


class Master:
    """One master instance. A "restart" replaces it with a fresh instance (new id, empty state).

    Its state is a :class:`MasterRegistry` shared with the :class:`Allocator` (offers) and
    :class:`TaskCalls` (ACCEPT, KILL, ACKNOWLEDGE, RECONCILE).
    """

    def __init__(self, config: MasterConfig) -> None:
        self.config = config
        self.id = str(uuid.uuid4())
        self.start_time = now()
        self.registry = MasterRegistry(self.id)
        self.completed_frameworks: deque[Framework] = deque(maxlen=COMPLETED_FRAMEWORKS_KEPT)
        self.removed_framework_ids: set[str] = set()
        self.allocator = Allocator(self.registry, config.allocation_interval)
        self.task_calls = TaskCalls(self.registry, self.allocator)
        self._framework_seq = 0
        self._agent_seq = 0
        self.running = False

    @property
    def frameworks(self) -> dict[str, Framework]:
        return self.registry.frameworks

    @property
    def agents(self) -> dict[str, AgentRecord]:
        return self.registry.agents

    @property
    def offers(self) -> dict[str, Offer]:
        return self.registry.offers

    @property
    def removed_agent_ids(self) -> set[str]:
        return self.registry.removed_agent_ids

    def is_registered(self, agent_id: str) -> bool:
        return agent_id in self.registry.agents

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.running = True
        self.allocator.start()

    async def stop(self) -> None:
        """Stop this instance: close every scheduler stream (schedulers see the master go away)."""
        self.running = False
        await self.allocator.stop()
        for fw in self.frameworks.values():
            if fw.failover_handle:
                fw.failover_handle.cancel()
            if fw.stream:
                stream, fw.stream = fw.stream, None
                stream.close()

    def master_info(self) -> dict[str, Any]:
        """mesos.proto ``MasterInfo`` (also what is written to ZooKeeper as ``json.info_*``)."""
        c = self.config
        return {
            "id": self.id,
            "ip": _ip_as_uint32(c.host),
            "port": c.port,
            "pid": f"master@{c.host}:{c.port}",
            "hostname": c.hostname,
            "version": MESOS_API_VERSION,
            "address": {"hostname": c.hostname, "ip": c.host, "port": c.port},
            "capabilities": [{"type": "AGENT_UPDATE"}],
        }

    # ---- SUBSCRIBE (scheduler.proto Call.Subscribe, "Scheduler HTTP API" SUBSCRIBE) -----------
    def subscribe(self, call: SchedulerCall, raw_info: dict[str, Any]) -> EventStream:
        info = dict(raw_info)
        fid = call.framework_id.value if call.framework_id else (info.get("id") or {}).get("value")
        stream = EventStream(self.config.heartbeat_interval, name=f"scheduler:{fid or 'new'}")
        if fid and fid in self.removed_framework_ids:
            # Mesos: a removed framework cannot come back.
            stream.send({"type": "ERROR", "error": {"message": "Framework has been removed"}})
            stream.close()
            return stream
        if not fid:
            self._framework_seq += 1
            fid = f"{self.id}-{self._framework_seq:04d}"
        info["id"] = {"value": fid}
        fw = self.frameworks.get(fid)
        if fw is None:
            fw = Framework(id=fid, info=info)
            self.frameworks[fid] = fw
            logger.info("framework %s (%s) subscribed", fid, info.get("name"))
        else:
            # Failover: a re-subscribing scheduler takes over the framework and its tasks.
            if fw.stream is not None and not fw.stream.closed:
                old, fw.stream = fw.stream, None
                old.send({"type": "ERROR", "error": {"message": "Framework failed over"}})
                old.close()
            if fw.failover_handle:
                fw.failover_handle.cancel()
                fw.failover_handle = None
            fw.info = info
            fw.recovered = False
            fw.reregistered_time = now()
            for oid in list(fw.offers):  # the new scheduler does not know the old offers
                self.allocator.remove_offer(oid, rescind=False)
            for rec in self.agents.values():
                rec.agent.update_framework(fid, info)
            logger.info("framework %s re-subscribed (failover)", fid)
        fw.suppressed = bool(call.subscribe and call.subscribe.suppressed_roles)
        fw.unregistered_time = None
        fw.stream = stream
        framework_id = fid
        stream.on_close(lambda s: self._stream_closed(framework_id, s))
        stream.send(
            {
                "type": "SUBSCRIBED",
                "subscribed": {
                    "framework_id": {"value": fid},
                    "heartbeat_interval_seconds": self.config.heartbeat_interval,
                    "master_info": self.master_info(),
                },
            }
        )
        self.allocator.trigger()
        return stream

    def _stream_closed(self, fid: str, stream: EventStream) -> None:
        fw = self.frameworks.get(fid)
        if fw is None or fw.stream is not stream or not self.running:
            return
        fw.stream = None
        fw.unregistered_time = now()
        for oid in list(fw.offers):
            self.allocator.remove_offer(oid, rescind=True)
        timeout = fw.failover_timeout
        logger.info("framework %s disconnected; failover timeout %.1fs", fid, timeout)
        loop = asyncio.get_running_loop()
        fw.failover_handle = loop.call_later(timeout, self._failover_expired, fid, stream)

    def _failover_expired(self, fid: str, stream: EventStream) -> None:
        fw = self.frameworks.get(fid)
        if fw is None or fw.connected:
            return
        logger.info("framework %s did not re-subscribe within its failover timeout; removing it", fid)
        self.remove_framework(fw)

    def disconnect_framework(self, fid: str) -> bool:
        """Fault injection: close a framework's event stream as if the connection broke."""
        fw = self.frameworks.get(fid)
        if fw is None or fw.stream is None:
            return False
        fw.stream.abort()
        return True

    def remove_framework(self, fw: Framework) -> None:
        """TEARDOWN or failover timeout: kill all tasks, shut down executors, forget the framework."""
        if fw.failover_handle:
            fw.failover_handle.cancel()
            fw.failover_handle = None
        for oid in list(fw.offers):
            self.allocator.remove_offer(oid, rescind=False)
        for rec in self.agents.values():
            rec.agent.shutdown_framework(fw.id)
        for task in list(fw.tasks.values()):
            if not is_terminal(task.state):
                task.state = "TASK_KILLED"
                task.statuses.append({"state": "TASK_KILLED", "timestamp": now()})
            fw.completed_tasks.append(task)
        fw.tasks.clear()
        fw.executors.clear()
        self.frameworks.pop(fw.id, None)
        self.removed_framework_ids.add(fw.id)
        fw.unregistered_time = now()
        self.completed_frameworks.append(fw)
        if fw.stream is not None:
            stream, fw.stream = fw.stream, None
            stream.close()
        self.allocator.trigger()

    # ---- other calls ------------------------------------------------------------------------
    def handle(self, fw: Framework, call: SchedulerCall, raw: dict[str, Any]) -> None:
        """Carry out a non-SUBSCRIBE call from a subscribed framework (the HTTP layer answers 202).

        ``raw`` is the call's JSON: TaskInfos are passed to executors exactly as the scheduler sent them.
        """
        t = call.type
        if t == "TEARDOWN":
            self.remove_framework(fw)
        elif t == "ACCEPT":
            self.task_calls.accept(fw, call, raw)
        elif t == "DECLINE":
            refuse = call.decline.filters.refuse_seconds if call.decline.filters else 5.0  # type: ignore[union-attr]
            for oid in call.decline.offer_ids:  # type: ignore[union-attr]
                offer = self.offers.get(oid.value)
                if offer is None or offer.framework_id != fw.id:
                    continue  # Mesos ignores unknown offers in DECLINE
                self.allocator.remove_offer(oid.value, rescind=False)
                self.allocator.add_filter(fw, offer.agent_id, offer.resources, refuse)
            self.allocator.trigger()
        elif t == "REVIVE":
            fw.suppressed = False
            fw.filters.clear()  # REVIVE removes all filters
            self.allocator.trigger()
        elif t == "SUPPRESS":
            fw.suppressed = True
        elif t == "KILL":
            self.task_calls.kill(fw, call.kill.task_id.value)  # type: ignore[union-attr]
        elif t == "SHUTDOWN":
            rec = self.agents.get(call.shutdown.agent_id.value)  # type: ignore[union-attr]
            if rec is not None:
                rec.agent.shutdown_executor(fw.id, call.shutdown.executor_id.value)  # type: ignore[union-attr]
        elif t == "ACKNOWLEDGE":
            ack = call.acknowledge
            self.task_calls.acknowledge(fw, ack.agent_id.value, ack.task_id.value, ack.uuid)  # type: ignore[union-attr]
        elif t == "RECONCILE":
            self.task_calls.reconcile(
                fw,
                [(r.task_id.value, r.agent_id.value if r.agent_id else None) for r in call.reconcile.tasks]
                if call.reconcile
                else [],
            )
        elif t == "MESSAGE":
            m = call.message
            rec = self.agents.get(m.agent_id.value)  # type: ignore[union-attr]
            if rec is None:
                logger.warning("framework message to unknown agent %s dropped", m.agent_id.value)  # type: ignore[union-attr]
            else:
                rec.agent.framework_message(fw.id, m.executor_id.value, m.data)  # type: ignore[union-attr]
        elif t in ("ACCEPT_INVERSE_OFFERS", "DECLINE_INVERSE_OFFERS", "REQUEST"):
            pass  # no inverse offers exist here; Mesos ignores REQUEST
        else:
            raise CallError(400, f"Call type {t} is not supported by the local Mesos stand-in")

    # ---- agents -------------------------------------------------------------------------------
    def register_agent(self, agent: AgentLink) -> str:
        """First registration of an agent (RegisterSlaveMessage): assign an AgentID."""
        aid = agent.agent_id or f"{self.id}-S{self._agent_seq}"
        self._agent_seq += 1
        self.agents[aid] = AgentRecord(aid, agent, agent.total)
        logger.info("agent %s registered at %s:%s (%s)", aid, agent.host, agent.port, agent.total)
        self.allocator.trigger()
        return aid

    def reregister_agent(self, agent: AgentLink) -> None:
        """ReregisterSlaveMessage after a master restart: recover frameworks, executors and tasks."""
        aid = agent.agent_id
        assert aid is not None
        rec = AgentRecord(aid, agent, agent.total, reregistered_time=now())
        self.agents[aid] = rec
        for fid, finfo, executors, tasks in agent.snapshot():
            fw = self.frameworks.get(fid)
            if fw is None:
                fw = Framework(id=fid, info=dict(finfo), recovered=True)
                self.frameworks[fid] = fw
            for eid, (einfo, eres) in executors.items():
                fw.executors.setdefault(aid, {})[eid] = (einfo, eres)
            for t in tasks:
                fw.tasks[t.task_id] = t
        self.allocator.trigger()

    def remove_agent(self, agent_id: str, unreachable: bool = False) -> None:
        """The agent is gone (or unreachable): rescind its offers and tell frameworks about its tasks."""
        rec = self.agents.pop(agent_id, None)
        if rec is None:
            return
        self.removed_agent_ids.add(agent_id)
        for oid in list(rec.offers):
            self.allocator.remove_offer(oid, rescind=True)
        for fw in self.frameworks.values():
            fw.executors.pop(agent_id, None)
            for task in [t for t in fw.tasks.values() if t.agent_id == agent_id]:
                if fw.partition_aware:
                    state = "TASK_UNREACHABLE" if unreachable else "TASK_GONE"
                else:
                    state = "TASK_LOST"
                reason = "REASON_AGENT_REMOVED"
                if not is_terminal(task.state):
                    task.state = state
                    task.statuses.append({"state": state, "timestamp": now()})
                    fw.send(
                        {
                            "type": "UPDATE",
                            "update": {
                                "status": {
                                    "task_id": {"value": task.task_id},
                                    "agent_id": {"value": agent_id},
                                    "state": state,
                                    "reason": reason,
                                    "source": "SOURCE_MASTER",
                                    "timestamp": now(),
                                    "message": "Agent " + ("unreachable" if unreachable else "removed"),
                                }
                            },
                        }
                    )
                fw.tasks.pop(task.task_id, None)
                fw.completed_tasks.append(task)
            fw.send({"type": "FAILURE", "failure": {"agent_id": {"value": agent_id}}})
        logger.info("agent %s removed (unreachable=%s)", agent_id, unreachable)
        self.allocator.trigger()

    def status_update(
        self, agent_id: str, framework_id: str, status: dict[str, Any], latest_state: str
    ) -> None:
        """StatusUpdateMessage from an agent's status update manager: record and forward."""
        fw = self.frameworks.get(framework_id)
        if fw is None:
            logger.info("status update for unknown framework %s dropped", framework_id)
            return
        task = fw.tasks.get(status["task_id"]["value"])
        if task is not None:
            if task.state != latest_state:
                task.statuses.append({"state": latest_state, "timestamp": status.get("timestamp", now())})
            task.state = latest_state
            task.status_update_state = status["state"]
            task.status_update_uuid = status.get("uuid")
            task.last_status = status
            if is_terminal(latest_state):
                self.allocator.trigger()
        fw.send({"type": "UPDATE", "update": {"status": status}})

    def executor_message(self, agent_id: str, framework_id: str, executor_id: str, data: str) -> None:
        fw = self.frameworks.get(framework_id)
        if fw is None or not fw.send(
            {
                "type": "MESSAGE",
                "message": {
                    "agent_id": {"value": agent_id},
                    "executor_id": {"value": executor_id},
                    "data": data,
                },
            }
        ):
            logger.info(
                "executor message from %s dropped (framework %s not connected)", executor_id, framework_id
            )

    def executor_exited(
        self, agent_id: str, framework_id: str, executor_id: str, status: int, command: bool
    ) -> None:
        """ExitedExecutorMessage: recover the executor's resources; FAILURE for custom executors."""
        fw = self.frameworks.get(framework_id)
        if fw is None:
            return
        fw.executors.get(agent_id, {}).pop(executor_id, None)
        if not command:
            fw.send(
                {
                    "type": "FAILURE",
                    "failure": {
                        "agent_id": {"value": agent_id},
                        "executor_id": {"value": executor_id},
                        "status": status,
                    },
                }
            )
        self.allocator.trigger()
