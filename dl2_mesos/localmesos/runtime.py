"""``LocalMesos``: one master plus N agents on one asyncio loop, with fault injection.

Agents outlive master restarts (as Mesos agents do): a restarted master comes back on the same
port with a new id and empty state (``--registry=in_memory``: no replicated log), agents
re-register with their executors and tasks, and frameworks re-subscribe with their ids.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .agent import Agent
from .agent_records import AgentConfig
from .http_app import HttpServer, agent_app, master_app
from .master import Master, MasterConfig
from .resources import parse_size_mib
from .spawner import ExecutorSpawner
from .zk import ZooKeeperRegistration

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterConfig:
    """Everything ``LocalMesos`` needs; agents get one ``AgentConfig`` each."""

    agents: tuple[AgentConfig, ...] = field(default_factory=lambda: (AgentConfig(),))
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    hostname: str = "127.0.0.1"
    zk: str | None = None  # zk://host:port/path: register the master there like Mesos
    work_dir: str | None = None  # sandboxes live under it; a temporary folder when None
    heartbeat_interval: float = 15.0
    allocation_interval: float = 1.0
    stop_grace: float = 3.0  # on stop: SHUTDOWN executors, SIGKILL what is left after this


def agent_configs(
    count: int,
    *,
    cpus: float = 8,
    gpus: int = 0,
    mem: str | float = "16GiB",
    disk: str | float = "64GiB",
    port_base: int = 31000,
    ports_per_agent: int = 1000,
    **options: Any,
) -> tuple[AgentConfig, ...]:
    """``count`` identical agents with disjoint port ranges and a ``rack``-free attribute ``agent``.

    Raises:
        ValueError: the agents' port ranges would not fit in 1-65535.
    """
    last = port_base + count * ports_per_agent - 1
    if port_base < 1 or (count and last > 65535):
        raise ValueError(
            f"port ranges {port_base}-{last} ({count} agents x {ports_per_agent} ports) do not fit in 1-65535"
        )
    out = []
    for i in range(count):
        lo = port_base + i * ports_per_agent
        out.append(
            AgentConfig(
                cpus=float(cpus),
                gpus=int(gpus),
                mem=parse_size_mib(mem),
                disk=parse_size_mib(disk),
                ports=(lo, lo + ports_per_agent - 1),
                attributes=(("agent", str(i)),),
                **options,
            )
        )
    return tuple(out)


class LocalMesos:
    """The running cluster. All methods run on (or are scheduled onto) its event loop."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self._own_work_dir = config.work_dir is None
        self.work_dir = Path(config.work_dir or tempfile.mkdtemp(prefix="dl2-localmesos-"))
        self.master: Master | None = None
        self.master_server: HttpServer | None = None
        self.agents: dict[str, Agent] = {}
        self.removed_agents: dict[str, Agent] = {}
        self.agent_servers: dict[str, HttpServer] = {}
        self.zk = ZooKeeperRegistration(config.zk) if config.zk else None
        self.port = config.port
        self._agent_index = 0
        # Executors start from a helper process, off this process's event loop (see spawner.py).
        self.spawner = ExecutorSpawner()

    # ---- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.master_server = HttpServer(master_app(self, self.config.zk), self.config.host, self.config.port)
        self.port = self.master_server.port
        self.master = self._new_master()
        self.master.start()
        await self.master_server.start()
        for cfg in self.config.agents:
            await self.add_agent(cfg)
        if self.zk:
            await asyncio.to_thread(self.zk.register, self.master.master_info())
        logger.info(
            "local Mesos master on %s:%d with %d agents", self.config.host, self.port, len(self.agents)
        )

    def _new_master(self) -> Master:
        c = self.config
        return Master(
            MasterConfig(
                host=c.host,
                port=self.port,
                hostname=c.hostname,
                heartbeat_interval=c.heartbeat_interval,
                allocation_interval=c.allocation_interval,
            )
        )

    async def stop(self) -> None:
        """Stop everything: executors get SHUTDOWN, then SIGKILL after ``stop_grace``."""
        if self.zk:
            await asyncio.to_thread(self.zk.close)
        if self.master is not None:
            await self.master.stop()
        await asyncio.gather(*(a.shutdown(self.config.stop_grace) for a in self.agents.values()))
        await asyncio.gather(*(server.stop() for server in list(self.agent_servers.values())))
        self.agent_servers.clear()
        if self.master_server is not None:
            await self.master_server.stop()
        await self.spawner.close()
        self.master = None
        if self._own_work_dir and not os.environ.get("DL2_LOCALMESOS_KEEP_SANDBOXES"):
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # ---- agents ---------------------------------------------------------------------------------
    def agent_config_from(self, spec: dict[str, Any]) -> AgentConfig:
        """An AgentConfig from a JSON spec: cpus, gpus, mem, disk, ports [lo, hi], attributes."""
        base = self.config.agents[0] if self.config.agents else AgentConfig()
        ports = spec.get("ports")
        if ports is None:
            lo = 31000 + 1000 * (self._agent_index + len(self.removed_agents) + 1)
            ports = (lo, lo + 999)
        attrs = spec.get("attributes") or {}
        if not isinstance(attrs, dict):
            raise ValueError("attributes must be an object")
        return replace(
            base,
            cpus=float(spec.get("cpus", base.cpus)),
            gpus=int(spec.get("gpus", base.gpus)),
            mem=parse_size_mib(spec.get("mem", base.mem)),
            disk=parse_size_mib(spec.get("disk", base.disk)),
            ports=(int(ports[0]), int(ports[1])),
            attributes=tuple(attrs.items()),
        )

    async def add_agent(self, config: AgentConfig) -> str:
        """Start an agent (its own HTTP port) and register it with the master; returns its id."""
        assert self.master is not None, "master not running"
        agent = Agent(self._agent_index, config, self.work_dir, spawner=self.spawner)
        self._agent_index += 1
        server = HttpServer(agent_app(agent), self.config.host, 0)
        agent.host, agent.port = self.config.host, server.port
        await server.start()
        agent.register(self.master)
        assert agent.agent_id is not None
        self.agents[agent.agent_id] = agent
        self.agent_servers[agent.agent_id] = server
        return agent.agent_id

    async def remove_agent(self, agent_id: str, unreachable: bool = False) -> bool:
        """Fault: the agent's machine vanishes. Executors are SIGKILLed, the master marks its tasks
        TASK_GONE (TASK_UNREACHABLE if ``unreachable``) for partition-aware frameworks, TASK_LOST
        otherwise, rescinds its offers and sends FAILURE (agent lost)."""
        agent = self.agents.pop(agent_id, None)
        if agent is None:
            return False
        agent.kill_all()
        if self.master is not None:
            self.master.remove_agent(agent_id, unreachable=unreachable)
        server = self.agent_servers.pop(agent_id, None)
        await agent.shutdown(0.0)
        if server is not None:
            await server.stop()
        self.removed_agents[agent_id] = agent
        return True

    # ---- master faults --------------------------------------------------------------------------
    async def restart_master(self, downtime: float = 0.0) -> None:
        """Fault: the master process restarts (new master id, in-memory state lost).

        Scheduler streams end; the master is back on the same port after ``downtime`` seconds;
        agents re-register with their executors and tasks; schedulers re-subscribe (pymesos does so
        by itself) and, within their failover timeout, keep their tasks.
        """
        old = self.master
        if self.zk:
            await asyncio.to_thread(self.zk.unregister)
        self.master = None
        if old is not None:
            await old.stop()
        if self.master_server is not None:
            await self.master_server.stop()
        if downtime > 0:
            await asyncio.sleep(downtime)
        master = self._new_master()
        master.start()
        for agent in self.agents.values():
            agent.register(master)
        self.master = master
        self.master_server = HttpServer(master_app(self, self.config.zk), self.config.host, self.port)
        await self.master_server.start()
        if self.zk:
            await asyncio.to_thread(self.zk.register, master.master_info())
        logger.info("master restarted as %s", master.id)

    def disconnect_framework(self, framework_id: str) -> bool:
        """Fault: cut a scheduler's event stream (the failover timeout starts)."""
        return self.master.disconnect_framework(framework_id) if self.master else False

    # ---- information ----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {
            "master": f"{self.config.host}:{self.port}",
            "master_url": f"http://{self.config.host}:{self.port}",
            "zk": self.config.zk,
            "master_id": self.master.id if self.master else None,
            "agents": {aid: a.endpoint for aid, a in self.agents.items()},
            "work_dir": str(self.work_dir),
            "pid": os.getpid(),
            "executor_pids": self.executor_pids(),
        }

    def executor_pids(self) -> list[int]:
        return [
            pid
            for a in list(self.agents.values()) + list(self.removed_agents.values())
            for pid in a.executor_pids()
        ]
