"""Import Philly-style job logs (Microsoft's Philly cluster trace and look-alikes) as traces.

Input: CSV with a header. Recognised columns (first match wins, case-insensitive):

* submit time: ``submit_time``, ``submitted_time``, ``submit``, ``submitted`` -- seconds
  (a number) or a date-time (``2017-10-03 14:02:11``, ISO 8601);
* duration: ``duration``, ``duration_s``, ``run_time``, ``runtime`` -- seconds (> 0);
* GPUs: ``num_gpus``, ``gpus``, ``num_gpu``, ``gpu_num`` -- a whole number >= 0;
* optional id: ``job_id``, ``jobid``, ``id`` (default ``philly-NNNN`` by row).

Mapping (documented choice, deterministic for a given seed):

* arrival = submit time minus the earliest submit time in the file (the trace starts at 0);
* job type: jobs asking for 0 GPUs get one of the CPU-only types (cnn-text-classification,
  dssm), jobs with GPUs one of the six GPU types, drawn uniformly with ``seed`` (the logs
  name no model);
* epochs = duration x the type's **single-worker** speed (epochs/s with 1 PS + 1 worker): the
  job is as long as it would be on one worker, so the scheduler can shorten it by scaling out;
* limits: the defaults (1..16 PS and workers); the logged GPU count does not cap the job,
  because DL2 decides the counts.

A malformed row raises :class:`~dl2_mesos.errors.TraceFormatError` naming the file and line.
"""

from __future__ import annotations

import csv
import io
import math
from datetime import datetime
from pathlib import Path

import numpy as np

from dl2_mesos.errors import TraceFormatError
from dl2_mesos.job_types import all_job_types
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.sim.trace import Trace, TraceJob, read_text_file, sort_trace
from dl2_mesos.speed_model import default_speed_model

SUBMIT_COLUMNS = ("submit_time", "submitted_time", "submit", "submitted")
DURATION_COLUMNS = ("duration", "duration_s", "run_time", "runtime")
GPU_COLUMNS = ("num_gpus", "gpus", "num_gpu", "gpu_num")
ID_COLUMNS = ("job_id", "jobid", "id")


def _pick(header: list[str], names: tuple[str, ...]) -> str | None:
    lower = {h.strip().lower(): h for h in header}
    for n in names:
        if n in lower:
            return lower[n]
    return None


def _time(path: str, line: int, text: str) -> float:
    text = text.strip()
    try:
        v = float(text)
    except ValueError:
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise TraceFormatError(
                path, line, f"submit time {text!r} is neither seconds nor a date-time"
            ) from None
    if not math.isfinite(v):
        raise TraceFormatError(path, line, f"submit time {text!r} is not finite")
    return v


def import_philly(path: str | Path, seed: int = 0) -> Trace:
    """Read a Philly-style CSV job log and return it as a trace (see the module docstring).

    Raises:
        TraceFormatError: missing columns or a malformed row (names the file and line).
    """
    p = str(path)
    text = read_text_file(path)
    reader = csv.reader(io.StringIO(text))
    rows = [(i + 1, r) for i, r in enumerate(reader) if r and any(c.strip() for c in r)]
    if not rows:
        raise TraceFormatError(p, 1, "empty file: expected a header line")
    header_line, header = rows[0]
    cols = {}
    for what, names in (
        ("submit time", SUBMIT_COLUMNS),
        ("duration", DURATION_COLUMNS),
        ("GPU count", GPU_COLUMNS),
    ):
        c = _pick(header, names)
        if c is None:
            raise TraceFormatError(p, header_line, f"no {what} column (one of: {', '.join(names)})")
        cols[what] = header.index(c)
    id_col = _pick(header, ID_COLUMNS)
    id_idx = header.index(id_col) if id_col is not None else None

    rng = np.random.default_rng(seed)
    types = all_job_types()
    cpu_types = [t for t in types if t.worker.gpus == 0]
    gpu_types = [t for t in types if t.worker.gpus > 0]
    speed = default_speed_model()
    parsed: list[tuple[int, str, float, float, int]] = []
    seen: dict[str, int] = {}
    for n, (line, row) in enumerate(rows[1:]):
        if len(row) != len(header):
            raise TraceFormatError(p, line, f"expected {len(header)} cells, got {len(row)}")
        submit = _time(p, line, row[cols["submit time"]])
        try:
            duration = float(row[cols["duration"]])
        except ValueError:
            raise TraceFormatError(p, line, f"duration {row[cols['duration']]!r} is not a number") from None
        if not math.isfinite(duration) or duration <= 0:
            raise TraceFormatError(p, line, f"duration must be > 0 seconds, got {row[cols['duration']]!r}")
        try:
            gpus = int(row[cols["GPU count"]])
        except ValueError:
            raise TraceFormatError(
                p, line, f"GPU count {row[cols['GPU count']]!r} is not a whole number"
            ) from None
        if gpus < 0:
            raise TraceFormatError(p, line, f"GPU count must be >= 0, got {gpus}")
        job_id = (row[id_idx].strip() if id_idx is not None else "") or f"philly-{n:04d}"
        if job_id in seen:
            raise TraceFormatError(p, line, f"duplicate job id {job_id!r} (first on line {seen[job_id]})")
        seen[job_id] = line
        parsed.append((line, job_id, submit, duration, gpus))
    if not parsed:
        return ()
    start = min(s for _, _, s, _, _ in parsed)
    jobs = []
    for line, job_id, submit, duration, gpus in parsed:
        group = gpu_types if gpus > 0 else cpu_types
        jt = group[int(rng.integers(0, len(group)))]
        epochs = duration * speed.epochs_per_second(jt.name, 1, 1)
        try:
            spec = JobSpec(job_type=jt.name, epochs=float(epochs))
        except ValueError as exc:
            raise TraceFormatError(p, line, str(exc)) from None
        jobs.append(TraceJob(job_id, submit - start, spec))
    return sort_trace(jobs)
