"""One slot's decision state: counts given so far, the placement board, windows, features, masks.

Action layout (3J + 1, the reference's): for window column i, ``3i`` = +1 worker, ``3i + 1`` =
+1 PS, ``3i + 2`` = +1 PS and +1 worker as a co-located bundle; ``3J`` = void (stop adding in
this window).

Starting point of a slot (``DL2Config.start``):

* ``"current"`` (default): every job starts from the PS/worker counts it runs now, and their
  tasks are charged on the board where they run. The policy only adds; ``void`` keeps the
  rest as it is, so a job whose counts the policy leaves alone is never restarted. Jobs are
  never shrunk by the policy: freed capacity comes from finishing jobs. This is what makes
  restarts (charged by the simulator, 6 minutes each by default) rare. Jobs that run nothing
  (new arrivals) first get a starter bundle each, in arrival order, while one fits.
* ``"zero"``: the reference's rule: every slot starts from nothing, every job first gets a
  starter bundle (1 PS + 1 worker) on the least-loaded agent if one fits, then the policy adds.

More concurrent jobs than J: jobs that can still grow (below a cap) are cut, in arrival order,
into successive windows of J; the policy works on one window until it picks void or nothing
in that window can be added, then moves on to the next window within the same slot. Jobs in no
window keep their starting counts. So 1000 concurrent jobs take ceil(1000 / J) windows.
"""

from __future__ import annotations

import numpy as np

from dl2_mesos.allocation import Allocation, JobAllocation, validate_allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.placement import PlacementBoard
from dl2_mesos.policy.dl2.config import DL2Config
from dl2_mesos.policy.dl2.features import (
    COUNT_SCALE,
    F_CHANGED,
    F_PS,
    F_SHARE,
    F_WORKERS,
    NUM_GLOBAL_FEATURES,
    NUM_JOB_FEATURES,
    static_job_features,
)
from dl2_mesos.resources import Resources

WORKER, PS, BUNDLE = 0, 1, 2


def void_action(window: int) -> int:
    return 3 * window


def decode_action(action: int, window: int) -> tuple[int, int]:
    """(column, kind) of a non-void action; kind is WORKER, PS or BUNDLE."""
    if not 0 <= action < 3 * window:
        raise ValueError(f"action {action} is not a job action for window {window}")
    return action // 3, action % 3


class SlotContext:
    """Mutable working state of one slot's decision (never shared across slots)."""

    def __init__(self, state: ClusterState, config: DL2Config) -> None:
        self.state = state
        self.cfg = config
        self.J = config.window
        jobs = state.jobs
        n = self.n = len(jobs)
        self.job_ids = [j.job_id for j in jobs]
        self.static = static_job_features(state)
        self.ps0 = np.array([j.num_ps for j in jobs], dtype=np.int64)
        self.w0 = np.array([j.num_workers for j in jobs], dtype=np.int64)
        self.max_ps = np.array([j.spec.max_ps for j in jobs], dtype=np.int64)
        self.max_w = np.array([j.spec.max_workers for j in jobs], dtype=np.int64)
        self.min_ps = np.array([j.spec.min_ps for j in jobs], dtype=np.int64)
        self.min_w = np.array([j.spec.min_workers for j in jobs], dtype=np.int64)
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
                self._charge(self._agent_index[t.agent_id], t.resources)
                self.board.charge(t.agent_id, t.resources)
            self.ps = self.ps0.copy()
            self.w = self.w0.copy()
        else:
            self.ps = np.zeros(n, dtype=np.int64)
            self.w = np.zeros(n, dtype=np.int64)
        max_ps, max_w = self.max_ps.tolist(), self.max_w.tolist()
        for i in np.flatnonzero((self.ps == 0) & (self.w == 0)).tolist():
            # Starter bundle (the reference's ASSIGN_BUNDLE), arrival order, for every job that
            # has nothing yet: no job starves while capacity is free, whatever the network does.
            if max_ps[i] >= 1:
                self._place(i, BUNDLE)
            else:
                self._place(i, WORKER)
        self._waiting = int(((self.ps == 0) & (self.w == 0)).sum())
        self._init_fit_counts()
        ps, w = self.ps.tolist(), self.w.tolist()
        eligible = [i for i in range(n) if ps[i] < max_ps[i] or w[i] < max_w[i]]
        self.windows: list[np.ndarray] = [
            np.array(eligible[k : k + self.J], dtype=np.int64) for k in range(0, len(eligible), self.J)
        ]

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
        if kind != WORKER:
            self.ps[i] += 1
        return True

    def fits(self) -> np.ndarray:
        """Whether each distinct demand (worker, PS, bundle of some job) fits on some agent now."""
        assert self._fitcount is not None
        return self._fitcount > 0

    # -- observation ------------------------------------------------------------------------
    def mask(self, window: np.ndarray) -> np.ndarray:
        """Valid actions for ``window`` (3J + 1 booleans; void is always valid)."""
        m = np.zeros(3 * self.J + 1, dtype=bool)
        m[-1] = True
        k = len(window)
        if k == 0:
            return m
        kinds = self._kinds[window]  # (k, 3): worker, PS, bundle demand ids
        fits = self.fits()
        can_w = self.w[window] < self.max_w[window]
        can_p = self.ps[window] < self.max_ps[window]
        jm = np.empty((k, 3), dtype=bool)
        jm[:, 0] = can_w & fits[kinds[:, 0]]
        jm[:, 1] = can_p & fits[kinds[:, 1]]
        jm[:, 2] = can_w & can_p & fits[kinds[:, 2]]
        m[: 3 * k] = jm.ravel()
        return m

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
        return rows

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
        x = np.zeros((self.J, NUM_JOB_FEATURES), dtype=np.float32)
        x[: len(window)] = self.job_rows(window)
        return np.concatenate([x.ravel(), self.global_features(window_index)])

    # -- actions ----------------------------------------------------------------------------
    def apply(self, window: np.ndarray, action: int) -> bool:
        """Apply a non-void action to the job in its column; False when it could not be placed."""
        col, kind = decode_action(action, self.J)
        if col >= len(window):
            raise ValueError(f"action {action} names empty column {col}")
        i = int(window[col])
        if (kind in (WORKER, BUNDLE) and self.w[i] >= self.max_w[i]) or (
            kind in (PS, BUNDLE) and self.ps[i] >= self.max_ps[i]
        ):
            raise ValueError(f"action {action} exceeds job {self.job_ids[i]}'s caps")
        return self._place(i, kind)

    def allocation(self) -> Allocation:
        """The counts decided so far, with jobs below their minimum dropped to nothing."""
        out: dict[str, JobAllocation] = {}
        for job_id, p, w, min_p, min_w in zip(self.job_ids, self.ps.tolist(), self.w.tolist(),
                                              self.min_ps.tolist(), self.min_w.tolist()):
            if p == 0 and w == 0:
                continue
            if p < min_p or w < min_w:
                continue  # cannot run at this size; the tasks given to it stay unused this slot
            out[job_id] = JobAllocation(p, w)
        alloc = Allocation(out)
        validate_allocation(alloc, self.state)
        return alloc
