"""Measured restart costs per job type: what a rescale really costs on this system.

DL2 charges a job whose PS/worker counts change a restart cost in that slot (paper section 5:
checkpoint-and-stop plus restore; the job types default to 60 s + 300 s). The executors measure
every rescale phase by phase (:class:`~dl2_mesos.messages.RescaleReport`). :class:`RestartCostBook`
turns those reports into one figure per job type: a rescale of a job costs the longest ``total``
among its executors' reports for that generation (they work in parallel), and a type's cost is
the median of its last ``window`` rescales. The framework can show it to the policy
(``JobView.measured_restart_seconds``) and export it (:meth:`RestartCostBook.export`);
``dl2 simulate`` reads such a file with :func:`load_restart_costs` and :func:`apply_restart_costs`.

File format (JSON)::

    {"format": "dl2-restart-costs/1",
     "types": {"resnet-50": {"seconds": 21.8, "rescales": 4, "phases": {"stop": 7.4, ...}}, ...}}
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FORMAT = "dl2-restart-costs/1"
RESTART_COSTS_FILE = "restart_costs.json"  # the framework's export, in its state_dir
DEFAULT_WINDOW = 20


class RestartCostsError(ValueError):
    """A restart-cost file that cannot be used (the message says why)."""


class RestartCostBook:
    """Per job type, the measured cost of its recent rescales (seconds).

    Args:
        window: rescales per type the median is taken over.
    """

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self._rescales: dict[tuple[str, int], dict[str, Any]] = {}  # (job, generation) -> type, seconds, phases
        self._order: deque[tuple[str, int]] = deque()

    def record(self, job_type: str, job_id: str, report: Any) -> None:
        """Add one executor's successful :class:`~dl2_mesos.messages.RescaleReport` (failed ones
        and reports without a finite ``total`` are ignored)."""
        if not getattr(report, "ok", False):
            return
        phases = {str(k): float(v) for k, v in report.phases if isinstance(v, (int, float)) and math.isfinite(v)}
        total = phases.get("total")
        if total is None or total < 0:
            return
        key = (job_id, int(report.generation))
        known = self._rescales.get(key)
        if known is None:
            self._rescales[key] = {"type": job_type, "seconds": total, "phases": phases}
            self._order.append(key)
            self._trim(job_type)
        elif total > known["seconds"]:  # the job waits for its slowest executor
            known.update(seconds=total, phases=phases)

    def _trim(self, job_type: str) -> None:
        keys = [k for k in self._order if self._rescales[k]["type"] == job_type]
        for k in keys[: max(0, len(keys) - self.window)]:
            self._order.remove(k)
            del self._rescales[k]

    def seconds(self, job_type: str) -> float | None:
        """The median measured restart cost of ``job_type``; None before its first rescale."""
        vals = [r["seconds"] for r in self._rescales.values() if r["type"] == job_type]
        return statistics.median(vals) if vals else None

    def to_json(self) -> dict[str, Any]:
        """The export document (see the module docstring)."""
        types: dict[str, Any] = {}
        for t in sorted({r["type"] for r in self._rescales.values()}):
            recs = [r for r in self._rescales.values() if r["type"] == t]
            names = sorted({n for r in recs for n in r["phases"]})
            types[t] = {"seconds": round(statistics.median(r["seconds"] for r in recs), 4), "rescales": len(recs),
                        "phases": {n: round(statistics.median(r["phases"].get(n, 0.0) for r in recs), 4)
                                   for n in names}}
        return {"format": FORMAT, "types": types}

    def export(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_json` to ``path`` atomically."""
        p = Path(path)
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        os.replace(tmp, p)


def parse_restart_costs(doc: Any, known_types: Iterable[str] | None = None) -> dict[str, float]:
    """``{job type: seconds}`` from an export document.

    Raises:
        RestartCostsError: not an export document, an unknown job type (when ``known_types`` is
            given), or a cost that is not a finite number >= 0.
    """
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT or not isinstance(doc.get("types"), Mapping):
        raise RestartCostsError(f"not a restart-cost document: expected {{'format': '{FORMAT}', 'types': {{...}}}}")
    known = set(known_types) if known_types is not None else None
    out: dict[str, float] = {}
    for name, entry in doc["types"].items():
        if known is not None and name not in known:
            raise RestartCostsError(f"unknown job type {name!r} (known: {', '.join(sorted(known))})")
        secs = entry.get("seconds") if isinstance(entry, Mapping) else None
        if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not math.isfinite(secs) or secs < 0:
            raise RestartCostsError(f"job type {name!r}: seconds must be a finite number >= 0, got {secs!r}")
        out[str(name)] = float(secs)
    return out


def load_restart_costs(path: str | os.PathLike[str], known_types: Iterable[str] | None = None) -> dict[str, float]:
    """Read an exported file (see :func:`parse_restart_costs`).

    Raises:
        RestartCostsError: unreadable, not JSON, or not a valid document (the reason included).
    """
    try:
        doc = json.loads(Path(path).read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except OSError as exc:
        raise RestartCostsError(f"cannot read restart costs from {path}: {exc}") from None
    except ValueError as exc:
        raise RestartCostsError(f"{path} is not valid JSON: {exc}") from None
    return parse_restart_costs(doc, known_types)


def apply_restart_costs(specs: Iterable[Any], costs: Mapping[str, float]) -> list[Any]:
    """The job specs with ``restart_seconds`` set from ``costs`` for their type (a spec that sets its
    own ``restart_seconds`` keeps it; types without a measurement keep the default)."""
    import dataclasses

    out = []
    for s in specs:
        if s.restart_seconds is None and s.job_type in costs:
            s = dataclasses.replace(s, restart_seconds=costs[s.job_type])
        out.append(s)
    return out
