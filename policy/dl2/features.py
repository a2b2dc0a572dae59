"""DL2 state features: per-job columns and a few global values, all normalised to about [0, 1].

Per job (one column of the J x F window, jobs in the job order -- ``DL2Config.order`` --, empty
columns all zero):

====  =====================================================================================
0-7   job type, one-hot (the paper's x; the reference used the raw id)
8     valid column flag (1 for a real job)
9     time units (slots, see below) since arrival (the paper's d), min(d / 50, 4)
10    remaining fraction of the job's epochs (the paper's e, as in the reference)
11    remaining epochs, log10(1 + e) / 5 (absolute size: separates long from short jobs)
12    dominant share of the counts given so far in this slot, relative to the fair share
      (share x number of active jobs), clipped at 4 (the paper's r)
13    PS given so far this slot / 16 (the paper's u)
14    workers given so far this slot / 16 (the paper's w)
15    PS running at the slot start / 16
16    workers running at the slot start / 16
17    restart cost / time unit (what changing this job's counts costs)
18    time units since its counts last changed, min(s / 20, 1)
19    1 when this slot's counts differ from the running ones (a restart will be charged)
20    1 when the job runs no task at the slot start (waiting)
21    estimated remaining time units at the measured speed / 50, clipped at 4 (0 when unknown)
22    1 when a measured speed is known
====  =====================================================================================

With the ``gains`` feature set (``DL2Config.features``) four more columns say what growing the
job would give it by the speed table, at its in-slot counts (its start size while it runs
nothing; see :func:`~dl2_mesos.policy.dl2.growth.growth_gains`):

====  =====================================================================================
23    log2 speed-up of +1 worker, clipped to [-1, 1]
24    log2 speed-up of +1 PS
25    log2 speed-up of +1 PS and +1 worker
26    log2 speed-up of the fastest size at or beyond the job's size, clipped to [0, 3], / 3
====  =====================================================================================

A network sees the type and counts of every job, so it could learn these from the reward alone;
given them, the value of growing one job rather than another is one linear read-out away.

Global (appended once): free CPU and GPU fraction on the board now, active jobs / 100, jobs
waiting with nothing / active jobs, window index / number of windows.

Time unit. Columns 9, 17, 18 and 21 count time in units of :func:`time_unit_seconds`: the slot
length, unless the jobs' restart costs are large against it. Every model was trained with slots
of 1200 s and restarts of 360 s (``TRAINED_RESTART_FRACTION`` of a slot); in slots of 300 s the
same jobs look four times as long and a restart more than a whole slot, inputs the network never
saw, and the shipped model then grew and shrank the same jobs slot after slot (measured in the
simulator: 500-600 changes of one job in 1000 slots, 16 jobs unfinished). Measuring time in units
of at least restart cost / ``TRAINED_RESTART_FRACTION`` shows it those jobs as in training. A
deployment whose whole clock is compressed (the demo: 10 s slots, 5 s restarts) keeps units close
to its slot.

Free capacity is part of the global input here (the paper leaves it out); it tells the network
when the cluster is about to run out, which the void action otherwise has to guess.
"""

from __future__ import annotations

import math

import numpy as np

from dl2_mesos.cluster import ClusterState
from dl2_mesos.job_types import NUM_JOB_TYPES

NUM_JOB_FEATURES = 23  # the "base" set
#: per-job columns of each feature set (``DL2Config.features``)
FEATURE_SETS = {"base": NUM_JOB_FEATURES, "gains": NUM_JOB_FEATURES + 4}
NUM_GLOBAL_FEATURES = 5
COUNT_SCALE = 16.0

F_TYPE = 0
F_VALID = 8
F_SLOTS_RUN = 9
F_REM_FRAC = 10
F_REM_ABS = 11
F_SHARE = 12
F_PS = 13
F_WORKERS = 14
F_PS0 = 15
F_W0 = 16
F_RESTART = 17
F_SINCE_RESCALE = 18
F_CHANGED = 19
F_WAITING = 20
F_EST_SLOTS = 21
F_EST_KNOWN = 22
F_GAIN_W = 23
F_GAIN_PS = 24
F_GAIN_B = 25
F_HEADROOM = 26


def input_size(window: int, arch: str, features: str = "base") -> int:
    """Length of the flattened network input for a window of ``window`` jobs."""
    return window * FEATURE_SETS[features] + NUM_GLOBAL_FEATURES


#: restart cost / slot length in the worlds the models were trained in (360 s in 1200 s slots)
TRAINED_RESTART_FRACTION = 0.3


def time_unit_seconds(state: ClusterState) -> float:
    """The time unit of the features (seconds): the slot length, or the jobs' median restart
    cost / ``TRAINED_RESTART_FRACTION`` when that is longer (see the module docstring)."""
    slot = max(float(state.slot_seconds), 1.0)
    if not state.jobs:
        return slot
    median = float(np.median([j.restart_cost_seconds for j in state.jobs]))
    return max(slot, median / TRAINED_RESTART_FRACTION)


def static_job_features(state: ClusterState, width: int = NUM_JOB_FEATURES) -> np.ndarray:
    """The features of every job in ``state`` that do not change within the slot (n x width).

    Dynamic columns (share, counts, changed flag, growth gains) are left at zero and filled in
    by the slot context as the decision proceeds.
    """
    n = len(state.jobs)
    out = np.zeros((n, width), dtype=np.float32)
    unit = time_unit_seconds(state)
    per_slot = max(float(state.slot_seconds), 1.0) / unit  # time units per slot (<= 1)
    for i, job in enumerate(state.jobs):
        t = job.spec.type_id - 1
        if 0 <= t < NUM_JOB_TYPES:
            out[i, F_TYPE + t] = 1.0
        out[i, F_VALID] = 1.0
        out[i, F_SLOTS_RUN] = min(job.slots_run * per_slot / 50.0, 4.0)
        out[i, F_REM_FRAC] = job.remaining_fraction
        out[i, F_REM_ABS] = math.log10(1.0 + job.remaining_epochs) / 5.0
        out[i, F_PS0] = job.num_ps / COUNT_SCALE
        out[i, F_W0] = job.num_workers / COUNT_SCALE
        out[i, F_RESTART] = min(job.restart_cost_seconds / unit, 4.0)
        out[i, F_SINCE_RESCALE] = min(job.slots_since_rescale * per_slot / 20.0, 1.0)
        out[i, F_WAITING] = 1.0 if (job.num_ps == 0 and job.num_workers == 0) else 0.0
        eps = job.measured_epochs_per_second
        if eps is not None and eps > 0:
            slots = job.remaining_epochs / (eps * unit)
            out[i, F_EST_SLOTS] = min(slots / 50.0, 4.0)
            out[i, F_EST_KNOWN] = 1.0
    return out
