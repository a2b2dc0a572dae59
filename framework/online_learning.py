"""DL2's live phase on the leader: per-slot reward, online model updates, versions, rollback.

The core calls :meth:`OnlineLearning.end_slot` with the reward of the slot that just ended
(sum over jobs of epochs trained in the slot / the job's total epochs, from reported progress)
and :meth:`begin_slot` after each decision. With a learnable model (an
:class:`~dl2_mesos.policy_api.OnlineModel` the policy registry builds, for ``dl2`` over its
experience recorder and trainer) each completed slot is one experience; the trainer updates the
weights and the new version is written to the state store (``models/...``), so a new leader
resumes from it.

Rollback (a guard against online updates that hurt: the paper's live phase, §4.3, keeps
learning from the cluster's own rewards, so a bad update must not stay): every ``online_window``
slots the slots since the last accepted model (the *checkpoint*) are judged against the
accepted windows before them (the *reference*, the last :data:`REFERENCE_WINDOWS`). Each slot's reward is compared with its *yardstick*
(:func:`slot_yardstick`: what the jobs active at the slot's start would earn at their minimal
allocation, as many of them as the cluster holds), because the raw reward grows with the number of jobs and shrinks with their
length: a cluster that simply empties, or a workload of longer jobs, would look like a
regression. The model is rolled back to the checkpoint (kept in the store) only when

* the model changed since the checkpoint (a drop under an unchanged model is the workload's
  doing, not the update's),
* the judged mean is below ``(1 - rollback_margin)`` x the reference mean, and
* the drop exceeds :data:`NOISE_Z` (3) standard errors (progress reports arrive every few seconds, so one
  short slot sees one report more or fewer than the next: that noise alone must not roll back).

A window below the margin makes the model *suspect*: the reference and the checkpoint are
held, and the slots after it are judged (the next :data:`CONFIRM_WINDOWS` windows, then one
more, up to :data:`SUSPECT_WINDOWS` windows in all). Only that fresh evidence can roll back, so
an unlucky window never does, and a persistent regression cannot become the reference a window
at a time: a bad update is rolled back after three windows. After a rollback the
restored model runs frozen for one window, which becomes the new reference (so one bad window
cannot cascade into rolling back version after version).

A slot's reward lags the decisions before it (a grown job trains faster only after its
restart), so an accepted window vouches for the model that was latest at the window's *start*
(the *candidate*), not for the one deciding at its end: the candidate becomes the checkpoint
when the next window is accepted. Otherwise a bad update whose first window still earned what
the good model had set up would become the version a rollback restores.

The first window after a start is the cluster's warm-up (jobs launching, first restarts): its
slots vary widely, so until it has left the reference (:data:`REFERENCE_WINDOWS` windows later)
the noise bar is high and only a large drop rolls back (measured on the live rig: a model
earning 0.6x of such a reference stayed within 3 standard errors about half the time; against
three steady windows the same drop was 7-10 standard errors).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Any

from dl2_mesos.policy_api import OnlineModel
from dl2_mesos.resources import Resources
from dl2_mesos.framework.state_store import StateStore

logger = logging.getLogger(__name__)


#: Windows a suspect drop (below the margin, within the noise) is judged over before it is accepted.
SUSPECT_WINDOWS = 4
#: Fresh windows after the suspect one that must confirm a drop before a rollback.
CONFIRM_WINDOWS = 2
#: A drop must exceed this many standard errors (the reference is built from accepted windows,
#: which lean high: a stricter bar than the textbook 2 keeps noise from rolling back).
NOISE_Z = 3.0
#: Accepted windows the reference spans.
REFERENCE_WINDOWS = 3


def slot_yardstick(state: Any) -> float | None:
    """What a slot's reward is compared with: the reward the jobs active at its start would
    earn in one slot at their minimal allocation (the speed table's epochs per slot at
    ``min_ps``/``min_workers`` over each job's epochs), counting only as many of them as the
    cluster holds at those sizes (:func:`_what_fits`). The raw reward grows with the number of
    jobs and shrinks with their length, so a cluster that empties, or a workload of longer
    jobs, would otherwise look like a regression of the model; against the yardstick, queued
    jobs, poor sizes and restarts still show. The cap matters on a contended cluster: without
    it a burst of arrivals raises the yardstick beyond what any allocation could earn, so the
    reward's ratio to it falls under every model while the burst lasts (measured on the live
    rig, 4 nodes, a model trained before the drift: the burst's windows at 0.30-0.50 of the
    windows before it, 0.40-0.79 with the cap), and those windows, once accepted, are the
    reference later ones are judged against. None without jobs (or a state without them)."""
    from dl2_mesos.speed_model import default_speed_model

    jobs = getattr(state, "jobs", None)
    if not jobs:
        return None
    speed = default_speed_model()
    earn: list[tuple[float, Resources | None]] = []
    for job in jobs:
        spec = job.spec
        ps, workers = (max(1, spec.min_ps) if spec.uses_ps else 0), max(1, spec.min_workers)
        try:
            eps = speed.epochs_per_second(spec.job_type, ps, workers, spec.uses_ps)
        except (KeyError, ValueError):
            eps = 0.0
        value = eps * state.slot_seconds / spec.epochs if eps > 0 and spec.epochs > 0 else 1.0 / len(jobs)
        try:
            demand = job.demand(ps, workers)
        except (AttributeError, AssertionError, TypeError):  # a job whose demands are not known
            demand = None
        earn.append((value, demand))
    # what dl2 may use: the agents' resources less what runs there outside it (ClusterState.capacity)
    capacity = getattr(state, "capacity", None)
    return _what_fits(earn, None if capacity is None or capacity.is_zero() else capacity) or None


def _what_fits(earn: list[tuple[float, Resources | None]], capacity: Resources | None) -> float:
    """The sum of the values of ``earn`` (value, minimal demand) that fit in ``capacity``
    together: all of them when they do (or when the capacity is unknown), else the most
    valuable per dominant share first, skipping a job that no longer fits (the most the jobs
    could earn at their minimal sizes on this cluster, the nodes' boundaries aside). A job of
    unknown demand always counts."""
    if capacity is None:
        return sum(v for v, _ in earn)
    known = [(v, d) for v, d in earn if d is not None]
    out = sum(v for v, d in earn if d is None)
    used = Resources()
    for v, d in sorted(known, key=lambda vd: -vd[0] / max(vd[1].share_of(capacity), 1e-9)):
        if (used + d).fits_in(capacity):
            used = used + d
            out += v
    return out


class OnlineLearning:
    """Reward tracking for every policy; model updates, versions and rollback for learnable ones.

    Args:
        store: where model versions live.
        adapter: the learnable model, or None (baselines: rewards are only tracked).
        policy_name: for display.
        enabled: False freezes the model (``--no-online-learning``).
        window: slots per reward window.
        margin: relative drop of the reward (against its yardstick) below the reference window's
            that, when also beyond noise, triggers a rollback (see the module docstring).
        keep: model versions kept in the store.
        teacher: the teacher the adapter imitates online ("": it learns by reinforcement); shown.
    """

    def __init__(self, store: StateStore, adapter: OnlineModel | None, policy_name: str, *,
                 enabled: bool = True, window: int = 10, margin: float = 0.2, keep: int = 5,
                 teacher: str = "", twin: bool = False) -> None:
        self.store = store
        self.teacher = teacher
        self.twin = twin
        self.adapter = adapter
        self.policy_name = policy_name
        self.enabled = enabled and adapter is not None
        self.window = window
        self.margin = margin
        self.keep = max(2, keep)
        self.rewards: deque[float] = deque(maxlen=200)  # relative to the slot's yardstick
        self.info: dict[str, Any] = {}
        self._since_check = 0
        self._slot_yardstick: float | None = None

    def start(self) -> None:
        """Resume the stored model version, or store the starting model as version 1."""
        from dl2_mesos.speed_model import default_speed_model

        # the slot yardstick's speed table (built once per process, ~0.5 s): now, not inside the
        # first slot's decision, where status updates would wait for it on the loop
        default_speed_model()
        self.info = self.store.models()
        if self.adapter is None:
            return
        version = self.info.get("current")
        if version:
            blob = self.store.get_model(int(version))
            if blob is not None:
                self.adapter.load(blob)
                self._tell_version(int(version))
                logger.info("online learning: resumed model version %s from the state store", version)
                return
            logger.error("model version %s missing from the store; starting from the loaded model", version)
        self.info = {"current": 1, "history": [1], "baseline": None, "reference": [], "checkpoint": 1,
                     "candidate": 1, "probation": False, "rollbacks": [], "recent_rewards": []}
        self._tell_version(1)
        self.store.put_model(1, self.adapter.dump(), {"parent": None, "reason": "starting model"})
        self.store.put_models(self.info)

    def _tell_version(self, version: int) -> None:
        if self.adapter is not None:
            self.adapter.set_version(version)

    @property
    def version(self) -> int | None:
        return self.info.get("current")

    def begin_slot(self, state: Any, allocation: Any) -> None:
        """Called after each decision (the adapter's policy already recorded its inferences).

        Notes what the coming slot's reward is judged against (:func:`slot_yardstick`)."""
        self._slot_yardstick = slot_yardstick(state)

    def end_slot(self, reward: float | None, policy: Any = None) -> None:
        """Account the reward of the slot that ended; update the model; maybe roll back.

        ``reward`` None means no job was active: the slot says nothing about the policy, so it
        neither counts towards a rollback nor becomes experience.
        """
        yardstick, self._slot_yardstick = self._slot_yardstick, None
        if reward is None:
            if self.adapter is not None:
                self.adapter.skip_slot()
            return
        self.rewards.append(reward / yardstick if yardstick else reward)
        info = self.info
        info.setdefault("recent_rewards", [])
        info["recent_rewards"] = (info["recent_rewards"] + [round(reward, 6)])[-50:]
        if self.adapter is None:
            return
        had = self.adapter.complete_slot(reward)
        self._since_check += 1
        if self._since_check >= self.window and self._end_window():
            self.store.put_models(info)
            return
        if self.enabled and had and not info.get("probation") and self.adapter.update():
            self._new_version("online update")
        self.store.put_models(info)

    def _new_version(self, reason: str) -> None:
        info = self.info
        parent = info.get("current")
        version = max(self.store.model_versions() + [int(parent or 0)]) + 1
        self._tell_version(version)
        assert self.adapter is not None  # only a learnable model gets new versions
        self.store.put_model(version, self.adapter.dump(), {"parent": parent, "reason": reason})
        info["current"] = version
        info["history"] = (info.get("history", []) + [version])[-self.keep:]
        for v in self.store.model_versions():
            if v not in info["history"] and v not in (1, info.get("checkpoint"), info.get("candidate")):
                self.store.delete_model(v)
        logger.debug("online learning: model version %d", version)

    def _end_window(self) -> bool:
        """Judge the slots since the checkpoint; True when it rolled the model back.

        A window below the margin makes the model *suspect*: the reference and the checkpoint
        are held and the windows after it are judged (see the module docstring)."""
        info = self.info
        self._since_check = 0
        reference = info.get("reference") or []
        suspect = int(info.get("suspect") or 0)
        # a suspect window only triggers a closer look: the slots judged then are the ones after
        # it (fresh evidence; judging it again would count the same unlucky slots twice)
        judged = [round(r, 6) for r in list(self.rewards)[-self.window * max(1, suspect):]]
        window = judged[-self.window:]
        # a window below the margin first makes the model suspect; only the fresh slots after it,
        # two windows at least, can roll it back (an unlucky window or two never do)
        rolled_back = bool(reference) and suspect >= CONFIRM_WINDOWS and self._check_rollback(reference, judged)
        mean = sum(window) / len(window)
        ref_mean = sum(reference) / len(reference) if reference else None
        logger.info("online learning: window reward %.4f of its yardstick (reference %s), model %s (checkpoint %s)%s",
                    mean, "-" if ref_mean is None else f"{ref_mean:.4f}", info.get("current"),
                    info.get("checkpoint"), ", rolled back" if rolled_back else "")
        if rolled_back:
            info["suspect"] = 0
            return True
        below = ref_mean is not None and sum(judged) / len(judged) < (1.0 - self.margin) * ref_mean
        if below and info.get("checkpoint") != info.get("current") and suspect + 1 < SUSPECT_WINDOWS:
            info["suspect"] = suspect + 1  # hold the reference and the checkpoint; judge more slots
            return False
        # the accepted slots join the reference (its last REFERENCE_WINDOWS windows: one lucky
        # window must not become the bar). A slot's reward lags the decisions before it (a job
        # grown now trains faster only after its restart), so a model becomes the checkpoint one
        # accepted window after it was the latest: the window that just passed judged the
        # candidate's consequences, not yet the current model's (promoting the current model at
        # once made a fresh bad update, whose first window still looked fine, the rollback target)
        info["suspect"] = 0
        info["reference"] = (list(reference) + judged)[-self.window * REFERENCE_WINDOWS:]
        info["baseline"] = sum(info["reference"]) / len(info["reference"])
        info["checkpoint"] = info.get("candidate") or info.get("checkpoint") or info.get("current")
        info["candidate"] = info.get("current")
        info["probation"] = False
        return False

    @staticmethod
    def _drop_is_significant(reference: list[float], window: list[float], margin: float) -> tuple[bool, str]:
        """Whether ``window`` is worse than ``reference`` beyond the margin and the noise."""
        ref_mean = sum(reference) / len(reference)
        mean = sum(window) / len(window)

        def var(xs: list[float], m: float) -> float:
            return sum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1)

        stderr = math.sqrt(var(reference, ref_mean) / len(reference) + var(window, mean) / len(window))
        worse = ref_mean > 0 and mean < (1.0 - margin) * ref_mean and ref_mean - mean > NOISE_Z * stderr
        why = (f"mean reward {mean:.4f} of the yardstick over the last {len(window)} slots is below "
               f"{1 - margin:.0%} of the reference window's {ref_mean:.4f} "
               f"(drop {ref_mean - mean:.4f} > {NOISE_Z:g} x its standard error {stderr:.4f})")
        return worse, why

    def _check_rollback(self, reference: list[float], window: list[float]) -> bool:
        info = self.info
        checkpoint, bad = info.get("checkpoint"), info.get("current")
        if checkpoint is None or checkpoint == bad:
            return False  # the model did not change: a drop is the workload's doing
        worse, reason = self._drop_is_significant(reference, window, self.margin)
        if not worse:
            return False
        blob = self.store.get_model(int(checkpoint))
        if blob is None:
            logger.error("online learning: cannot roll back, version %s missing", checkpoint)
            return False
        assert self.adapter is not None  # only a learnable model has versions to roll back to
        self.adapter.load(blob)
        self._tell_version(int(checkpoint))
        logger.warning("online learning: rolling back model version %s -> %s: %s", bad, checkpoint, reason)
        history = info.get("history", [])
        info["history"] = history[:history.index(checkpoint) + 1] if checkpoint in history else [checkpoint]
        info["current"] = checkpoint
        info["candidate"] = checkpoint
        info.setdefault("rollbacks", []).append({"from": bad, "to": checkpoint, "reason": reason})
        info["probation"] = True  # the restored model runs frozen for a window: the new reference
        info["reference"] = []
        self.rewards.clear()
        return True

    def describe(self) -> dict[str, Any]:
        """What ``GET /api/v1/policy`` shows."""
        return {
            "name": self.policy_name,
            "online_learning": self.enabled,
            "online_teacher": self.teacher or None,
            "online_twin": self.twin,
            "learnable": self.adapter is not None,
            "model_version": self.info.get("current"),
            "history": list(self.info.get("history", [])),
            "baseline_reward": self.info.get("baseline"),
            "recent_rewards": list(self.info.get("recent_rewards", []))[-20:],
            "rollbacks": list(self.info.get("rollbacks", []))[-10:],
            "checkpoint": self.info.get("checkpoint"),
            "probation": bool(self.info.get("probation")),
            "window": self.window,
            "rollback_margin": self.margin,
        }
