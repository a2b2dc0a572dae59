"""Fast decision of one slot (``arch="shared"``): the loop behind ``DL2Policy.decide``, greedy,
and behind the training rollouts, sampled.

It makes the decisions of :func:`~dl2_mesos.policy.dl2.decision_loop.run_slot` with a greedy (or
a sampling) chooser, which runs a full forward pass per inference, but each inference costs a
couple of dozen small numpy operations, because everything the network computes is linear in a
job's hidden vector except the per-job encoder itself:

* Each job's logits are ``h_j @ A + pooled @ B + g @ C + b`` and the void head's first layer is
  ``pooled @ D + g @ E + c``, where ``pooled`` is the mean of the window's hidden vectors. So
  each job keeps one *projection* ``u_j = [h_j @ A | h_j @ [B | D] / k]`` (3 + 3 + H numbers),
  the window keeps the sum of the ``[B | D]`` parts, and an inference is that sum plus the
  global part: one small matrix-vector product (the G globals and the biases), the void head's
  ReLU and last layer, and an argmax. An action changes one job's counts, so one job is
  re-projected per inference and the sum is updated by its change.
* The encoder's closing LayerNorm is folded into the projection:
  ``LN(x) @ M = ((x - mean) @ (w * M)) / std + b @ M``, so a job costs its hidden layers, one
  ``H x (H + 6)`` product and two reductions; the hidden vector itself is never formed.
* The window sum and the heads run in float64 (the matrix products in float32, like the
  network), so the running sum does not drift over hundreds of updates.
* The action mask of a window is kept up to date in place: an action changes only its own
  job's caps, and the fit of each distinct demand is a per-demand agent counter kept by
  :class:`~dl2_mesos.policy.dl2.slot.SlotContext`; the whole mask is rebuilt only when some
  demand stops fitting anywhere.

The logits equal a full forward pass's up to float rounding (~1e-7 relative) and are rounded to
float32 before the argmax, so float32 ties go to the first column as in a forward pass; exact
ties (jobs with identical feature rows) stay exact, because every job is projected by the same
one-row code path. A decision can differ only where two logits are within that rounding, where
the numpy and the torch forward passes disagree too: ``tests/dl2/greedy_check.py`` is the rule
the tests hold the loop to. Offline sweeps against full forward passes -- 2,000 random states
and seeded random networks, about 120,000 steps, 300 states against torch -- found no differing
step; a variant that compared the logits in float64 parted once, between 1.19662799 and
1.19662805 (numpy: a float32 tie; torch: the other order).

Full input vectors and masks are kept in the steps only when ``record`` is set (online
learning, training rollouts); the input vector is assembled from the window's feature rows,
kept current as the actions change them, instead of being rebuilt for every inference.

Sampled decisions draw from the same masked logits with the same generator calls as the
sampling chooser (:mod:`~dl2_mesos.policy.dl2.sampling`), so a seeded rollout takes the same
steps either way (``tests/dl2/test_greedy_equivalence.py``).
"""

from __future__ import annotations

import math

import numpy as np

from dl2_mesos.cluster import ClusterState
from dl2_mesos.policy.dl2.idle import idle_allocation
from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.features import (
    COUNT_SCALE,
    F_CHANGED,
    F_GAIN_W,
    F_HEADROOM,
    F_PS,
    F_SHARE,
    F_WORKERS,
    NUM_GLOBAL_FEATURES,
)
from dl2_mesos.policy.dl2.network import NumpyActor
from dl2_mesos.policy.dl2.sampling import bad_state_action, draw_action
from dl2_mesos.policy.dl2.step import Step
from dl2_mesos.policy.dl2.slot import SlotContext

_NO_FEATURES = np.zeros(0, dtype=np.float32)
_NO_MASK = np.zeros(0, dtype=bool)
_NEG_INF = -np.inf
_G = NUM_GLOBAL_FEATURES


class GreedyKernel:
    """A shared-arch :class:`NumpyActor` rearranged for the incremental greedy loop.

    Raises ValueError for layer stacks other than the ones :mod:`network` builds
    (``layers`` x (Linear, ReLU), LayerNorm; job head Linear; void head Linear, ReLU, Linear).
    """

    def __init__(self, fast: NumpyActor) -> None:
        enc_kinds = [op[0] for op in fast.enc]
        n_lin = len(enc_kinds) // 2
        if n_lin < 1 or enc_kinds != ["linear", "relu"] * n_lin + ["ln"]:
            raise ValueError(f"unsupported encoder layers {enc_kinds}")
        if [op[0] for op in fast.void_head] != ["linear", "relu", "linear"] or len(fast.job_head) != 1:
            raise ValueError("unsupported head layers")
        f32, f64 = np.float32, np.float64
        K = self.K = int(fast.job_head[0][1].shape[1])  # actions per job
        # hidden layers with the bias as the weight row of a trailing constant 1 input
        self.layers = [np.vstack([op[1], op[2][None, :]]).astype(f32) for op in fast.enc if op[0] == "linear"]
        _, ln_w, ln_b, eps = fast.enc[-1]
        self.eps = float(eps)
        hidden = self.hidden = int(ln_w.shape[0])
        _, Wj, bj = fast.job_head[0]  # (2H + G) x 3, reads [h, pooled, g]
        (_, V1, c1), _, (_, V2, c2) = fast.void_head  # (H + G) x H, then H x 1; reads [pooled, g]
        # projection of a hidden vector: [own job part (K) | context part (K) | void layer 1 (H)]
        M = np.concatenate([Wj[:hidden], Wj[hidden : 2 * hidden], V1[:hidden]], axis=1).astype(f64)
        #: the LayerNorm weight folded into the projection
        self.Mw = (ln_w.astype(f64)[:, None] * M).astype(f32)
        # The LayerNorm bias through the projection is the same for every job, so it goes into
        # the biases: its own-job part is added to every job's logits like the context part,
        # and the mean of the pooled parts over the window is the pooled part itself.
        bM = ln_b.astype(f64) @ M
        # global part of [0 (K) | context (K) | void layer 1 (H)], biases as the row of a trailing 1
        Wg = np.zeros((_G + 1, 2 * K + hidden), dtype=f64)
        Wg[:_G, K : 2 * K] = Wj[2 * hidden :]
        Wg[:_G, 2 * K :] = V1[hidden:]
        Wg[_G, K : 2 * K] = bj + bM[K : 2 * K] + bM[:K]
        Wg[_G, 2 * K :] = c1 + bM[2 * K :]
        self.Wg = Wg
        self.w2 = V2[:, 0].astype(f64)
        self.b2 = float(c2[0])
        self._scaled: dict[int, np.ndarray] = {}  # window size k -> Mw with its pooled part / k

    def projector(self, k: int):
        """A function ``row -> u`` for a window of ``k`` jobs: ``u[:K]`` is the job's own part
        of its logits, ``u[3:]`` its share (1/k) of the window's pooled parts (float32).

        ``row`` is a job feature row with a trailing 1 (F + 1). Every job goes through this
        one-row path, so equal rows give equal projections (exact ties stay exact).
        """
        first, rest = self.layers[0], self.layers[1:]
        hidden = self.hidden
        bufs = []
        for W in rest:
            buf = np.ones(hidden + 1, dtype=np.float32)
            bufs.append((W, buf, buf[:hidden]))
        zero = np.zeros(hidden, dtype=np.float32)
        ones = np.ones(hidden, dtype=np.float32)
        Mw = self._scaled.get(k)
        if Mw is None:  # (windows are mostly full: one or two sizes per slot)
            scale = np.full(self.Mw.shape[1], 1.0 / k)
            scale[: self.K] = 1.0
            Mw = self._scaled[k] = (self.Mw * scale).astype(np.float32)
        eps = self.eps
        sqrt = math.sqrt

        def project(row: np.ndarray) -> np.ndarray:
            x = row.dot(first)
            for W, buf, h in bufs:
                np.maximum(x, zero, out=h)
                x = buf.dot(W)
            np.maximum(x, zero, out=x)
            # LayerNorm folded into the projection: (x - mean) @ (w * M) / std
            d = np.subtract(x, x.dot(ones) / hidden, out=x)
            u = d.dot(Mw)
            u *= 1.0 / sqrt(float(d.dot(d)) / hidden + eps)
            return u

        return project

    def logits_of(self, rows: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Action logits (Kk + 1,) of a window's k job rows (k x F) and G global values, through
        the projections: the network's output rearranged (for tests)."""
        k = rows.shape[0]
        project = self.projector(k)
        aug = np.ones((k, rows.shape[1] + 1), dtype=np.float32)  # rows with the trailing 1
        aug[:, :-1] = rows
        u = np.stack([project(r) for r in aug]).astype(np.float64)
        pre = u.sum(axis=0) + np.append(g.astype(np.float64), 1.0) @ self.Wg
        K = self.K
        void = np.maximum(pre[2 * K :], 0.0) @ self.w2 + self.b2
        return np.append((u[:, :K] + pre[K : 2 * K]).ravel(), void)


def kernel_of(fast: NumpyActor) -> GreedyKernel:
    """The (cached) greedy kernel of a numpy actor (rebuilt with the actor after a reload)."""
    kernel = getattr(fast, "_greedy_kernel", None)
    if kernel is None:
        kernel = fast._greedy_kernel = GreedyKernel(fast)
    return kernel


def run_slot_greedy_fast(state: ClusterState, cfg: DL2Config, fast: NumpyActor, record: bool = False,
                         keep_steps: bool = True):
    """Greedy decision of one slot; returns (allocation, steps) like ``run_slot``.

    With ``keep_steps=False`` (a decision nobody learns from) the steps list stays empty.
    """
    return _run_slot_fast(state, cfg, fast, record, keep_steps, None, 0.0)


def run_slot_sampled_fast(state: ClusterState, cfg: DL2Config, fast: NumpyActor, rng: np.random.Generator,
                          epsilon: float = 0.0, record: bool = False):
    """Sampled decision of one slot (the training rollouts' and the rollout teacher's), with
    the incremental inference of the greedy loop; returns (allocation, steps) like ``run_slot``.

    Every choice is drawn as :class:`~dl2_mesos.policy.dl2.decision_loop.NetChooser` draws it
    (:func:`~dl2_mesos.policy.dl2.sampling.draw_action` over the same logits, and with
    probability ``epsilon`` the job-aware fixing action first), from the same generator calls:
    with equal seeds the two loops take the same steps, except where a draw falls within float
    rounding of a boundary between two actions' probabilities.
    """
    return _run_slot_fast(state, cfg, fast, record, True, rng, epsilon)


def _run_slot_fast(state: ClusterState, cfg: DL2Config, fast: NumpyActor, record: bool, keep_steps: bool,
                   rng: np.random.Generator | None, epsilon: float):
    """The incremental loop: greedy when ``rng`` is None, else sampled (with exploration)."""
    keep_steps = keep_steps or record
    if cfg.idle_fastest:
        idle = idle_allocation(state)
        if idle is not None:
            return idle, []
    kernel = kernel_of(fast)
    K = kernel.K
    if K != cfg.per_job:
        raise ValueError(f"the network has {K} actions per job, the config {cfg.per_job}")
    ctx = SlotContext(state, cfg)
    steps: list[Step] = []
    budget = cfg.max_steps_per_slot
    void = cfg.void
    n = ctx.n
    if n == 0:
        return ctx.allocation(), steps
    Wg, w2, b2 = kernel.Wg, kernel.w2, kernel.b2
    hidden = kernel.hidden
    ps, w, ps0, w0 = ctx.ps, ctx.w, ctx.ps0, ctx.w0
    ps0l, w0l = ps0.tolist(), w0.tolist()
    with_gains = ctx.with_gains
    psl, wl, capl, hasl = ctx._psl, ctx._wl, ctx._capl, ctx._hasl
    # feature rows with a trailing 1 (the first layer's bias)
    static = np.ones((n, ctx.static.shape[1] + 1), dtype=np.float32)
    static[:, :-1] = ctx.static
    job_ids = ctx.job_ids
    share_scale = float(n)
    active = [r for r in range(3) if hasl[r]]  # resources the cluster has
    # global values with a trailing 1 (the biases' row of Wg)
    g = np.zeros(_G + 1, dtype=np.float64)
    g[_G] = 1.0
    g32 = np.zeros(_G, dtype=np.float32)
    # pre-activations of the heads: window sum of the projections + global part
    pre = np.empty(2 * K + hidden, dtype=np.float64)  # [unused | context part | void layer 1]
    ctx_part, void_pre = pre[K : 2 * K], pre[2 * K :]
    act = np.empty(hidden, dtype=np.float64)
    zero = np.zeros(hidden, dtype=np.float64)
    n_features = ctx.static.shape[1]
    x_size = ctx.J * n_features + _G
    for w_index, window in enumerate(ctx.windows):
        k = len(window)
        cols = window.tolist()
        project = kernel.projector(k)
        rows = np.ones((k, static.shape[1]), dtype=np.float32)  # with the trailing 1
        rows[:, :-1] = ctx.job_rows(window)
        job_inputs = rows[:, :-1]  # view: the window's part of the network input, kept current
        Urows = [project(r) for r in rows]  # each job's current projection (2K + H)
        usum = np.stack(Urows).sum(axis=0, dtype=np.float64)
        full = ctx.mask(window)
        jm = full[: K * k].reshape(k, K)  # view: the job part of the mask
        # masked job parts: + context part = masked logits, in float32 like the network's output,
        # so that logits equal in float32 tie as they do in a forward pass (first column wins)
        JPm = np.where(jm, np.stack(Urows)[:, :K], _NEG_INF)
        vals = np.empty_like(JPm)
        version = ctx.fit_version
        while budget > 0:
            if not jm.any():
                break  # nothing can be done in this window: no decision to learn from
            ctx.write_global_features(g32, w_index)  # float32 values, as the network input has them
            g[:_G] = g32
            np.dot(g, Wg, out=pre)
            pre += usum
            np.maximum(void_pre, zero, out=act)
            v = np.float32(act.dot(w2) + b2)
            np.add(JPm, ctx_part.astype(np.float32), out=vals)
            if rng is None:
                a = int(vals.argmax())
                col, kind = divmod(a, K)
                stop = bool(v > vals[col, kind])  # void is the last action: it wins only when strictly larger
            else:
                a = -1
                if epsilon > 0 and rng.random() < epsilon:
                    fix = bad_state_action(ctx, window, full)
                    if fix is not None:
                        a = fix
                if a < 0:
                    a = draw_action(np.append(vals.ravel(), v), rng)  # index k * K is void
                col, kind = divmod(a, K)
                stop = a == k * K
            budget -= 1
            if record:  # the network input: SlotContext.features from the rows kept current
                x = np.zeros(x_size, dtype=np.float32)
                x[: k * n_features] = job_inputs.ravel()
                x[-_G:] = g32
            else:
                x = _NO_FEATURES
            if stop:
                if keep_steps:
                    steps.append(Step(x, full if record else _NO_MASK, void, None))
                break
            i = cols[col]
            if keep_steps:
                steps.append(Step(x, full if record else _NO_MASK, a, job_ids[i]))
            ctx.apply_to(i, kind, a)
            # the job's new feature row: SlotContext.job_rows for one job, same arithmetic
            p_i, w_i = int(ps[i]), int(w[i])
            pv, wv = psl[i], wl[i]
            share = 0.0
            for r in active:
                f = (p_i * pv[r] + w_i * wv[r]) / capl[r]
                if f > share:
                    share = f
            row = static[i].copy()
            row[F_SHARE] = min(share * share_scale, 4.0)
            row[F_PS] = p_i / COUNT_SCALE
            row[F_WORKERS] = w_i / COUNT_SCALE
            row[F_CHANGED] = (p_i != ps0l[i]) or (w_i != w0l[i])
            if with_gains:
                row[F_GAIN_W : F_HEADROOM + 1] = ctx.gains(i, p_i, w_i)
            u = project(row)
            rows[col] = row
            usum += u - Urows[col]  # the change (float32), summed in float64
            Urows[col] = u
            if record:  # the recorded step keeps the mask it was decided with
                full = full.copy()
                jm = full[: K * k].reshape(k, K)
            if ctx.fit_version != version:  # some demand started or stopped fitting anywhere
                version = ctx.fit_version
                full[:] = ctx.mask(window)
                JPm = np.where(jm, np.stack(Urows)[:, :K], _NEG_INF)
                vals = np.empty_like(JPm)
            else:  # only this job's own actions changed
                ctx.mask_row(i, jm[col])
                JPm[col] = np.where(jm[col], u[:K], _NEG_INF)
    return ctx.finish(), steps
