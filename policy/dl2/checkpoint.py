"""Saving and loading DL2 models.

A checkpoint file (``torch.save`` of plain dicts, loaded with ``weights_only=True``) holds:

* ``format``: ``"dl2-checkpoint"``; ``schema_version``: the feature layout version;
* ``config``: the :class:`DL2Config` (constructor arguments);
* ``actor`` / ``critic``: the state dicts; ``version``: the model version (bumped by every
  online update); ``meta``: free-form training information (JSON-like);
* optionally ``optim``: optimiser state dicts, for resuming training.

Anything else (another file, an older schema, weights of another shape) raises
:class:`dl2_mesos.errors.CheckpointError` saying what does not match.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass, field
from importlib import resources as ilr
from pathlib import Path
from typing import Any

import torch

from dl2_mesos.errors import CheckpointError, ConfigError
from dl2_mesos.policy.dl2.model_config import SCHEMA_VERSION, DL2Config
from dl2_mesos.policy.dl2.network import ActorCritic

FORMAT = "dl2-checkpoint"
SHIPPED_MODEL = "dl2.pt"


@dataclass
class LoadedModel:
    """A model read from a checkpoint."""

    net: ActorCritic
    version: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    optim: dict[str, Any] | None = None

    @property
    def config(self) -> DL2Config:
        return self.net.cfg


def shipped_model_path() -> Path:
    """Path of the pre-trained model shipped inside the package."""
    return Path(str(ilr.files("dl2_mesos.policy.models").joinpath(SHIPPED_MODEL)))


def save_checkpoint(
    path: str | os.PathLike[str],
    net: ActorCritic,
    version: int = 0,
    meta: dict[str, Any] | None = None,
    optim: dict[str, Any] | None = None,
) -> Path:
    """Write ``net`` to ``path`` atomically (temporary file, then rename)."""
    path = Path(path)
    payload: dict[str, Any] = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "config": net.cfg.to_dict(),
        "actor": {k: v.detach().cpu() for k, v in net.actor.state_dict().items()},
        "critic": {k: v.detach().cpu() for k, v in net.critic.state_dict().items()},
        "version": int(version),
        "meta": dict(meta or {}),
    }
    if optim is not None:
        payload["optim"] = optim
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a model file is package data
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _unpickling_reason(exc: Exception) -> str:
    """The line of a refused load that says what was refused (torch wraps it in advice)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    reasons = [ln for ln in lines[1:] if not ln.startswith(("Check the documentation", "Please file an issue"))]
    return reasons[0] if reasons else (lines[0] if lines else type(exc).__name__)


def _load_failure(path: Path, exc: Exception) -> str:
    """Why torch could not read ``path``, in words (its own message can be empty or an index
    error from reading a text file as its legacy format)."""
    if path.stat().st_size == 0:
        return "the file is empty"
    if isinstance(exc, (IndexError, KeyError, EOFError, ValueError)) or not str(exc).strip():
        return f"not a file written by torch.save ({type(exc).__name__}: {exc})".replace(": )", ")")
    # torch's zip reader appends advice about corruption to its reason: keep the reason
    return str(exc).split(" This is an internal")[0]


def load_checkpoint(path: str | os.PathLike[str] | None = None) -> LoadedModel:
    """Read a checkpoint (default: the shipped model).

    Raises:
        CheckpointError: missing or unreadable file, not a DL2 checkpoint, another feature
            schema version, or weights that do not fit the stored configuration.
    """
    path = Path(path) if path is not None else shipped_model_path()
    if not path.is_file():
        raise CheckpointError(f"no DL2 model at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's own text advises loading with weights_only=False, which would run the file's
        # code: give only its reason.
        raise CheckpointError(
            f"{path} is not a readable DL2 checkpoint: not a file of tensors and plain values, "
            f"the only content ever unpickled ({_unpickling_reason(exc)})"
        ) from None
    except Exception as exc:  # torch raises many types for a corrupt or foreign file
        raise CheckpointError(f"{path} is not a readable DL2 checkpoint: {_load_failure(path, exc)}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a DL2 checkpoint (format marker missing)")
    sv = payload.get("schema_version")
    if sv != SCHEMA_VERSION:
        raise CheckpointError(
            f"{path} uses feature schema version {sv}, this code reads version {SCHEMA_VERSION}; retrain the model"
        )
    try:
        cfg = DL2Config.from_dict(dict(payload["config"]))
    except (KeyError, TypeError, ConfigError) as exc:
        raise CheckpointError(f"{path} has an invalid model configuration: {exc}") from exc
    net = ActorCritic(cfg)
    try:
        net.actor.load_state_dict(payload["actor"])
        net.critic.load_state_dict(payload["critic"])
    except (KeyError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: weights do not match the stored configuration {cfg}: {exc}") from exc
    return LoadedModel(net=net, version=int(payload.get("version", 0)), meta=dict(payload.get("meta", {})),
                       optim=payload.get("optim"))
