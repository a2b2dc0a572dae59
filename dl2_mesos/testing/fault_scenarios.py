"""The fault scenarios: each starts a :class:`~dl2_mesos.testing.faults.FaultRig`, runs small real
MXNet jobs, injects one fault mid-run and returns :class:`~dl2_mesos.testing.faults.FaultResult`s.

Scenarios that need ZooKeeper take the shared server, except the ZooKeeper outage, which stops
its own (other users of a shared server would be disturbed). The HDFS outage stops and restarts
the shared HDFS's NameNode (the DataNode keeps running and re-registers).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import requests

from dl2_mesos.testing.faults import AUTH, FaultResult, FaultRig, RigOptions, TERMINAL, get_json, wait_for
from dl2_mesos.testing.hdfs import HdfsCluster
from dl2_mesos.testing.zookeeper import ZooKeeperServer

logger = logging.getLogger(__name__)

EPOCHS = 8.0  # 80 batches per job: a few seconds of training, enough to fault mid-run
ScenarioFn = Callable[[HdfsCluster, ZooKeeperServer, Path], list[FaultResult]]


def _running_with_progress(rig: FaultRig, timeout: float = 90.0, min_epochs: float = 0.5) -> dict[str, float]:
    """Wait until every job runs and has trained a little; returns the progress then."""
    return wait_for(lambda: (lambda p: p if len(p) == len(rig.job_ids) and all(v >= min_epochs for v in p.values())
                             else None)(rig.progress()), timeout, f"{rig.name}: jobs training", interval=0.1)


def leader_killed_during_rescale(hdfs: HdfsCluster, zk: ZooKeeperServer, workdir: Path) -> list[FaultResult]:
    """Two replicas; job 0 grows from 1 to 2 workers when a second agent joins; the leader is
    SIGKILLed while that rescale is in flight. The standby must take over and finish it."""
    opt = RigOptions(agents=1, agent_cpus=2.0, replicas=2)
    with FaultRig("leader-kill", hdfs, zk, workdir / "leader-kill", opt) as rig:
        ids = rig.submit(2, EPOCHS + 4)
        wait_for(lambda: rig.jobs().get(ids[0], {}).get("phase") == "running", 90, "job 0 running", interval=0.1)
        old = rig.leader()
        assert old is not None
        rig.cluster.add_agent(cpus=3.0)
        wait_for(lambda: (lambda j: j.get("phase") == "rescaling" or j.get("generation", 0) >= 1)(
            rig.jobs().get(ids[0], {})), 60, "job 0 to start rescaling", interval=0.05)
        before = rig.progress()
        old.kill(signal.SIGKILL)
        t = time.monotonic()
        rec = rig.wait_recovered(before, t)
        new = rig.leader()
        detail = f"new leader {new.name if new else None}; job 0 rescales: {rig.jobs().get(ids[0], {}).get('rescales')}"
        res = rig.result("leader SIGKILL during rescale", rec, detail)
        rescales = (rig.job(ids[0]) or {}).get("rescales", 0)
        if rescales < 1:
            res = FaultResult(res.fault, res.recovery_s, res.finished, res.submitted, res.checkpoints_ok,
                              res.checkpoints, res.detail, res.problems + ("job 0 never rescaled",))
        return [res]


class LeadershipMonitor:
    """Asks every replica's ``/health`` about ten times a second (one thread per replica, so a
    slow answer does not delay the others) and records, per replica, the intervals in which its
    consecutive answers said ``role == "leader"``. :attr:`overlaps` lists every time two replicas'
    leading intervals intersect: two leaders acting at once (both subscribed, both deciding)."""

    def __init__(self, rig: FaultRig, interval: float = 0.1) -> None:
        self.rig, self.interval = rig, interval
        self.answers = 0
        self._intervals: dict[str, list[list[float]]] = {r.name: [] for r in rig.replicas}
        self._open: dict[str, bool] = {r.name: False for r in rig.replicas}
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._poll, args=(r,), name=f"monitor-{r.name}", daemon=True)
                         for r in rig.replicas]

    def __enter__(self) -> LeadershipMonitor:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def leaders(self) -> list[str]:
        """The replicas that say they lead right now."""
        return [r.name for r in self.rig.replicas
                if r.alive and ((r.health() or {}).get("role") == "leader")]

    def _poll(self, r) -> None:  # noqa: ANN001 - FrameworkProcess
        while not self._stop.wait(self.interval):
            h = get_json(r.url + "/health", timeout=1.5) if r.alive else None
            now = time.monotonic() - self._t0
            with self._lock:
                if h is None:
                    continue  # no answer: no evidence either way
                self.answers += 1
                if h.get("role") == "leader":
                    if self._open[r.name]:
                        self._intervals[r.name][-1][1] = now
                    else:
                        self._intervals[r.name].append([now, now])
                        self._open[r.name] = True
                else:
                    self._open[r.name] = False

    @property
    def overlaps(self) -> list[tuple[float, float, str, str]]:
        """(from, to, replica, replica): seconds since the monitor started."""
        out = []
        with self._lock:
            names = list(self._intervals)
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    for s1, e1 in self._intervals[a]:
                        for s2, e2 in self._intervals[b]:
                            if max(s1, s2) <= min(e1, e2):
                                out.append((round(max(s1, s2), 1), round(min(e1, e2), 1), a, b))
        return sorted(out)


def zookeeper_outage(hdfs: HdfsCluster, zk: ZooKeeperServer, workdir: Path, downtime: float = 20.0,
                     leader_late_s: float = 12.0) -> list[FaultResult]:
    """ZooKeeper (its own server) stopped for ``downtime`` s mid-run and restarted; the leader
    reaches it again only ``leader_late_s`` s after the standby does (each replica talks to
    ZooKeeper through its own proxy), so its session expires on the server and the standby is
    elected while the old leader is still cut off: the race of a long outage. With a downtime
    longer than the session timeout (4 s here) the leader must fence itself (stop its driver, exit
    75 for the rig's supervisor) before anyone else can be elected: at no time may two replicas
    report leading, and afterwards exactly one leads."""
    own = ZooKeeperServer(workdir=str(workdir / "zk-outage-data")).start()
    try:
        opt = RigOptions(agents=2, agent_cpus=3.0, replicas=2, zk_proxies=True)
        with FaultRig("zk-outage", hdfs, own, workdir / "zk-outage", opt) as rig:
            rig.submit(2, EPOCHS + 12)
            _running_with_progress(rig)
            with LeadershipMonitor(rig) as mon:
                old = rig.leader()
                late = rig.zk_proxies[rig.replicas.index(old)] if old is not None else None
                own.stop()
                if late is not None:
                    late.block()
                time.sleep(downtime)
                before = rig.progress() or {j: 0.0 for j in rig.job_ids}
                own.start()
                t = time.monotonic()
                if late is not None:
                    threading.Timer(leader_late_s, late.unblock).start()
                # progress as known before the outage: the view may be empty while nobody leads
                rec = rig.wait_recovered(before, t)
                res = rig.result(f"ZooKeeper down {downtime:.0f}s", rec)
                if late is not None:
                    late.unblock()
                leaders_after = mon.leaders()
            restarts = sum(r.restarts for r in rig.replicas)
            problems = list(res.problems)
            overlaps = mon.overlaps
            if overlaps:
                s0, e0, a, b = overlaps[0]
                problems.append(f"two replicas led at once {len(overlaps)} time(s): first {a} and {b} "
                                f"from {s0}s to {e0}s ({mon.answers} health answers)")
            if len(leaders_after) != 1:
                problems.append(f"after the outage {len(leaders_after)} replicas lead: {leaders_after}")
            detail = (f"replica restarts by supervisor: {restarts}; {mon.answers} health answers, "
                      f"{len(overlaps)} overlaps of two leaders")
            return [FaultResult(res.fault, res.recovery_s, res.finished, res.submitted, res.checkpoints_ok,
                                res.checkpoints, detail, tuple(problems))]
    finally:
        own.close()


def agent_removed(hdfs: HdfsCluster, zk: ZooKeeperServer, workdir: Path) -> list[FaultResult]:
    """The agent running job 0 vanishes; its tasks must be relaunched on the remaining agents."""
    opt = RigOptions(agents=3, agent_cpus=3.0)
    with FaultRig("agent-removed", hdfs, None, workdir / "agent-removed", opt) as rig:
        ids = rig.submit(2, EPOCHS + 4)
        before = _running_with_progress(rig, min_epochs=1.0)
        victim = next(t["agent_id"] for t in rig.job(ids[0])["tasks"] if t["state"] == "TASK_RUNNING")
        rig.cluster.remove_agent(victim)
        t = time.monotonic()
        rec = rig.wait_recovered(rig.progress() or before, t)
        moved = {t["agent_id"] for t in (rig.job(ids[0]) or {}).get("tasks", [])}
        return [rig.result("agent removed", rec, f"job 0 now on {len(moved - {victim})} other agent(s)")]


def process_kills(hdfs: HdfsCluster, zk: ZooKeeperServer, workdir: Path) -> list[FaultResult]:
    """Two runs on one rig: a training worker SIGKILLed as if out of memory (the executor restarts
    it from the checkpoint), then a whole executor SIGKILLed (Mesos reports its tasks failed and
    the framework relaunches the job)."""
    out = []
    opt = RigOptions(agents=2, agent_cpus=3.0)
    with FaultRig("process-kills", hdfs, None, workdir / "process-kills", opt) as rig:
        ids = rig.submit(2, EPOCHS + 6)
        _running_with_progress(rig, min_epochs=1.0)
        pid = next(p for p, j in rig.job_processes("worker") if j == ids[0])
        victim = next((epid for epid in rig.executor_pids() if _executor_of(epid) == ids[1]), None)
        if victim is None:
            raise AssertionError(f"no executor process for {ids[1]}")
        before = rig.progress()
        os.kill(pid, signal.SIGKILL)
        os.kill(victim, signal.SIGKILL)
        t = time.monotonic()
        recs = {}
        threads = [threading.Thread(target=lambda j=j: recs.__setitem__(j, rig.wait_recovered(before, t, ids=[j])))
                   for j in ids]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        rec_oom, rec_exec = recs[ids[0]], recs[ids[1]]
        final = rig.result("", None)
        for name, rec, jid in (("worker SIGKILL (as OOM)", rec_oom, ids[0]), ("executor SIGKILL", rec_exec, ids[1])):
            done = int((rig.job(jid) or {}).get("phase") == "finished")
            out.append(FaultResult(name, rec, done, 1, final.checkpoints_ok, final.checkpoints,
                                   f"job {jid}", final.problems))
    return out


def namenode_outage(hdfs: HdfsCluster, zk: ZooKeeperServer, workdir: Path, downtime: float = 8.0) -> list[FaultResult]:
    """The HDFS NameNode stopped while jobs checkpoint every second, then restarted."""
    opt = RigOptions(agents=2, agent_cpus=3.0, checkpoint_every_s=1.0)
    with FaultRig("namenode-outage", hdfs, None, workdir / "namenode-outage", opt) as rig:
        rig.submit(2, EPOCHS + 10)
        _running_with_progress(rig, min_epochs=1.0)
        stop_namenode(hdfs)
        try:
            time.sleep(downtime)
        finally:
            start_namenode(hdfs)
        before = rig.progress()
        t = time.monotonic()
        rec = rig.wait_recovered(before, t)
        return [rig.result(f"HDFS NameNode down {downtime:.0f}s", rec)]


def mesos_faults(hdfs: HdfsCluster, zk: ZooKeeperServer, workdir: Path) -> list[FaultResult]:
    """The local master restarted (empty memory; agents and the framework re-register), then the
    framework's event stream cut (it must re-subscribe with the same framework id)."""
    out = []
    opt = RigOptions(agents=2, agent_cpus=3.0)
    with FaultRig("mesos", hdfs, None, workdir / "mesos", opt) as rig:
        rig.submit(2, EPOCHS + 14)
        _running_with_progress(rig, min_epochs=1.0)
        fw_id = requests.get(rig.api() + "/api/v1/cluster", headers=AUTH, timeout=5).json()["framework_id"]
        before = rig.progress()
        rig.cluster.restart_master(downtime=2.0)
        t = time.monotonic()
        rec_master = rig.wait_recovered(before, t)
        before = rig.progress()
        if not rig.cluster.disconnect_framework(fw_id):
            raise AssertionError(f"framework {fw_id} not connected to the restarted master")
        t = time.monotonic()
        rec_cut = rig.wait_recovered(before, t)
        resub = wait_for(lambda: [f for f in rig.cluster.state()["frameworks"] if f.get("connected")], 30,
                         "framework to re-subscribe")
        final = rig.result("", None)
        ids_seen = sorted({f["id"] for f in rig.cluster.state()["frameworks"]})
        problems = final.problems + (() if ids_seen == [fw_id] and resub[0]["id"] == fw_id
                                     else (f"framework ids after re-subscribe: {ids_seen}, expected [{fw_id}]",))
        for name, rec in (("Mesos master restarted", rec_master), ("framework connection cut", rec_cut)):
            out.append(FaultResult(name, rec, final.finished, final.submitted, final.checkpoints_ok and not problems,
                                   final.checkpoints, f"framework id kept: {ids_seen == [fw_id]}", problems))
    return out


def _executor_of(pid: int) -> str | None:
    """The job id in an executor process's MESOS_EXECUTOR_ID (``dl2-<job>@<agent>``)."""
    try:
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")  # noqa: SIM115
    except OSError:
        return None
    for e in env:
        if e.startswith(b"MESOS_EXECUTOR_ID=dl2-"):
            return e.split(b"=", 1)[1][4:].decode().rsplit("@", 1)[0]
    return None


# -- NameNode alone ------------------------------------------------------------------------------
def stop_namenode(hdfs: HdfsCluster) -> None:
    """Stop only the NameNode of ``hdfs`` (the DataNode keeps running)."""
    proc = hdfs.namenode
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired; escalate
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    hdfs.namenode = None


def start_namenode(hdfs: HdfsCluster, timeout: float = 60.0) -> None:
    """Start the NameNode again on the same folders and ports; wait until HDFS takes writes."""
    _, cp = hdfs._write_config()  # noqa: SLF001 - same classpath as HdfsCluster.start
    hdfs.namenode = hdfs._java(cp, "org.apache.hadoop.hdfs.server.namenode.NameNode", log="namenode.log")  # noqa: SLF001
    deadline = time.monotonic() + timeout
    while not hdfs.ready():
        if time.monotonic() > deadline:
            raise RuntimeError("NameNode did not come back")
        time.sleep(0.25)


SCENARIOS: dict[str, ScenarioFn] = {
    "leader-kill": leader_killed_during_rescale,
    "zk-outage": zookeeper_outage,
    "agent-removed": agent_removed,
    "process-kills": process_kills,
    "namenode-outage": namenode_outage,
    "mesos": mesos_faults,
}


def run_scenarios(hdfs: HdfsCluster, zk: ZooKeeperServer, workdir: Path,
                  names: list[str] | None = None) -> list[FaultResult]:
    """Run the named scenarios (all by default) one after another; a scenario that raises is
    reported as a row with no recovery and its error."""
    out: list[FaultResult] = []
    for name in names or list(SCENARIOS):
        t0 = time.monotonic()
        try:
            out += SCENARIOS[name](hdfs, zk, workdir)
        except (AssertionError, RuntimeError, OSError, requests.RequestException) as exc:
            logger.exception("scenario %s failed", name)
            out.append(FaultResult(name, None, 0, 0, False, 0, f"error: {exc}", (str(exc),)))
        logger.info("scenario %s took %.1fs", name, time.monotonic() - t0)
    return out


__all__ = ["SCENARIOS", "run_scenarios", "stop_namenode", "start_namenode", "TERMINAL"]
