"""Issue 14 item 4: clients that open connections and never finish their headers cannot exhaust the
replica's file descriptors, and cannot cost it the leadership. A real ``dl2 framework`` process, a real
ZooKeeper, a bounded number of slow connections on loopback."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from dl2_mesos.services.localcluster import LocalCluster
from dl2_mesos.services.zookeeper import free_port

DL2 = str(Path(sys.executable).with_name("dl2"))
PARTIAL_HEAD = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _health(api: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return requests.get(api + "/health", timeout=2).json()
        except (requests.RequestException, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _slow_clients(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            s.sendall(PARTIAL_HEAD)
        except OSError:
            pass  # closed at once: over the cap
        socks.append(s)
    return socks


def _closed_by_server(s: socket.socket) -> bool:
    s.settimeout(0.05)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def _with_nofile(soft: int, hard: int | str, argv: list[str]) -> list[str]:
    """``argv`` started under util-linux ``prlimit`` with these open-files limits. (A ``preexec_fn``
    would fork the threaded pytest process and can deadlock the child before exec.)"""
    return ["prlimit", f"--nofile={soft}:{hard}", *argv]


def _framework(args: list[str], env: dict[str, str], limit: int | None = None, log: Path | None = None) -> subprocess.Popen:
    argv = [DL2, "framework", "--policy", "fifo", "--no-online-learning", *args]
    if limit is not None:
        argv = _with_nofile(limit, limit, argv)
    base = {k: v for k, v in os.environ.items() if not k.startswith("DL2_")}
    return subprocess.Popen(argv, env={**base, **env}, stdout=subprocess.DEVNULL,
                            stderr=open(log, "wb") if log else subprocess.DEVNULL)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_ops_slow_headers_are_capped_and_timed_out(tmp_path):
    port = free_port()
    proc = _framework(["--zk", "none", "--state-dir", str(tmp_path / "s"), "--master", f"127.0.0.1:{free_port()}",
                       "--connect-timeout", "300s", "--api", f"127.0.0.1:{port}"],
                      {"DL2_API_MAX_CONNECTIONS": "50", "DL2_API_HEADER_TIMEOUT": "1s"})
    socks: list[socket.socket] = []
    try:
        api = f"http://127.0.0.1:{port}"
        _health(api)
        before = _fds(proc.pid)
        socks = _slow_clients(port, 300)
        time.sleep(0.5)
        during = _fds(proc.pid)
        assert during - before <= 50 + 10, f"{during - before} more descriptors for 300 slow clients (cap 50)"
        # the server closes every one of them: over the cap at once, the rest after the header timeout
        deadline = time.monotonic() + 10
        while not all(_closed_by_server(s) for s in socks):
            assert time.monotonic() < deadline, "slow connections still open after the header timeout"
            time.sleep(0.2)
        assert _health(api, timeout=5)["status"] == "ok"
        assert _fds(proc.pid) - before <= 5
    finally:
        for s in socks:
            s.close()
        _stop(proc)


def test_ops_soft_open_files_limit_is_raised_to_the_hard_one(tmp_path):
    port = free_port()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 300:
        pytest.skip(f"hard open-files limit {hard} on this machine leaves nothing to raise")

    base = {k: v for k, v in os.environ.items() if not k.startswith("DL2_")}
    argv = [DL2, "framework", "--policy", "fifo", "--zk", "none", "--state-dir", str(tmp_path / "s"),
            "--master", f"127.0.0.1:{free_port()}", "--connect-timeout", "300s", "--api", f"127.0.0.1:{port}"]
    hard_text = "unlimited" if hard == resource.RLIM_INFINITY else hard
    proc = subprocess.Popen(_with_nofile(256, hard_text, argv), env=base, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _health(f"http://127.0.0.1:{port}")
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        line = next(ln for ln in limits.splitlines() if ln.startswith("Max open files"))
        assert line.split()[3] == (str(hard) if hard != resource.RLIM_INFINITY else "unlimited"), line
    finally:
        _stop(proc)


def test_ops_descriptor_exhaustion_does_not_cost_leadership(zookeeper, tmp_path):
    """A low hard limit (600) and 1000 slow clients: the ZooKeeper session, the leadership and the
    API survive, because the connection cap leaves descriptors for everything else."""
    port = free_port()
    with LocalCluster(agents=0, allocation_interval=0.2, heartbeat_interval=2.0) as cluster:
        proc = _framework(["--zk", zookeeper.url(f"/dl2-fd-{port}"), "--master", cluster.master,
                           "--api", f"127.0.0.1:{port}", "--advertise-url", f"http://127.0.0.1:{port}"],
                          {"DL2_API_HEADER_TIMEOUT": "30s", "DL2_ZK_TIMEOUT": "4s"}, limit=600,
                          log=tmp_path / "framework.log")
        socks: list[socket.socket] = []
        try:
            api = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while _health(api).get("role") != "leader" or not _health(api).get("registered"):
                assert proc.poll() is None, (tmp_path / "framework.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "never became leader"
                time.sleep(0.3)
            socks = _slow_clients(port, 1000)
            time.sleep(8)  # two ZooKeeper session timeouts while the slow clients hold their connections
            assert proc.poll() is None, (tmp_path / "framework.log").read_text()[-2000:]
            for s in socks:
                s.close()
            socks = []
            time.sleep(0.5)
            h = _health(api, timeout=10)
            assert h["role"] == "leader" and h["registered"], h
        finally:
            for s in socks:
                s.close()
            _stop(proc)
        err = (tmp_path / "framework.log").read_text()
        assert "fencing this leader" not in err and "session lost" not in err, err[-2000:]
