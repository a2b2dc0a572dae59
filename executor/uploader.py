"""Background checkpoint uploads: the job's owner thread never blocks on storage retries."""

from __future__ import annotations

import logging
import queue
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dl2_mesos.storage import CheckpointInfo, CheckpointStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UploadResult:
    path: str
    meta: dict[str, Any]
    info: CheckpointInfo | None
    error: str
    seconds: float
    kept: str = ""  # the local folder, kept after a successful upload (final checkpoints, keep_final)


class Uploader:
    """Uploads local checkpoint folders in order, one at a time, then removes them locally.

    Results appear in :attr:`results` (read by the owner thread); :meth:`drain` waits until every
    submitted upload finished (used before relaunching or reporting a kill). With ``keep_final``
    a final checkpoint's folder is kept after its upload (:attr:`UploadResult.kept`): the owner
    restores the next generation from it and removes it.
    """

    def __init__(self, store: CheckpointStore, keep_final: bool = False) -> None:
        self.store = store
        self.keep_final = keep_final
        self.results: queue.Queue[UploadResult] = queue.Queue()
        self._jobs: queue.Queue[tuple[str, str, dict[str, Any]] | None] = queue.Queue()
        self._pending = 0
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="dl2-uploader", daemon=True)
        self._thread.start()

    def submit(self, path: str, name: str, meta: dict[str, Any]) -> None:
        with self._cond:
            self._pending += 1
        self._jobs.put((path, name, meta))

    @property
    def pending(self) -> int:
        with self._cond:
            return self._pending

    def drain(self, timeout: float) -> bool:
        """Wait until nothing is pending; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        self._jobs.put(None)

    def _next(self) -> tuple[str, str, dict[str, Any]] | None:
        """The next upload; a periodic checkpoint with a newer one queued behind it is skipped (a
        backlog after a storage outage then costs one upload, not one per missed interval)."""
        job = self._jobs.get()
        while job is not None and not job[2].get("final") and not self._jobs.empty():
            nxt = self._jobs.get()
            logger.info("skipping upload of %s: a newer checkpoint is queued", job[0])
            shutil.rmtree(job[0], ignore_errors=True)
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()
            job = nxt
        return job

    def _run(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            path, name, meta = job
            t0 = time.monotonic()
            info, error, kept = None, "", ""
            try:
                info = self.store.save(path, name=name, meta=meta)
                if self.keep_final and meta.get("final"):
                    kept = path
                else:
                    shutil.rmtree(path, ignore_errors=True)
            except Exception as exc:  # noqa: BLE001 - reported to the owner thread, never fatal here
                error = f"{type(exc).__name__}: {exc}"
                logger.error("checkpoint upload of %s failed: %s", path, error)
            self.results.put(UploadResult(path, meta, info, error, time.monotonic() - t0, kept))
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()


def local_dir_size(path: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
