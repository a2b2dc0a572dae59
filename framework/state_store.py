"""The framework's persistent state, laid out over a versioned key-value store.

Layout under the store root (``<zk path>/state`` in ZooKeeper, ``state_dir`` on disk)::

    framework_id            the Mesos framework id (reused by every leader)
    meta                    JSON: epoch (wall clock of slot 0), term (leader term), last_slot
    jobs/<job id>           JSON: one FrameworkJob (spec, phase, timestamps, progress, tasks, generation)
    models/current          JSON: current model version, version history, baseline and recent rewards
    models/<version>/meta   JSON: version metadata (created, parent, reason)
    models/<version>/blob/<i>  the model's bytes in chunks of at most 512 KiB (ZooKeeper caps a node at 1 MiB)

Every write is a compare-and-set against the version this object last read or wrote; a
:class:`~dl2_mesos.framework.kv.StaleVersion` means another leader has written since: the
caller must stop leading. A leader that fenced itself (:meth:`StateStore.fence`: its ZooKeeper
session is lost or presumed expired) writes nothing any more, not even the unguarded model
chunks: every write raises ``StaleVersion`` from then on.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from dl2_mesos.framework.kv import KVStore, StaleVersion
from dl2_mesos.framework.records import FrameworkJob

logger = logging.getLogger(__name__)

CHUNK = 512 * 1024


class StateStore:
    """Typed access to the framework state with per-key CAS.

    Args:
        kv: the backend (memory, file or ZooKeeper).
    """

    def __init__(self, kv: KVStore) -> None:
        self.kv = kv
        self._versions: dict[str, int] = {}
        self.fenced_reason = ""

    # -- fencing ---------------------------------------------------------------------------
    @property
    def fenced(self) -> bool:
        return bool(self.fenced_reason)

    def fence(self, reason: str) -> None:
        """Refuse every later write (thread-safe: a flag read before each write)."""
        if not self.fenced_reason:
            self.fenced_reason = reason or "fenced"

    def _writable(self, key: str) -> None:
        if self.fenced_reason:
            raise StaleVersion(f"{key}: not written, this leader is fenced ({self.fenced_reason})")

    # -- generic ---------------------------------------------------------------------------
    def _get_json(self, key: str) -> Any | None:
        got = self.kv.get(key)
        if got is None:
            self._versions.pop(key, None)
            return None
        data, version = got
        self._versions[key] = version
        return json.loads(data.decode()) if data else None

    def _put_json(self, key: str, value: Any, fenced: bool = True) -> None:
        self._writable(key)
        data = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
        expected = self._versions.get(key, -1)
        guard = None
        if fenced and key != "meta" and "meta" in self._versions:
            # only while our term's meta is unchanged: a newer leader bumps it
            guard = ("meta", self._versions["meta"])
        self._versions[key] = self.kv.put(key, data, expected, guard)

    def _delete(self, key: str) -> None:
        self._writable(key)
        self.kv.delete(key)
        for k in [k for k in self._versions if k == key or k.startswith(key + "/")]:
            del self._versions[k]

    # -- framework id and meta ---------------------------------------------------------------
    def framework_id(self) -> str | None:
        got = self.kv.get("framework_id")
        if got is None:
            return None
        self._versions["framework_id"] = got[1]
        return got[0].decode() or None

    def set_framework_id(self, framework_id: str) -> None:
        self._writable("framework_id")
        expected = self._versions.get("framework_id", -1)
        self._versions["framework_id"] = self.kv.put("framework_id", framework_id.encode(), expected)

    def meta(self) -> dict[str, Any]:
        return self._get_json("meta") or {}

    def put_meta(self, meta: dict[str, Any]) -> None:
        self._put_json("meta", meta)

    def begin_term(self, now: float) -> dict[str, Any]:
        """Start a leader term: read meta, bump ``term`` with CAS (fencing an older leader)."""
        meta = self.meta()
        meta.setdefault("epoch", now)
        meta["term"] = int(meta.get("term", 0)) + 1
        self.put_meta(meta)
        return meta

    # -- jobs --------------------------------------------------------------------------------
    def load_jobs(self) -> dict[str, FrameworkJob]:
        out: dict[str, FrameworkJob] = {}
        for job_id in self.kv.children("jobs"):
            d = self._get_json(f"jobs/{job_id}")
            if d is None:
                continue
            try:
                out[job_id] = FrameworkJob.from_dict(d)
            except (KeyError, TypeError, ValueError) as exc:
                # a corrupt record must not stop the framework; keep it in the store for a human
                logger.error("state store: cannot read job %s (%s); skipped", job_id, exc)
        return out

    def put_job(self, job: FrameworkJob) -> None:
        self._put_json(f"jobs/{job.job_id}", job.to_dict())

    def delete_job(self, job_id: str) -> None:
        self._delete(f"jobs/{job_id}")

    # -- models ------------------------------------------------------------------------------
    def models(self) -> dict[str, Any]:
        """``{"current": int | None, "history": [...], ...}`` (empty dict when no model stored)."""
        return self._get_json("models/current") or {}

    def put_models(self, info: dict[str, Any]) -> None:
        self._put_json("models/current", info)

    def put_model(self, version: int, blob: bytes, meta: dict[str, Any]) -> None:
        key = f"models/v{version:06d}"
        self._delete(key)
        self._put_json(f"{key}/meta", {**meta, "size": len(blob), "chunks": (len(blob) + CHUNK - 1) // CHUNK})
        for i in range(0, max(1, len(blob)), CHUNK):
            self._writable(f"{key}/blob")
            self.kv.put(f"{key}/blob/{i // CHUNK:05d}", blob[i:i + CHUNK], None)

    def get_model(self, version: int) -> bytes | None:
        key = f"models/v{version:06d}"
        meta = self._get_json(f"{key}/meta")
        if meta is None:
            return None
        parts = []
        for i in range(meta["chunks"]):
            got = self.kv.get(f"{key}/blob/{i:05d}")
            if got is None:
                return None
            parts.append(got[0])
        blob = b"".join(parts)
        return blob if len(blob) == meta["size"] else None

    def delete_model(self, version: int) -> None:
        self._delete(f"models/v{version:06d}")

    def model_versions(self) -> list[int]:
        return sorted(int(n[1:]) for n in self.kv.children("models") if n.startswith("v") and n[1:].isdigit())
