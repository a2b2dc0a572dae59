"""Fast greedy decision of one slot (``arch="shared"``): the loop behind ``DL2Policy.decide``.

It makes exactly the decisions of :func:`~dl2_mesos.policy.dl2.agent.run_slot` with a greedy
chooser -- the same floating-point operations on the same values, so the same argmax -- but
each inference costs a few dozen small numpy operations instead of a full forward pass:

* A job's hidden vector depends only on its own features, so it is computed once per slot and
  again only for the job an action changed; the window summary is a running sum. Each job's
  three logits are its (cached) hidden part plus a context part shared by all jobs.
* The action mask of a window is kept up to date in place: an action changes only its own
  job's caps, and the fit of each distinct demand is a per-demand agent counter kept by
  :class:`~dl2_mesos.policy.dl2.slot.SlotContext`; the whole mask is rebuilt only when some
  demand stops fitting anywhere.
* The layers run as straight-line numpy code (:func:`run_ops`) with in-place updates; the
  LayerNorm mean is numpy's own ``mean`` arithmetic without its Python wrapper.

Full input vectors and masks are kept in the steps only when ``record`` is set (online
learning).
"""

from __future__ import annotations

import numpy as np

from dl2_mesos.cluster import ClusterState
from dl2_mesos.policy.dl2.config import DL2Config
from dl2_mesos.policy.dl2.features import (
    COUNT_SCALE,
    F_CHANGED,
    F_PS,
    F_SHARE,
    F_WORKERS,
    NUM_GLOBAL_FEATURES,
)
from dl2_mesos.policy.dl2.network import NumpyActor
from dl2_mesos.policy.dl2.slot import PS, WORKER, SlotContext

_NO_FEATURES = np.zeros(0, dtype=np.float32)
_NO_MASK = np.zeros(0, dtype=bool)
_NEG_INF = np.float32(-np.inf)


def _mean_last(x: np.ndarray) -> np.ndarray:
    """``x.mean(axis=-1, keepdims=True)``, bit for bit, without numpy's Python wrapper.

    numpy divides the float32 sum by the count in float64 and rounds to float32; dividing in
    float32 directly gives the same value (a double-rounded quotient is exact when the wide
    type has at least 2p + 2 bits: 53 >= 2 * 24 + 2).
    """
    s = np.add.reduce(x, axis=-1, keepdims=True)
    s /= x.shape[-1]
    return s


def run_ops(ops: list[tuple], x: np.ndarray) -> np.ndarray:
    """``NumpyActor._run`` with the same arithmetic and less Python per layer.

    The op lists start with a linear layer, so ``x`` itself is never modified.
    """
    for op in ops:
        kind = op[0]
        if kind == "linear":
            x = x @ op[1]
            x += op[2]
        elif kind == "relu":
            x = np.maximum(x, 0.0, out=x)
        else:  # LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias, in that order
            d = x - _mean_last(x)
            var = _mean_last(np.multiply(d, d))  # (x - mu) ** 2 is computed as a square
            var += op[3]
            d /= np.sqrt(var, out=var)
            d *= op[1]
            d += op[2]
            x = d
    return x


class GreedyKernel:
    """The pieces of a shared-arch :class:`NumpyActor` the greedy loop needs, pre-sliced."""

    def __init__(self, fast: NumpyActor) -> None:
        self.enc = fast.enc
        _, W, b = fast.job_head[0]
        hidden = (W.shape[0] - NUM_GLOBAL_FEATURES) // 2  # job_head reads [h, pooled, g]
        self.W_job = W[:hidden]
        self.W_ctx = W[hidden:]
        self.b_ctx = b
        self.void = fast.void_head
        vk = [op[0] for op in self.void]
        self._void2 = ([(op[1], op[2]) for op in self.void if op[0] == "linear"]
                       if vk == ["linear", "relu", "linear"] else None)

        # the per-job encoder as (W, b) pairs each followed by ReLU, then one LayerNorm
        kinds = [op[0] for op in self.enc]
        self._one = kinds == ["linear", "relu"] * (len(kinds) // 2) + ["ln"]
        self._lin = [(op[1], op[2]) for op in self.enc if op[0] == "linear"]
        self._ln = self.enc[-1]

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """Hidden vectors of job feature rows (k x F -> k x H)."""
        return run_ops(self.enc, rows)

    def encode_one(self, row: np.ndarray) -> np.ndarray:
        """Hidden vector of one job row (F,) -> (H,), bit for bit ``encode(row[None])[0]``.

        One row as a 1-D vector takes the same BLAS path (gemv) and the same pairwise sums as
        a 1 x F matrix, with scalar means instead of keepdims reductions (tested).
        """
        if not self._one:
            return run_ops(self.enc, row[None, :])[0]
        x = row
        for W, b in self._lin:
            x = x @ W
            x += b
            np.maximum(x, 0.0, out=x)
        _, weight, bias, eps = self._ln
        n = x.shape[0]
        d = x - np.add.reduce(x) / n
        var = np.add.reduce(np.multiply(d, d)) / n
        d /= np.sqrt(var + eps)
        d *= weight
        d += bias
        return d

    def job_part(self, h: np.ndarray) -> np.ndarray:
        """The hidden-vector part of the job logits (k x H -> k x 3)."""
        return h @ self.W_job

    def heads(self, z: np.ndarray) -> tuple[np.ndarray, np.float32]:
        """(context part of every job's 3 logits, void logit) of z = [pooled summary, globals]."""
        c = z @ self.W_ctx
        c += self.b_ctx
        if self._void2 is None:
            return c, run_ops(self.void, z)[0]
        (W1, b1), (W2, b2) = self._void2
        a = z @ W1
        a += b1
        np.maximum(a, 0.0, out=a)
        v = a @ W2
        v += b2
        return c, v[0]


def kernel_of(fast: NumpyActor) -> GreedyKernel:
    """The (cached) greedy kernel of a numpy actor."""
    kernel = getattr(fast, "_greedy_kernel", None)
    if kernel is None:
        kernel = fast._greedy_kernel = GreedyKernel(fast)
    return kernel


def run_slot_greedy_fast(state: ClusterState, cfg: DL2Config, fast: NumpyActor, record: bool = False):
    """Greedy decision of one slot; returns (allocation, steps) like ``run_slot``."""
    from dl2_mesos.policy.dl2.agent import Step

    kernel = kernel_of(fast)
    ctx = SlotContext(state, cfg)
    steps: list[Step] = []
    budget = cfg.max_steps_per_slot
    void = 3 * cfg.window
    n = ctx.n
    if n == 0:
        return ctx.allocation(), steps
    H = kernel.encode(ctx.job_rows(np.arange(n)))  # n x hidden
    HA = kernel.job_part(H)  # n x 3
    hidden = H.shape[1]
    ps, w, ps0, w0 = ctx.ps, ctx.w, ctx.ps0, ctx.w0
    max_ps, max_w = ctx.max_ps.tolist(), ctx.max_w.tolist()
    psl, wl, capl, hasl = ctx._psl, ctx._wl, ctx._capl, ctx._hasl
    static = ctx.static
    fitcount = ctx._fitcount
    kinds = ctx._kindl
    job_ids = ctx.job_ids
    place = ctx._place
    # input of the heads: [pooled summary, global values], rewritten in place every step
    z = np.zeros(hidden + NUM_GLOBAL_FEATURES, dtype=np.float32)
    pooled, gz = z[:hidden], z[hidden:]
    for w_index, window in enumerate(ctx.windows):
        k = len(window)
        cols = window.tolist()
        hsum = H[window].sum(axis=0)
        HAw = HA[window]  # k x 3, a copy: the window's job parts from here on
        full = ctx.mask(window)
        jm = full[: 3 * k].reshape(k, 3)  # view: the job part of the mask
        HAm = np.where(jm, HAw, _NEG_INF)  # masked job parts: + context = masked logits
        version = ctx.fit_version
        any_valid = bool(jm.any())
        ctx.write_global_features(gz, w_index)
        while budget > 0:
            if not any_valid:
                break  # nothing can be added in this window: no decision to learn from
            np.true_divide(hsum, k, out=pooled)
            c, v = kernel.heads(z)
            vals = HAm + c
            a = int(vals.argmax())
            budget -= 1
            x = ctx.features(window, w_index) if record else _NO_FEATURES
            col, kind = divmod(a, 3)
            if v > vals[col, kind]:  # void is the last action: it wins only when strictly larger
                steps.append(Step(x, full if record else _NO_MASK, void, None))
                break
            i = cols[col]
            steps.append(Step(x, full if record else _NO_MASK, a, job_ids[i]))
            if not place(i, kind):  # pragma: no cover - the mask said it fits
                raise RuntimeError(f"masked-in action {a} could not be placed")
            ctx.write_global_features(gz, w_index)  # free capacity and waiting jobs changed
            # the job's new feature row: SlotContext.job_rows for one job, same arithmetic
            p_i, w_i = int(ps[i]), int(w[i])
            pv, wv = psl[i], wl[i]
            share = 0.0
            for r in range(3):
                if hasl[r]:
                    f = (p_i * pv[r] + w_i * wv[r]) / capl[r]
                    if f > share:
                        share = f
            row = static[i].copy()
            row[F_SHARE] = min(share * n, 4.0)
            row[F_PS] = p_i / COUNT_SCALE
            row[F_WORKERS] = w_i / COUNT_SCALE
            row[F_CHANGED] = (p_i != ps0[i]) or (w_i != w0[i])
            h_new = kernel.encode_one(row)
            hsum += h_new - H[i]
            H[i] = h_new
            ha = HAw[col] = kernel.job_part(h_new[None, :])[0]  # (windows never share a job)
            # mask: only this job's caps changed, unless some demand stopped fitting anywhere
            if record:  # the recorded step keeps the mask it was decided with
                full = full.copy()
                jm = full[: 3 * k].reshape(k, 3)
            if ctx.fit_version != version:
                version = ctx.fit_version
                full[:] = ctx.mask(window)
                np.copyto(HAm, np.where(jm, HAw, _NEG_INF))
                any_valid = bool(jm.any())
            elif w_i < max_w[i] and p_i < max_ps[i]:
                HAm[col] = np.where(jm[col], ha, _NEG_INF)  # same valid actions, new logits
            else:  # a cap was reached: some of this job's actions become invalid
                kw, kp, kb = kinds[i]
                can_w, can_p = w_i < max_w[i], p_i < max_ps[i]
                mw = jm[col, WORKER] = can_w and fitcount[kw] > 0
                mp = jm[col, PS] = can_p and fitcount[kp] > 0
                mb = jm[col, 2] = can_w and can_p and fitcount[kb] > 0
                hm = HAm[col]
                hm[WORKER] = ha[WORKER] if mw else _NEG_INF
                hm[PS] = ha[PS] if mp else _NEG_INF
                hm[2] = ha[2] if mb else _NEG_INF
                any_valid = bool(jm.any())
    return ctx.allocation(), steps
