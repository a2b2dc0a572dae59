"""The contract between the dl2 executor and a training program, and a helper for programs.

This module imports **only the standard library**: it runs under the job interpreter
(``.venv-jobs``: MXNet 1.9.1 with numpy < 1.24) as well as under the executor's.

Environment the executor sets for every job process
---------------------------------------------------
========================= =====================================================================
``DL2_JOB_ID``            job id
``DL2_TASK_ID``           Mesos task id of this process ("" for the MXNet scheduler)
``DL2_ROLE``              ``scheduler`` | ``server`` | ``worker`` (ps tasks run ``server``)
``DL2_RANK``              rank within the role (0-based)
``DL2_RUNTIME``           ``mxnet`` | ``pytorch``
``DL2_GENERATION``        cluster generation (grows by one at every rescale)
``DL2_NUM_SERVERS``       servers in this generation (0 for PyTorch)
``DL2_NUM_WORKERS``       workers in this generation
``DL2_EPOCHS``            epochs to train in total (the job finishes when reached)
``DL2_PROGRESS_FILE``     JSON-lines file this process appends events to (the progress channel)
``DL2_CHECKPOINT_DIR``    local folder where this process writes new checkpoints
``DL2_RESTORE_DIR``       local folder holding the checkpoint to resume from (unset: start fresh)
``DL2_RESTORE_PENDING_S`` > 0: the executor is still filling ``DL2_RESTORE_DIR`` (the process was
                          started early, so that its start overlaps the restore); wait up to this
                          many seconds for its ``MANIFEST.json`` (or ``NO_CHECKPOINT``: start fresh)
``DL2_SAVER``             ``1`` for the one process that saves checkpoints (worker rank 0)
``DL2_CHECKPOINT_EVERY_S`` seconds between periodic checkpoints (0: only when stopping)
``DL2_PROGRESS_EVERY_S``  seconds between progress events
========================= =====================================================================

MXNet processes also get ``DMLC_ROLE``, ``DMLC_PS_ROOT_URI``, ``DMLC_PS_ROOT_PORT``,
``DMLC_NUM_SERVER``, ``DMLC_NUM_WORKER``, ``DMLC_NODE_HOST`` and ``OMP_NUM_THREADS=1``; PyTorch
workers get ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``.

Progress channel
----------------
One JSON object per line in ``DL2_PROGRESS_FILE``, each with ``type`` and ``ts`` (Unix time):
``started``; ``restored`` (``checkpoint``, ``epoch``, ``batch``); ``progress`` (``epoch`` total
fractional epochs, ``batch`` total batches, ``samples_per_second``, ``loss``; cumulative, so a lost
line costs nothing); ``first_batch``; ``checkpoint`` (``path`` a folder under
``DL2_CHECKPOINT_DIR``, ``epoch``, ``batch``, ``final``, ``save_seconds``); ``exit`` (``status``
``finished`` or ``stopped``, plus anything the program adds, e.g. a parameter digest). The
executor tails the file, uploads each checkpoint folder through the storage layer (then removes
it) and forwards progress to the framework.

Stopping
--------
SIGTERM (sent by the executor on kill and on rescale) only sets :attr:`JobRuntime.stop_requested`.
The program stops at a safe point: with synchronous data parallelism all workers must stop at the
same batch, so programs agree through their own all-reduce (the reference programs push a stop
flag through the kvstore / all-reduce it every batch); the saver then writes a ``final``
checkpoint and every worker calls :meth:`JobRuntime.exit` with ``stopped``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_FINISHED = "finished"
EXIT_STOPPED = "stopped"


def _env_int(name: str, default: int = 0) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


def _env_float(name: str, default: float = 0.0) -> float:
    raw = os.environ.get(name, "")
    return float(raw) if raw.strip() else default


@dataclass
class RestoredState:
    """What a restored checkpoint says about training so far."""

    path: Path
    checkpoint: str
    epoch: float
    batch: int
    meta: dict


NO_CHECKPOINT = "NO_CHECKPOINT"  # written into a pending restore folder when there is nothing to restore


class RestoreNotReady(RuntimeError):
    """A pending restore folder did not become ready in time."""


def wait_for_restore(folder: Path, timeout: float, poll: float = 0.05) -> bool:
    """Wait until the executor finished ``folder``: True for a checkpoint (``MANIFEST.json``, written
    last), False for ``NO_CHECKPOINT``.

    Raises:
        RestoreNotReady: neither appeared within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        if (folder / "MANIFEST.json").exists():
            return True
        if (folder / NO_CHECKPOINT).exists():
            return False
        if time.monotonic() >= deadline:
            raise RestoreNotReady(f"restore folder {folder} not ready after {timeout:.0f}s")
        time.sleep(poll)


class JobRuntime:
    """Reads the ``DL2_*`` environment, writes progress events and handles SIGTERM.

    Typical use in a worker::

        rt = JobRuntime.from_env()
        rt.install_signal_handlers()
        state = rt.restored()            # None on a fresh start
        ...
        rt.progress(epoch, batch, samples_per_second, loss)
        if rt.saver and rt.checkpoint_due(): rt.save_checkpoint(writer, epoch, batch)
        ...
        rt.exit("stopped")
    """

    def __init__(self, env: dict[str, str] | None = None) -> None:
        e = os.environ if env is None else env
        self.job_id = e.get("DL2_JOB_ID", "job")
        self.task_id = e.get("DL2_TASK_ID", "")
        self.role = e.get("DL2_ROLE") or {"server": "server", "scheduler": "scheduler"}.get(
            e.get("DMLC_ROLE", ""), "worker")
        self.rank = int(e.get("DL2_RANK", "0") or 0)
        self.runtime = e.get("DL2_RUNTIME", "mxnet")
        self.generation = int(e.get("DL2_GENERATION", "0") or 0)
        self.num_servers = int(e.get("DL2_NUM_SERVERS", "0") or 0)
        self.num_workers = int(e.get("DL2_NUM_WORKERS", "1") or 1)
        self.epochs = float(e.get("DL2_EPOCHS", "1") or 1)
        self.saver = e.get("DL2_SAVER", "1" if self.rank == 0 and self.role == "worker" else "0") == "1"
        self.checkpoint_every_s = float(e.get("DL2_CHECKPOINT_EVERY_S", "0") or 0)
        self.progress_every_s = float(e.get("DL2_PROGRESS_EVERY_S", "1") or 1)
        pf = e.get("DL2_PROGRESS_FILE", "")
        self.progress_file = Path(pf) if pf else None
        cd = e.get("DL2_CHECKPOINT_DIR", "")
        self.checkpoint_dir = Path(cd) if cd else Path.cwd() / "dl2-checkpoints"
        rd = e.get("DL2_RESTORE_DIR", "")
        self.restore_dir = Path(rd) if rd else None
        self.restore_pending_s = float(e.get("DL2_RESTORE_PENDING_S", "0") or 0)
        self.stop_requested = False
        self._lock = threading.Lock()
        self._last_progress = 0.0
        self._last_checkpoint = time.monotonic()
        self._checkpoints = 0

    @classmethod
    def from_env(cls) -> JobRuntime:
        return cls()

    # -- signals ------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT set :attr:`stop_requested`; the program stops at its next safe point."""

        def on_signal(signum: int, _frame: Any) -> None:
            self.stop_requested = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    # -- progress channel ---------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        """Append one event line to the progress file (no-op without ``DL2_PROGRESS_FILE``)."""
        if self.progress_file is None:
            return
        line = json.dumps({"type": kind, "ts": time.time(), **fields}, allow_nan=False, default=str)
        with self._lock, open(self.progress_file, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()

    def progress(self, epoch: float, batch: int, samples_per_second: float, loss: float | None = None,
                 force: bool = False) -> None:
        """Report cumulative progress; rate-limited to one line per ``DL2_PROGRESS_EVERY_S``."""
        now = time.monotonic()
        if not force and now - self._last_progress < self.progress_every_s:
            return
        self._last_progress = now
        if loss is not None and not (loss == loss and abs(loss) != float("inf")):
            loss = None  # NaN/inf cannot travel in JSON messages
        self.event("progress", epoch=float(epoch), batch=int(batch),
                   samples_per_second=float(samples_per_second), loss=loss)

    # -- checkpoints --------------------------------------------------------------------------
    def restored(self) -> RestoredState | None:
        """The checkpoint the executor downloaded for this process, or None to start fresh.

        Raises:
            RestoreNotReady: the executor announced a restore (``DL2_RESTORE_PENDING_S``) and the
                folder was not ready in time.
        """
        if self.restore_dir is None:
            return None
        if self.restore_pending_s > 0:
            wait_for_restore(self.restore_dir, self.restore_pending_s)
        if not (self.restore_dir / "MANIFEST.json").exists():
            return None
        man = json.loads((self.restore_dir / "MANIFEST.json").read_text())
        meta = dict(man.get("meta", {}))
        return RestoredState(self.restore_dir, str(man.get("dirname", "")), float(meta.get("epoch", 0.0)),
                             int(meta.get("batch", 0)), meta)

    def checkpoint_due(self) -> bool:
        """True when a periodic checkpoint is due (``DL2_CHECKPOINT_EVERY_S`` > 0)."""
        return self.checkpoint_every_s > 0 and time.monotonic() - self._last_checkpoint >= self.checkpoint_every_s

    def new_checkpoint_dir(self) -> Path:
        """A fresh, empty local folder to write one checkpoint into."""
        self._checkpoints += 1
        d = self.checkpoint_dir / f"g{self.generation}-{os.getpid()}-{self._checkpoints}"
        d.mkdir(parents=True, exist_ok=False)
        return d

    def checkpoint_written(self, path: Path, epoch: float, batch: int, final: bool = False,
                           save_seconds: float = 0.0, **meta: Any) -> None:
        """Hand a finished local checkpoint folder to the executor for upload."""
        self._last_checkpoint = time.monotonic()
        self.event("checkpoint", path=str(path), epoch=float(epoch), batch=int(batch), final=bool(final),
                   save_seconds=float(save_seconds), generation=self.generation, meta=meta)

    def save_checkpoint(self, write: Any, epoch: float, batch: int, final: bool = False, **meta: Any) -> Path:
        """Call ``write(folder)`` on a fresh folder, time it, and hand the folder over for upload."""
        t0 = time.monotonic()
        d = self.new_checkpoint_dir()
        write(d)
        (d / "state.json").write_text(json.dumps({"epoch": epoch, "batch": batch, **meta}))
        self.checkpoint_written(d, epoch, batch, final=final, save_seconds=time.monotonic() - t0, **meta)
        return d

    def exit(self, status: str, **fields: Any) -> None:
        """Record why the process ends (``finished`` or ``stopped``) as its last event."""
        self.event("exit", status=status, **fields)


def read_events(path: str | os.PathLike[str], offset: int = 0) -> tuple[list[dict], int, list[str]]:
    """Complete JSON lines of a progress file from ``offset``.

    Returns ``(events, new_offset, bad_lines)``; a partial last line is left for the next call and
    malformed lines are returned separately (the caller logs and drops them).
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset, []
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset, []
    events, bad = [], []
    for raw in data[: end + 1].splitlines():
        if not raw.strip():
            continue
        try:
            ev = json.loads(raw)
        except ValueError:
            bad.append(raw[:200].decode(errors="replace"))
            continue
        if isinstance(ev, dict) and isinstance(ev.get("type"), str):
            events.append(ev)
        else:
            bad.append(raw[:200].decode(errors="replace"))
    return events, offset + end + 1, bad
