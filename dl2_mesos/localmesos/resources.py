"""Arithmetic on Mesos ``Resource`` lists (mesos.proto ``Resource``/``Value``), unreserved role ``*``.

``ResourceBag`` is an immutable, normalised view of a resource list: SCALAR values are kept at
Mesos's fixed-point precision (3 decimals), RANGES as sorted disjoint closed intervals, SETs as
frozensets. ``a.contains(b)`` is Mesos's ``Resources::contains``; subtraction and addition follow
``Resources::operator-``/``+``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Interval = tuple[int, int]
_EPS = 1e-9
MIN_CPUS = 0.01  # Mesos's default min_allocatable_resources "cpus:0.01|mem:32"
MIN_MEM = 32.0


class ResourceError(ValueError):
    """A resource list that Mesos would reject (the message says why)."""


def _round(value: float) -> float:
    return round(value * 1000.0) / 1000.0


def _merge(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    out: list[list[int]] = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return tuple((b, e) for b, e in out)


def _subtract_ranges(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> tuple[Interval, ...]:
    result = list(a)
    for rb, re_ in b:
        nxt: list[Interval] = []
        for ab, ae in result:
            if re_ < ab or rb > ae:
                nxt.append((ab, ae))
                continue
            if ab < rb:
                nxt.append((ab, rb - 1))
            if ae > re_:
                nxt.append((re_ + 1, ae))
        result = nxt
    return _merge(result)


def _covers(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> bool:
    return all(any(ab <= bb and be <= ae for ab, ae in a) for bb, be in b)


@dataclass(frozen=True)
class ResourceBag:
    scalars: Mapping[str, float] = field(default_factory=dict)
    ranges: Mapping[str, tuple[Interval, ...]] = field(default_factory=dict)
    sets: Mapping[str, frozenset[str]] = field(default_factory=dict)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def of(
        cls, cpus: float = 0, mem: float = 0, disk: float = 0, gpus: float = 0, ports: Iterable[Interval] = ()
    ) -> ResourceBag:
        scalars = {
            k: _round(float(v))
            for k, v in (("cpus", cpus), ("mem", mem), ("disk", disk), ("gpus", gpus))
            if v
        }
        pr = _merge(ports)
        return cls(scalars, {"ports": pr} if pr else {}, {})

    @classmethod
    def from_json(cls, resources: Iterable[Mapping[str, Any]]) -> ResourceBag:
        """Build from Resource JSON dicts; raises ResourceError for what Mesos's validation rejects."""
        scalars: dict[str, float] = {}
        ranges: dict[str, list[Interval]] = {}
        sets: dict[str, set[str]] = {}
        for r in resources:
            name, rtype = r.get("name"), r.get("type")
            if not isinstance(name, str) or not name:
                raise ResourceError("Resource has no name")
            role = r.get("role", "*")
            if role not in (None, "*") or r.get("reservations") or r.get("reservation") or r.get("disk"):
                raise ResourceError(
                    f"Resource '{name}': reservations and volumes are not supported by the local stand-in"
                )
            if rtype == "SCALAR":
                value = (r.get("scalar") or {}).get("value")
                if (
                    not isinstance(value, (int, float))
                    or isinstance(value, bool)
                    or not math.isfinite(value)
                    or value < 0
                ):
                    raise ResourceError(
                        f"Invalid scalar resource '{name}': value must be a non-negative number"
                    )
                scalars[name] = _round(scalars.get(name, 0.0) + float(value))
            elif rtype == "RANGES":
                for rng in (r.get("ranges") or {}).get("range", []) or []:
                    b, e = rng.get("begin"), rng.get("end")
                    if not isinstance(b, int) or not isinstance(e, int) or b < 0 or e < b:
                        raise ResourceError(f"Invalid range resource '{name}': bad range {rng}")
                    ranges.setdefault(name, []).append((b, e))
            elif rtype == "SET":
                items = (r.get("set") or {}).get("item", []) or []
                sets.setdefault(name, set()).update(str(i) for i in items)
            else:
                raise ResourceError(f"Resource '{name}' has unsupported type {rtype!r}")
        if "gpus" in scalars and scalars["gpus"] != int(scalars["gpus"]):
            raise ResourceError("The 'gpus' resource must be an unsigned integer")
        return cls(
            {k: v for k, v in scalars.items() if v > 0},
            {k: _merge(v) for k, v in ranges.items() if v},
            {k: frozenset(v) for k, v in sets.items() if v},
        )

    def to_json(self, allocation_role: str | None = None) -> list[dict[str, Any]]:
        """Resource JSON as the master sends it in offers and state (role ``*``)."""
        out: list[dict[str, Any]] = []
        for name in sorted(self.scalars):
            out.append({"name": name, "type": "SCALAR", "scalar": {"value": self.scalars[name]}})
        for name in sorted(self.ranges):
            out.append(
                {
                    "name": name,
                    "type": "RANGES",
                    "ranges": {"range": [{"begin": b, "end": e} for b, e in self.ranges[name]]},
                }
            )
        for name in sorted(self.sets):
            out.append({"name": name, "type": "SET", "set": {"item": sorted(self.sets[name])}})
        for r in out:
            r["role"] = "*"
            if allocation_role is not None:
                r["allocation_info"] = {"role": allocation_role}
        return out

    # ---- algebra ------------------------------------------------------------------------
    def __add__(self, other: ResourceBag) -> ResourceBag:
        scalars = dict(self.scalars)
        for k, v in other.scalars.items():
            scalars[k] = _round(scalars.get(k, 0.0) + v)
        ranges = dict(self.ranges)
        for k, rng in other.ranges.items():
            ranges[k] = _merge(ranges.get(k, ()) + rng)
        sets = dict(self.sets)
        for k, items in other.sets.items():
            sets[k] = sets.get(k, frozenset()) | items
        return ResourceBag(scalars, ranges, sets)

    def __sub__(self, other: ResourceBag) -> ResourceBag:
        scalars = {k: _round(v - other.scalars.get(k, 0.0)) for k, v in self.scalars.items()}
        ranges = {k: _subtract_ranges(v, other.ranges.get(k, ())) for k, v in self.ranges.items()}
        sets = {k: v - other.sets.get(k, frozenset()) for k, v in self.sets.items()}
        return ResourceBag(
            {k: v for k, v in scalars.items() if v > _EPS},
            {k: v for k, v in ranges.items() if v},
            {k: v for k, v in sets.items() if v},
        )

    def contains(self, other: ResourceBag) -> bool:
        if any(v > self.scalars.get(k, 0.0) + _EPS for k, v in other.scalars.items()):
            return False
        if any(not _covers(self.ranges.get(k, ()), v) for k, v in other.ranges.items()):
            return False
        return all(v <= self.sets.get(k, frozenset()) for k, v in other.sets.items())

    def is_empty(self) -> bool:
        return not (self.scalars or self.ranges or self.sets)

    def scalar(self, name: str) -> float:
        return self.scalars.get(name, 0.0)

    def allocatable(self) -> bool:
        """Mesos offers resources only above its minimum allocatable size."""
        return self.scalar("cpus") >= MIN_CPUS or self.scalar("mem") >= MIN_MEM

    def summary(self) -> dict[str, Any]:
        """The flat form Mesos's ``/master/state`` uses: scalars as numbers, ranges as "[a-b, c-d]"."""
        out: dict[str, Any] = {k: 0.0 for k in ("cpus", "mem", "disk", "gpus")}
        out.update(self.scalars)
        for k, rng in self.ranges.items():
            out[k] = "[" + ", ".join(f"{b}-{e}" for b, e in rng) + "]"
        for k, items in self.sets.items():
            out[k] = "{" + ", ".join(sorted(items)) + "}"
        return out

    def __str__(self) -> str:
        parts = [f"{k}:{v:g}" for k, v in sorted(self.scalars.items())]
        parts += [f"{k}:[{','.join(f'{b}-{e}' for b, e in v)}]" for k, v in sorted(self.ranges.items())]
        parts += [f"{k}:{{{','.join(sorted(v))}}}" for k, v in sorted(self.sets.items())]
        return "; ".join(parts) or "{}"


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNIT_MIB = {
    "": 1.0,
    "B": 1 / 2**20,
    "K": 1 / 1024,
    "KB": 1 / 1024,
    "KIB": 1 / 1024,
    "M": 1.0,
    "MB": 1.0,
    "MIB": 1.0,
    "G": 1024.0,
    "GB": 1024.0,
    "GIB": 1024.0,
    "T": 1024.0**2,
    "TB": 1024.0**2,
    "TIB": 1024.0**2,
}


def parse_size_mib(text: str | float | int) -> float:
    """'16GiB' / '512MiB' / '2048' (MiB) -> MiB, as Mesos's ``mem``/``disk`` scalars are in MB."""
    if isinstance(text, (int, float)):
        return float(text)
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"cannot read a size from {text!r} (examples: 16GiB, 512MiB, 2048)")
    return float(m.group(1)) * _UNIT_MIB[(m.group(2) or "").upper()]
