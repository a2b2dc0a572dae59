"""Master registration in ZooKeeper, as Mesos masters do for ``zk://`` master detection.

A Mesos master contending for leadership creates an ephemeral, sequential znode
``<path>/json.info_<seq>`` holding its ``MasterInfo`` as JSON; the leader is the smallest
sequence number. Detectors (pymesos's ``MasterDetector``, libmesos) watch the children of the
path and read the smallest one. With a single local master this one registration is the leader.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlparse

from kazoo.client import KazooClient

logger = logging.getLogger(__name__)


def parse_zk_url(url: str) -> tuple[str, str]:
    """``zk://host:port[,host:port]/path`` -> (kazoo hosts, znode path)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("zk", "zoo") or not parsed.netloc:
        raise ValueError(f"not a ZooKeeper URL: {url!r} (expected zk://host:port/path)")
    path = parsed.path.rstrip("/") or "/mesos"
    return parsed.netloc, path


class ZooKeeperRegistration:
    """Holds one ``json.info_`` znode for a master while it runs."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url
        self.hosts, self.path = parse_zk_url(url)
        self.timeout = timeout
        self._zk: KazooClient | None = None
        self.znode: str | None = None

    def register(self, master_info: dict[str, Any]) -> str:
        """Create the znode (blocking, a few ms against a local ZooKeeper); returns its path."""
        if self._zk is None:
            from kazoo.handlers.threading import KazooTimeoutError

            client = KazooClient(hosts=self.hosts, timeout=self.timeout)
            try:
                client.start(timeout=self.timeout)
            except KazooTimeoutError:
                client.close()
                raise ConnectionError(f"ZooKeeper {self.hosts} unreachable after {self.timeout:g}s") from None
            self._zk = client
        self._zk.ensure_path(self.path)
        data = json.dumps(master_info).encode("utf-8")
        self.znode = self._zk.create(f"{self.path}/json.info_", data, ephemeral=True, sequence=True)
        logger.info("registered master %s in ZooKeeper at %s", master_info.get("id"), self.znode)
        return self.znode

    def unregister(self) -> None:
        if self._zk is not None and self.znode is not None:
            try:
                self._zk.delete(self.znode)
            except Exception as exc:  # kazoo raises several kinds; the session close below removes it anyway
                logger.debug("deleting %s failed: %s", self.znode, exc)
        self.znode = None

    def close(self) -> None:
        self.unregister()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
