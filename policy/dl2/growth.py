"""Which growth can still make a job faster, by the measured speed table.

Growing a job (+worker, +PS, +bundle) costs it a restart and takes capacity other jobs could
use; it is worth it only if some size at or beyond the grown one is faster than the job's size
now. The measured speeds are not monotone in the counts (vgg-16 with one worker: 14 PS train
28.4 samples/s, 15 PS 26.9), and beyond the measured range they are flat, so a policy that
grows a job one task at a time can step past the job's fastest size and gain nothing for the
capacity it takes (the paper's DL2 learns this only from the reward, and a shipped model that
does it once in a while sits above the heuristics on an idle cluster).

A step from size (p, w) to (p', w') is *futile* when no size (p'', w'') >= (p', w') within the
job's caps is faster than (p, w). Masking futile steps never cuts a path to a faster size: on
any path of +1 steps from (p, w) to a faster size (p*, w*) >= it, every step's target is <=
(p*, w*), so the best size at or beyond it is at least as fast as (p*, w*), faster than the
size the step starts from (the speed may dip on the way; the test is against the best size
beyond, not the next one).

The speeds are the table's (the simulator adds at most a per-slot noise around it); PyTorch
(all-reduce) jobs have no PS dimension.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from dl2_mesos.speed_model import default_speed_model


@lru_cache(maxsize=1024)
def speed_and_best_beyond(job_type: str, max_ps: int, max_workers: int,
                          uses_ps: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(speed, best)``: samples/s at every (PS, workers) within the caps, and the fastest
    speed at or beyond each size, ``best[p, w] = max(speed[p:, w:])``.

    Both are (max_ps + 1) x (max_workers + 1), read-only; a job without PS has one row (p = 0).
    """
    sm = default_speed_model()
    rows = max(int(max_ps), 0) + 1 if uses_ps else 1
    cols = max(int(max_workers), 0) + 1
    speed = np.zeros((rows, cols))
    for p in range(rows):
        for w in range(cols):
            speed[p, w] = sm.samples_per_second(job_type, p, w, uses_ps)
    best = np.maximum.accumulate(np.maximum.accumulate(speed[::-1, ::-1], axis=0), axis=1)[::-1, ::-1]
    best = np.ascontiguousarray(best)
    speed.flags.writeable = False
    best.flags.writeable = False
    return speed, best


@lru_cache(maxsize=1024)
def speed_and_best_lists(job_type: str, max_ps: int, max_workers: int,
                         uses_ps: bool) -> tuple[list[list[float]], list[list[float]]]:
    """:func:`speed_and_best_beyond` as nested lists (``x[p][w]``): one job's checks in the
    decision loop cost plain float comparisons, not numpy scalar look-ups."""
    speed, best = speed_and_best_beyond(job_type, max_ps, max_workers, uses_ps)
    return speed.tolist(), best.tolist()


def useful_growth(speed, best, ps: int, workers: int, need: float = 0.0) -> tuple[bool, bool, bool]:
    """Whether +1 worker, +1 PS and +1 PS with +1 worker can still make a job running
    ``ps`` PS and ``workers`` workers faster (False where the step leaves the caps), and,
    when ``need`` is given, reach at least that speed at or beyond the grown size (the
    restart-payback rule: :func:`payback_speed`).

    ``speed`` and ``best`` are the pair of :func:`speed_and_best_beyond` (arrays) or of
    :func:`speed_and_best_lists`; both are indexed ``[p][w]``.
    """
    rows, cols = len(best), len(best[0])
    if ps >= rows or workers >= cols:
        return False, False, False
    now = speed[ps][workers]
    if need > now:
        now = need * (1.0 - 1e-12)  # "faster than now" becomes "at least the payback speed"
    more_w = workers + 1 < cols
    more_p = ps + 1 < rows
    return (
        bool(more_w and best[ps][workers + 1] > now),
        bool(more_p and best[ps + 1][workers] > now),
        bool(more_w and more_p and best[ps + 1][workers + 1] > now),
    )


def payback_speed(speed_now: float, remaining_samples: float, restart_seconds: float) -> float:
    """The speed (samples/s) a running job must reach for a rescale to pay for itself.

    Growing a running job restarts it: it loses ``restart_seconds`` of training, and the rest
    of its work, ``remaining_samples``, then runs at the new speed ``s`` instead of
    ``speed_now``. That saves ``remaining/speed_now - remaining/s`` seconds, which repays the
    restart only if ``s >= 1 / (1/speed_now - restart/remaining)``. Near its end a job's
    remaining work is too small for any speed-up to repay the restart (``inf``); a job that
    makes no progress now (``speed_now`` 0) or restarts for free needs nothing (0). The rule
    uses the measured table's speeds, like growth pruning; the job's other costs (the capacity
    it takes from others) are the policy's to weigh.
    """
    if restart_seconds <= 0 or speed_now <= 0:
        return 0.0
    if remaining_samples <= 0:
        return math.inf
    slack = 1.0 / speed_now - restart_seconds / remaining_samples
    return math.inf if slack <= 0 else 1.0 / slack


def growth_gains(speed, best, ps: int, workers: int, start_ps: int,
                 start_w: int) -> tuple[float, float, float, float]:
    """What growing a job would give it, by the speed table: the log2 speed-ups of +1 worker,
    +1 PS and +1 of each (each clipped to [-1, 1]; 0 where the step leaves the caps) and of the
    fastest size at or beyond its size (log2, clipped to [0, 3], divided by 3).

    Relative to the job's size ``(ps, workers)``, or to its start size ``(start_ps, start_w)``
    when it runs nothing. ``speed`` and ``best`` are the pair of :func:`speed_and_best_lists`.
    """
    rows, cols = len(best), len(best[0])
    if ps == 0 and workers == 0:
        ps, workers = min(start_ps, rows - 1), min(start_w, cols - 1)
    if ps >= rows or workers >= cols:
        return 0.0, 0.0, 0.0, 0.0
    now = speed[ps][workers]
    if now <= 0:
        return 0.0, 0.0, 0.0, 0.0

    def gain(faster: float) -> float:
        return max(-1.0, min(1.0, math.log2(faster / now))) if faster > 0 else -1.0

    more_w, more_p = workers + 1 < cols, ps + 1 < rows
    return (
        gain(speed[ps][workers + 1]) if more_w else 0.0,
        gain(speed[ps + 1][workers]) if more_p else 0.0,
        gain(speed[ps + 1][workers + 1]) if more_w and more_p else 0.0,
        min(max(math.log2(best[ps][workers] / now), 0.0), 3.0) / 3.0,
    )


__all__ = ["growth_gains", "payback_speed", "speed_and_best_beyond", "speed_and_best_lists", "useful_growth"]
