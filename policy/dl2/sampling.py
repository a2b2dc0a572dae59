"""How a sampled decision is drawn: the masked softmax, the draw, and the paper's job-aware
exploration rule. One definition shared by the full-forward-pass chooser
(:class:`~dl2_mesos.policy.dl2.decision_loop.NetChooser`) and the incremental loop
(:mod:`~dl2_mesos.policy.dl2.greedy`), so that both draw the same action from the same logits
and generator state.
"""

from __future__ import annotations

import numpy as np

from dl2_mesos.policy.dl2.slot import PS, WORKER, SlotContext

#: worker/PS ratio above which a job counts as unbalanced (paper: 10)
BAD_RATIO = 10.0


def action_probabilities(masked_logits: np.ndarray) -> np.ndarray:
    """Softmax (float64) over logits whose masked entries are -inf (those get probability 0):
    the distribution :func:`~dl2_mesos.policy.dl2.network.masked_log_probs` gives in torch."""
    z = masked_logits.astype(np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def draw_action(masked_logits: np.ndarray, rng: np.random.Generator) -> int:
    """An index drawn from the masked softmax of ``masked_logits`` with one ``rng.random()``.

    Masked entries (-inf) are never drawn, and entries that are masked or absent change no
    draw: the logits of a window's k jobs plus void give the same draw as the full J-job vector
    (void mapped to the last index).
    """
    p = action_probabilities(masked_logits)
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))


def bad_state_action(ctx: SlotContext, window: np.ndarray, mask: np.ndarray) -> int | None:
    """The paper's job-aware exploration rule: the fixing action for the first unbalanced job.

    Workers but no PS -> +PS; PS but no worker -> +worker; workers/PS or PS/workers above 10 ->
    add the scarce role. Returns None when no window job is in a bad state (or its fix is masked).
    """
    K = ctx.K
    for col, i in enumerate(window):
        p, w = int(ctx.ps[i]), int(ctx.w[i])
        if ctx.max_ps[i] == 0:
            continue  # all-reduce job: no PS to balance
        if w > 0 and (p == 0 or w / p > BAD_RATIO):
            a = K * col + PS
        elif p > 0 and (w == 0 or p / w > BAD_RATIO):
            a = K * col + WORKER
        else:
            continue
        if mask[a]:
            return a
    return None
