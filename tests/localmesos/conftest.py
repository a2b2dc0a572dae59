"""Fixtures for the localmesos tests: a LocalCluster, a recording pymesos scheduler, task builders.

Everything here drives the REAL pymesos MesosSchedulerDriver / MesosExecutorDriver over HTTP.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from pathlib import Path
from collections.abc import Callable
from typing import Any

import httpx
import psutil
import pytest
from pymesos import MesosSchedulerDriver, Scheduler, encode_data

from dl2_mesos.services.localcluster import LocalCluster

TINY_EXECUTOR = Path(__file__).parent / "helpers" / "tiny_executor.py"

# Short Mesos timings so the folder stays fast; the semantics are the same as the defaults.
FAST = dict(
    heartbeat_interval=1.0,
    allocation_interval=0.2,
    executor_shutdown_grace_period=1.0,
    status_update_retry_interval=0.5,
    executor_registration_timeout=20.0,
)


def scalar(offer: dict[str, Any], name: str) -> float:
    return sum(r["scalar"]["value"] for r in offer["resources"] if r["name"] == name)


class RecordingScheduler(Scheduler):
    """Records every callback; launches queued tasks into the first offers they fit, declines the rest."""

    def __init__(self, refuse_seconds: float | None = None, hold_offers: bool = False) -> None:
        self.events: list[tuple[str, Any]] = []
        self.cond = threading.Condition()
        self.pending: list[dict[str, Any]] = []
        self.refuse_seconds = refuse_seconds
        self.hold_offers = hold_offers
        self.framework_id: str | None = None
        self.held: list[dict[str, Any]] = []

    def _record(self, name: str, payload: Any = None) -> None:
        with self.cond:
            self.events.append((name, payload))
            self.cond.notify_all()

    def queue(self, *tasks: dict[str, Any]) -> None:
        with self.cond:
            self.pending.extend(tasks)

    # pymesos callbacks
    def registered(self, driver, framework_id, master_info):
        self.framework_id = framework_id["value"]
        self._record("registered", framework_id["value"])

    def reregistered(self, driver, master_info):
        self._record("reregistered", master_info)

    def disconnected(self, driver):
        self._record("disconnected")

    def resourceOffers(self, driver, offers):
        for offer in offers:
            self._record("offer", offer)
        for offer in offers:
            with self.cond:
                launch, left = [], []
                cpus, mem, gpus = scalar(offer, "cpus"), scalar(offer, "mem"), scalar(offer, "gpus")
                for t in self.pending:
                    need = {
                        n: sum(
                            r["scalar"]["value"]
                            for r in t["resources"] + t.get("executor", {}).get("resources", [])
                            if r["name"] == n
                        )
                        for n in ("cpus", "mem", "gpus")
                    }
                    if need["cpus"] <= cpus and need["mem"] <= mem and need["gpus"] <= gpus:
                        cpus, mem, gpus = cpus - need["cpus"], mem - need["mem"], gpus - need["gpus"]
                        launch.append(dict(t, agent_id=offer["agent_id"]))
                    else:
                        left.append(t)
                self.pending = left
            if launch:
                driver.launchTasks(offer["id"], launch)
            elif self.hold_offers:
                self.held.append(offer)
            else:
                filters = None if self.refuse_seconds is None else {"refuse_seconds": self.refuse_seconds}
                driver.declineOffer(offer["id"], filters)

    def offerRescinded(self, driver, offer_id):
        self._record("rescinded", offer_id["value"])

    def statusUpdate(self, driver, status):
        self._record("update", status)

    def frameworkMessage(self, driver, executor_id, agent_id, message):
        self._record(
            "message", {"executor_id": executor_id["value"], "agent_id": agent_id["value"], "data": message}
        )

    def slaveLost(self, driver, agent_id):
        self._record("agent_lost", agent_id["value"])

    def executorLost(self, driver, executor_id, agent_id, status):
        self._record(
            "executor_lost",
            {"executor_id": executor_id["value"], "agent_id": agent_id["value"], "status": status},
        )

    def error(self, driver, message):
        self._record("error", message)

    def processHeartBeat(self, driver):
        self._record("heartbeat")

    # helpers for tests
    def wait_for(self, predicate: Callable[[str, Any], bool], timeout: float = 20.0, after: int = 0) -> Any:
        """First recorded (name, payload) at index >= after satisfying predicate; its payload."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for name, payload in self.events[after:]:
                    if predicate(name, payload):
                        return payload
                left = deadline - time.monotonic()
                if left <= 0:
                    names = [n for n, _ in self.events]
                    raise TimeoutError(f"no matching event within {timeout}s; saw {names[-30:]}")
                self.cond.wait(left)

    def wait_state(self, task_id: str, state: str, timeout: float = 20.0, after: int = 0) -> dict[str, Any]:
        return self.wait_for(
            lambda n, p: n == "update" and p["task_id"]["value"] == task_id and p["state"] == state,
            timeout,
            after,
        )

    def all(self, predicate: Callable[[str, Any], bool]) -> list[Any]:
        """Every recorded payload so far whose (name, payload) satisfies predicate (no waiting)."""
        with self.cond:
            return [p for n, p in self.events if predicate(n, p)]

    def states(self, task_id: str) -> list[str]:
        with self.cond:
            return [p["state"] for n, p in self.events if n == "update" and p["task_id"]["value"] == task_id]

    def count(self, name: str) -> int:
        with self.cond:
            return sum(1 for n, _ in self.events if n == name)

    def mark(self) -> int:
        with self.cond:
            return len(self.events)


def res(
    cpus: float = 0.5, mem: float = 64, gpus: int = 0, ports: list[tuple[int, int]] | None = None
) -> list[dict]:
    out = [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
        {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}},
    ]
    if gpus:
        out.append({"name": "gpus", "type": "SCALAR", "scalar": {"value": gpus}})
    if ports:
        out.append(
            {
                "name": "ports",
                "type": "RANGES",
                "ranges": {"range": [{"begin": b, "end": e} for b, e in ports]},
            }
        )
    return out


def executor_task(
    task_id: str,
    spec: dict[str, Any] | None = None,
    executor_id: str | None = None,
    cpus: float = 0.5,
    mem: float = 64,
    gpus: int = 0,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A TaskInfo with a custom ExecutorInfo running the tiny executor script."""
    variables = [{"name": k, "value": v} for k, v in (env or {}).items()]
    return {
        "task_id": {"value": task_id},
        "name": f"tiny {task_id}",
        "resources": res(cpus, mem, gpus),
        "data": encode_data(json.dumps(spec or {}).encode()),
        "executor": {
            "executor_id": {"value": executor_id or f"ex-{task_id}"},
            "name": "tiny executor",
            "command": {
                "value": f"{sys.executable} {TINY_EXECUTOR}",
                "environment": {"variables": variables},
            },
            "resources": res(0.1, 32),
        },
    }


def command_task(task_id: str, shell: str, cpus: float = 0.25, mem: float = 32) -> dict[str, Any]:
    return {
        "task_id": {"value": task_id},
        "name": f"cmd {task_id}",
        "resources": res(cpus, mem),
        "command": {"value": shell},
    }


@pytest.fixture
def cluster():
    """Two agents with 4 CPUs, 1 GPU, 4 GiB each, fast timings."""
    with LocalCluster(agents=2, cpus=4, gpus=1, mem="4GiB", attributes={"rack": "r1"}, **FAST) as c:
        yield c
    # nothing an executor started may outlive the cluster
    assert leftover_executors() == []


def leftover_executors() -> list[str]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            if p.status() != psutil.STATUS_ZOMBIE and ("tiny_executor" in cmd or "localmesos-cmd" in cmd):
                out.append(cmd)
        except psutil.Error:
            pass
    return out


@pytest.fixture
def make_driver(cluster):
    """Start real pymesos scheduler drivers against the cluster; all stopped at the end."""
    drivers: list[MesosSchedulerDriver] = []

    def make(
        scheduler: Scheduler,
        *,
        name: str = "test-fw",
        master: str | None = None,
        failover_timeout: float = 30,
        partition_aware: bool = True,
        implicit_acks: bool = True,
        framework_id: str | None = None,
        checkpoint: bool = False,
    ) -> MesosSchedulerDriver:
        info: dict[str, Any] = {
            "user": "",
            "name": name,
            "failover_timeout": failover_timeout,
            "checkpoint": checkpoint,
            "hostname": "localhost",
        }
        if partition_aware:
            info["capabilities"] = [{"type": "PARTITION_AWARE"}]
        if framework_id:
            info["id"] = {"value": framework_id}
        driver = MesosSchedulerDriver(
            scheduler,
            info,
            master or cluster.mesos_master,
            use_addict=False,
            implicit_acknowledgements=implicit_acks,
        )
        driver.start()
        drivers.append(driver)
        return driver

    yield make
    for d in drivers:
        if not d.aborted:
            d.stop()
        d.join()


def wait_all_acknowledged(cluster: LocalCluster, timeout: float = 10.0) -> None:
    """Wait until no agent holds an unacknowledged status update.

    Use before cutting connections or restarting the master: pymesos raises in its IO thread (and
    interrupts the main thread) when an acknowledgement it is sending meets a closed stream (403),
    as it would against a real Mesos master.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = [
            httpx.get(f"http://{e}/state", timeout=5).json()["pending_status_updates"]
            for e in cluster.agents.values()
        ]
        if not any(pending):
            time.sleep(0.2)  # the ACKNOWLEDGE call's HTTP response may still be on its way
            return
        time.sleep(0.05)
    raise TimeoutError("status updates still unacknowledged")


def new_id(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def ids():
    return new_id
