"""DL2's live phase on the leader: per-slot reward, online model updates, versions, rollback.

The core calls :meth:`OnlineLearning.end_slot` with the reward of the slot that just ended
(sum over jobs of epochs trained in the slot / the job's total epochs, from reported progress)
and :meth:`begin_slot` after each decision. With a learnable model (an
:class:`~dl2_mesos.policy_api.OnlineModel` the policy registry builds, for ``dl2`` over its
experience recorder and trainer) each completed slot is one experience; the trainer updates the
weights and the new version is written to the state store (``models/...``), so a new leader
resumes from it.

Rollback (a guard against online updates that hurt, the paper's live phase §4.3 keeps learning
from the cluster's own rewards, so a bad update must not stay): every ``online_window`` slots
the window that just ended is judged against the window before it (the *reference*), on the
reward **per job active at the slot's start** (the raw reward grows with the number of jobs, so
a cluster that simply empties would look like a regression). The model is rolled back to the
version it had when the judged window began (the *checkpoint*, kept in the store) only when

* the model changed during the judged window (a drop under an unchanged model is the
  workload's doing, not the update's),
* the judged window's mean is below ``(1 - rollback_margin)`` x the reference mean, and
* the drop exceeds twice its standard error (progress reports arrive every few seconds, so one
  short slot sees one report more or fewer than the next: that noise alone must not roll back).

After a rollback the restored model runs frozen for one window, which becomes the new
reference (so one bad window cannot cascade into rolling back version after version).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Any

from dl2_mesos.policy_api import OnlineModel
from dl2_mesos.framework.state_store import StateStore

logger = logging.getLogger(__name__)


class OnlineLearning:
    """Reward tracking for every policy; model updates, versions and rollback for learnable ones.

    Args:
        store: where model versions live.
        adapter: the learnable model, or None (baselines: rewards are only tracked).
        policy_name: for display.
        enabled: False freezes the model (``--no-online-learning``).
        window: slots per reward window.
        margin: relative drop of a window's reward per job below the previous window's that (when also
            beyond noise, see the module docstring) triggers a rollback.
        keep: model versions kept in the store.
    """

    def __init__(self, store: StateStore, adapter: OnlineModel | None, policy_name: str, *,
                 enabled: bool = True, window: int = 10, margin: float = 0.2, keep: int = 5) -> None:
        self.store = store
        self.adapter = adapter
        self.policy_name = policy_name
        self.enabled = enabled and adapter is not None
        self.window = window
        self.margin = margin
        self.keep = max(2, keep)
        self.rewards: deque[float] = deque(maxlen=200)  # per job active at the slot's start
        self.info: dict[str, Any] = {}
        self._since_check = 0
        self._slot_jobs: int | None = None

    def start(self) -> None:
        """Resume the stored model version, or store the starting model as version 1."""
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
                     "probation": False, "rollbacks": [], "recent_rewards": []}
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

        Notes how many jobs the coming slot serves, so its reward can be compared per job."""
        jobs = getattr(state, "jobs", None)
        self._slot_jobs = len(jobs) if jobs is not None else None

    def end_slot(self, reward: float | None, policy: Any = None) -> None:
        """Account the reward of the slot that ended; update the model; maybe roll back.

        ``reward`` None means no job was active: the slot says nothing about the policy, so it
        neither counts towards a rollback nor becomes experience.
        """
        jobs, self._slot_jobs = self._slot_jobs, None
        if reward is None:
            if self.adapter is not None:
                self.adapter.skip_slot()
            return
        self.rewards.append(reward / jobs if jobs else reward)
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
            if v not in info["history"] and v not in (1, info.get("checkpoint")):
                self.store.delete_model(v)
        logger.debug("online learning: model version %d", version)

    def _end_window(self) -> bool:
        """Judge the window that just ended; True when it rolled the model back."""
        info = self.info
        self._since_check = 0
        window = [round(r, 6) for r in list(self.rewards)[-self.window:]]
        reference = info.get("reference") or []
        rolled_back = bool(reference) and self._check_rollback(reference, window)
        if not rolled_back:
            # the window just judged is the next one's reference, its last model the checkpoint
            info["reference"] = window
            info["baseline"] = sum(window) / len(window)
            info["checkpoint"] = info.get("current")
            info["probation"] = False
            if not reference:
                logger.info("online learning: reference reward per job %.4f", info["baseline"])
        return rolled_back

    @staticmethod
    def _drop_is_significant(reference: list[float], window: list[float], margin: float) -> tuple[bool, str]:
        """Whether ``window`` is worse than ``reference`` beyond the margin and the noise."""
        ref_mean = sum(reference) / len(reference)
        mean = sum(window) / len(window)

        def var(xs: list[float], m: float) -> float:
            return sum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1)

        stderr = math.sqrt(var(reference, ref_mean) / len(reference) + var(window, mean) / len(window))
        worse = ref_mean > 0 and mean < (1.0 - margin) * ref_mean and ref_mean - mean > 2.0 * stderr
        why = (f"mean reward per job {mean:.4f} over the last {len(window)} slots is below "
               f"{1 - margin:.0%} of the previous window's {ref_mean:.4f} "
               f"(drop {ref_mean - mean:.4f} > 2 x its standard error {stderr:.4f})")
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
