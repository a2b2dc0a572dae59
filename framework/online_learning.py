"""DL2's live phase on the leader: per-slot reward, online model updates, versions, rollback.

The core calls :meth:`OnlineLearning.end_slot` with the reward of the slot that just ended
(sum over jobs of epochs trained in the slot / the job's total epochs, from reported progress)
and :meth:`begin_slot` after each decision. With a learnable model (an
:class:`~dl2_mesos.policy_api.OnlineModel` the policy registry builds, for ``dl2`` over its
experience recorder and trainer) each completed slot is one experience; the trainer updates the weights and the new version is written to the state store
(``models/...``), so a new leader resumes from it. When the mean reward of the last
``online_window`` slots falls below ``(1 - rollback_margin)`` x the mean the starting model
achieved over its first window, the previous version is restored and the reason logged.
"""

from __future__ import annotations

import logging
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
        margin: relative drop below the starting model's reward that triggers a rollback.
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
        self.rewards: deque[float] = deque(maxlen=200)
        self.info: dict[str, Any] = {}
        self._since_check = 0

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
        self.info = {"current": 1, "history": [1], "baseline": None, "baseline_rewards": [],
                     "rollbacks": [], "recent_rewards": []}
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
        """Called after each decision (the adapter's policy already recorded its inferences)."""

    def end_slot(self, reward: float | None, policy: Any = None) -> None:
        """Account the reward of the slot that ended; update the model; maybe roll back.

        ``reward`` None means no job was active: the slot says nothing about the policy, so it
        neither counts towards a rollback nor becomes experience.
        """
        if reward is None:
            if self.adapter is not None:
                self.adapter.skip_slot()
            return
        self.rewards.append(reward)
        info = self.info
        info.setdefault("recent_rewards", [])
        info["recent_rewards"] = (info["recent_rewards"] + [round(reward, 6)])[-50:]
        if self.adapter is None:
            return
        had = self.adapter.complete_slot(reward)
        if info.get("baseline") is None:
            info.setdefault("baseline_rewards", []).append(reward)
            if len(info["baseline_rewards"]) >= self.window:
                info["baseline"] = sum(info["baseline_rewards"]) / len(info["baseline_rewards"])
                logger.info("online learning: starting model's reward baseline %.4f", info["baseline"])
                self._since_check = 0
        else:
            self._since_check += 1
            if self._since_check >= self.window and self._check_rollback():
                self.store.put_models(info)
                return
        if self.enabled and had and self.adapter.update():
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
            if v not in info["history"] and v != 1:
                self.store.delete_model(v)
        logger.debug("online learning: model version %d", version)

    def _check_rollback(self) -> bool:
        info = self.info
        self._since_check = 0
        recent = list(self.rewards)[-self.window:]
        base = info.get("baseline") or 0.0
        mean = sum(recent) / len(recent)
        if base <= 0 or mean >= (1.0 - self.margin) * base:
            return False
        history = info.get("history", [])
        if len(history) < 2:
            return False
        bad, prev = history[-1], history[-2]
        blob = self.store.get_model(prev)
        if blob is None:
            logger.error("online learning: cannot roll back, version %s missing", prev)
            return False
        assert self.adapter is not None  # only a learnable model has versions to roll back to
        self.adapter.load(blob)
        self._tell_version(int(prev))
        reason = (f"mean reward {mean:.4f} over the last {len(recent)} slots is below "
                  f"{1 - self.margin:.0%} of the starting model's {base:.4f}")
        logger.warning("online learning: rolling back model version %s -> %s: %s", bad, prev, reason)
        info["history"] = history[:-1]
        info["current"] = prev
        info.setdefault("rollbacks", []).append({"from": bad, "to": prev, "reason": reason})
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
            "window": self.window,
            "rollback_margin": self.margin,
        }
