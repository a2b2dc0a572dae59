"""The DL2 actor (policy network) and critic (value network), in torch.

Both read the flattened window input of :mod:`~dl2_mesos.policy.dl2.features` (J x F job
columns followed by G global values). Two architectures (``DL2Config.arch``):

* ``"flat"``: the paper's network: an MLP of ``layers`` x ``hidden`` ReLU units over the whole
  flattened input, then a linear layer to the KJ + 1 action logits (K = ``DL2Config.per_job``) (critic: to one value).
* ``"shared"`` (default): the same ``layers`` x ``hidden`` MLP applied to every job column
  (job features only), weights shared across columns, so what is learnt about one column
  holds for every column and for every window size. A masked mean over the valid columns
  summarises the window; each job's K logits are a linear function of its own hidden vector,
  the summary and the global values; the void logit and the critic's value come from an MLP
  over the summary and the global values.

LayerNorm replaces the reference's (inactive) batch normalisation.
"""

from __future__ import annotations

import torch
from torch import nn

from dl2_mesos.policy.dl2.model_config import DL2Config
from dl2_mesos.policy.dl2.features import F_VALID, NUM_GLOBAL_FEATURES


def _mlp(n_in: int, hidden: int, layers: int) -> nn.Sequential:
    mods: list[nn.Module] = []
    for k in range(layers):
        mods += [nn.Linear(n_in if k == 0 else hidden, hidden), nn.ReLU()]
    mods.append(nn.LayerNorm(hidden))
    return nn.Sequential(*mods)


class _SharedTrunk(nn.Module):
    """Per-column encoder with shared weights plus a masked mean summary."""

    def __init__(self, cfg: DL2Config) -> None:
        super().__init__()
        self.J = cfg.window
        self.F = cfg.job_features
        # job columns only: a column's encoding changes only when that job's counts change,
        # so inference re-encodes one row per step (see DL2Policy's incremental greedy path)
        self.enc = _mlp(self.F, cfg.hidden, cfg.layers)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b = x.shape[0]
        jobs = x[:, : self.J * self.F].reshape(b, self.J, self.F)
        g = x[:, self.J * self.F :]
        h = self.enc(jobs)  # b, J, H
        valid = jobs[:, :, F_VALID : F_VALID + 1]
        h = h * valid
        pooled = h.sum(dim=1) / valid.sum(dim=1).clamp(min=1.0)
        return h, pooled, g


class Actor(nn.Module):
    """Policy network: input (B, J*F+G) -> action logits (B, KJ+1), unmasked."""

    def __init__(self, cfg: DL2Config) -> None:
        super().__init__()
        self.cfg = cfg
        n_in = cfg.window * cfg.job_features + NUM_GLOBAL_FEATURES
        if cfg.arch == "flat":
            self.trunk = _mlp(n_in, cfg.hidden, cfg.layers)
            self.head = nn.Linear(cfg.hidden, cfg.num_actions)
        else:
            self.shared = _SharedTrunk(cfg)
            self.job_head = nn.Linear(2 * cfg.hidden + NUM_GLOBAL_FEATURES, cfg.per_job)
            self.void_head = nn.Sequential(
                nn.Linear(cfg.hidden + NUM_GLOBAL_FEATURES, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 1)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cfg.arch == "flat":
            return self.head(self.trunk(x))
        h, pooled, g = self.shared(x)
        b, J = h.shape[0], h.shape[1]
        ctx = torch.cat([pooled, g], dim=1).unsqueeze(1).expand(b, J, pooled.shape[1] + g.shape[1])
        job_logits = self.job_head(torch.cat([h, ctx], dim=2))
        void = self.void_head(torch.cat([pooled, g], dim=1))
        return torch.cat([job_logits.reshape(b, self.cfg.per_job * J), void], dim=1)


class Critic(nn.Module):
    """Value network: input (B, J*F+G) -> state value (B,)."""

    def __init__(self, cfg: DL2Config) -> None:
        super().__init__()
        self.cfg = cfg
        n_in = cfg.window * cfg.job_features + NUM_GLOBAL_FEATURES
        if cfg.arch == "flat":
            self.trunk = _mlp(n_in, cfg.hidden, cfg.layers)
            self.head = nn.Linear(cfg.hidden, 1)
        else:
            self.shared = _SharedTrunk(cfg)
            self.head = nn.Sequential(
                nn.Linear(cfg.hidden + NUM_GLOBAL_FEATURES, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 1)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cfg.arch == "flat":
            return self.head(self.trunk(x)).squeeze(1)
        _, pooled, g = self.shared(x)
        return self.head(torch.cat([pooled, g], dim=1)).squeeze(1)


def masked_log_probs(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Log-probabilities renormalised over the valid actions (invalid ones get -inf)."""
    return torch.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)


class ActorCritic(nn.Module):
    """The actor and the critic of one DL2 model (separate networks, as in the paper)."""

    def __init__(self, cfg: DL2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.actor = Actor(cfg)
        self.critic = Critic(cfg)


class NumpyActor:
    """A numpy copy of an :class:`Actor` for fast single-state inference (greedy decisions).

    Torch's per-operator overhead dominates the tiny per-inference tensors; the same arithmetic
    in numpy is several times faster. Built from the actor's current weights; rebuild it after
    the weights change. ``logits(x)`` equals ``actor(x[None])[0]`` up to float rounding.
    """

    def __init__(self, actor: Actor) -> None:
        self.cfg = actor.cfg
        if actor.cfg.arch == "flat":
            self.trunk = self._seq(actor.trunk)
            self.head = self._seq(nn.Sequential(actor.head))
        else:
            self.enc = self._seq(actor.shared.enc)
            self.job_head = self._seq(nn.Sequential(actor.job_head))
            self.void_head = self._seq(actor.void_head)

    @staticmethod
    def _seq(seq: nn.Sequential) -> list[tuple]:
        ops: list[tuple] = []
        for m in seq:
            if isinstance(m, nn.Linear):
                ops.append(("linear", m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()))
            elif isinstance(m, nn.ReLU):
                ops.append(("relu",))
            elif isinstance(m, nn.LayerNorm):
                ops.append(("ln", m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy(), m.eps))
            else:  # pragma: no cover - the networks above use only these layers
                raise TypeError(f"unsupported layer {m!r}")
        return ops

    @staticmethod
    def _run(ops: list[tuple], x):
        import numpy as np

        for op in ops:
            if op[0] == "linear":
                x = x @ op[1] + op[2]
            elif op[0] == "relu":
                x = np.maximum(x, 0.0)
            else:
                mu = x.mean(axis=-1, keepdims=True)
                var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
                x = (x - mu) / np.sqrt(var + op[3]) * op[1] + op[2]
        return x

    def logits(self, x):
        """Action logits (KJ + 1,) of one flattened input (J*F + G,)."""
        import numpy as np

        if self.cfg.arch == "flat":
            return self._run(self.head, self._run(self.trunk, x))
        J, F = self.cfg.window, self.cfg.job_features
        jobs = x[: J * F].reshape(J, F)
        g = x[J * F :]
        valid = jobs[:, F_VALID : F_VALID + 1]
        h = self.encode(jobs) * valid
        pooled = h.sum(axis=0) / max(float(valid.sum()), 1.0)
        return np.concatenate([(self.job_part(h) + self.context_part(pooled, g)).reshape(-1),
                               self.void_logit(pooled, g)])

    # -- pieces used by the incremental greedy loop (shared arch only) ----------------------
    def encode(self, rows):
        """Hidden vectors of job feature rows (k x F -> k x H)."""
        return self._run(self.enc, rows)

    def job_part(self, h):
        """The hidden-vector part of the job logits (k x H -> k x K)."""
        _, W, b = self.job_head[0]
        return h @ W[: h.shape[-1]]

    def context_part(self, pooled, g):
        """The part of every job's 3 logits that comes from the summary and global values (K,)."""
        import numpy as np

        _, W, b = self.job_head[0]
        return np.concatenate([pooled, g]) @ W[len(pooled) :] + b

    def void_logit(self, pooled, g):
        import numpy as np

        return self._run(self.void_head, np.concatenate([pooled, g]))
