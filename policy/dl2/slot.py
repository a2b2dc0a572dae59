"""One slot's decision state: counts given so far, the placement board, windows, features, masks.

Action layout (``DL2Config.actions``), K actions per window column i, then void (``KJ``):

* ``"grow"`` (K = 3, the reference's 3J + 1): ``3i`` = +1 worker, ``3i + 1`` = +1 PS,
  ``3i + 2`` = +1 PS and +1 worker as a co-located bundle; void = stop adding in this window.
* ``"elastic"`` (K = 6): the same three, then ``6i + 3`` = -1 worker, ``6i + 4`` = -1 PS,
  ``6i + 5`` = pause (stop all its tasks; it keeps its progress and resumes later at the
  restart cost). A job moves one way per slot: once grown it cannot shrink in the same slot
  and vice versa, so a slot's decision always ends. Shrinks never go below the job's minimum
  (``min_ps``/``min_workers``, at least 1 worker and, for PS jobs, 1 PS); only pause goes to 0.

Starting a job. A job that runs nothing can only be *started*, with the bundle action (``Ki +
2``), which places its whole minimum (``min_ps`` PS and ``min_workers`` workers, co-located
pairs first) or nothing at all: no task is ever booked for a job that cannot run (a job left
below its minimum would hold capacity and train nothing). A start that does not fit blocks
that job for the rest of the slot. The same rule gives the starter of each job at the slot
start. PyTorch (all-reduce) jobs have no PS: only worker actions and the start apply.

Starting point of a slot (``DL2Config.start``):

* ``"current"`` (default): every job starts from the PS/worker counts it runs now, and their
  tasks are charged on the board where they run. The policy only adds; ``void`` keeps the
  rest as it is, so a job whose counts the policy leaves alone is never restarted. Jobs are
  never shrunk by the policy: freed capacity comes from finishing jobs. This is what makes
  restarts (charged by the simulator, 6 minutes each by default) rare. Jobs that run nothing
  (new arrivals) first get a starter bundle each, in the job order, while one fits; a job
  started so cannot be shrunk or paused in the same slot (a start is a grow).
* ``"zero"``: the reference's rule: every slot starts from nothing, every job first gets a
  starter bundle (1 PS + 1 worker) on the least-loaded agent if one fits, then the policy adds.

Job order (``DL2Config.order``, :mod:`~dl2_mesos.policy.dl2.priority`): ``"arrival"`` or
``"priority"`` (shortest estimated remaining time first; windows filled from both ends of that
ranking). It orders the starters, the windows and the no-stall restart.

Hold after a change (``start="current"``). A running job whose counts changed less than
``HOLD_RESTARTS`` times its restart cost ago (start included) is held: none of its actions is valid, only the window's
void, so every rescale is followed by at least twice its cost of running. In the slots and
restart costs the models were trained with (1200 s, 360 s) this never binds; in short slots
(300 s) it keeps the policy from growing and shrinking the same job every slot, which there
left jobs restarting and never training.

More concurrent jobs than J: jobs that can still grow (below a cap) are cut, in the job order,
into successive windows of J; the policy works on one window until it picks void or nothing
in that window can be added, then moves on to the next window within the same slot. Jobs in no
window keep their starting counts. So 1000 concurrent jobs take ceil(1000 / J) windows.
"""

from __future__ import annotations

import numpy as np

from dl2_mesos.allocation import Allocation, JobAllocation, validate_allocation
from dl2_mesos.cluster import ClusterState, JobView
from dl2_mesos.placement import PlacementBoard
from dl2_mesos.policy.dl2.growth import growth_gains, payback_speed, speed_and_best_lists, useful_growth
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.priority import job_order
from dl2_mesos.policy.dl2.features import (
    COUNT_SCALE,
    F_CHANGED,
    F_GAIN_W,
    F_HEADROOM,
    F_PS,
    F_SHARE,
    F_WORKERS,
    NUM_GLOBAL_FEATURES,
    static_job_features,
)
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import default_speed_model

WORKER, PS, BUNDLE = 0, 1, 2
SHRINK_WORKER, SHRINK_PS, PAUSE = 3, 4, 5

#: a running job's counts stay at least this many times its restart cost after they change
HOLD_RESTARTS = 2.0

#: a job's direction of change within the slot
_GROWN, _SHRUNK, _BLOCKED = 1, -1, -2


def void_action(window: int, per_job: int = 3) -> int:
    return per_job * window


def decode_action(action: int, window: int, per_job: int = 3) -> tuple[int, int]:
    """(column, kind) of a non-void action; kind is WORKER, PS, BUNDLE (or a shrink/pause)."""
    if not 0 <= action < per_job * window:
        raise ValueError(f"action {action} is not a job action for window {window}")
    return action // per_job, action % per_job


def _payback_need(job: JobView, speed: list[list[float]]) -> float:
    """The speed a running job's growth must reach to repay its restart (0 for a job that runs
    nothing: starting it costs no restart); ``speed`` is its table, ``[p][w]`` in samples/s."""
    p, w = job.num_ps, job.num_workers
    if p == 0 and w == 0:
        return 0.0
    if not speed or p >= len(speed) or w >= len(speed[0]):
        return 0.0  # counts beyond its caps (a cap lowered while it ran): leave it to pruning
    remaining = job.remaining_epochs * default_speed_model().epoch_size(job.spec.job_type)
    return payback_speed(speed[p][w], remaining, job.restart_cost_seconds)


class SlotContext:
    """Mutable working state of one slot's decision (never shared across slots)."""

    def __init__(self, state: ClusterState, config: DL2Config) -> None:
        self.state = state
        self.cfg = config
        self.J = config.window
        self.K = config.per_job
        self.elastic = config.actions == "elastic"
        jobs = state.jobs
        n = self.n = len(jobs)
        self.job_ids = [j.job_id for j in jobs]
        self.static = static_job_features(state, config.job_features)
        #: fill the growth-gain columns (the ``gains`` feature set)
        self.with_gains = config.features == "gains"
        self.ps0 = np.array([j.num_ps for j in jobs], dtype=np.int64)
        self.w0 = np.array([j.num_workers for j in jobs], dtype=np.int64)
        self.max_ps = np.array([j.spec.max_ps for j in jobs], dtype=np.int64)
        self.max_w = np.array([j.spec.max_workers for j in jobs], dtype=np.int64)
        self.min_ps = np.array([j.spec.min_ps for j in jobs], dtype=np.int64)
        self.min_w = np.array([j.spec.min_workers for j in jobs], dtype=np.int64)
        self.uses_ps = self.max_ps > 0
        # the smallest size a job may run at: its minimum, at least 1 worker and (PS jobs) 1 PS
        self.start_ps = np.where(self.uses_ps, np.maximum(self.min_ps, 1), 0)
        self.start_w = np.maximum(self.min_w, 1)
        #: +1 grown, -1 shrunk or paused, -2 a start that did not fit (this slot), 0 untouched
        self.dir = np.zeros(n, dtype=np.int64)
        slot_s = float(state.slot_seconds)
        #: running jobs changed too recently to change again (see "Hold after a change"; with
        #: ``start="zero"`` every slot rebuilds every job, so there is nothing to hold)
        self.held = np.array([config.start == "current" and (j.num_ps > 0 or j.num_workers > 0)
                              and j.slots_since_rescale * slot_s < HOLD_RESTARTS * j.restart_cost_seconds
                              for j in jobs], dtype=bool)
        self.ps_res: list[Resources] = [j.spec.ps for j in jobs]  # type: ignore[misc]
        self.w_res: list[Resources] = [j.spec.worker for j in jobs]  # type: ignore[misc]
        self.b_res = [p + w for p, w in zip(self.ps_res, self.w_res)]
        # distinct demands (usually a handful): fit checks are made once per demand, not per job
        self._demands: list[Resources] = []
        index: dict[tuple[float, float, float], int] = {}  # (a Resources' fields: cheaper to hash)
        kindl: list[list[int]] = []
        for i in range(n):
            row = []
            for d in (self.w_res[i], self.ps_res[i], self.b_res[i]):
                key = (d.cpus, d.gpus, d.mem)
                k = index.get(key)
                if k is None:
                    k = index[key] = len(self._demands)
                    self._demands.append(d)
                row.append(k)
            kindl.append(row)
        self._kindl = kindl
        self._kinds = np.array(kindl, dtype=np.int64).reshape(n, 3)
        cap = state.capacity
        self._cap = np.array([max(cap.cpus, 1e-9), max(cap.gpus, 1e-9), max(cap.mem, 1e-9)])
        self._has = np.array([cap.cpus > 0, cap.gpus > 0, cap.mem > 0])
        self._psv = np.array([[r.cpus, r.gpus, r.mem] for r in self.ps_res]).reshape(n, 3)
        self._wv = np.array([[r.cpus, r.gpus, r.mem] for r in self.w_res]).reshape(n, 3)
        # the same values as plain floats, for the one-job updates of the greedy loop
        self._psl = [(r.cpus, r.gpus, r.mem) for r in self.ps_res]
        self._wl = [(r.cpus, r.gpus, r.mem) for r in self.w_res]
        self._capl = [float(c) for c in self._cap]
        self._hasl = [bool(h) for h in self._has]
        self.board = PlacementBoard(state.agents)
        # where each job's tasks are (agent positions), per role, to give tasks back on a shrink
        self._where: list[tuple[list[int], list[int]]] = [([], []) for _ in range(n)]  # (workers, PS)
        self._row = {j.job_id: i for i, j in enumerate(jobs)}
        # Mirror of the board's per-agent use, summed in the board's order, so "does demand d fit
        # on some agent" is a counter per demand kept up to date by each placement (exactly the
        # board's fits_anywhere, without a search per demand after every action).
        self._agent_index = {a.agent_id: k for k, a in enumerate(state.agents)}
        self._acap = [(a.available.cpus, a.available.gpus, a.available.mem) for a in state.agents]
        self._aused = [[0.0, 0.0, 0.0] for _ in state.agents]
        self._free = [cap.cpus, cap.gpus, cap.mem]
        self._fitcount: np.ndarray | None = None  # agents fitting each demand (set after the start)
        self._lost_cache: dict[tuple, np.ndarray | None] = {}
        #: bumped whenever some demand stops fitting on every agent (masks must be rebuilt)
        self.fit_version = 0
        if config.start == "current":
            for t in state.tasks:
                a = self._agent_index[t.agent_id]
                self._charge(a, t.resources)
                i = self._row.get(t.job_id)
                if i is not None:
                    self._where[i][0 if t.role == "worker" else 1].append(a)
            # one state change per agent on the board (the same sums as charging task by task)
            self.board.charge_many((t.agent_id, t.resources) for t in state.tasks)
            self.ps = self.ps0.copy()
            self.w = self.w0.copy()
        else:
            self.ps = np.zeros(n, dtype=np.int64)
            self.w = np.zeros(n, dtype=np.int64)
        max_ps, max_w = self.max_ps.tolist(), self.max_w.tolist()
        #: per job row: whether +worker, +PS, +bundle can still make it faster (growth.py);
        #: all True when the config does not prune growth (lists: read once per action)
        self._useful: list[tuple[bool, bool, bool]] = [(True, True, True)] * n
        self._grids: list[tuple[list[list[float]], list[list[float]]]] | None = None
        self._prune = config.prune_growth or config.restart_payback
        if self._prune or self.with_gains:
            self._grids = [speed_and_best_lists(j.spec.job_type, mp, mw, u)
                           for j, mp, mw, u in zip(jobs, max_ps, max_w, self.uses_ps.tolist())]
        self._start_psl, self._start_wl = self.start_ps.tolist(), self.start_w.tolist()
        #: per job row: the speed growth must reach to repay a restart (0: no such test)
        self._need: list[float] = [0.0] * n
        if config.restart_payback and config.start == "current":
            self._need = [_payback_need(j, grid[0]) for j, grid in zip(jobs, self._grids)]  # type: ignore[arg-type]
        # the speed grids also feed the gains columns; only pruning may turn them into masks
        if self._prune:
            self._useful = [useful_growth(speed, best, p, w, need) for (speed, best), p, w, need
                            in zip(self._grids, self.ps.tolist(), self.w.tolist(), self._need)]
        self._waiting = 0
        #: job rows in the configured order (starters, no-stall restart) and the window sequence
        self.rank, sequence = job_order(state, config.order)
        zero = ((self.ps == 0) & (self.w == 0)).tolist()
        for i in [r for r in self.rank if zero[r]]:
            # Starter (the reference's ASSIGN_BUNDLE, at the job's minimum size), in the job order,
            # for every job that has nothing yet: no job starves while capacity is free,
            # whatever the network does. All or nothing: nothing is booked for a job that
            # cannot start. A start is a grow: the job cannot be paused again in this slot
            # (a job moves one way per slot), so the network cannot hand the starter's room
            # to a job that ranks after it.
            if self._start(i):
                self.dir[i] = _GROWN
        self._waiting = int(((self.ps == 0) & (self.w == 0)).sum())
        self._init_fit_counts()
        ps, w = self.ps.tolist(), self.w.tolist()
        if self.elastic:  # every job can change: grow, shrink, pause or start
            eligible = sequence
        else:
            eligible = [i for i in sequence if ps[i] < max_ps[i] or w[i] < max_w[i]]
        self.windows: list[np.ndarray] = [
            np.array(eligible[k : k + self.J], dtype=np.int64) for k in range(0, len(eligible), self.J)
        ]

    def _refresh_useful(self, i: int) -> None:
        """Recompute job row ``i``'s useful grow kinds after its counts changed (pruning on)."""
        speed, best = self._grids[i]  # type: ignore[index]
        self._useful[i] = useful_growth(speed, best, int(self.ps[i]), int(self.w[i]), self._need[i])

    @property
    def free(self) -> np.ndarray:
        """Free CPUs, GPUs and memory on the whole board now."""
        return np.array(self._free)

    # -- fit checks -------------------------------------------------------------------------
    def _charge(self, a: int, d: Resources) -> None:
        u = self._aused[a]
        u[0] += d.cpus
        u[1] += d.gpus
        u[2] += d.mem
        self._free[0] -= d.cpus
        self._free[1] -= d.gpus
        self._free[2] -= d.mem

    def _agent_fits(self, a: int) -> np.ndarray:
        """Which demands fit on agent ``a`` now (the board's test: free >= demand - 1e-9)."""
        (cc, cg, cm), (uc, ug, um) = self._acap[a], self._aused[a]
        return (cc - uc >= self._dc) & (cg - ug >= self._dg) & (cm - um >= self._dm)

    def _init_fit_counts(self) -> None:
        dv = np.array([[d.cpus, d.gpus, d.mem] for d in self._demands]).reshape(-1, 3) - 1e-9
        self._dc, self._dg, self._dm = dv[:, 0].copy(), dv[:, 1].copy(), dv[:, 2].copy()
        if self._acap:
            free = np.array(self._acap, dtype=float) - np.array(self._aused, dtype=float)
            fits = (free[:, None, :] >= dv[None, :, :]).all(axis=2)
            self._fitcount = fits.sum(axis=0)
        else:
            self._fitcount = np.zeros(len(self._demands), dtype=np.int64)

    def _place(self, i: int, kind: int) -> bool:
        # (a bundle is placed as one demand, PS + worker: the board's place_bundle)
        d = self.w_res[i] if kind == WORKER else self.ps_res[i] if kind == PS else self.b_res[i]
        a = self.board.place_index(d)  # the board and this context share the state's agent order
        if a is None:
            return False
        if self._fitcount is None:  # still placing the starter bundles
            self._charge(a, d)
        else:
            # Demands that fitted on agent a before this task and no longer do. It depends only
            # on the agent's capacity, its use and the demand placed, and agents go through the
            # same few states, so it is cached: most placements cost one dictionary look-up.
            used = self._aused[a]
            key = (self._acap[a], used[0], used[1], used[2], self._kindl[i][kind])
            lost = self._lost_cache.get(key, False)
            if lost is False:
                before = self._agent_fits(a)
                self._charge(a, d)
                lost = before & ~self._agent_fits(a)
                lost = self._lost_cache[key] = lost if lost.any() else None
            else:  # self._charge(a, d), inlined: this runs once per action
                used[0] += d.cpus
                used[1] += d.gpus
                used[2] += d.mem
                free = self._free
                free[0] -= d.cpus
                free[1] -= d.gpus
                free[2] -= d.mem
            if lost is not None:
                self._fitcount -= lost
                if not self._fitcount[lost].all():
                    self.fit_version += 1  # some demand no longer fits anywhere
        if self.ps[i] == 0 and self.w[i] == 0 and self._fitcount is not None:
            self._waiting -= 1
        if kind != PS:
            self.w[i] += 1
            self._where[i][0].append(a)
        if kind != WORKER:
            self.ps[i] += 1
            self._where[i][1].append(a)
        if self._prune:
            self._refresh_useful(i)
        return True

    def _release(self, a: int, d: Resources) -> None:
        """Give ``d`` back on agent ``a`` (board, mirror and the per-demand fit counters)."""
        self.board.release(self.board._ids[a], d)
        before = self._agent_fits(a) if self._fitcount is not None else None
        u = self._aused[a]
        u[0] -= d.cpus
        u[1] -= d.gpus
        u[2] -= d.mem
        self._free[0] += d.cpus
        self._free[1] += d.gpus
        self._free[2] += d.mem
        if before is None:
            return
        gained = self._agent_fits(a) & ~before
        if gained.any():
            if not self._fitcount[gained].all():
                self.fit_version += 1  # some demand fits again somewhere
            self._fitcount += gained

    def _remove(self, i: int, role: int) -> None:
        """Stop one task of job ``i`` (role WORKER or PS), the one on the most loaded agent
        (as :func:`dl2_mesos.placement.place` chooses which tasks stop on a shrink)."""
        where = self._where[i][0 if role == WORKER else 1]
        load = self._agent_load
        k = max(range(len(where)), key=lambda j: (load(where[j]), -j))
        a = where.pop(k)
        self._release(a, self.w_res[i] if role == WORKER else self.ps_res[i])
        if role == WORKER:
            self.w[i] -= 1
        else:
            self.ps[i] -= 1
        if self.ps[i] == 0 and self.w[i] == 0 and self._fitcount is not None:
            self._waiting += 1
        if self._prune:
            self._refresh_useful(i)

    def _agent_load(self, a: int) -> float:
        (cc, cg, _), (uc, ug, _) = self._acap[a], self._aused[a]
        return (uc / cc if cc > 0 else 0.0) + (ug / cg if cg > 0 else 0.0)

    def _start(self, i: int) -> bool:
        """Place job ``i``'s minimum (PS/worker pairs co-located where one agent fits both, else
        apart, then the rest), all or nothing; False (and nothing booked) when it does not fit."""
        n_ps, n_w = int(self.start_ps[i]), int(self.start_w[i])
        pairs = min(n_ps, n_w)
        plan = [BUNDLE] * pairs + [WORKER] * (n_w - pairs) + [PS] * (n_ps - pairs)
        for kind in plan:
            if self._place(i, kind):
                continue
            if kind == BUNDLE and self._place(i, WORKER):
                if self._place(i, PS):
                    continue
            while self.w[i]:  # roll back: nothing stays booked
                self._remove(i, WORKER)
            while self.ps[i]:
                self._remove(i, PS)
            return False
        return True

    def fits(self) -> np.ndarray:
        """Whether each distinct demand (worker, PS, bundle of some job) fits on some agent now."""
        assert self._fitcount is not None
        return self._fitcount > 0

    # -- observation ------------------------------------------------------------------------
    def mask(self, window: np.ndarray) -> np.ndarray:
        """Valid actions for ``window`` (KJ + 1 booleans; void is always valid)."""
        K = self.K
        m = np.zeros(K * self.J + 1, dtype=bool)
        m[-1] = True
        k = len(window)
        if k == 0:
            return m
        kinds = self._kinds[window]  # (k, 3): worker, PS, bundle demand ids
        fits = self.fits()
        ps, w, d = self.ps[window], self.w[window], self.dir[window]
        zero = (ps == 0) & (w == 0)
        run = ~zero
        grow = run & (d != _SHRUNK)
        can_w = grow & (w < self.max_w[window])
        can_p = grow & (ps < self.max_ps[window])
        # a job at zero is started with the bundle action (its minimum, all or nothing)
        start = zero & (d == 0) & np.where(self.uses_ps[window],
                                           fits[kinds[:, 2]] | (fits[kinds[:, 0]] & fits[kinds[:, 1]]),
                                           fits[kinds[:, 0]])
        ul = self._useful
        useful = np.array([ul[i] for i in window.tolist()], dtype=bool).reshape(k, 3)
        jm = np.zeros((k, K), dtype=bool)
        free = ~self.held[window]
        can_w, can_p = can_w & free, can_p & free
        jm[:, 0] = can_w & fits[kinds[:, 0]] & useful[:, 0]
        jm[:, 1] = can_p & fits[kinds[:, 1]] & useful[:, 1]
        jm[:, 2] = (can_w & can_p & fits[kinds[:, 2]] & useful[:, 2]) | start
        if self.elastic:
            shrink = run & (d != _GROWN) & free
            jm[:, SHRINK_WORKER] = shrink & (w > self.start_w[window])
            jm[:, SHRINK_PS] = shrink & (ps > self.start_ps[window])
            jm[:, PAUSE] = shrink
        m[: K * k] = jm.ravel()
        return m

    def mask_row(self, i: int, out: np.ndarray) -> None:
        """Write job row ``i``'s K valid actions into ``out`` (one row of :meth:`mask`, for the
        greedy loop, which rebuilds only the row of the job an action changed)."""
        p, w, d = int(self.ps[i]), int(self.w[i]), int(self.dir[i])
        fc = self._fitcount
        kw, kp, kb = self._kindl[i]
        out[:] = False
        if self.held[i]:
            return
        if p == 0 and w == 0:
            if self.uses_ps[i]:
                out[BUNDLE] = d == 0 and (fc[kb] > 0 or (fc[kw] > 0 and fc[kp] > 0))
            else:
                out[BUNDLE] = d == 0 and fc[kw] > 0
            return
        if d != _SHRUNK:
            cw, cp = w < self.max_w[i], p < self.max_ps[i]
            uw, up, ub = self._useful[i]
            out[WORKER] = cw and uw and fc[kw] > 0
            out[PS] = cp and up and fc[kp] > 0
            out[BUNDLE] = cw and cp and ub and fc[kb] > 0
        if self.elastic and d != _GROWN:
            out[SHRINK_WORKER] = w > self.start_w[i]
            out[SHRINK_PS] = p > self.start_ps[i]
            out[PAUSE] = True

    def shares(self, idx: np.ndarray) -> np.ndarray:
        """Dominant shares of jobs ``idx`` at their in-slot counts."""
        use = self.ps[idx, None] * self._psv[idx] + self.w[idx, None] * self._wv[idx]
        frac = np.where(self._has, use / self._cap, 0.0)
        return frac.max(axis=1) if len(idx) else np.zeros(0)

    def job_rows(self, idx: np.ndarray) -> np.ndarray:
        """Feature rows (len(idx) x F float32) of jobs ``idx`` at their in-slot counts."""
        rows = self.static[idx].copy()
        if len(idx):
            rows[:, F_SHARE] = np.minimum(self.shares(idx) * self.n, 4.0)
            rows[:, F_PS] = self.ps[idx] / COUNT_SCALE
            rows[:, F_WORKERS] = self.w[idx] / COUNT_SCALE
            rows[:, F_CHANGED] = (self.ps[idx] != self.ps0[idx]) | (self.w[idx] != self.w0[idx])
            if self.with_gains:
                for r, i in enumerate(idx.tolist()):
                    rows[r, F_GAIN_W : F_HEADROOM + 1] = self.gains(i, int(self.ps[i]), int(self.w[i]))
        return rows

    def gains(self, i: int, ps: int, workers: int) -> tuple[float, float, float, float]:
        """Job row ``i``'s growth-gain columns at ``ps`` PS and ``workers`` workers (the
        ``gains`` feature set only)."""
        speed, best = self._grids[i]  # type: ignore[index]
        return growth_gains(speed, best, ps, workers, self._start_psl[i], self._start_wl[i])

    def global_features(self, window_index: int) -> np.ndarray:
        """The G global values (float32)."""
        g = np.zeros(NUM_GLOBAL_FEATURES, dtype=np.float32)
        self.write_global_features(g, window_index)
        return g

    def write_global_features(self, out: np.ndarray, window_index: int) -> None:
        """Write the G global values into ``out[:G]`` (float32)."""
        out[0] = self._free[0] / self._capl[0] if self._hasl[0] else 0.0
        out[1] = self._free[1] / self._capl[1] if self._hasl[1] else 0.0
        out[2] = min(self.n / 100.0, 10.0)
        out[3] = float(self._waiting) / max(self.n, 1)
        out[4] = window_index / max(len(self.windows), 1)

    def features(self, window: np.ndarray, window_index: int) -> np.ndarray:
        """The flattened network input for ``window`` (J * F + G float32; empty columns zero)."""
        x = np.zeros((self.J, self.static.shape[1]), dtype=np.float32)
        x[: len(window)] = self.job_rows(window)
        return np.concatenate([x.ravel(), self.global_features(window_index)])

    # -- actions ----------------------------------------------------------------------------
    def apply(self, window: np.ndarray, action: int) -> bool:
        """Apply a non-void action to the job in its column; False when it could not be placed
        (a start that did not fit: the job is then blocked for the rest of the slot)."""
        col, kind = decode_action(action, self.J, self.K)
        if col >= len(window):
            raise ValueError(f"action {action} names empty column {col}")
        i = int(window[col])
        return self.apply_to(i, kind, action)

    def apply_to(self, i: int, kind: int, action: int = -1) -> bool:
        """:meth:`apply` for job row ``i`` and action kind ``kind``."""
        p, w, d = int(self.ps[i]), int(self.w[i]), int(self.dir[i])
        if p == 0 and w == 0:
            if kind != BUNDLE or d != 0:
                raise ValueError(f"action {action}: job {self.job_ids[i]} runs nothing; only a start applies")
            if self._start(i):
                self.dir[i] = _GROWN
                return True
            self.dir[i] = _BLOCKED
            return False
        if kind in (WORKER, PS, BUNDLE):
            if d == _SHRUNK or (kind != PS and w >= self.max_w[i]) or (kind != WORKER and p >= self.max_ps[i]):
                raise ValueError(f"action {action} exceeds job {self.job_ids[i]}'s caps")
            if not self._useful[i][kind]:
                raise ValueError(f"action {action} cannot make job {self.job_ids[i]} faster (masked)")
            ok = self._place(i, kind)
            if ok:
                self.dir[i] = _GROWN
            return ok
        if not self.elastic or d == _GROWN:
            raise ValueError(f"action {action}: job {self.job_ids[i]} cannot shrink now")
        if kind == SHRINK_WORKER:
            if w <= self.start_w[i]:
                raise ValueError(f"action {action}: job {self.job_ids[i]} is at its minimum workers")
            self._remove(i, WORKER)
        elif kind == SHRINK_PS:
            if p <= self.start_ps[i]:
                raise ValueError(f"action {action}: job {self.job_ids[i]} is at its minimum PS")
            self._remove(i, PS)
        else:  # PAUSE
            for _ in range(w):
                self._remove(i, WORKER)
            for _ in range(p):
                self._remove(i, PS)
        self.dir[i] = _SHRUNK
        return True

    def settle_growth(self) -> None:
        """Restart-payback rule, end of the slot: a running job grown to a size slower than its
        payback speed goes back to the size it ran at (its new tasks are given back).

        The per-action mask lets a job grow while some size at or beyond the grown one would
        repay the restart, so that it can pass through slower sizes on the way; where the
        decision stops short of any size that repays, the rescale would cost the job more than
        it gains, and the job keeps its tasks as they were (no restart).
        """
        if not self.cfg.restart_payback or self._grids is None:
            return
        for i, need in enumerate(self._need):
            if need <= 0.0 or self.dir[i] != _GROWN:
                continue
            p, w, p0, w0 = int(self.ps[i]), int(self.w[i]), int(self.ps0[i]), int(self.w0[i])
            if p < p0 or w < w0 or (p, w) == (p0, w0) or self._grids[i][0][p][w] >= need:
                continue
            self._give_back_newest(i, w - w0, p - p0)  # the newest tasks are the slot's own
            self.dir[i] = 0

    def _give_back_newest(self, i: int, workers: int, ps: int) -> None:
        """Stop job ``i``'s ``workers`` and ``ps`` most recently placed tasks (undoing this
        slot's own placements, which are the newest of its task lists)."""
        for role, count in ((WORKER, workers), (PS, ps)):
            where = self._where[i][0 if role == WORKER else 1]
            for _ in range(count):
                self._release(where.pop(), self.w_res[i] if role == WORKER else self.ps_res[i])
        self.w[i] -= workers
        self.ps[i] -= ps
        if self.ps[i] == 0 and self.w[i] == 0 and self._fitcount is not None and (workers or ps):
            self._waiting += 1
        if self._prune:
            self._refresh_useful(i)

    def settle_shrinks(self) -> None:
        """Idle-shrink rule, end of the slot: a running job the decision shrank or paused gets
        its tasks back when the room it freed is still free, i.e. no other job of the slot took
        it (its counts back as they were: no restart).

        A shrink costs the job its restart and slows it; it pays only by the room it hands to
        other jobs. Where the room would stay idle until the next slot, the shrink is undone,
        in the job order, while each job's whole former size fits again (all or nothing). A
        shrink to a size the speed table says is faster (the table is not monotone) is kept.
        """
        if not self.cfg.restore_idle_shrinks or self.cfg.start != "current":
            return
        sm = default_speed_model()
        for i in self.rank:
            if self.dir[i] != _SHRUNK:
                continue
            p, w, p0, w0 = int(self.ps[i]), int(self.w[i]), int(self.ps0[i]), int(self.w0[i])
            if p > p0 or w > w0 or (p0 == 0 and w0 == 0):
                continue
            jt, uses_ps = self.state.jobs[i].spec.job_type, bool(self.uses_ps[i])
            if p and w and sm.samples_per_second(jt, p, w, uses_ps) > sm.samples_per_second(jt, p0, w0, uses_ps):
                continue
            back = [WORKER] * (w0 - w) + [PS] * (p0 - p)
            placed = 0
            while placed < len(back) and self._place(i, back[placed]):
                placed += 1
            if placed == len(back):
                self.dir[i] = 0
            else:  # all or nothing
                done = back[:placed]
                self._give_back_newest(i, done.count(WORKER), done.count(PS))

    def finish(self) -> Allocation:
        """End the slot's decision: the end-of-slot rules the config switches on (payback
        settle, idle-shrink restore), then the no-stall restart, then the allocation. Both
        decision loops end here."""
        self.settle_growth()
        self.settle_shrinks()
        self.ensure_progress()
        return self.allocation()

    def ensure_progress(self) -> None:
        """No stall: when the decision leaves every job without tasks (e.g. all paused), the
        jobs are started again in the configured order while their minimum fits."""
        if self.n and not (self.ps.any() or self.w.any()):
            for i in self.rank:
                self._start(i)

    def allocation(self) -> Allocation:
        """The counts decided so far, with jobs below their minimum dropped to nothing."""
        out: dict[str, JobAllocation] = {}
        for job_id, p, w, min_p, min_w in zip(self.job_ids, self.ps.tolist(), self.w.tolist(),
                                              self.min_ps.tolist(), self.min_w.tolist()):
            if p == 0 and w == 0:
                continue
            if p < min_p or w < min_w:
                # (starts are all or nothing and shrinks stop at the minimum, so only a job that
                # already ran below its minimum, e.g. after losing a node, ends up here)
                continue
            out[job_id] = JobAllocation(p, w)
        alloc = Allocation(out)
        validate_allocation(alloc, self.state)
        return alloc
