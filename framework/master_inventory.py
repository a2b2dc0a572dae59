"""Read the cluster's agents from the Mesos master (``GET /master/slaves``) for the loop.

Apache Mesos serves ``/master/slaves`` (and the same ``slaves`` array in ``/master/state``) to
any HTTP client: each agent's ``resources`` (its total), ``used_resources`` (every framework's
tasks) and ``offered_resources``. A :class:`MasterInventory` thread asks for it every
``interval`` seconds and enqueues an :class:`~dl2_mesos.framework.events.AgentInventory` event;
only the loop thread changes the :class:`~dl2_mesos.framework.cluster_capacity.CapacityBook`.
Failures are reported the same way (the last good list stays in use, with its age).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import requests

from dl2_mesos.resources import Resources
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.cluster_capacity import AgentCapacity

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL = 15.0
MAX_AGENTS = 100_000


def _scalars(d: Any) -> Resources:
    if not isinstance(d, dict):
        return Resources()
    out = []
    for k in ("cpus", "gpus", "mem"):
        v = d.get(k, 0)
        out.append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0.0)
    return Resources(*out)


def parse_agents(data: Any) -> list[AgentCapacity]:
    """The agents of a ``/master/slaves`` or ``/master/state`` answer (malformed entries skipped).

    Raises:
        ValueError: the answer has no ``slaves`` list.
    """
    if not isinstance(data, dict) or not isinstance(data.get("slaves"), list):
        raise ValueError("the master's answer has no 'slaves' list")
    out = []
    for s in data["slaves"][:MAX_AGENTS]:
        if not isinstance(s, dict) or not isinstance(s.get("id"), str):
            continue
        out.append(AgentCapacity(s["id"], str(s.get("hostname", s["id"]))[:255], _scalars(s.get("resources")),
                                 _scalars(s.get("used_resources")), _scalars(s.get("offered_resources")),
                                 bool(s.get("active", True))))
    return out


def read_agents(master: str, *, timeout: float = 10.0, auth: tuple[str, str] | None = None,
                session: requests.Session | None = None) -> list[AgentCapacity]:
    """GET ``http://<master>/master/slaves`` and parse it.

    Raises:
        requests.RequestException, ValueError: unreachable, refused, or not the expected JSON.
    """
    base = master if "://" in master else f"http://{master}"
    r = (session or requests).get(base.rstrip("/") + "/master/slaves", timeout=timeout, auth=auth)
    r.raise_for_status()
    return parse_agents(r.json())


class MasterInventory:
    """A daemon thread that reads the master's agents and enqueues them for the loop.

    Args:
        master: the master's current ``host:port`` (None while unknown, e.g. a ``zk://`` master
            before the driver found the leading one).
        put: the loop's event queue ``put``.
        interval: seconds between reads.
        auth: HTTP basic credentials (the framework's principal and secret), for masters that
            authenticate read-only endpoints.
    """

    def __init__(self, master: Callable[[], str | None], put: Callable[[Any], None], *,
                 interval: float = DEFAULT_INTERVAL, auth: tuple[str, str] | None = None) -> None:
        self.master = master
        self.put = put
        self.interval = interval
        self.auth = auth
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dl2-master-inventory", daemon=True)
        self._failing = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def poll_once(self) -> None:
        """One read: an :class:`~dl2_mesos.framework.events.AgentInventory` event either way."""
        master = self.master()
        if not master:
            return
        try:
            agents = read_agents(master, auth=self.auth)
        except (requests.RequestException, ValueError) as exc:
            if not self._failing:
                logger.warning("cannot read the agents from the master %s (%s); capacity is estimated from "
                               "offers until it answers", master, exc)
            self._failing = True
            self.put(ev.AgentInventory(master, None, str(exc)))
            return
        if self._failing:
            logger.info("reading the agents from the master %s again", master)
        self._failing = False
        self.put(ev.AgentInventory(master, tuple(agents), ""))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # never let the thread die: capacity falls back to offers
                logger.exception("master inventory read failed")
            self._stop.wait(self.interval)
