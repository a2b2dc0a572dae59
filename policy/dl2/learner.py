"""Actor-critic learning from recorded slots: the one update path for simulated and online training.

A trajectory is a sequence of :class:`SlotData` (the inferences of one slot and the reward
observed at its end). Targets:

* slot return ``G_t = r_t + gamma * ((1 - lam) * V(s_{t+1}) + lam * G_{t+1})`` (TD(lambda) with
  the critic as bootstrap, gamma 0.9 as in the paper; ``lam = 1`` gives the discounted Monte
  Carlo return, ``lam = 0`` one-step TD). ``V(s_t)`` is the critic's value of the slot's first
  inference; an unfinished trajectory bootstraps from the last value.
* every inference of slot t gets ``G_t`` (all decisions of a slot share its reward, paper);
  with ``per_job_reward`` (ablation) an inference gets its own job's normalised progress.

Update (one per mini-batch): advantage ``A = G - V(s)`` from the critic (ablation ``critic=False``:
``G`` minus the replay buffer's mean return), normalised over the batch; policy loss
``-mean(A * log pi(a|s)) - beta * H(pi(.|s))`` where ``log pi`` is computed by the *current*
actor on the masked, renormalised distribution (the prototype fed stale sampling-time
probabilities in place of the network's output); critic loss ``MSE(V(s), G)``. Entropy weight ``beta`` decays
exponentially from ``entropy_start`` to ``entropy_end``. With ``clip`` > 0 the policy term is
PPO's clipped surrogate instead, against the log-probability each sample's action had under the
weights that acted (recorded when the sample is stored: rollouts run with the learner's weights
of that moment). With ``elite`` the update is self-imitation instead: of several rollouts on one
trace only the one with the highest total reward is kept, and the actor maximises the
log-probability of its actions (the cross-entropy method's step, one elite per trace).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.features import input_size
from dl2_mesos.policy.dl2.network import ActorCritic, masked_log_probs
from dl2_mesos.policy.dl2.replay import Batch, ReplayBuffer


@dataclass(frozen=True)
class LearnerConfig:
    """Hyper-parameters of the actor-critic update (defaults tuned for short CPU runs)."""

    lr_actor: float = 3e-4
    lr_critic: float = 1e-3
    gamma: float = 0.9
    lam: float = 0.9
    batch_size: int = 256
    replay_size: int = 8192
    replay: bool = True
    critic: bool = True
    per_job_reward: bool = False
    entropy_start: float = 0.05
    entropy_end: float = 0.002
    entropy_half_life: int = 300
    grad_clip: float = 1.0
    seed: int = 0
    #: multiplies every slot reward before returns are computed (keeps the critic's targets near 1)
    reward_scale: float = 1.0
    #: advantage baseline: "critic" (the paper), or "input": the mean return, at the same slot,
    #: of the other rollouts on the same trace (input-dependent baseline, Mao et al. ICLR'19);
    #: needs several episodes per trace (``add_trajectories``)
    baseline: str = "critic"
    #: PPO-style clipping (Schulman et al. 2017) of the policy step: 0 = the paper's plain
    #: policy gradient; e.g. 0.2 bounds the probability ratio of each sample's action, new policy
    #: over the one that acted, to [0.8, 1.2] where moving further would pay (dual clip: a
    #: negative advantage's term is bounded at 3x, so a stale replay sample cannot blow up)
    clip: float = 0.0
    #: self-imitation of the elite (the cross-entropy method's update): of the rollouts on one
    #: trace (``add_trajectories``), only the one with the highest total reward is stored, and the
    #: actor maximises the log-probability of its actions (advantage 1, no critic); the critic
    #: is left alone. Between rollouts that differ only by sampling noise there is nothing to
    #: imitate: see ``elite_margin``
    elite: bool = False
    #: with ``elite``: a trace's best rollout is stored only when its total reward beats the
    #: mean of the others by more than this fraction of that mean's magnitude (e.g. 0.01); 0:
    #: whenever it is strictly best
    elite_margin: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.clip < 1.0:
            raise ConfigError(f"clip must be in [0, 1), got {self.clip}")
        if not (math.isfinite(self.elite_margin) and self.elite_margin >= 0.0):
            raise ConfigError(f"elite_margin must be a finite number >= 0, got {self.elite_margin}")
        if self.elite and self.per_job_reward:
            raise ConfigError("elite and per_job_reward do not combine: an elite's actions all have advantage 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SlotData:
    """The inferences of one slot and what the slot earned."""

    features: np.ndarray  # float32 (n, D)
    masks: np.ndarray  # bool (n, A)
    actions: np.ndarray  # int64 (n,)
    job_ids: tuple[str | None, ...]
    reward: float
    job_rewards: Mapping[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.actions)


def stack_steps(steps: Sequence[Any], input_dim: int, num_actions: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stack agent Steps into (features, masks, actions) arrays (empty arrays for no steps)."""
    if not steps:
        return (np.zeros((0, input_dim), np.float32), np.zeros((0, num_actions), bool), np.zeros(0, np.int64))
    return (
        np.stack([s.features for s in steps]).astype(np.float32, copy=False),
        np.stack([s.mask for s in steps]),
        np.array([s.action for s in steps], dtype=np.int64),
    )


class Learner:
    """Holds the optimisers and the replay buffer of one model and updates it."""

    def __init__(self, net: ActorCritic, cfg: LearnerConfig, optim_state: dict[str, Any] | None = None) -> None:
        self.net = net
        self.cfg = cfg
        self.input_dim = input_size(net.cfg.window, net.cfg.arch, net.cfg.features)
        self.num_actions = net.cfg.num_actions
        self.opt_actor = torch.optim.Adam(net.actor.parameters(), lr=cfg.lr_actor)
        self.opt_critic = torch.optim.Adam(net.critic.parameters(), lr=cfg.lr_critic)
        self.updates = 0
        if optim_state:
            self.opt_actor.load_state_dict(optim_state["actor"])
            self.opt_critic.load_state_dict(optim_state["critic"])
            self.updates = int(optim_state.get("updates", 0))
        self.replay = ReplayBuffer(cfg.replay_size if cfg.replay else 1 << 20, self.input_dim, self.num_actions)
        self.rng = np.random.default_rng(cfg.seed)

    def optim_state(self) -> dict[str, Any]:
        return {"actor": self.opt_actor.state_dict(), "critic": self.opt_critic.state_dict(), "updates": self.updates}

    @property
    def actor_lr(self) -> float:
        return float(self.opt_actor.param_groups[0]["lr"])

    def snapshot(self) -> dict[str, Any]:
        """A copy of the weights and optimiser state to go back to (:meth:`restore`)."""
        return copy.deepcopy({"net": self.net.state_dict(), "optim": self.optim_state()})

    def restore(self, snapshot: dict[str, Any], actor_lr_factor: float = 1.0) -> float:
        """Go back to ``snapshot``'s weights and optimiser state, with the actor's learning rate
        multiplied by ``actor_lr_factor`` (relative to the rate now); returns the new rate. The
        replay buffer and the entropy schedule carry on."""
        lr = self.actor_lr * actor_lr_factor
        self.net.load_state_dict(snapshot["net"])
        self.opt_actor.load_state_dict(snapshot["optim"]["actor"])
        self.opt_critic.load_state_dict(snapshot["optim"]["critic"])
        for group in self.opt_actor.param_groups:
            group["lr"] = lr
        return lr

    @property
    def entropy_weight(self) -> float:
        c = self.cfg
        w = c.entropy_start * math.pow(0.5, self.updates / max(c.entropy_half_life, 1))
        return max(c.entropy_end, w)

    # -- targets ----------------------------------------------------------------------------
    def slot_returns(self, slots: Sequence[SlotData], terminal: bool) -> np.ndarray:
        """TD(lambda) returns per slot, bootstrapped with the current critic."""
        T = len(slots)
        values: list[float | None] = [None] * T
        firsts = [t for t in range(T) if len(slots[t])]
        if firsts and self.cfg.critic:
            x = torch.from_numpy(np.stack([slots[t].features[0] for t in firsts]))
            with torch.no_grad():
                v = self.net.critic(x).numpy()
            for t, val in zip(firsts, v):
                values[t] = float(val)
        g = np.zeros(T, dtype=np.float64)
        last_v = next((values[t] for t in reversed(range(T)) if values[t] is not None), 0.0)
        boot = 0.0 if terminal else float(last_v or 0.0)
        gamma, lam = self.cfg.gamma, self.cfg.lam
        scale = self.cfg.reward_scale
        for t in reversed(range(T)):
            if t + 1 < T:
                nv = values[t + 1]
                boot = g[t + 1] if nv is None else (1 - lam) * nv + lam * g[t + 1]
            g[t] = slots[t].reward * scale + gamma * boot
        return g

    def add_trajectories(self, trajectories: Sequence[tuple[Sequence[SlotData], bool]]) -> int:
        """Store several (slots, terminal) rollouts; with ``baseline="input"`` they must be on
        the same trace, and each slot's baseline is the mean return of the *other* rollouts at
        that slot index (a rollout that already ended counts with return 0). With ``elite``
        only the best rollout is stored (:meth:`add_elite`)."""
        if self.cfg.elite:
            return self.add_elite(trajectories)
        if self.cfg.baseline != "input" or len(trajectories) < 2:
            return sum(self.add_trajectory(s, terminal=t) for s, t in trajectories)
        if not self.cfg.replay:
            self.replay.clear()
        rets = [self.slot_returns(s, t) for s, t in trajectories]
        T = max(len(r) for r in rets)
        padded = np.zeros((len(rets), T))
        for k, r in enumerate(rets):
            padded[k, : len(r)] = r
        total = padded.sum(axis=0)
        n = 0
        for k, (slots, _) in enumerate(trajectories):
            others = (total[: len(rets[k])] - padded[k, : len(rets[k])]) / (len(rets) - 1)
            n += self._store(slots, rets[k], others)
        return n

    def add_elite(self, trajectories: Sequence[tuple[Sequence[SlotData], bool]]) -> int:
        """Store the rollout with the highest total reward among ``trajectories`` (rollouts on
        one trace), every sample with target 1, when it beats the mean of the others by the
        margin (``elite_margin``); returns the samples stored (0: no rollout stood out). Without
        replay the buffer then holds this elite alone."""
        if len(trajectories) < 2:
            raise ValueError("elite self-imitation needs several rollouts on the same trace")
        totals = np.array([sum(s.reward for s in slots) for slots, _ in trajectories], dtype=np.float64)
        best = int(np.argmax(totals))
        others = float(np.delete(totals, best).mean())
        if not totals[best] - others > self.cfg.elite_margin * abs(others):
            return 0
        if not self.cfg.replay:
            self.replay.clear()
        slots = trajectories[best][0]
        return self._store(slots, np.ones(len(slots)), None)

    def add_trajectory(self, slots: Sequence[SlotData], terminal: bool = True) -> int:
        """Turn a trajectory into samples with targets and store them; returns how many."""
        if not self.cfg.replay:
            self.replay.clear()  # ablation: learn only from the newest experience
        return self._store(slots, self.slot_returns(slots, terminal), None)

    def _store(self, slots: Sequence[SlotData], g: np.ndarray, baseline: np.ndarray | None) -> int:
        feats, masks, acts, rets, bases = [], [], [], [], []
        for t, s in enumerate(slots):
            if not len(s):
                continue
            if self.cfg.per_job_reward:
                base = float(np.mean(list(s.job_rewards.values()))) if s.job_rewards else 0.0
                r = np.array([s.job_rewards.get(j, 0.0) if j is not None else base for j in s.job_ids], np.float32)
            else:
                r = np.full(len(s), g[t], dtype=np.float32)
            feats.append(s.features)
            masks.append(s.masks)
            acts.append(s.actions)
            rets.append(r)
            if baseline is not None:
                bases.append(np.full(len(s), baseline[t], dtype=np.float32))
        if not feats:
            return 0
        f, m, a = np.concatenate(feats), np.concatenate(masks), np.concatenate(acts)
        batch = Batch(f, m, a, np.concatenate(rets), np.concatenate(bases) if bases else None,
                      self._log_probs(f, m, a) if self.cfg.clip > 0 else None)
        self.replay.add(batch)
        return len(batch)

    def _log_probs(self, features: np.ndarray, masks: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """log pi(a|s) of the current actor: at storage time, the policy that acted. Floored at
        -20 so an explored action the policy gave ~0 keeps a finite ratio."""
        with torch.no_grad():
            _, la = self._action_log_probs(torch.from_numpy(features), torch.from_numpy(masks),
                                           torch.from_numpy(actions))
        return la.clamp_min(-20.0).numpy().astype(np.float32)

    def _action_log_probs(self, x: torch.Tensor, m: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's masked log-probabilities of every action, and of the actions taken."""
        logp = masked_log_probs(self.net.actor(x), m)
        return logp, logp.gather(1, a.unsqueeze(1)).squeeze(1)

    def _policy_term(self, logp_a: torch.Tensor, adv: torch.Tensor, old: np.ndarray | None) -> torch.Tensor:
        """Per-sample policy objective to maximise: ``A log pi`` or PPO's clipped surrogate."""
        if self.cfg.clip <= 0 or old is None:
            return adv * logp_a
        old_t = torch.from_numpy(old)
        known = ~torch.isnan(old_t)
        ratio = torch.exp((logp_a - torch.nan_to_num(old_t, nan=0.0)).clamp(-20.0, 20.0))
        eps = self.cfg.clip
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv)
        surrogate = torch.where(adv < 0, torch.maximum(surrogate, 3.0 * adv), surrogate)  # dual clip
        return torch.where(known, surrogate, adv * logp_a)

    # -- updates ----------------------------------------------------------------------------
    def update(self, n_updates: int) -> dict[str, float]:
        """Run ``n_updates`` mini-batch steps; returns averaged losses (empty when no data)."""
        if len(self.replay) == 0 or n_updates <= 0:
            return {}
        self.net.train()
        acc = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "advantage_abs": 0.0}
        for _ in range(n_updates):
            b = self.replay.sample(self.cfg.batch_size, self.rng)
            x = torch.from_numpy(b.features)
            m = torch.from_numpy(b.masks)
            a = torch.from_numpy(b.actions)
            g = torch.from_numpy(b.returns)
            logp, logp_a = self._action_log_probs(x, m, a)
            p = logp.exp()
            entropy = -(p * logp.masked_fill(~m, 0.0)).sum(dim=1)
            if self.cfg.elite:  # imitation of stored elites: every sample's advantage is its target, 1
                value_loss = torch.zeros(())
                adv = g
            elif self.cfg.critic:
                v = self.net.critic(x)
                value_loss = nn.functional.mse_loss(v, g)
                adv = g - v.detach()
                if self.cfg.baseline == "input" and b.baselines is not None:
                    ib = torch.from_numpy(b.baselines)
                    adv = torch.where(torch.isnan(ib), adv, g - ib)
            else:
                value_loss = torch.zeros(())
                adv = g - self.replay.mean_return()
            acc["advantage_abs"] += adv.abs().mean().item()
            if len(adv) > 1 and not self.cfg.elite:
                adv = (adv - adv.mean()) / (adv.std() + 1e-6)
            policy_loss = -self._policy_term(logp_a, adv, b.old_log_probs).mean() - self.entropy_weight * entropy.mean()
            self.opt_actor.zero_grad()
            policy_loss.backward()
            nn.utils.clip_grad_norm_(self.net.actor.parameters(), self.cfg.grad_clip)
            self.opt_actor.step()
            if self.cfg.critic and not self.cfg.elite:
                self.opt_critic.zero_grad()
                value_loss.backward()
                nn.utils.clip_grad_norm_(self.net.critic.parameters(), self.cfg.grad_clip * 10)
                self.opt_critic.step()
            self.updates += 1
            acc["policy_loss"] += policy_loss.item()
            acc["value_loss"] += value_loss.item()
            acc["entropy"] += entropy.mean().item()
        self.net.eval()
        out = {k: v / n_updates for k, v in acc.items()}
        out["entropy_weight"] = self.entropy_weight
        return out
