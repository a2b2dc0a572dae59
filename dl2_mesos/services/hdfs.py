"""Start a real single-node HDFS (Hadoop 2.7.3 NameNode + DataNode + WebHDFS) for tests and benchmarks.

The jars come from ``.cache/hadoop-jars`` (see ``scripts/install_services.sh``); Java is Debian's
OpenJDK 17; WebHDFS needs Debian's jersey1 jars. Every address is on 127.0.0.1 with free ports.

``stop()`` and ``start()`` may be called again to simulate an outage: the name and data folders and
the ports are kept, so the same file system comes back (no re-format).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from dl2_mesos.services.zookeeper import free_port

logger = logging.getLogger(__name__)

_REPO_ROOT = Path(__file__).resolve().parents[2]
HADOOP_JARS = Path(os.environ.get("DL2_HADOOP_JARS", _REPO_ROOT / ".cache" / "hadoop-jars"))
_JERSEY = ["jsr311-api", "jersey1-core", "jersey1-server", "jersey1-servlet", "jersey1-json"]


def hdfs_available() -> bool:
    """True when the Hadoop jars, the jersey jars and java are all present."""
    return (
        (HADOOP_JARS / "hadoop-hdfs-2.7.3.jar").exists()
        and all(Path(f"/usr/share/java/{j}.jar").exists() for j in _JERSEY)
        and shutil.which("java") is not None
    )


def _xml(props: dict[str, object]) -> str:
    rows = "".join(f"  <property><name>{k}</name><value>{v}</value></property>\n" for k, v in props.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


def _http_get(url: str, timeout: float = 2.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return resp.read()
    except (urllib.error.URLError, OSError, ValueError):
        return None


class HdfsCluster:
    """A NameNode and a DataNode on 127.0.0.1 with WebHDFS, data in a temporary folder.

    Use as a context manager or call :meth:`start` / :meth:`close`. ``url`` is the ``hdfs://``
    root (native RPC), ``webhdfs_url`` the ``webhdfs://`` one.
    """

    def __init__(self, workdir: str | None = None) -> None:
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="dl2-hdfs-"))
        self.rpc_port = free_port()
        self.http_port = free_port()
        self.dn_port = free_port()
        self.dn_http_port = free_port()
        self.dn_ipc_port = free_port()
        self.namenode: subprocess.Popen | None = None
        self.datanode: subprocess.Popen | None = None
        self._formatted = False

    # -- addresses ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``hdfs://127.0.0.1:<rpc>`` (hdfs-native / fsspec ``hdfs``)."""
        return f"hdfs://127.0.0.1:{self.rpc_port}"

    @property
    def webhdfs_url(self) -> str:
        """``webhdfs://127.0.0.1:<http>`` (fsspec ``webhdfs``)."""
        return f"webhdfs://127.0.0.1:{self.http_port}"

    @property
    def http_base(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    # -- configuration -----------------------------------------------------------------------
    def _write_config(self) -> tuple[Path, str]:
        conf = self.workdir / "conf"
        res = self.workdir / "res"
        conf.mkdir(parents=True, exist_ok=True)
        for sub in ("hdfs", "datanode", "secondary", "static"):
            (res / "webapps" / sub).mkdir(parents=True, exist_ok=True)
        (conf / "core-site.xml").write_text(_xml({"fs.defaultFS": self.url}))
        (conf / "hdfs-site.xml").write_text(
            _xml(
                {
                    "dfs.replication": 1,
                    "dfs.namenode.name.dir": f"file://{self.workdir / 'name'}",
                    "dfs.datanode.data.dir": f"file://{self.workdir / 'data'}",
                    "dfs.namenode.rpc-address": f"127.0.0.1:{self.rpc_port}",
                    "dfs.namenode.http-address": f"127.0.0.1:{self.http_port}",
                    "dfs.namenode.secondary.http-address": "127.0.0.1:0",
                    "dfs.datanode.address": f"127.0.0.1:{self.dn_port}",
                    "dfs.datanode.http.address": f"127.0.0.1:{self.dn_http_port}",
                    "dfs.datanode.ipc.address": f"127.0.0.1:{self.dn_ipc_port}",
                    "dfs.webhdfs.enabled": "true",
                    "dfs.permissions.enabled": "false",
                    "dfs.namenode.datanode.registration.ip-hostname-check": "false",
                    "dfs.datanode.hostname": "127.0.0.1",
                    "dfs.client.use.datanode.hostname": "true",
                    # A restarted NameNode would otherwise stay read-only for 30 s (outage tests).
                    "dfs.namenode.safemode.extension": 0,
                    "dfs.heartbeat.interval": 1,
                }
            )
        )
        (conf / "log4j.properties").write_text(
            "log4j.rootLogger=WARN, CONSOLE\n"
            "log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.CONSOLE.layout.ConversionPattern=%d %p %c: %m%n\n"
        )
        jersey = ":".join(f"/usr/share/java/{j}.jar" for j in _JERSEY)
        # jsr311 must precede the Hadoop jars (they carry an incompatible javax.ws.rs).
        return conf, f"{conf}:{res}:{jersey}:{HADOOP_JARS}/*"

    def _java(self, cp: str, main: str, *args: str, log: str) -> subprocess.Popen:
        out = open(self.workdir / log, "ab")  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(
                ["java", "-Xmx512m", "-Djava.net.preferIPv4Stack=true", "-cp", cp, main, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "HADOOP_CONF_DIR": str(self.workdir / "conf")},
            )
        finally:
            out.close()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> HdfsCluster:
        """Format (first time only), start both daemons and wait until HDFS takes writes."""
        if not hdfs_available():
            raise RuntimeError(
                f"HDFS not installed (jars in {HADOOP_JARS}, jersey1 jars, java): "
                "run `bash scripts/install_services.sh`"
            )
        _, cp = self._write_config()
        if not self._formatted:
            fmt = subprocess.run(
                ["java", "-Xmx256m", "-Djava.net.preferIPv4Stack=true", "-cp", cp,
                 "org.apache.hadoop.hdfs.server.namenode.NameNode", "-format", "-nonInteractive"],
                capture_output=True,
                timeout=120,
            )
            if fmt.returncode != 0:
                raise RuntimeError(f"namenode -format failed: {fmt.stdout[-2000:]!r} {fmt.stderr[-2000:]!r}")
            self._formatted = True
        self.namenode = self._java(cp, "org.apache.hadoop.hdfs.server.namenode.NameNode", log="namenode.log")
        self.datanode = self._java(cp, "org.apache.hadoop.hdfs.server.datanode.DataNode", log="datanode.log")
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        logger.info("HDFS ready at %s (webhdfs %s)", self.url, self.webhdfs_url)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in (("namenode", self.namenode), ("datanode", self.datanode)):
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}; see {self.workdir}/{name}.log")
            if self.ready():
                return
            time.sleep(0.25)
        raise RuntimeError(f"HDFS not ready after {timeout}s; see logs in {self.workdir}")

    def ready(self) -> bool:
        """One live DataNode, out of safe mode, and WebHDFS answering."""
        raw = _http_get(f"{self.http_base}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState")
        if raw is None:
            return False
        try:
            beans = json.loads(raw).get("beans", [])
        except ValueError:
            return False
        if not beans or beans[0].get("NumLiveDataNodes") != 1 or beans[0].get("FSState") == "safeMode":
            return False
        info = _http_get(f"{self.http_base}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo")
        if info is not None and b'"Safemode" : ""' not in info and b'"Safemode":""' not in info:
            return False
        return _http_get(f"{self.http_base}/webhdfs/v1/?op=GETFILESTATUS") is not None

    def stop(self) -> None:
        """Stop both daemons (data kept: :meth:`start` brings the same file system back)."""
        for attr in ("datanode", "namenode"):
            proc: subprocess.Popen | None = getattr(self, attr)
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, 15)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
                    proc.wait()
            setattr(self, attr, None)

    @property
    def running(self) -> bool:
        return self.namenode is not None and self.namenode.poll() is None

    def close(self) -> None:
        """Stop and remove the data folder (if this object created it)."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> HdfsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
