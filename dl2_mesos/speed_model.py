"""Training speed of a job as a function of its PS and worker counts, from measurements.

Data: the DL2 prototype's measured table (``dl2_mesos/data/config_speed.txt``, see
PROVENANCE.md): per model, per (PS, workers) point, the speed of every worker (samples/s).
The job's speed is the *sum* over workers, as in the reference.

Fit (the prototype's semantics, with two of its quirks fixed: it kept ten failed
measurements, and its RBF rose again beyond the measured worker counts):
  * the ten failed measurements (total speed below 10% of the model's median) are dropped;
  * a linear radial-basis-function interpolant (scipy, linear kernel with a linear polynomial
    tail) is fitted per model over the remaining (PS, workers) points;
  * counts beyond the measured range are clamped to it (more tasks than ever measured are
    assumed to give no further gain, instead of extrapolating the RBF), and the result is
    floored at 1% of the model's smallest measured speed, so a running job always progresses;
  * an unmeasured point inside the range is kept between its nearest measured neighbours in
    its row and column, so the table is monotone wherever the measurements are.

Epochs per second = total samples/s / the type's ``epoch_size`` (the reference's divisor).
Values are precomputed into a table, so a lookup is an array index.

PyTorch all-reduce jobs have no PS: their speed is taken at PS = workers (a balanced PS job of
the same model; documented approximation).
"""

from __future__ import annotations

import ast
from functools import lru_cache
from importlib import resources as ilr

import numpy as np

from dl2_mesos.job_types import all_job_types, get_job_type

TABLE_MAX = 64  # counts up to this are tabulated; larger counts clamp to it
FAILED_FRACTION_OF_MEDIAN = 0.10


def load_measurements() -> dict[str, list[tuple[int, int, float]]]:
    """Parse the speed table: model -> [(num_ps, num_workers, total samples/s)], failures kept."""
    text = ilr.files("dl2_mesos.data").joinpath("config_speed.txt").read_text()
    out: dict[str, list[tuple[int, int, float]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        rec = ast.literal_eval(line)
        model, _mode, _batch, ps, w, speeds = rec[0], rec[1], rec[2], int(rec[3]), int(rec[4]), rec[5]
        out.setdefault(model, []).append((ps, w, float(sum(speeds))))
    return out


def clean_measurements(points: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """Drop failed measurements: total speed below 10% of the model's median."""
    med = float(np.median([s for _, _, s in points]))
    return [p for p in points if p[2] >= FAILED_FRACTION_OF_MEDIAN * med]


def _bound_by_measured_neighbours(vals: np.ndarray, measured: dict[tuple[int, int], float]) -> None:
    """Keep each unmeasured in-range value between its nearest measured neighbours.

    The RBF can dip or overshoot slightly between two measured points of one row (same PS
    count) or column (same worker count); bounding it by them makes the table monotone
    wherever the measurements are. Where both a row and a column bracket the point, the
    intersection of the two intervals is used when it is not empty, else the row's.
    """
    rows: dict[int, list[int]] = {}
    cols: dict[int, list[int]] = {}
    for p, w in measured:
        rows.setdefault(p, []).append(w)
        cols.setdefault(w, []).append(p)
    for v in (*rows.values(), *cols.values()):
        v.sort()

    def bracket(sorted_vals: list[int], x: int) -> tuple[int, int] | None:
        i = int(np.searchsorted(sorted_vals, x))
        if 0 < i < len(sorted_vals):
            return sorted_vals[i - 1], sorted_vals[i]
        return None

    max_p = max(p for p, _ in measured)
    max_w = max(w for _, w in measured)
    for p in range(1, max_p + 1):
        for w in range(1, max_w + 1):
            if (p, w) in measured:
                continue
            bounds = []
            b = bracket(rows.get(p, []), w)
            if b is not None:
                a, c = measured[(p, b[0])], measured[(p, b[1])]
                bounds.append((min(a, c), max(a, c)))
            b = bracket(cols.get(w, []), p)
            if b is not None:
                a, c = measured[(b[0], w)], measured[(b[1], w)]
                bounds.append((min(a, c), max(a, c)))
            if not bounds:
                continue
            lo, hi = bounds[0]
            if len(bounds) == 2:
                lo2, hi2 = max(lo, bounds[1][0]), min(hi, bounds[1][1])
                if lo2 <= hi2:
                    lo, hi = lo2, hi2
            vals[p, w] = min(max(vals[p, w], lo), hi)


class SpeedModel:
    """Lookup of total training speed (samples/s) and epochs/s per job type and counts."""

    def __init__(self) -> None:
        from scipy.interpolate import RBFInterpolator  # imported lazily: only the builder needs scipy

        raw = load_measurements()
        self._tables: dict[str, np.ndarray] = {}
        self._epoch_size: dict[str, float] = {}
        for jt in all_job_types():
            pts = clean_measurements(raw[jt.name])
            xy = np.array([[p, w] for p, w, _ in pts], dtype=float)
            z = np.array([s for _, _, s in pts], dtype=float)
            rbf = RBFInterpolator(xy, z, kernel="linear", degree=1)
            max_p, max_w = xy[:, 0].max(), xy[:, 1].max()
            grid = np.arange(TABLE_MAX + 1, dtype=float)
            pp, ww = np.meshgrid(np.clip(grid, 1, max_p), np.clip(grid, 1, max_w), indexing="ij")
            vals = rbf(np.stack([pp.ravel(), ww.ravel()], axis=1)).reshape(pp.shape)
            floor = 0.01 * z.min()
            # measured points are used exactly where they exist
            for p, w, s in pts:
                vals[p, w] = s
            _bound_by_measured_neighbours(vals, {(p, w): s for p, w, s in pts})
            # beyond the measured range: exactly the edge values (clamped counts)
            mp, mw = int(max_p), int(max_w)
            vals[mp + 1 :, :] = vals[mp, :]
            vals[:, mw + 1 :] = vals[:, mw][:, None]
            vals = np.maximum(vals, floor)
            vals[0, :] = 0.0  # no PS: no progress for a PS job
            vals[:, 0] = 0.0  # no worker: no progress
            self._tables[jt.name] = vals
            self._epoch_size[jt.name] = jt.epoch_size

    def samples_per_second(self, job_type: str, num_ps: int, num_workers: int, uses_ps: bool = True) -> float:
        """Total samples/s of a job of ``job_type`` with the given counts (0 if either is 0)."""
        if not uses_ps:
            num_ps = num_workers
        if num_ps <= 0 or num_workers <= 0:
            return 0.0
        t = self._tables[job_type]
        return float(t[min(num_ps, TABLE_MAX), min(num_workers, TABLE_MAX)])

    def epochs_per_second(self, job_type: str, num_ps: int, num_workers: int, uses_ps: bool = True) -> float:
        """Epochs per second (reference semantics: samples/s divided by the type's epoch_size)."""
        return self.samples_per_second(job_type, num_ps, num_workers, uses_ps) / self._epoch_size[job_type]

    def epoch_size(self, job_type: str) -> float:
        """Samples per epoch of ``job_type`` (the divisor of :meth:`epochs_per_second`)."""
        return self._epoch_size[job_type]

    def table(self, job_type: str) -> np.ndarray:
        """The (TABLE_MAX+1)^2 table of samples/s indexed [num_ps, num_workers] (read-only view)."""
        v = self._tables[get_job_type(job_type).name].view()
        v.flags.writeable = False
        return v


@lru_cache(maxsize=1)
def default_speed_model() -> SpeedModel:
    """The shared speed model built from the shipped measurements (built once per process)."""
    return SpeedModel()
