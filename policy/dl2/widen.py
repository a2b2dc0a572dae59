"""Moving a trained model to a wider per-job feature set without changing what it decides.

A feature set that extends another (``"gains"`` appends four columns to ``"base"``, see
:mod:`~dl2_mesos.policy.dl2.features`) can start from a model trained on the narrower set: every
weight is copied, and the weights reading the new columns start at zero, so the widened model
computes exactly the same logits and values as the original until training moves them. This
lets RL continue a long run (e.g. a curriculum from a DRF warm-up) with the extra inputs instead
of starting over from a new warm-up.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.dl2.features import FEATURE_SETS, NUM_GLOBAL_FEATURES
from dl2_mesos.policy.dl2.network import ActorCritic

#: Feature sets each set can be widened to (the narrower set's columns are a prefix of the wider's).
WIDENS_TO: dict[str, tuple[str, ...]] = {"base": ("gains",), "gains": ()}


def _first_layer_key(net: ActorCritic, part: str) -> str:
    return f"{part}.{'shared.enc' if net.cfg.arch == 'shared' else 'trunk'}.0.weight"


def _widen_input(weight: torch.Tensor, arch: str, window: int, old: int, new: int) -> torch.Tensor:
    """The first layer's weight with zero columns for the added per-job features."""
    hidden = weight.shape[0]
    zeros = torch.zeros(hidden, new - old, dtype=weight.dtype)
    if arch == "shared":  # one encoder over each job's columns
        return torch.cat([weight, zeros], dim=1)
    # flat: window blocks of per-job columns, then the global features
    jobs = weight[:, : window * old].reshape(hidden, window, old)
    padded = torch.cat([jobs, zeros.unsqueeze(1).expand(hidden, window, new - old)], dim=2)
    return torch.cat([padded.reshape(hidden, window * new), weight[:, window * old :]], dim=1)


def widen_features(net: ActorCritic, features: str) -> ActorCritic:
    """A copy of ``net`` that reads the feature set ``features`` and decides exactly as ``net`` does.

    Returns ``net`` itself when it already reads ``features``. Raises :class:`ConfigError` when
    ``features`` is not a wider set of ``net``'s (a narrower one would drop inputs the weights use).
    """
    have = net.cfg.features
    if features == have:
        return net
    if features not in FEATURE_SETS:
        raise ConfigError(f"features must be one of {tuple(FEATURE_SETS)}, got {features!r}")
    if features not in WIDENS_TO.get(have, ()):
        raise ConfigError(f"a model trained on the {have!r} features cannot be moved to {features!r} "
                          f"(only to a set that extends its own: {WIDENS_TO.get(have, ()) or 'none'})")
    cfg = replace(net.cfg, features=features)
    wide = ActorCritic(cfg)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    old, new = FEATURE_SETS[have], FEATURE_SETS[features]
    for part in ("actor", "critic"):
        key = _first_layer_key(net, part)
        state[key] = _widen_input(state[key], cfg.arch, cfg.window, old, new)
        assert state[key].shape[1] == (new if cfg.arch == "shared" else cfg.window * new + NUM_GLOBAL_FEATURES)
    wide.load_state_dict(state)
    return wide
