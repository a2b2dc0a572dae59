"""One framework replica: API server, leader election, and (while leading) the Mesos driver,
the scheduling loop and online learning.

Exit codes of :meth:`Replica.run`: 0 stopped on request, 2 configuration or connection
failure (ZooKeeper or master unreachable), 75 leadership lost (ZooKeeper session lost or
presumed expired, or the state was written by another leader): a supervisor restarts the
process as a standby.

Fencing a leader (session LOST, or suspended for a full session timeout): the state store
refuses every further write at once, the replica stops reporting itself leader, the Mesos driver
is stopped with ``failover=True`` (tasks keep running for the next leader) and the loop ends;
the process exits 75.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from dl2_mesos.config import Config, check_api_exposure, check_zk_exposure
from dl2_mesos.errors import ConfigError, Dl2Error
from dl2_mesos.jobs import JobSpec
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.api import NotLeader, create_app
from dl2_mesos.framework.core import SchedulerCore, UnknownJob
from dl2_mesos.framework.http_guard import MAX_HEAD_BYTES, connection_cap, guarded_h11
from dl2_mesos.framework.kv import FileKV, KVStore, ZooKeeperKV
from dl2_mesos.framework.leader import LocalLeadership, ZkLeadership
from dl2_mesos.framework.loop import SchedulingLoop
from dl2_mesos.framework.master_inventory import MasterInventory

# pymesos installs a SIGINT handler when imported, which only works on the main thread: import
# it here (module import time), never first inside a leadership thread.
from dl2_mesos.framework.mesos_scheduler import Dl2MesosScheduler  # noqa: E402
from dl2_mesos.framework.metrics import FrameworkMetrics, RefusedSubmissions
from dl2_mesos.framework.online_learning import OnlineLearning
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.framework.task_info import framework_info

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_CONFIG, EXIT_LEADERSHIP_LOST = 0, 2, 75
REPLY_TIMEOUT = 15.0
#: The GIL switch interval of the framework process (Python's default is 5 ms). The loop thread
#: runs CPU-bound for long stretches (a slot that places 1000 jobs takes a second or more), and the
#: threads that call the master need the GIL several times per HTTP call: with the default each of
#: those waits up to 5 ms behind the loop (the "convoy effect"), calls took 65 ms, and with 1000
#: jobs on 500 agents acknowledgements were late enough that agents re-sent 336 updates (status
#: lag p99 11 s); at 0.5 ms: 44 ms a call, 3 re-sent, lag p99 0.9 s (``bench/faults.py``).
GIL_SWITCH_SECONDS = 0.0005


class Unreachable(Dl2Error):
    """ZooKeeper or the Mesos master could not be reached within ``connect_timeout``."""


def make_policy(cfg: Config) -> Any:
    """The configured policy from the registry (ConfigError when it cannot be built)."""
    from dl2_mesos.policy.registry import make_policy as registry_make

    try:
        return registry_make(cfg.policy, **dict(cfg.policy_args))
    except (Dl2Error, TypeError, ValueError, OSError) as exc:
        raise ConfigError(f"policy {cfg.policy!r}: cannot be built: {exc}") from exc


def make_learner(cfg: Config, policy: Any, store: StateStore) -> OnlineLearning:
    from dl2_mesos.policy.registry import make_online_model

    adapter = make_online_model(cfg.policy, policy, teacher=cfg.online_teacher or None,  # the name is validated
                                twin=cfg.online_twin)
    return OnlineLearning(store, adapter, getattr(policy, "name", cfg.policy), enabled=cfg.online_learning,
                          window=cfg.online_window, margin=cfg.rollback_margin, keep=cfg.model_keep,
                          teacher=cfg.online_teacher if adapter is not None else "",
                          twin=cfg.online_twin and adapter is not None)


def check_master(master: str, timeout: float, stop: threading.Event | None = None) -> str | None:
    """GET /version on a host:port master, retrying for ``timeout`` s; returns the version, or
    None when ``stop`` is set before the master answers (a replica told to stop does not wait
    out the connect timeout)."""
    if master.startswith("zk://"):
        return ""
    hostport = master if ":" in master else master + ":5050"
    deadline = time.monotonic() + timeout
    delay = 0.25
    last = ""
    while True:
        try:
            with urllib.request.urlopen(f"http://{hostport}/version", timeout=5) as r:
                return json.loads(r.read().decode()).get("version", "")
        except (OSError, ValueError) as exc:
            last = str(exc)
        if time.monotonic() + delay > deadline:
            raise Unreachable(f"Mesos master {hostport} unreachable after {timeout:.0f}s: {last}")
        if (stop or threading.Event()).wait(delay):
            return None
        delay = min(2.0, delay * 2)


def connect_zookeeper(cfg: Config) -> Any:
    """A started KazooClient for ``cfg.zk`` (digest ACLs when ``zk_digest`` is set)."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError
    from kazoo.security import make_digest_acl

    kw: dict[str, Any] = {}
    if cfg.zk_digest:
        user, _, password = cfg.zk_digest.partition(":")
        kw["auth_data"] = [("digest", cfg.zk_digest)]
        kw["default_acl"] = [make_digest_acl(user, password, all=True)]
    # kazoo's default reconnect backoff grows to an hour: after a long outage a replica would come
    # back long after ZooKeeper did (and its session would expire meanwhile). Retry every <= 2 s.
    retry = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2.0}
    client = KazooClient(hosts=cfg.zk_hosts, timeout=cfg.zk_timeout, connection_retry=retry, **kw)
    try:
        client.start(timeout=cfg.connect_timeout)
    except KazooTimeoutError:
        client.close()
        raise Unreachable(f"ZooKeeper {cfg.zk_hosts} unreachable after {cfg.connect_timeout:.0f}s") from None
    if cfg.zk_digest:
        try:
            secure_tree(client, cfg.zk_path, kw["default_acl"])
        except Exception:
            client.stop()
            client.close()
            raise
    return client


def secure_tree(client: Any, root: str, acl: list[Any]) -> int:
    """Put ``acl`` on ``root`` and on every node below it (nodes made before the digest was turned on
    are world-writable otherwise); creates ``root`` when missing. Returns how many nodes were changed.

    Raises:
        ConfigError: a node's ACL cannot be changed (it belongs to another identity).
    """
    from kazoo.exceptions import NoAuthError, NoNodeError

    client.ensure_path(root, acl=acl)
    changed = 0
    pending = [root]
    while pending:
        path = pending.pop()
        try:
            current, _ = client.get_acls(path)
            if list(current) != list(acl):
                client.set_acls(path, acl)
                changed += 1
            pending.extend(f"{path.rstrip('/')}/{child}" for child in client.get_children(path))
        except NoNodeError:
            continue  # removed meanwhile (an ephemeral election node)
        except NoAuthError:
            raise ConfigError(f"zk_digest: cannot set the digest ACL on {path}: it is protected by another "
                              "identity (fix its ACL by hand, or use another zk path)") from None
    if changed:
        logger.warning("ZooKeeper: put the digest ACL on %d existing node(s) under %s", changed, root)
    return changed


class StateDirLock:
    """An exclusive ``fcntl`` lock on ``<state_dir>/.lock``: one framework per file state store (two
    would take the same framework id from each other in Mesos). Held until :meth:`release` or exit."""

    def __init__(self, state_dir: str) -> None:
        import fcntl

        folder = Path(state_dir)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(f"state_dir: cannot use {state_dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self._fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            raise ConfigError(f"state_dir: {state_dir} is in use by another framework (pid {holder}); "
                              "run one framework per state folder (or use --zk for several replicas)") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = -1


def bind_api_socket(cfg: Config) -> socket.socket:
    """The API's listening socket, bound here so that a taken port is a one-line ConfigError."""
    host = cfg.api_host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), cfg.api_port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"api: cannot listen on {cfg.api}: {exc.strerror or exc}") from None
    sock.set_inheritable(False)
    return sock


class Replica:
    """A framework replica. ``run()`` blocks until stopped and returns the exit code."""

    def __init__(self, cfg: Config, driver_factory: Any = None, policy_factory: Any = None) -> None:
        self.cfg = cfg
        self._policy_factory = policy_factory or make_policy
        self.metrics = FrameworkMetrics()
        self.events: queue.Queue = queue.Queue()
        self.url = cfg.public_url()
        self._stop = threading.Event()
        self._exit_code = EXIT_OK
        self._reason = ""
        self.loop: SchedulingLoop | None = None
        self.core: SchedulerCore | None = None
        self._driver_factory = driver_factory or self._pymesos_driver
        self._server: Any = None  # a uvicorn.Server once the API runs (uvicorn is imported lazily)
        self._server_thread: threading.Thread | None = None
        self._state_lock: StateDirLock | None = None
        self.zk = None
        kv: KVStore
        if cfg.uses_zookeeper:
            check_zk_exposure(cfg)
            self.zk = connect_zookeeper(cfg)
            kv = ZooKeeperKV(self.zk, cfg.zk_path + "/state", acl=None)
            self.leadership: Any = ZkLeadership(self.zk, cfg.zk_path + "/leader", self.url, self._zk_change)
        else:
            self._state_lock = StateDirLock(cfg.state_dir)
            kv = FileKV(cfg.state_dir)
            self.leadership = LocalLeadership(self.url)
        self.store = StateStore(kv)

    # -- Backend for the API -----------------------------------------------------------------
    def view(self) -> dict[str, Any]:
        if self.loop is not None:
            return self.loop.view
        return {"jobs": {}, "cluster": {}, "policy": {}}

    def is_leader(self) -> bool:
        return bool(self.leadership.is_leader and self.loop is not None and self.loop.running
                    and not self.store.fenced)

    def leader_url(self) -> str | None:
        url = self.leadership.leader_url()
        return None if url == self.url and not self.is_leader() else url

    def _ask(self, event: Any) -> dict[str, Any]:
        if not self.is_leader():
            raise NotLeader()
        self.events.put(event)
        try:
            return event.reply.result(timeout=REPLY_TIMEOUT)
        except TimeoutError:
            # a command the loop has not started is withdrawn, so the 503 "retry" that follows is
            # true: nothing was stored (before, the loop stored it later and a retry doubled the job)
            if event.reply.cancel():
                raise TimeoutError("the scheduling loop did not take the command in time") from None
            # the loop is on it already: its answer comes with the next published view
            return event.reply.result(timeout=REPLY_TIMEOUT)

    def submit(self, spec: JobSpec, idempotency_key: str = "") -> dict[str, Any]:
        return self._ask(ev.SubmitJob(spec, idempotency_key))

    def cancel(self, job_id: str) -> dict[str, Any]:
        try:
            return self._ask(ev.CancelJob(job_id))
        except UnknownJob as exc:
            raise KeyError(job_id) from exc

    def metrics_text(self) -> bytes:
        return self.metrics.render()

    def health(self) -> dict[str, Any]:
        c = self.view().get("cluster", {})
        return {"status": "ok", "role": "leader" if self.is_leader() else "standby", "url": self.url,
                "leader": self.leader_url(), "registered": c.get("registered", False),
                "framework_id": c.get("framework_id")}

    # -- lifecycle ---------------------------------------------------------------------------
    def start_api(self) -> None:
        """Serve the API in a thread. Raises ConfigError: an open API off loopback, or a taken port."""
        import uvicorn

        check_api_exposure(self.cfg)
        sock = bind_api_socket(self.cfg)
        backend = _BackendShim(self)
        app = create_app(backend, api_token=self.cfg.api_token, read_token=self.cfg.api_read_token,
                         open_reads=self.cfg.api_open_reads, max_body_bytes=self.cfg.max_body_bytes)
        cap = connection_cap(self.cfg.api_max_connections)
        config = uvicorn.Config(RefusedSubmissions(app, self.metrics), log_level="warning", access_log=False,
                                http=guarded_h11(cap, self.cfg.api_header_timeout),
                                timeout_keep_alive=max(1, round(self.cfg.api_keep_alive)),
                                h11_max_incomplete_event_size=MAX_HEAD_BYTES, backlog=min(2048, cap))
        self._server = uvicorn.Server(config)
        self._server_thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                               name="dl2-api", daemon=True)
        self._server_thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            if not self._server_thread.is_alive():
                raise Unreachable(f"cannot serve the API on {self.cfg.api}")
            time.sleep(0.05)
        logger.info("API on %s (advertised %s)", self.cfg.api, self.url)

    def stop(self, reason: str = "stop requested", code: int = EXIT_OK) -> None:
        if not self._stop.is_set():
            self._reason = reason
            self._exit_code = code
        self._stop.set()
        self.leadership.cancel()

    def run(self) -> int:
        """Serve the API, contend for leadership, lead until stopped. Returns the exit code."""
        sys.setswitchinterval(GIL_SWITCH_SECONDS)  # see GIL_SWITCH_SECONDS
        try:
            self.start_api()
            while not self._stop.is_set():
                self.leadership.run(self._lead)
                if isinstance(self.leadership, LocalLeadership):
                    break
        except (ConfigError, Unreachable) as exc:
            logger.error("%s", exc)
            self.stop(str(exc), EXIT_CONFIG)
        finally:
            if self._server is not None:
                self._server.should_exit = True
                if self._server_thread is not None:
                    self._server_thread.join(5)
            if self.zk is not None:
                try:
                    self.zk.stop()
                    self.zk.close()
                except Exception:
                    logger.debug("zk close", exc_info=True)
            if self._state_lock is not None:
                self._state_lock.release()
        logger.info("replica exiting (%s)", self._reason or "done")
        return self._exit_code

    def _zk_change(self, change: str) -> None:
        # called on kazoo's thread: only enqueue / set flags
        if change == "lost":
            self.fence("ZooKeeper session lost")
        else:
            self.events.put(ev.Leadership(change))

    def fence(self, reason: str) -> None:
        """Stop acting as leader now: no more state writes, then stop the term and exit 75.

        Only sets flags (safe from kazoo's thread); :meth:`_lead` stops the driver and the loop.
        """
        if self.leadership.is_leader and not self.store.fenced:
            logger.warning("fencing this leader: %s", reason)
        self.store.fence(reason)
        self.stop(reason, EXIT_LEADERSHIP_LOST)

    def _failed_over(self, message: str) -> None:
        """Mesos gave our framework id to another scheduler: this one is stale. Stop writing state
        and exit (75) without tearing the framework down (called on pymesos's thread: flags only)."""
        self.fence(f"Mesos says this framework failed over to another scheduler ({message}); "
                   "this replica is stale and stops")

    def _pymesos_driver(self, scheduler: Any, info: dict[str, Any]) -> Any:
        from pymesos import MesosSchedulerDriver  # already imported (see the module top)

        return MesosSchedulerDriver(
            scheduler, info, self.cfg.master, use_addict=False, implicit_acknowledgements=False,
            principal=self.cfg.principal or None, secret=self.cfg.secret or None, failover=True,
        )

    def _lead(self) -> None:
        """Leadership term: restore state, subscribe, run the loop until stopped or fenced."""
        if self._stop.is_set():
            return
        self.metrics.leader.set(1)
        self.events = queue.Queue()
        driver = None
        inventory = None
        try:
            if check_master(self.cfg.master, self.cfg.connect_timeout, self._stop) is None:
                return  # told to stop while the master was still unreachable
            policy = self._policy_factory(self.cfg)
            core = SchedulerCore(self.cfg, policy, self.store, metrics=self.metrics)
            core.restore()
            learner = make_learner(self.cfg, policy, self.store)
            learner.start()
            core.learner = learner
            self.core = core
            self.loop = SchedulingLoop(core, self.events, on_fatal=lambda r: self.stop(r, EXIT_LEADERSHIP_LOST))
            self.loop.start()
            info = framework_info(self.cfg, core.framework_id, self.url + "/")
            driver = self._driver_factory(Dl2MesosScheduler(self.events, on_failed_over=self._failed_over,
                                                            senders=self.cfg.master_calls), info)
            driver.start()
            inventory = self._master_inventory(driver)
            inventory.start()
            deadline = time.monotonic() + self.cfg.connect_timeout
            while not self._stop.wait(0.2):
                if self.leadership.must_fence():
                    self.fence(f"ZooKeeper unreachable for the session timeout "
                               f"({self.leadership.session_timeout:g}s): the session has expired, "
                               f"another replica may lead")
                elif not self.loop.running:
                    self.stop("scheduling loop ended", EXIT_LEADERSHIP_LOST)
                elif not core.ever_registered and time.monotonic() > deadline:
                    self.stop(f"could not subscribe to Mesos master {self.cfg.master} within "
                              f"{self.cfg.connect_timeout:.0f}s", EXIT_CONFIG)
        except (ConfigError, Unreachable) as exc:
            logger.error("%s", exc)
            self.stop(str(exc), EXIT_CONFIG)
        finally:
            self.metrics.leader.set(0)
            if inventory is not None:
                inventory.stop()
            if driver is not None:
                try:
                    driver.stop(failover=True)  # keep tasks running for the next leader
                except Exception:
                    logger.debug("driver stop", exc_info=True)
            if self.loop is not None:
                self.loop.stop()
            logger.info("leadership term ended: %s", self._reason)


    def _master_inventory(self, driver: Any) -> MasterInventory:
        """Reads the agents' totals from the leading master (the driver's, found through ZooKeeper
        for a zk:// master) for the cluster's capacity (see :mod:`.cluster_capacity`)."""
        configured = None if self.cfg.master.startswith("zk://") else self.cfg.master

        def master() -> str | None:
            found = getattr(driver, "master", None)  # pymesos: the leading master's host:port
            return found if isinstance(found, str) and found else configured

        auth = (self.cfg.principal, self.cfg.secret) if self.cfg.principal and self.cfg.secret else None
        return MasterInventory(master, self.events.put, auth=auth)


class _BackendShim:
    """Adapts :class:`Replica` to the API's Backend protocol."""

    def __init__(self, replica: Replica) -> None:
        self.r = replica

    def view(self) -> dict[str, Any]:
        return self.r.view()

    def is_leader(self) -> bool:
        return self.r.is_leader()

    def leader_url(self) -> str | None:
        return self.r.leader_url()

    def submit(self, spec: JobSpec, idempotency_key: str = "") -> dict[str, Any]:
        return self.r.submit(spec, idempotency_key)

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self.r.cancel(job_id)

    def metrics(self) -> bytes:
        return self.r.metrics_text()

    def health(self) -> dict[str, Any]:
        return self.r.health()
