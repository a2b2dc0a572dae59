"""Online learning (the paper's live phase): record what DL2 decided, learn from reported progress.

Flow in the framework:

1. ``recorder = ExperienceRecorder()``; ``policy = DL2Policy(recorder=recorder)``. Every
   ``policy.decide(state)`` records the slot's inferences (input, mask, action) and the jobs'
   epochs done at the slot start.
2. At the next slot start (or whenever progress for the slot is known) call
   ``recorder.complete_slot(next_state=new_state)`` -- the reward is computed from the progress
   the jobs reported, ``sum_j (epochs_done_after - epochs_done_before) / epochs_j`` (jobs gone
   from ``new_state`` count as finished) -- or pass ``epochs={job: epochs trained}`` or
   ``reward=`` directly. The result is a :class:`SlotExperience` (frozen, JSON-serialisable).
3. ``trainer = OnlineTrainer(policy.net)``; ``stats = trainer.update(recorder.drain())``
   updates the weights with the same :class:`~dl2_mesos.policy.dl2.learner.Learner` code as
   simulated training and bumps the model version; ``trainer.save(path)`` writes a checkpoint
   carrying that version.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dl2_mesos.allocation import Allocation
from dl2_mesos.cluster import ClusterState
from dl2_mesos.errors import CheckpointError
from dl2_mesos.policy.dl2.checkpoint import save_checkpoint
from dl2_mesos.policy.dl2.features import FEATURE_SETS, input_size
from dl2_mesos.policy.dl2.learner import Learner, LearnerConfig, SlotData
from dl2_mesos.policy.dl2.network import ActorCritic
from dl2_mesos.slot_accounting import job_reward

logger = logging.getLogger(__name__)

EXPERIENCE_FORMAT = 1
MAX_UNDRAINED_SLOTS = 200  # completed slots a recorder keeps until drained (the newest)


@dataclass(frozen=True)
class SlotExperience:
    """One slot of live experience: the inferences DL2 made and the reward that followed.

    ``masks`` lists, per inference, the indices of the valid actions (compact in JSON).
    """

    slot: int
    model_version: int
    window: int
    features: tuple[tuple[float, ...], ...]
    masks: tuple[tuple[int, ...], ...]
    actions: tuple[int, ...]
    job_ids: tuple[str | None, ...]
    reward: float
    job_rewards: tuple[tuple[str, float], ...] = ()
    per_job: int = 3  # actions per job column (3: grow-only, 6: elastic)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": EXPERIENCE_FORMAT,
            "slot": self.slot,
            "model_version": self.model_version,
            "window": self.window,
            "features": [list(f) for f in self.features],
            "masks": [list(m) for m in self.masks],
            "actions": list(self.actions),
            "job_ids": list(self.job_ids),
            "reward": self.reward,
            "job_rewards": {k: v for k, v in self.job_rewards},
            "per_job": self.per_job,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SlotExperience:
        """Rebuild from :meth:`to_dict` output.

        Raises:
            ValueError: wrong format version, missing fields or inconsistent lengths.
        """
        if d.get("format") != EXPERIENCE_FORMAT:
            raise ValueError(f"unknown experience format {d.get('format')!r} (expected {EXPERIENCE_FORMAT})")
        try:
            exp = cls(
                slot=int(d["slot"]),
                model_version=int(d["model_version"]),
                window=int(d["window"]),
                features=tuple(tuple(float(v) for v in f) for f in d["features"]),
                masks=tuple(tuple(int(v) for v in m) for m in d["masks"]),
                actions=tuple(int(a) for a in d["actions"]),
                job_ids=tuple(None if j is None else str(j) for j in d["job_ids"]),
                reward=float(d["reward"]),
                job_rewards=tuple((str(k), float(v)) for k, v in dict(d.get("job_rewards", {})).items()),
                per_job=int(d.get("per_job", 3)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed slot experience: {exc}") from exc
        n = len(exp.actions)
        if not (len(exp.features) == len(exp.masks) == len(exp.job_ids) == n):
            raise ValueError("malformed slot experience: features, masks, actions and job_ids differ in length")
        return exp

    @classmethod
    def from_json(cls, text: str) -> SlotExperience:
        return cls.from_dict(json.loads(text))

    def to_slot_data(self) -> SlotData:
        """The learner's form (numpy arrays)."""
        A = self.per_job * self.window + 1
        n = len(self.actions)
        sizes = {input_size(self.window, "", f) for f in FEATURE_SETS}
        D = len(self.features[0]) if n else min(sizes)
        if D not in sizes or any(len(f) != D for f in self.features):
            raise ValueError(f"malformed slot experience: {D} input values for a window of {self.window}")
        feats = np.array(self.features, dtype=np.float32).reshape(n, D)
        masks = np.zeros((n, A), dtype=bool)
        for i, m in enumerate(self.masks):
            masks[i, list(m)] = True
        return SlotData(feats, masks, np.array(self.actions, dtype=np.int64), self.job_ids, self.reward,
                        dict(self.job_rewards))


@dataclass
class _Pending:
    slot: int
    version: int
    steps: list
    before: dict[str, tuple[float, float]]  # job -> (epochs done, total epochs)
    state: ClusterState | None = None  # kept only for online imitation


class ExperienceRecorder:
    """Captures DL2's inferences per slot and pairs them with the reward observed afterwards.

    With ``keep_states`` the slot-start state of each completed slot is kept too
    (:meth:`drain_states`: what online imitation labels with its teacher's decisions)."""

    def __init__(self, window: int | None = None, keep_states: bool = False) -> None:
        self.window = window
        self.keep_states = keep_states
        self._pending: _Pending | None = None
        self.completed: list[SlotExperience] = []
        self.states: list[ClusterState] = []
        self.per_job = 3

    def record_decision(self, state: ClusterState, steps: Sequence[Any], allocation: Allocation, version: int,
                        per_job: int = 3) -> None:
        """Called by DL2Policy.decide. A still-pending slot without a reward is dropped.

        ``per_job``: actions per job column of the deciding model (its ``DL2Config.per_job``)."""
        self.per_job = per_job
        if self._pending is not None:
            logger.warning("slot %d was never completed with a reward; dropping its experience", self._pending.slot)
        before = {j.job_id: (j.epochs_done, j.spec.epochs) for j in state.jobs}
        self._pending = _Pending(state.slot, version, list(steps), before, state if self.keep_states else None)

    @property
    def pending(self) -> bool:
        return self._pending is not None

    def complete_slot(
        self,
        next_state: ClusterState | None = None,
        epochs: Mapping[str, float] | None = None,
        reward: float | None = None,
    ) -> SlotExperience | None:
        """Close the pending slot with its reward (see the module docstring); None if none pending."""
        p = self._pending
        if p is None:
            return None
        job_rewards: dict[str, float] = {}
        if epochs is not None:
            for jid, e in epochs.items():
                if jid in p.before:
                    job_rewards[jid] = job_reward(float(e), p.before[jid][1])
        elif next_state is not None:
            after = next_state.jobs_by_id
            for jid, (done, total) in p.before.items():
                if jid in after:
                    job_rewards[jid] = job_reward(after[jid].epochs_done - done, total)
                else:  # gone: finished during the slot
                    job_rewards[jid] = job_reward(total - done, total)
        elif reward is None:
            raise ValueError("complete_slot needs next_state, epochs or reward")
        r = float(reward) if reward is not None else float(sum(job_rewards.values()))
        window = self.window
        if p.steps:
            window = (len(p.steps[0].mask) - 1) // self.per_job
        exp = SlotExperience(
            slot=p.slot,
            model_version=p.version,
            window=int(window or 0),
            features=tuple(tuple(float(v) for v in s.features) for s in p.steps),
            masks=tuple(tuple(int(i) for i in np.flatnonzero(s.mask)) for s in p.steps),
            actions=tuple(int(s.action) for s in p.steps),
            job_ids=tuple(s.job_id for s in p.steps),
            reward=r,
            job_rewards=tuple(sorted(job_rewards.items())),
            per_job=self.per_job,
        )
        self._pending = None
        self.completed.append(exp)
        if p.state is not None:
            self.states.append(p.state)
        # nobody drains a frozen model's recorder (online learning off): keep the newest only
        del self.completed[:-MAX_UNDRAINED_SLOTS], self.states[:-MAX_UNDRAINED_SLOTS]
        return exp

    def drop_pending(self) -> None:
        """Forget the pending slot without an experience (a slot that says nothing of the policy)."""
        self._pending = None

    def drain(self) -> list[SlotExperience]:
        """Take the completed experiences (the recorder keeps none afterwards)."""
        out, self.completed = self.completed, []
        return out

    def drain_states(self) -> list[ClusterState]:
        """Take the completed slots' start states (``keep_states``; none kept afterwards)."""
        out, self.states = self.states, []
        return out


def write_experiences(exps: Iterable[SlotExperience], path: str | Path) -> None:
    """Append experiences to a JSON-lines file."""
    with open(path, "a", encoding="utf-8") as fh:
        for e in exps:
            fh.write(e.to_json() + "\n")


def read_experiences(path: str | Path) -> list[SlotExperience]:
    """Read a JSON-lines experience file (ValueError names the bad line)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    out.append(SlotExperience.from_json(line))
                except (ValueError, json.JSONDecodeError) as exc:
                    raise ValueError(f"{path}:{n}: {exc}") from exc
    return out


class OnlineTrainer:
    """Updates a live DL2 model from recorded experience (same Learner as simulated RL).

    Args:
        net: the model to update in place (e.g. ``DL2Policy.net``).
        cfg: learner hyper-parameters (paper's online lr 1e-4 by default here).
        version: the model's current version; each update that changes weights bumps it.
        updates_per_slot: gradient steps per recorded slot.
    """

    def __init__(self, net: ActorCritic, cfg: LearnerConfig | None = None, version: int = 0,
                 updates_per_slot: int = 2) -> None:
        self.net = net
        self.learner = Learner(net, cfg or LearnerConfig(lr_actor=1e-4, lr_critic=1e-3))
        self.version = version
        self.updates_per_slot = updates_per_slot

    def update(self, experiences: Sequence[SlotExperience]) -> dict[str, float]:
        """Learn from ``experiences`` (consecutive slots form one unfinished trajectory).

        Returns the learner's stats plus ``samples`` and ``version``. Experiences recorded with
        another window size raise ValueError.
        """
        exps = sorted(experiences, key=lambda e: e.slot)
        for e in exps:
            if e.actions and e.window != self.net.cfg.window:
                raise ValueError(f"experience of slot {e.slot} has window {e.window}, the model {self.net.cfg.window}")
        # split into runs of consecutive slots
        runs: list[list[SlotData]] = []
        prev = None
        for e in exps:
            if prev is None or e.slot != prev + 1:
                runs.append([])
            runs[-1].append(e.to_slot_data())
            prev = e.slot
        samples = sum(self.learner.add_trajectory(r, terminal=False) for r in runs)
        stats: dict[str, float] = {}
        if samples:
            stats = self.learner.update(max(1, self.updates_per_slot * len(exps)))
            self.version += 1
        stats["samples"] = float(samples)
        stats["version"] = float(self.version)
        return stats

    def save(self, path: str | Path, meta: Mapping[str, Any] | None = None) -> Path:
        """Write the updated model (with its version) to ``path``."""
        return save_online_model(self.net, self.version, path, meta)


def save_online_model(net: ActorCritic, version: int, path: str | Path, meta: Mapping[str, Any] | None = None) -> Path:
    """Write an online-updated model with its version (CheckpointError when it cannot be written)."""
    try:
        return save_checkpoint(path, net, version=version, meta=dict(meta or {}, online=True))
    except OSError as exc:
        raise CheckpointError(f"cannot write model to {path}: {exc}") from exc
