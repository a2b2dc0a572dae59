"""Fault injection on real parts: ``dl2 framework`` replicas (subprocesses), the local Mesos-compatible
cluster, the project's executor running small real MXNet jobs, real ZooKeeper and real HDFS.

A :class:`FaultRig` starts one such system; each ``scenario_*`` function submits jobs, injects one
fault mid-run, measures the time to recover and returns a :class:`FaultResult`: did every job
finish, and does every committed checkpoint still verify against its sha256 manifest (read back
through :mod:`dl2_mesos.storage`)? ``tests/faults`` asserts the correctness parts; ``dl2 bench
faults`` / ``bench/faults.py`` print the table.

Recovery time = from the end of the fault (the kill, or the moment the stopped service is back)
until every unfinished job has progressed beyond the epochs it had reached when the fault ended
(or finished). It includes re-training from the last checkpoint after a crash.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from dl2_mesos.storage import MANIFEST, CheckpointError, CheckpointStore
from dl2_mesos.testing.hdfs import HdfsCluster
from dl2_mesos.testing.localcluster import LocalCluster
from dl2_mesos.testing.recording_proxy import RecordingProxy
from dl2_mesos.testing.zookeeper import ZooKeeperServer, free_port

logger = logging.getLogger(__name__)

DL2 = str(Path(sys.executable).with_name("dl2"))
TOKEN = "fault-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MXNET_PROGRAM = ["python", "-m", "dl2_mesos.programs.mxnet_mlp", "--batch-sleep", "0.02", "--batches-per-epoch", "10"]
TINY = {"worker": {"cpus": 1, "gpus": 0, "mem": 256}, "ps": {"cpus": 0.5, "gpus": 0, "mem": 128},
        "max_ps": 1, "max_workers": 2}
TERMINAL = ("finished", "failed", "cancelled")
EXIT_LEADERSHIP_LOST = 75
_DIR_RE = re.compile(r"^\d{6,}(?:-[A-Za-z0-9][A-Za-z0-9._-]*)?$")


@dataclass(frozen=True)
class FaultResult:
    """One injected fault and what it did to the jobs."""

    fault: str
    recovery_s: float | None  # None: did not recover within the time limit
    finished: int
    submitted: int
    checkpoints_ok: bool
    checkpoints: int  # committed checkpoints verified (sha256) across the scenario's jobs
    detail: str = ""
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.finished == self.submitted and self.checkpoints_ok and self.recovery_s is not None


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``pred`` until it returns something truthy; AssertionError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = pred()
        except (requests.RequestException, ValueError, KeyError, OSError):
            v = None
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def get_json(url: str, timeout: float = 3.0) -> Any:
    """GET ``url`` as JSON (with the rigs' token: reads need it too); None when unreachable or not 2xx."""
    try:
        r = requests.get(url, headers=AUTH, timeout=timeout)
        return r.json() if r.ok else None
    except (requests.RequestException, ValueError):
        return None


class FrameworkProcess:
    """One ``dl2 framework`` replica as a subprocess, optionally supervised: an exit with code 75
    (leadership lost) is restarted, as the README asks of a supervisor."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path, port: int,
                 supervise: bool = True) -> None:
        self.name, self.argv, self.env, self.port = name, argv, env, port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_dir / f"{name}.log"
        self.supervise = supervise
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.exit_codes: list[int] = []
        self._stopping = False
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def start(self) -> FrameworkProcess:
        with self._lock:
            log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
            try:
                self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                             start_new_session=True)
            finally:
                log.close()
        if self.supervise and self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name=f"supervise-{self.name}", daemon=True)
            self._watcher.start()
        return self

    def _watch(self) -> None:
        while not self._stopping:
            p = self.proc
            if p is not None and p.poll() is not None:
                with self._lock:
                    if self._stopping or p is not self.proc:
                        continue
                    self.exit_codes.append(p.returncode)
                    self.proc = None
                if p.returncode == EXIT_LEADERSHIP_LOST:
                    logger.info("replica %s exited 75 (leadership lost); restarting it", self.name)
                    self.restarts += 1
                    time.sleep(0.5)
                    if not self._stopping:
                        self.start()
            time.sleep(0.2)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def health(self) -> dict[str, Any] | None:
        return get_json(self.url + "/health", timeout=2)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the replica (SIGKILL: it dies without cleanup and is not restarted)."""
        with self._lock:
            p = self.proc
            if sig == signal.SIGKILL:
                self.proc = None  # a SIGKILLed replica stays dead unless start() is called
        if p is not None and p.poll() is None:
            p.send_signal(sig)
            p.wait(15)

    def stop(self) -> None:
        self._stopping = True
        with self._lock:
            p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if self._watcher is not None:
            self._watcher.join(5)


class TcpProxy:
    """A TCP forwarder on 127.0.0.1 in front of one server (ZooKeeper here), so a test can cut
    one client off while others still reach the server: :meth:`block` drops every connection and
    refuses new ones until :meth:`unblock`. One thread, non-blocking sockets."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self.blocked = False
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._peer: dict[socket.socket, socket.socket] = {}
        self._lock = threading.Lock()
        self._drop = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"tcp-proxy-{self.port}", daemon=True)
        self._thread.start()

    def block(self) -> None:
        with self._lock:
            self.blocked = self._drop = True

    def unblock(self) -> None:
        with self._lock:
            self.blocked = False

    def close(self) -> None:
        self._closed = True
        self._thread.join(5)

    def _close_pair(self, s: socket.socket) -> None:
        other = self._peer.pop(s, None)
        for x in (s, other):
            if x is None:
                continue
            self._peer.pop(x, None)
            try:
                self._sel.unregister(x)
            except (KeyError, ValueError):
                pass
            x.close()

    def _run(self) -> None:
        while not self._closed:
            with self._lock:
                drop, self._drop = self._drop, False
                blocked = self.blocked
            if drop:
                for s in list(self._peer):
                    self._close_pair(s)
            for key, _ in self._sel.select(0.05):
                sock = key.fileobj
                if sock is self._listener:
                    try:
                        client, _ = self._listener.accept()
                    except OSError:
                        continue
                    if blocked:
                        client.close()  # as if the network dropped it
                        continue
                    try:
                        upstream = socket.create_connection(self.target, timeout=2)
                    except OSError:
                        client.close()
                        continue
                    for x in (client, upstream):
                        x.setblocking(False)
                        self._sel.register(x, selectors.EVENT_READ, None)
                    self._peer[client], self._peer[upstream] = upstream, client
                    continue
                if sock not in self._peer:
                    continue
                try:
                    data = sock.recv(65536)
                    if not data:
                        raise ConnectionResetError
                    self._peer[sock].setblocking(True)
                    self._peer[sock].sendall(data)
                    self._peer[sock].setblocking(False)
                except OSError:
                    self._close_pair(sock)
        for s in list(self._peer):
            self._close_pair(s)
        self._sel.close()
        self._listener.close()


@dataclass
class RigOptions:
    """How a :class:`FaultRig` is put together (defaults: fast, small, 2 cores friendly)."""

    agents: int = 2
    agent_cpus: float = 4.0
    replicas: int = 1
    slot: str = "3s"
    policy: str = "fifo"
    checkpoint_every_s: float = 1.5
    extra_framework_args: tuple[str, ...] = ()
    executor_env: dict[str, str] = field(default_factory=dict)
    framework_env: dict[str, str] = field(default_factory=dict)
    via_proxy: bool = False  # the framework reaches the master through a RecordingProxy
    zk_proxies: bool = False  # each replica reaches ZooKeeper through its own TcpProxy (rig.zk_proxies)


class FaultRig:
    """A running system: local cluster + ``dl2 framework`` replica(s) + checkpoints on HDFS.

    Args:
        name: scenario name (HDFS folder and log names).
        hdfs: a started HDFS; checkpoints go to ``<hdfs.url>/dl2-faults/<name>-<random>``.
        zk: a started ZooKeeper, or None for the file state store (then one replica only).
        workdir: logs, state and the cluster's sandboxes go here.
    """

    def __init__(self, name: str, hdfs: HdfsCluster, zk: ZooKeeperServer | None, workdir: Path,
                 options: RigOptions | None = None) -> None:
        self.name, self.hdfs, self.zk = name, hdfs, zk
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.opt = options or RigOptions()
        if zk is None and self.opt.replicas != 1:
            raise ValueError("several replicas need ZooKeeper")
        suffix = os.urandom(3).hex()
        self.checkpoint_root = f"{hdfs.url}/dl2-faults/{name}-{suffix}"
        self.zk_url = zk.url(f"/dl2-faults-{name}-{suffix}") if zk is not None else "none"
        self.cluster: LocalCluster | None = None
        self.replicas: list[FrameworkProcess] = []
        self.job_ids: list[str] = []
        self.proxy: RecordingProxy | None = None
        self.zk_proxies: list[TcpProxy] = []  # by replica index, with RigOptions.zk_proxies

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> FaultRig:
        try:
            # A fresh port range per rig: ps-lite cannot bind a port still in TIME_WAIT, and the
            # framework takes the lowest offered ports, so back-to-back rigs would collide.
            port_base = 10000 + 1000 * random.randrange(0, 12)
            self.cluster = LocalCluster(agents=self.opt.agents, cpus=self.opt.agent_cpus, gpus=0, mem="8GiB",
                                        port_base=port_base,
                                        status_update_retry_interval=1.0, executor_shutdown_grace_period=3.0,
                                        work_dir=str(self.workdir / "cluster")).start()
            if self.opt.via_proxy:
                self.proxy = RecordingProxy(self.cluster.master).start()
            for i in range(self.opt.replicas):
                self.replicas.append(self._replica(i).start())
                if i == 0:
                    wait_for(lambda: (self.replicas[0].health() or {}).get("registered"), 60,
                             f"{self.name}: first replica to lead and subscribe")
            if len(self.replicas) > 1:
                wait_for(lambda: all((r.health() or {}).get("role") == "standby" for r in self.replicas[1:]), 60,
                         f"{self.name}: standbys")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for r in self.replicas:
            r.stop()
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None
        if self.proxy is not None:
            self.proxy.close()
        for p in self.zk_proxies:
            p.close()

    def _replica(self, index: int) -> FrameworkProcess:
        port = free_port()
        executor_env = {"DL2_MAX_RESTARTS": "3", "DL2_RESTORE_WAIT_S": "10", "DL2_LOG_LEVEL": "INFO",
                        **self.opt.executor_env}
        executor = " ".join(["env", *(f"{k}={shlex.quote(v)}" for k, v in executor_env.items()),
                             shlex.quote(sys.executable), "-m", "dl2_mesos.executor"])
        master = self.proxy.address if self.proxy is not None else self.cluster.master
        zk_url = self.zk_url
        if self.opt.zk_proxies and self.zk is not None:
            zp = TcpProxy(self.zk.port)
            self.zk_proxies.append(zp)
            zk_url = zk_url.replace(f"127.0.0.1:{self.zk.port}", f"127.0.0.1:{zp.port}", 1)
        argv = [DL2, "framework", "--master", master, "--zk", zk_url,
                "--state-dir", str(self.workdir / "state"), "--policy", self.opt.policy, "--slot", self.opt.slot,
                "--api", f"127.0.0.1:{port}", "--advertise-url", f"http://127.0.0.1:{port}",
                "--executor-command", executor, "--checkpoint-root", self.checkpoint_root, "--api-token", TOKEN,
                "--no-online-learning", *self.opt.extra_framework_args]
        env = dict(os.environ, DL2_ZK_TIMEOUT="4s", DL2_OFFER_WAIT="1s", DL2_RESCALE_RESEND="2s",
                   DL2_KILL_GRACE="5s", DL2_PROGRESS_INTERVAL="0.5s", DL2_LAUNCH_TIMEOUT="20s",
                   DL2_CONNECT_TIMEOUT="60s",
                   DL2_TASK_ENV=json.dumps({"DL2_CHECKPOINT_EVERY_S": str(self.opt.checkpoint_every_s)}),
                   **self.opt.framework_env)
        return FrameworkProcess(f"{self.name}-r{index}", argv, env, self.workdir, port,
                                supervise=self.zk is not None)

    # -- the API -----------------------------------------------------------------------------------
    def leader(self) -> FrameworkProcess | None:
        """The replica that leads and is subscribed to the master (None while nobody is)."""
        for r in self.replicas:
            h = r.health() if r.alive else None
            if h and h.get("role") == "leader" and h.get("registered"):
                return r
        return None

    def api(self, timeout: float = 60.0) -> str:
        return wait_for(lambda: (lambda r: r.url if r else None)(self.leader()), timeout, f"{self.name}: a leader").rstrip("/")

    def submit(self, count: int, epochs: float, prefix: str = "job") -> list[str]:
        ids = []
        for i in range(count):
            spec = {"job_type": "resnet-50", "epochs": epochs, "name": f"{prefix}{i}", "runtime": "mxnet",
                    "command": MXNET_PROGRAM, **TINY}
            r = requests.post(self.api() + "/api/v1/jobs", json=spec, headers=AUTH, timeout=20)
            if r.status_code != 201:
                raise AssertionError(f"submit refused: {r.status_code} {r.text}")
            ids.append(r.json()["id"])
        self.job_ids += ids
        return ids

    def post_job(self, spec: dict[str, Any], headers: dict[str, str] | None = None) -> requests.Response:
        """POST one job spec to the leader as given (with the rig's token unless ``headers``)."""
        r = requests.post(self.api() + "/api/v1/jobs", json=spec, headers=AUTH if headers is None else headers,
                          timeout=20)
        if r.status_code == 201:
            self.job_ids.append(r.json()["id"])
        return r

    def jobs(self) -> dict[str, dict[str, Any]]:
        """The leader's brief view of every job (empty while no leader answers)."""
        leader = self.leader()
        if leader is None:
            return {}
        data = get_json(leader.url + "/api/v1/jobs")
        return {j["id"]: j for j in (data or {}).get("jobs", [])}

    def job(self, job_id: str) -> dict[str, Any] | None:
        leader = self.leader()
        return get_json(f"{leader.url}/api/v1/jobs/{job_id}") if leader else None

    def progress(self) -> dict[str, float]:
        return {j: v["epochs_done"] for j, v in self.jobs().items() if j in self.job_ids}

    def wait_phase(self, phase: str, timeout: float, ids: list[str] | None = None) -> dict[str, Any]:
        ids = ids or self.job_ids
        return wait_for(lambda: (lambda js: js if all(js.get(j, {}).get("phase") == phase for j in ids) else None)(
            self.jobs()), timeout, f"{self.name}: jobs {phase}", interval=0.1)

    def wait_recovered(self, before: dict[str, float], since: float, timeout: float = 120.0,
                       ids: list[str] | None = None) -> float | None:
        """Seconds from ``since`` until every job (of ``ids``) not finished has passed its ``before``
        epochs (or ended); None when that did not happen within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            js = self.jobs()
            if js and all(j in js and (js[j]["phase"] in TERMINAL or js[j]["epochs_done"] > before.get(j, 0.0))
                          for j in ids or self.job_ids):
                return time.monotonic() - since
            time.sleep(0.1)
        return None

    def wait_all_done(self, timeout: float = 180.0) -> dict[str, dict[str, Any]]:
        """Wait until every job is terminal (or the time is up); returns the final views."""
        try:
            wait_for(lambda: (lambda js: js and all(js.get(j, {}).get("phase") in TERMINAL for j in self.job_ids))(
                self.jobs()), timeout, f"{self.name}: all jobs to end", interval=0.3)
        except AssertionError:
            logger.warning("%s: not every job ended within %.0fs", self.name, timeout)
        out = {}
        for j in self.job_ids:  # leadership may flap for a while after a fault: wait for an answer
            try:
                out[j] = wait_for(lambda j=j: self.job(j), 60, f"{self.name}: a leader to show {j}", interval=0.3)
            except AssertionError:
                out[j] = {}
        return out

    # -- checkpoints -------------------------------------------------------------------------------
    def verify_checkpoints(self, jobs: dict[str, dict[str, Any]]) -> tuple[bool, int, list[str]]:
        """Every job's committed checkpoints restore with matching sha256; none is half-written;
        the newest of a finished job is its final one."""
        problems: list[str] = []
        verified = 0
        for jid, job in jobs.items():
            uri = job.get("checkpoint_uri") or f"{self.checkpoint_root}/{jid}"
            n, errs = verify_job_checkpoints(uri, job.get("epochs"), self.workdir / "verify" / jid,
                                             require_final=job.get("phase") == "finished")
            verified += n
            problems += [f"{jid}: {e}" for e in errs]
        return not problems, verified, problems

    def result(self, fault: str, recovery_s: float | None, detail: str = "", timeout: float = 180.0) -> FaultResult:
        jobs = self.wait_all_done(timeout)
        finished = sum(1 for j in jobs.values() if j.get("phase") == "finished")
        ok, n, problems = self.verify_checkpoints(jobs)
        if finished != len(self.job_ids):
            problems = problems + [f"{j}: {v.get('phase')} {v.get('message', '')}".strip()
                                   for j, v in jobs.items() if v.get("phase") != "finished"]
        return FaultResult(fault, recovery_s, finished, len(self.job_ids), ok, n, detail, tuple(problems))

    # -- processes ---------------------------------------------------------------------------------
    def executor_pids(self) -> list[int]:
        assert self.cluster is not None
        return self.cluster.executor_pids()

    def job_processes(self, role: str = "worker") -> list[tuple[int, str]]:
        """(pid, job id) of live training processes of ``role`` (children of the executors)."""
        import psutil

        out = []
        for pid in self.executor_pids():
            try:
                children = psutil.Process(pid).children(recursive=True)
            except psutil.Error:
                continue
            for c in children:
                try:
                    env = c.environ()
                except psutil.Error:
                    continue
                if env.get("DL2_ROLE") == role:
                    out.append((c.pid, env.get("DL2_JOB_ID", "")))
        return out


def verify_job_checkpoints(uri: str, epochs: float | None, scratch: Path,
                           require_final: bool = True) -> tuple[int, list[str]]:
    """Check one job's checkpoint root through the storage layer; returns (verified, problems)."""
    problems: list[str] = []
    try:
        store = CheckpointStore(uri, keep=1000)
        infos = store.list()
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in store.fs.ls(store.root, detail=False)]
    except (OSError, CheckpointError) as exc:
        return 0, [f"cannot list {uri}: {exc}"]
    committed = [n for n in names if _DIR_RE.match(n)]
    listed = {i.dirname for i in infos}
    for n in committed:
        if n not in listed:
            problems.append(f"{n} has no valid {MANIFEST} (half-written or corrupt)")
    if not infos:
        problems.append("no committed checkpoint")
    verified = 0
    for info in infos:
        try:
            store.restore(scratch / info.dirname, name=info.dirname)
            verified += 1
        except (OSError, CheckpointError) as exc:
            problems.append(f"{info.dirname} fails verification: {exc}")
    if infos and require_final:
        last = infos[-1]
        if not last.meta.get("final") and "final" not in last.dirname:
            problems.append(f"newest checkpoint {last.dirname} is not the final one")
        state = scratch / last.dirname / "state.json"
        if epochs is not None and state.exists():
            done = float(json.loads(state.read_text()).get("epoch", 0))
            if done + 1e-6 < float(epochs):
                problems.append(f"final checkpoint at epoch {done}, job wanted {epochs}")
    return verified, problems


@contextmanager
def scratch_dir(prefix: str = "dl2-faults-") -> Iterator[Path]:
    import shutil

    d = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
