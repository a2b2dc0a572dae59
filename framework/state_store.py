"""The framework's persistent state, laid out over a versioned key-value store.

Layout under the store root (``<zk path>/state`` in ZooKeeper, ``state_dir`` on disk)::

    framework_id            the Mesos framework id (reused by every leader)
    meta                    JSON: epoch (wall clock of slot 0), term (leader term), last_slot
    jobs/<job id>           JSON: one FrameworkJob (spec, phase, timestamps, progress, tasks, generation)
    quarantine/jobs/<id>    JSON: a job record that could not be read (reason, raw data), moved aside
    quarantine/meta         JSON: the last unreadable ``meta`` (replaced by a fresh one)
    models/current          JSON: current model version, version history, baseline and recent rewards
    models/<version>/meta   JSON: version metadata (created, parent, reason)
    models/<version>/blob/<i>  the model's bytes in chunks of at most 512 KiB (ZooKeeper caps a node at 1 MiB)

Every write is a compare-and-set against the version this object last read or wrote; a
:class:`~dl2_mesos.framework.kv.StaleVersion` means another leader has written since: the
caller must stop leading. A leader that fenced itself (:meth:`StateStore.fence`: its ZooKeeper
session is lost or presumed expired) writes nothing any more: every write raises
``StaleVersion`` from then on.

The leader-term fence: :meth:`StateStore.begin_term` bumps ``meta`` with CAS and remembers
the version it wrote. From then on every write (jobs, framework id, models, deletes) carries
that version as a guard, and ``meta`` itself is written only from this store's own copy with
CAS on that version: a store never re-reads ``meta`` and adopts a newer leader's term.

A record that cannot be read (truncated znode, damaged file, invalid spec) does not stop a
leader: it is moved to ``quarantine/`` with a logged error, counted, and its job id is kept in
:attr:`StateStore.quarantined` so that reconciliation leaves its running tasks alone.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from dl2_mesos.framework.kv import CorruptValue, KVStore, StaleVersion
from dl2_mesos.framework.records import FrameworkJob, valid_job_id

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
        self._meta: dict[str, Any] | None = None  # this store's term's meta (after begin_term)
        #: job ids whose records could not be read (moved to quarantine/), with the reason
        self.quarantined: dict[str, str] = {}
        self.quarantined_meta = ""  # why meta was replaced at the start of this term, if it was

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

    def _guard(self) -> tuple[str, int] | None:
        """(meta, our term's version) once a term began: a newer leader's bump fails our writes."""
        if self._meta is None or "meta" not in self._versions:
            return None
        return ("meta", self._versions["meta"])

    def _put_json(self, key: str, value: Any) -> None:
        self._writable(key)
        data = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
        expected = self._versions.get(key, -1)
        self._versions[key] = self.kv.put(key, data, expected, self._guard())

    def _delete(self, key: str) -> None:
        self._writable(key)
        self.kv.delete(key, guard=self._guard())
        for k in [k for k in self._versions if k == key or k.startswith(key + "/")]:
            del self._versions[k]

    # -- framework id and meta ---------------------------------------------------------------
    def framework_id(self) -> str | None:
        try:
            got = self.kv.get("framework_id")
        except CorruptValue as exc:
            logger.error("state store: framework id unreadable (%s); registering as a new framework", exc)
            self._versions["framework_id"] = exc.version if exc.version is not None else -2
            return None
        if got is None:
            return None
        self._versions["framework_id"] = got[1]
        try:
            return got[0].decode("ascii") or None
        except UnicodeDecodeError:
            logger.error("state store: framework id is not ASCII; registering as a new framework")
            return None

    def set_framework_id(self, framework_id: str) -> None:
        self._writable("framework_id")
        expected = self._versions.get("framework_id", -1)
        self._versions["framework_id"] = self.kv.put(
            "framework_id", framework_id.encode(), None if expected == -2 else expected, self._guard())

    @property
    def term(self) -> int | None:
        """This store's leader term (None before :meth:`begin_term`)."""
        return None if self._meta is None else int(self._meta["term"])

    def meta(self) -> dict[str, Any]:
        """Our term's meta once a term began (never re-read: see the module doc), else the stored one."""
        if self._meta is not None:
            return dict(self._meta)
        return self._read_meta()[0]

    def _read_meta(self) -> tuple[dict[str, Any], int | None]:
        """(meta, version to CAS against); an unreadable meta is quarantined and read as {}."""
        raw, version = b"", None
        try:
            got = self.kv.get("meta")
            if got is None:
                self._versions.pop("meta", None)
                return {}, -1
            raw, version = got
            meta = json.loads(raw.decode("utf-8"))
            if not isinstance(meta, dict) or not isinstance(meta.get("term", 0), int) \
                    or not isinstance(meta.get("epoch", 0.0), (int, float)) \
                    or not isinstance(meta.get("last_slot", -1), int):
                raise ValueError("meta must be an object with integer term and last_slot and a numeric epoch")
            self._versions["meta"] = version
            return meta, version
        except (CorruptValue, ValueError) as exc:
            if isinstance(exc, CorruptValue):
                raw, version = exc.raw, exc.version
            logger.error("state store: meta is unreadable (%s); moved to quarantine/meta, starting a new "
                         "slot clock", exc)
            self._quarantine_raw("quarantine/meta", "meta", str(exc), raw)
            self.quarantined_meta = str(exc)
            return {}, version  # None: CAS impossible (a damaged file), written unconditionally

    def put_meta(self, meta: dict[str, Any]) -> None:
        """Write meta for our own term (CAS on the version we wrote last)."""
        self._writable("meta")
        if self._meta is not None and meta.get("term") != self._meta["term"]:
            raise StaleVersion(f"meta: this store leads term {self._meta['term']}, not {meta.get('term')}")
        data = json.dumps(meta, separators=(",", ":"), allow_nan=False).encode()
        self._versions["meta"] = self.kv.put("meta", data, self._versions.get("meta", -1))
        if self._meta is not None:
            self._meta = dict(meta)

    def set_last_slot(self, slot: int) -> None:
        """Record the last decided slot in our term's meta."""
        meta = self.meta()
        meta["last_slot"] = int(slot)
        self.put_meta(meta)

    def begin_term(self, now: float) -> dict[str, Any]:
        """Start a leader term: read meta, bump ``term`` with CAS (fencing an older leader)."""
        self._writable("meta")
        meta, version = self._read_meta()
        meta.setdefault("epoch", now)
        meta["term"] = int(meta.get("term", 0)) + 1
        data = json.dumps(meta, separators=(",", ":"), allow_nan=False).encode()
        self._versions["meta"] = self.kv.put("meta", data, version)
        self._meta = dict(meta)
        return dict(meta)

    # -- jobs --------------------------------------------------------------------------------
    def load_jobs(self, quarantine: bool = False) -> dict[str, FrameworkJob]:
        """Every readable job record.

        Args:
            quarantine: move unreadable records to ``quarantine/jobs/`` (the leader does, after
                :meth:`begin_term`); otherwise they are only logged and listed in :attr:`quarantined`.
        """
        out: dict[str, FrameworkJob] = {}
        for job_id in self.kv.children("quarantine/jobs"):
            self.quarantined.setdefault(job_id, "quarantined earlier")
        for job_id in self.kv.children("jobs"):
            key = f"jobs/{job_id}"
            raw = b""
            try:
                got = self.kv.get(key)
                if got is None:
                    continue
                raw, version = got
                self._versions[key] = version
                record = FrameworkJob.from_dict(json.loads(raw.decode("utf-8")))
                if record.job_id != job_id:
                    raise ValueError(f"the record names job {record.job_id!r}")
                out[job_id] = record
            except Exception as exc:  # noqa: BLE001 - any damage: the other jobs must still load
                if isinstance(exc, CorruptValue):
                    raw = exc.raw
                reason = f"{type(exc).__name__}: {str(exc)[:300]}"
                logger.error("state store: job record %r is unreadable (%s); %s. Its tasks are left running; "
                             "repair the record and move it back to jobs/ to resume it", job_id, reason,
                             "moved to quarantine/jobs" if quarantine else "skipped")
                self.quarantined[job_id] = reason
                if quarantine:
                    self._quarantine_raw(f"quarantine/jobs/{job_id}", key, reason, raw)
                    self._delete(key)
        return out

    def _quarantine_raw(self, to: str, key: str, reason: str, raw: bytes) -> None:
        record = {"key": key, "reason": reason, "at": time.time(), "data": bytes(raw).decode("latin-1")}
        self._writable(to)
        self.kv.put(to, json.dumps(record).encode(), None, self._guard())

    def put_job(self, job: FrameworkJob) -> None:
        if not valid_job_id(job.job_id):
            raise ValueError(f"refusing to store a job with id {job.job_id[:80]!r}")
        self._put_json(f"jobs/{job.job_id}", job.to_dict())

    def put_jobs(self, jobs: list[FrameworkJob]) -> None:
        """Store several jobs; in one group commit where the backend has ``put_many`` (a file
        store), else one after the other. Any CAS mismatch raises StaleVersion as ``put_job``."""
        put_many = getattr(self.kv, "put_many", None)
        if put_many is None or len(jobs) < 2:
            for job in jobs:
                self.put_job(job)
            return
        items = []
        for job in jobs:
            if not valid_job_id(job.job_id):
                raise ValueError(f"refusing to store a job with id {job.job_id[:80]!r}")
            key = f"jobs/{job.job_id}"
            self._writable(key)
            data = json.dumps(job.to_dict(), separators=(",", ":"), allow_nan=False).encode()
            items.append((key, data, self._versions.get(key, -1)))
        for (key, _, _), version in zip(items, put_many(items, self._guard())):
            self._versions[key] = version

    def delete_job(self, job_id: str) -> None:
        self._delete(f"jobs/{job_id}")

    # -- models ------------------------------------------------------------------------------
    def models(self) -> dict[str, Any]:
        """``{"current": int | None, "history": [...], ...}`` (empty dict when no model stored).

        An unreadable record is moved to ``quarantine/models-current`` (logged, counted in
        :attr:`quarantined`) and read as empty: the leader starts from its loaded model."""
        raw = b""
        try:
            got = self.kv.get("models/current")
            if got is None:
                return {}
            raw = got[0]
            self._versions["models/current"] = got[1]
            info = json.loads(raw.decode("utf-8"))
            if not isinstance(info, dict):
                raise ValueError("not an object")
            return info
        except (CorruptValue, ValueError) as exc:
            reason = f"{type(exc).__name__}: {str(exc)[:300]}"
            logger.error("state store: models/current is unreadable (%s); moved to quarantine/models-current, "
                         "starting from the loaded model", reason)
            self.quarantined["models/current"] = reason
            self._quarantine_raw("quarantine/models-current", "models/current",
                                 reason, exc.raw if isinstance(exc, CorruptValue) else raw)
            self._delete("models/current")
            return {}

    def put_models(self, info: dict[str, Any]) -> None:
        self._put_json("models/current", info)

    def put_model(self, version: int, blob: bytes, meta: dict[str, Any]) -> None:
        key = f"models/v{version:06d}"
        self._delete(key)
        self._put_json(f"{key}/meta", {**meta, "size": len(blob), "chunks": (len(blob) + CHUNK - 1) // CHUNK})
        for i in range(0, max(1, len(blob)), CHUNK):
            self._writable(f"{key}/blob")
            self.kv.put(f"{key}/blob/{i // CHUNK:05d}", blob[i:i + CHUNK], None, self._guard())

    def get_model(self, version: int) -> bytes | None:
        key = f"models/v{version:06d}"
        try:
            meta = self._get_json(f"{key}/meta")
            if meta is None:
                return None
            parts = []
            for i in range(int(meta["chunks"])):
                got = self.kv.get(f"{key}/blob/{i:05d}")
                if got is None:
                    return None
                parts.append(got[0])
        except (CorruptValue, ValueError, KeyError, TypeError) as exc:
            logger.error("state store: model version %d is unreadable (%s: %s)", version, type(exc).__name__, exc)
            return None
        blob = b"".join(parts)
        return blob if len(blob) == meta["size"] else None

    def delete_model(self, version: int) -> None:
        self._delete(f"models/v{version:06d}")

    def model_versions(self) -> list[int]:
        return sorted(int(n[1:]) for n in self.kv.children("models") if n.startswith("v") and n[1:].isdigit())
