"""Start a real standalone ZooKeeper (Debian's ``zookeeper`` package) for tests, benchmarks and the demo."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

logger = logging.getLogger(__name__)

ZOOKEEPER_JAR = os.environ.get("DL2_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def zookeeper_available() -> bool:
    return Path(ZOOKEEPER_JAR).exists() and shutil.which("java") is not None


def four_letter(port: int, cmd: str = "srvr", timeout: float = 1.0) -> str:
    """Send a four-letter command; returns the reply ('' when nothing answers)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(cmd.encode())
            chunks = []
            while True:
                b = s.recv(4096)
                if not b:
                    break
                chunks.append(b)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """A standalone ZooKeeper on 127.0.0.1, data in a temporary folder.

    ``stop()`` and ``start()`` can be called again (to simulate an outage); the data folder and
    port are kept so the same ensemble comes back.
    """

    def __init__(self, port: int | None = None, workdir: str | None = None) -> None:
        self.port = port or free_port()
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="dl2-zk-"))
        self.proc: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        """kazoo-style connection string."""
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str = "") -> str:
        """A ``zk://`` URL for this server with an optional path."""
        return f"zk://{self.hosts}{chroot}"

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        if not zookeeper_available():
            raise RuntimeError(f"ZooKeeper jar {ZOOKEEPER_JAR} or java not found (bash scripts/install_services.sh)")
        conf = self.workdir / "conf"
        data = self.workdir / "data"
        conf.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        (conf / "zoo.cfg").write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat",
                    "maxSessionTimeout=60000",
                    "minSessionTimeout=1000",
                ]
            )
            + "\n"
        )
        (conf / "log4j.properties").write_text("log4j.rootLogger=WARN, CONSOLE\nlog4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\nlog4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n")
        log = open(self.workdir / "zookeeper.log", "ab")
        self.proc = subprocess.Popen(
            [
                "java",
                "-Xmx256m",
                "-Dzookeeper.admin.enableServer=false",
                "-cp",
                f"{conf}:{ZOOKEEPER_JAR}:/usr/share/java/*",
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(conf / "zoo.cfg"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Mode: standalone" in four_letter(self.port):
                logger.info("ZooKeeper ready on %s", self.hosts)
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.workdir}/zookeeper.log")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper not ready after {timeout}s; see {self.workdir}/zookeeper.log")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Stop and remove the data folder (if this object created it)."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
