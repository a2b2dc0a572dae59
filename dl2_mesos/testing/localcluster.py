"""``LocalCluster``: the easy way to run the Mesos-compatible local master and agents.

It starts ``dl2_mesos.localmesos`` (a master plus N agents speaking Mesos's v1 Scheduler and
Executor HTTP APIs; a test/dev stand-in, not Apache Mesos) either in this process, on an
event loop in a background thread, or as a ``dl2 local-cluster`` subprocess, and offers the
fault injections tests need. Real pymesos drivers connect to it unchanged::

    from pymesos import MesosSchedulerDriver
    from dl2_mesos.testing.localcluster import LocalCluster

    with LocalCluster(agents=2, cpus=4, gpus=1, mem="8GiB") as cluster:
        driver = MesosSchedulerDriver(my_scheduler, {"user": "", "name": "demo"}, cluster.mesos_master)
        driver.start()
        cluster.wait_until(lambda s: s["frameworks"] and s["frameworks"][0]["tasks"], timeout=30)
        cluster.remove_agent(cluster.agent_ids[0])      # tasks there become TASK_GONE / TASK_LOST
        cluster.restart_master()                        # frameworks re-subscribe, tasks survive
        driver.stop()

Executors started by the agents see ``MESOS_AGENT_ENDPOINT`` etc. and ``MESOS_LOCAL=1``;
``stop()`` (or leaving the ``with`` block) ends every executor process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from dl2_mesos.localmesos.local_cluster_cli import build_config
from dl2_mesos.localmesos.runtime import LocalMesos

logger = logging.getLogger(__name__)
T = TypeVar("T")


class LocalCluster:
    """A local Mesos-compatible master with ``agents`` identical agents.

    Args:
        agents: number of agents. cpus, gpus, mem, disk: resources of each agent (mem/disk as
            "16GiB"/"512MiB" or MiB numbers). Agent i gets ports ``port_base + 1000*i`` ... ``+999``.
        port: master port (0 picks a free one). zk: ``zk://host:port/path`` to register the master
            in ZooKeeper (then ``mesos_master`` is that URL). work_dir: sandbox root (temporary if None).
        in_subprocess: run ``python -m dl2_mesos.localmesos.local_cluster_cli`` instead of an in-process loop;
            fault methods then go through the master's ``/local/*`` control endpoints.
        heartbeat_interval, allocation_interval, executor_shutdown_grace_period,
        executor_registration_timeout, status_update_retry_interval: Mesos's timing knobs, in seconds.
        attributes: ``{"name": "value"}`` attributes for every agent (each also has ``agent=<i>``).
        switch_user: run executors as their FrameworkInfo/CommandInfo user (``dl2 local-cluster``'s
            default, as Mesos's ``--switch_user``). Off here: a test harness runs every executor as
            the test's own user, whose interpreter and temporary folders the task user may not reach.
    """

    def __init__(
        self,
        agents: int = 2,
        *,
        cpus: float = 8,
        gpus: int = 0,
        mem: str | float = "16GiB",
        disk: str | float = "64GiB",
        port: int = 0,
        zk: str | None = None,
        work_dir: str | None = None,
        in_subprocess: bool = False,
        heartbeat_interval: float = 15.0,
        allocation_interval: float = 1.0,
        executor_shutdown_grace_period: float = 5.0,
        executor_registration_timeout: float = 60.0,
        status_update_retry_interval: float = 10.0,
        port_base: int = 31000,
        attributes: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        switch_user: bool = False,
    ) -> None:
        self.options = dict(
            agents=agents,
            cpus=cpus,
            gpus=gpus,
            mem=mem,
            disk=disk,
            host=host,
            port=port,
            zk=zk,
            work_dir=work_dir,
            heartbeat_interval=heartbeat_interval,
            allocation_interval=allocation_interval,
            port_base=port_base,
            attributes=tuple(f"{k}={v}" for k, v in (attributes or {}).items()),
            executor_shutdown_grace_period=executor_shutdown_grace_period,
            executor_registration_timeout=executor_registration_timeout,
            status_update_retry_min=status_update_retry_interval,
            switch_user=switch_user,
        )
        self.in_subprocess = in_subprocess
        self.zk_url = zk
        self._runtime: LocalMesos | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen | None = None
        self._info: dict[str, Any] = {}

    # ---- addresses --------------------------------------------------------------------------------
    @property
    def master(self) -> str:
        """``host:port`` of the master (pymesos's ``master_uri`` form)."""
        return self._info["master"]

    @property
    def master_url(self) -> str:
        """``http://host:port`` of the master."""
        return self._info["master_url"]

    @property
    def mesos_master(self) -> str:
        """What to hand a scheduler driver: the ``zk://`` URL when registered in ZooKeeper, else host:port."""
        return self.zk_url or self.master

    @property
    def agents(self) -> dict[str, str]:
        """Agent id -> ``host:port`` of its executor API, for the agents currently up."""
        return dict(self._refresh()["agents"])

    @property
    def agent_ids(self) -> list[str]:
        return list(self.agents)

    @property
    def work_dir(self) -> Path:
        return Path(self._info["work_dir"])

    # ---- lifecycle --------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> LocalCluster:
        if self.in_subprocess:
            self._start_subprocess(timeout)
        else:
            self._start_in_process(timeout)
        logger.info("local cluster at %s with agents %s", self.master, list(self._info["agents"]))
        return self

    def _start_in_process(self, timeout: float) -> None:
        config = build_config(**self.options)  # type: ignore[arg-type]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="localmesos", daemon=True)
        self._thread.start()
        self._runtime = LocalMesos(config)
        try:
            self._call(self._runtime.start(), timeout)
        except BaseException:
            self.stop()
            raise
        self._info = self._runtime.info()

    def _start_subprocess(self, timeout: float) -> None:
        o = self.options
        ready = Path(tempfile.mkdtemp(prefix="dl2-localcluster-")) / "ready.json"
        cmd = [
            sys.executable,
            "-m",
            "dl2_mesos.localmesos.local_cluster_cli",
            "--agents",
            str(o["agents"]),
            "--cpus",
            str(o["cpus"]),
            "--gpus",
            str(o["gpus"]),
            "--mem",
            str(o["mem"]),
            "--disk",
            str(o["disk"]),
            "--host",
            str(o["host"]),
            "--port",
            str(o["port"]),
            "--port-base",
            str(o["port_base"]),
            "--heartbeat-interval",
            str(o["heartbeat_interval"]),
            "--allocation-interval",
            str(o["allocation_interval"]),
            "--executor-shutdown-grace-period",
            str(o["executor_shutdown_grace_period"]),
            "--executor-registration-timeout",
            str(o["executor_registration_timeout"]),
            "--status-update-retry-interval",
            str(o["status_update_retry_min"]),
            "--ready-file",
            str(ready),
            "--switch-user" if o["switch_user"] else "--no-switch-user",
        ]
        for attr in o["attributes"]:  # type: ignore[union-attr]
            cmd += ["--attribute", attr]
        if o["zk"]:
            cmd += ["--zk", str(o["zk"])]
        if o["work_dir"]:
            cmd += ["--work-dir", str(o["work_dir"])]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"dl2 local-cluster exited with {self._proc.returncode} before it was ready"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"dl2 local-cluster not ready after {timeout}s")
            time.sleep(0.05)
        self._info = json.loads(ready.read_text())

    def stop(self, timeout: float = 30.0) -> None:
        """Stop master, agents and every executor process (idempotent)."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
                try:
                    self._proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                    self._proc.wait()
            self._proc = None
        if self._runtime is not None and self._loop is not None:
            try:
                self._call(self._runtime.stop(), timeout)
            except Exception:
                logger.exception("stopping the local cluster failed")
            self._runtime = None
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(10)
            self._loop.close()
            self._loop = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- inspection -------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """``GET /master/state`` (Mesos-shaped JSON: frameworks, slaves/agents, tasks ...)."""
        return self._get("/master/state")

    def wait_until(
        self, predicate: Callable[[dict[str, Any]], T], timeout: float = 30.0, interval: float = 0.1
    ) -> T:
        """Poll ``state()`` until ``predicate(state)`` is truthy; returns that value."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = predicate(self.state())
            except (urllib.error.URLError, ConnectionError, KeyError, IndexError):
                last = None
            if last:
                return last
            time.sleep(interval)
        raise TimeoutError(f"condition not met within {timeout}s")

    def executor_pids(self) -> list[int]:
        """PIDs of executor processes still running (a clean stop leaves none)."""
        if self._runtime is not None:
            return self._call_fn(self._runtime.executor_pids)
        return list(self._get("/local/cluster").get("executor_pids", []))

    # ---- faults -----------------------------------------------------------------------------------
    def remove_agent(self, agent_id: str, unreachable: bool = False) -> None:
        """The agent vanishes: executors SIGKILLed, offers rescinded, its tasks TASK_GONE
        (TASK_UNREACHABLE with ``unreachable=True``) for PARTITION_AWARE frameworks, else TASK_LOST."""
        if self._runtime is not None:
            ok = self._call(self._runtime.remove_agent(agent_id, unreachable))
        else:
            ok = self._post(f"/local/agents/{agent_id}/remove?unreachable={str(unreachable).lower()}")[
                "removed"
            ]
        if not ok:
            raise KeyError(f"no agent {agent_id}")

    def add_agent(
        self,
        cpus: float | None = None,
        gpus: int | None = None,
        mem: str | float | None = None,
        disk: str | float | None = None,
        ports: tuple[int, int] | None = None,
        attributes: dict[str, str] | None = None,
    ) -> str:
        """Start and register one more agent; returns its id."""
        spec = {
            k: v
            for k, v in dict(
                cpus=cpus, gpus=gpus, mem=mem, disk=disk, ports=ports, attributes=attributes
            ).items()
            if v is not None
        }
        if self._runtime is not None:
            runtime = self._runtime
            return self._call(runtime.add_agent(runtime.agent_config_from(spec)))
        return self._post("/local/agents", spec)["agent_id"]

    def restart_master(self, downtime: float = 0.0, timeout: float = 30.0) -> None:
        """The master restarts with empty in-memory state; agents re-register, schedulers re-subscribe."""
        if self._runtime is not None:
            self._call(self._runtime.restart_master(downtime), timeout)
            return
        before = self._get("/local/cluster")["master_id"]
        self._post(f"/local/master/restart?downtime={downtime}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self._get("/local/cluster")["master_id"] not in (None, before):
                    return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        raise TimeoutError("master did not come back")

    def disconnect_framework(self, framework_id: str) -> bool:
        """Close a framework's event stream as if its connection broke (its failover timeout starts)."""
        if self._runtime is not None:
            runtime = self._runtime
            return self._call_fn(lambda: runtime.disconnect_framework(framework_id))
        try:
            return bool(self._post(f"/local/frameworks/{framework_id}/disconnect")["disconnected"])
        except urllib.error.HTTPError:
            return False

    # ---- plumbing ---------------------------------------------------------------------------------
    def _refresh(self) -> dict[str, Any]:
        if self._runtime is not None:
            self._info = self._call_fn(self._runtime.info)
        elif self._proc is not None:
            self._info = self._get("/local/cluster")
        return self._info

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _call_fn(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return self._call(run())

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.master_url + path, timeout=10) as resp:
            return json.loads(resp.read())

    def _post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        req = urllib.request.Request(
            self.master_url + path,
            data=json.dumps(body or {}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())
