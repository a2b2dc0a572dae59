"""Job traces: generation (the reference's arrival processes) and the one CSV format.

CSV trace format
----------------
UTF-8 text; lines starting with ``#`` and blank lines are ignored; the first other line is a
header naming the columns (any order). Required columns:

``arrival_time``
    seconds since the start of the trace (>= 0, float).
``job_type``
    a job-type name (``resnet-50``, ``vgg-16``, ...) or id 1..8.
``epochs``
    total training epochs (> 0).

Optional columns (an empty cell means "the default"):

``job_id``
    unique id (default ``job-NNNN`` from the row number); ``name``;
``min_ps``, ``max_ps``, ``min_workers``, ``max_workers``
    limits (defaults 1, 16, 1, 16);
``worker_cpus``, ``worker_gpus``, ``worker_mem``, ``ps_cpus``, ``ps_gpus``, ``ps_mem``
    per-task demand (cores, whole GPUs, MiB); a role's three cells are given all together or
    not at all (default: the job type's demand);
``restart_seconds``
    this job's rescale cost (default: the simulator's per-type value);
``runtime`` (``mxnet`` | ``pytorch``), ``priority`` (integer).

Example::

    job_id,arrival_time,job_type,epochs,max_ps,max_workers
    job-0000,0,resnet-50,9000,16,16
    job-0001,1200,dssm,9900,8,8

A malformed row raises :class:`dl2_mesos.errors.TraceFormatError` naming the file and line.
Rows are returned sorted by (arrival time, job id).

Generation (``generate_trace``) follows the prototype's ``trace.py``: slot ``t`` gets
``min(cap, n_t)`` jobs where ``n_t`` is Poisson(cap), the Google pattern (with a random start
offset 0..4) or the cap itself (times ``arrival_scale``, the fractional part carried to the
next slot); each job draws its type uniformly from the configured types;
its length is the type's fraction of ``max_epochs`` (times U{0.90..1.09} when not fixed);
jobs arrive at the start of their slot. Deterministic for a given seed.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources as ilr
from pathlib import Path

import numpy as np

from dl2_mesos.errors import ConfigError, InvalidJobSpec, TraceFormatError
from dl2_mesos.job_types import get_job_type
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.sim.augment import augment
from dl2_mesos.policy.sim.settings import TraceConfig
from dl2_mesos.resources import Resources

REQUIRED_COLUMNS = ("arrival_time", "job_type", "epochs")
OPTIONAL_COLUMNS = (
    "job_id",
    "name",
    "min_ps",
    "max_ps",
    "min_workers",
    "max_workers",
    "worker_cpus",
    "worker_gpus",
    "worker_mem",
    "ps_cpus",
    "ps_gpus",
    "ps_mem",
    "restart_seconds",
    "runtime",
    "priority",
)
ALL_COLUMNS = ("job_id", "arrival_time", "job_type", "epochs") + tuple(
    c for c in OPTIONAL_COLUMNS if c != "job_id"
)
_INT_COLUMNS = ("min_ps", "max_ps", "min_workers", "max_workers", "priority")


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace: when it arrives and what it asks for."""

    job_id: str
    arrival_time: float  # seconds
    spec: JobSpec


Trace = tuple[TraceJob, ...]


def sort_trace(jobs: list[TraceJob] | tuple[TraceJob, ...]) -> Trace:
    """Jobs sorted by (arrival time, job id)."""
    return tuple(sorted(jobs, key=lambda j: (j.arrival_time, j.job_id)))


# -- generation ---------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def google_patterns() -> dict[int, tuple[int, ...]]:
    """The prototype's 75-slot Google-trace arrival patterns, keyed by cap."""
    text = ilr.files("dl2_mesos.data").joinpath("dl2_google_trace_arrival_patterns.json").read_text()
    data = json.loads(text)["patterns"]
    return {int(k): tuple(int(x) for x in v) for k, v in data.items()}


def _arrivals_per_slot(cfg: TraceConfig, rng: np.random.Generator):
    cap = cfg.max_arrivals_per_slot
    if cfg.arrival == "google":
        patterns = google_patterns()
        if cap not in patterns:
            raise ConfigError(
                f"no Google-trace arrival pattern for max_arrivals_per_slot={cap}; "
                f"known caps: {', '.join(str(k) for k in sorted(patterns))}"
            )
        pattern = patterns[cap]
        if not any(pattern):
            raise ConfigError(f"the Google pattern for cap {cap} has no arrivals")
        offset = int(rng.integers(0, 5))
        t = 0
        while True:
            yield min(cap, pattern[(t + offset) % len(pattern)])
            t += 1
    elif cfg.arrival == "poisson":
        while True:
            yield min(cap, int(rng.poisson(cap)))
    else:  # uniform
        while True:
            yield cap


def _scaled(counts, scale: float):
    """``counts`` times ``scale``, the fractional part carried to the next slot (no randomness)."""
    carry = 0.0
    for c in counts:
        carry += c * scale
        n = int(math.floor(carry + 1e-9))
        carry -= n
        yield n


@lru_cache(maxsize=32)
def _read_cached(path: str, mtime_ns: int) -> Trace:
    return read_trace(path)


def _from_files(cfg: TraceConfig, seed: int) -> Trace:
    rng = np.random.default_rng(seed)
    path = cfg.files[int(rng.integers(0, len(cfg.files)))] if len(cfg.files) > 1 else cfg.files[0]
    source = _read_cached(path, Path(path).stat().st_mtime_ns)
    if not source:
        raise ConfigError(f"trace file {path} has no jobs")
    if cfg.augment is None or cfg.augment.is_identity:
        return source
    return augment(source, cfg.augment, rng)


def generate_trace(cfg: TraceConfig, seed: int) -> Trace:
    """A trace of ``cfg.num_jobs`` jobs drawn with ``seed`` (same seed, same trace).

    With ``cfg.files`` (a ``trace:`` preset) the seed picks one of the files instead and, when
    ``cfg.augment`` is set, draws an augmented episode from it (:mod:`.augment`).

    Raises:
        ConfigError: a bad generator setting, or an empty trace file.
        TraceFormatError, OSError: a trace file that cannot be read.
    """
    if cfg.files:
        return _from_files(cfg, seed)
    rng = np.random.default_rng(seed)
    types = [get_job_type(t) for t in cfg.job_types]
    jobs: list[TraceJob] = []
    counts = _arrivals_per_slot(cfg, rng)
    if cfg.arrival_scale != 1.0:
        counts = _scaled(counts, cfg.arrival_scale)
    for slot, count in enumerate(counts):
        for _ in range(count):
            if len(jobs) >= cfg.num_jobs:
                return sort_trace(jobs)
            jt = types[int(rng.integers(0, len(types)))]
            epochs = jt.num_epochs_fraction * cfg.max_epochs
            if not cfg.fixed_length:
                epochs *= int(rng.integers(90, 110)) / 100.0  # U{0.90, 0.91, ..., 1.09}
            job_id = f"job-{len(jobs):04d}"
            spec = JobSpec(
                job_type=jt.name,
                epochs=float(epochs),
                name=job_id,
                max_ps=cfg.max_ps,
                max_workers=cfg.max_workers,
            )
            jobs.append(TraceJob(job_id, slot * cfg.slot_seconds, spec))
        if len(jobs) >= cfg.num_jobs:
            return sort_trace(jobs)
    raise AssertionError("unreachable")  # the generators above are infinite


# -- CSV ----------------------------------------------------------------------------------------


def _fmt(v: float) -> str:
    # shortest text that reads back as the same float ("9000" rather than "9000.0")
    s = repr(float(v))
    return s[:-2] if s.endswith(".0") else s


def trace_to_csv(trace: Trace) -> str:
    """The trace as CSV text (every column written)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(ALL_COLUMNS)
    for j in trace:
        s = j.spec
        assert s.worker is not None and s.ps is not None
        w.writerow(
            [
                j.job_id,
                _fmt(j.arrival_time),
                s.job_type,
                _fmt(s.epochs),
                s.name,
                s.min_ps,
                s.max_ps,
                s.min_workers,
                s.max_workers,
                _fmt(s.worker.cpus),
                _fmt(s.worker.gpus),
                _fmt(s.worker.mem),
                _fmt(s.ps.cpus),
                _fmt(s.ps.gpus),
                _fmt(s.ps.mem),
                "" if s.restart_seconds is None else _fmt(s.restart_seconds),
                s.runtime,
                s.priority,
            ]
        )
    return buf.getvalue()


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` to ``path`` in the CSV format above."""
    Path(path).write_text(trace_to_csv(trace))


def _number(path: str, line: int, col: str, text: str, integer: bool = False) -> float | int:
    try:
        v = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise TraceFormatError(path, line, f"column {col!r}: {text!r} is not {kind}") from None
    if not integer and not math.isfinite(v):
        raise TraceFormatError(path, line, f"column {col!r}: {text!r} is not finite")
    return v


MAX_ARRIVAL_SECONDS = 1e9
"""The latest arrival a trace file may give (seconds from its start)."""


def _row_to_job(path: str, line: int, row: dict[str, str], index: int) -> TraceJob:
    cell = {k: (v or "").strip() for k, v in row.items() if k is not None}
    if None in row:
        raise TraceFormatError(path, line, "more cells than header columns")
    for col in REQUIRED_COLUMNS:
        if not cell.get(col):
            raise TraceFormatError(path, line, f"column {col!r} is empty")
    arrival = _number(path, line, "arrival_time", cell["arrival_time"])
    if arrival < 0:
        raise TraceFormatError(path, line, f"column 'arrival_time': must be >= 0, got {arrival}")
    if arrival > MAX_ARRIVAL_SECONDS:  # e.g. a Unix timestamp (~1.7e9) where offsets are meant
        raise TraceFormatError(
            path, line,
            f"column 'arrival_time': {arrival:g} s is more than {MAX_ARRIVAL_SECONDS:g} s (about 30 years) "
            "after the trace's start; arrival times are seconds from the start, not timestamps",
        )
    job_type = cell["job_type"]
    if job_type.isdigit() and job_type.isascii():  # the trace format also takes type ids (1..8)
        try:
            job_type = get_job_type(int(job_type)).name
        except KeyError:
            pass  # JobSpec names the unknown type
    kw: dict = {"job_type": job_type, "epochs": _number(path, line, "epochs", cell["epochs"])}
    for col in _INT_COLUMNS:
        if cell.get(col):
            kw[col] = _number(path, line, col, cell[col], integer=True)
    if cell.get("restart_seconds"):
        kw["restart_seconds"] = _number(path, line, "restart_seconds", cell["restart_seconds"])
    for col in ("name", "runtime"):
        if cell.get(col):
            kw[col] = cell[col]
    for role in ("worker", "ps"):
        cols = [f"{role}_cpus", f"{role}_gpus", f"{role}_mem"]
        given = [bool(cell.get(c)) for c in cols]
        if any(given) and not all(given):
            raise TraceFormatError(path, line, f"give all of {', '.join(cols)} or none")
        if all(given):
            cpus, gpus, mem = (_number(path, line, c, cell[c]) for c in cols)
            kw[role] = Resources(float(cpus), float(gpus), float(mem))
    try:
        spec = JobSpec(**kw)
    except InvalidJobSpec as exc:
        raise TraceFormatError(path, line, str(exc)) from None
    job_id = cell.get("job_id") or f"job-{index:04d}"
    return TraceJob(job_id, float(arrival), spec)


def parse_trace(text: str, path: str = "<string>") -> Trace:
    """Parse CSV trace text; ``path`` is only used in error messages.

    Raises:
        TraceFormatError: naming ``path`` and the 1-based line of the bad row.
    """
    lines = text.splitlines()
    numbered = [(i + 1, ln) for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")]
    if not numbered:
        raise TraceFormatError(path, max(1, len(lines)), "no header line (empty trace file)")
    header_line, header_text = numbered[0]
    header = [h.strip() for h in next(csv.reader([header_text]))]
    unknown = [h for h in header if h not in ALL_COLUMNS]
    if unknown:
        raise TraceFormatError(
            path, header_line, f"unknown column {unknown[0]!r} (known: {', '.join(ALL_COLUMNS)})"
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise TraceFormatError(path, header_line, f"missing required column {missing[0]!r}")
    if len(set(header)) != len(header):
        raise TraceFormatError(path, header_line, "duplicate column in header")
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for index, (line, text_line) in enumerate(numbered[1:]):
        cells = next(csv.reader([text_line]))
        if len(cells) < len(header):
            raise TraceFormatError(path, line, f"expected {len(header)} cells, got {len(cells)}")
        row = dict(zip(header, cells))
        if len(cells) > len(header):
            row[None] = cells[len(header) :]  # type: ignore[index]
        job = _row_to_job(path, line, row, index)
        if job.job_id in seen:
            raise TraceFormatError(
                path, line, f"duplicate job_id {job.job_id!r} (first on line {seen[job.job_id]})"
            )
        seen[job.job_id] = line
        jobs.append(job)
    return sort_trace(jobs)


def read_text_file(path: str | Path) -> str:
    """The text of a trace or job-log file, decoded as UTF-8 (a leading byte-order mark dropped).

    Raises:
        TraceFormatError: bytes that are not UTF-8 (names the file and the line they are on).
        OSError: the file cannot be read.
    """
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceFormatError(
            str(path), line, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def read_trace(path: str | Path) -> Trace:
    """Read a CSV trace file.

    Raises:
        TraceFormatError: a malformed row or bytes that are not UTF-8 (names the file and line).
        FileNotFoundError: no such file.
    """
    return parse_trace(read_text_file(path), str(Path(path)))
