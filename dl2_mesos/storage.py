"""Checkpoint storage over fsspec: ``hdfs://`` (hdfs-native), ``webhdfs://`` and ``file://``.

Layout under a job's checkpoint root (``LaunchSpec.checkpoint_uri``)::

    <root>/000007-final/              one committed checkpoint: sequence number + optional name
        MANIFEST.json                 {"seq", "name", "created", "meta", "files": {rel: {sha256, size}}}
        params, trainer.states, ...   whatever the training program saved
    <root>/.tmp-000008-<hex>/         an upload in progress (never read)

Guarantees:

* **Atomic**: files are uploaded into a ``.tmp-*`` folder, the manifest last, then the folder is
  renamed to its final name in one metadata operation; readers only ever see whole checkpoints.
* **Keep last K**: after a commit, older checkpoints beyond ``keep`` are deleted; a failed save never
  touches existing ones.
* **Checksums**: every file's sha256 is in the manifest and verified on restore; a corrupt or
  incomplete latest checkpoint falls back to the previous one, with the reason logged.
* **Confined names**: a job-supplied name is one path component of ``[A-Za-z0-9._-]`` (no ``..``,
  no ``/``, not absolute); manifest paths are checked the same way before anything is written.
* **Retries**: transient errors (connection refused, timeouts, NameNode in safe mode) are retried
  with exponential backoff; the whole operation is retried, so a half-done upload is just abandoned.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import fsspec

from dl2_mesos.errors import CheckpointError

logger = logging.getLogger(__name__)

MANIFEST = "MANIFEST.json"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_DIR_RE = re.compile(r"(\d{6,})(?:-([A-Za-z0-9][A-Za-z0-9._-]*))?")
T = TypeVar("T")

# hdfs-native otherwise retries a refused connection for about three minutes inside one call;
# we keep calls short and do the retrying ourselves, with a budget the caller chooses.
HDFS_NATIVE_OPTIONS = {
    "dfs.client.failover.max.attempts": "1",
    "dfs.client.failover.sleep.base.millis": "100",
    "dfs.client.failover.sleep.max.millis": "500",
    "dfs.client.socket-timeout": "10000",
}


class InvalidCheckpointName(CheckpointError, ValueError):
    """A job-supplied checkpoint name or file path would leave the job's checkpoint root."""


class CheckpointNotFound(CheckpointError, FileNotFoundError):
    """No (valid) checkpoint exists where one was asked for."""


class StorageUnavailable(CheckpointError):
    """Storage kept failing with transient errors until the retry budget ran out."""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff for transient storage errors: ``attempts`` tries in all."""

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delays(self) -> list[float]:
        return [min(self.max_delay, self.base_delay * 2**i) for i in range(max(0, self.attempts - 1))]


@dataclass(frozen=True)
class CheckpointInfo:
    """One committed checkpoint as its manifest describes it."""

    dirname: str
    seq: int
    uri: str
    created: float
    meta: Mapping[str, Any] = field(default_factory=dict)
    files: tuple[tuple[str, str, int], ...] = ()  # (relative path, sha256, size)


def check_name(name: str) -> str:
    """Validate a job-supplied checkpoint name (one safe path component) and return it."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        raise InvalidCheckpointName(
            f"checkpoint name {name!r} refused: use 1-100 characters of [A-Za-z0-9._-], "
            "starting with a letter or digit, without '..' or '/'"
        )
    return name


def check_relpath(rel: str) -> str:
    """Validate a file path inside a checkpoint: relative, no ``..``, no empty parts."""
    parts = rel.split("/")
    if (
        not rel
        or rel.startswith("/")
        or "\\" in rel
        or any(p in ("", ".", "..") for p in parts)
        or rel == MANIFEST
    ):
        raise InvalidCheckpointName(f"checkpoint file path {rel!r} refused: must stay inside the checkpoint")
    return rel


def _refuse_constant(name: str) -> Any:
    """``json.loads`` hook: NaN and Infinity are not JSON and never valid checkpoint metadata."""
    raise ValueError(f"{name} is not a valid JSON value")


def check_file_list(files: tuple[tuple[str, str, int], ...]) -> None:
    """A manifest's files must be non-empty, with sizes >= 0, and no path may also be a folder of
    another (``params`` and ``params/x`` cannot both be files). Raises ValueError otherwise."""
    if not files:
        raise ValueError("the file list is empty")
    paths = {rel for rel, _, _ in files}
    for rel, _, size in files:
        if size < 0:
            raise ValueError(f"file {rel} has a negative size")
        parts = rel.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in paths:
                raise ValueError(f"{'/'.join(parts[:i])!r} is listed both as a file and as the folder of {rel!r}")


def is_transient(exc: BaseException) -> bool:
    """Connection trouble, timeouts and safe mode are worth retrying; everything else is not."""
    if isinstance(exc, (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
                        NotADirectoryError, CheckpointError)):
        return False
    text = str(exc).lower()
    if "safemode" in text or "safe mode" in text:
        return True
    return isinstance(exc, (OSError, TimeoutError, ConnectionError))


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def open_fs(uri: str, **storage_options: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """fsspec file system and path for ``uri`` (``hdfs://h:p/x``, ``webhdfs://h:p/x``, ``file:///x``, ``/x``)."""
    if uri.startswith(("hdfs://", "viewfs://")):
        storage_options = {**HDFS_NATIVE_OPTIONS, **storage_options}
    fs, path = fsspec.core.url_to_fs(uri, **storage_options)
    return fs, path.rstrip("/") or "/"


class CheckpointStore:
    """Checkpoints of one job under ``root_uri``.

    Args:
        root_uri: the job's checkpoint root, e.g. ``hdfs://127.0.0.1:9000/dl2/checkpoints/job-1``.
        keep: how many committed checkpoints to keep (>= 1).
        retry: backoff for transient errors.
        sleep: injectable for tests.
    """

    def __init__(
        self,
        root_uri: str,
        keep: int = 3,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        **storage_options: Any,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.root_uri = root_uri.rstrip("/")
        self.keep = keep
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self.fs, self.root = open_fs(root_uri, **storage_options)

    # -- helpers -----------------------------------------------------------------------------
    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def _retrying(self, what: str, fn: Callable[[], T]) -> T:
        delays = self.retry.delays()
        for attempt in range(len(delays) + 1):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - classified right below
                if not is_transient(exc):
                    raise
                if attempt >= len(delays):
                    raise StorageUnavailable(
                        f"{what} under {self.root_uri} failed after {attempt + 1} attempts: {exc}"
                    ) from exc
                logger.warning("%s under %s: transient error (%s); retry %d/%d in %.1fs",
                               what, self.root_uri, exc, attempt + 1, len(delays), delays[attempt])
                self._sleep(delays[attempt])
        raise AssertionError("unreachable")

    def _entries(self) -> list[tuple[int, str]]:
        try:
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False)]
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            m = _DIR_RE.fullmatch(n)
            if m:
                out.append((int(m.group(1)), n))
        return sorted(out)

    def _read_manifest(self, dirname: str) -> CheckpointInfo:
        raw = self.fs.cat_file(self._join(dirname, MANIFEST))
        try:
            man = json.loads(raw, parse_constant=_refuse_constant)
            files = tuple(
                (check_relpath(rel), str(v["sha256"]), int(v["size"])) for rel, v in sorted(man["files"].items())
            )
            check_file_list(files)
            created = float(man["created"])
            if not math.isfinite(created):
                raise ValueError(f"created is {created}")
            return CheckpointInfo(
                dirname=dirname,
                seq=int(man["seq"]),
                uri=f"{self.root_uri}/{dirname}",
                created=created,
                meta=dict(man.get("meta", {})),
                files=files,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"manifest of {dirname} is malformed: {exc!r}") from None

    # -- public API --------------------------------------------------------------------------
    def list(self) -> list[CheckpointInfo]:
        """Committed checkpoints, oldest first; ones with a missing or malformed manifest are logged and skipped."""

        def go() -> list[CheckpointInfo]:
            out = []
            for _, d in self._entries():
                try:
                    out.append(self._read_manifest(d))
                except FileNotFoundError:
                    logger.warning("checkpoint %s/%s has no manifest; ignored", self.root_uri, d)
                except CheckpointError as exc:
                    logger.warning("checkpoint %s/%s ignored: %s", self.root_uri, d, exc)
            return out

        return self._retrying("list", go)

    def latest(self) -> CheckpointInfo | None:
        """The newest committed checkpoint (manifest only, not verified), or None."""
        infos = self.list()
        return infos[-1] if infos else None

    def save(self, local_dir: str | os.PathLike[str], name: str = "", meta: Mapping[str, Any] | None = None) -> CheckpointInfo:
        """Upload every file under ``local_dir`` as a new checkpoint, atomically; prune to ``keep``.

        Raises:
            InvalidCheckpointName: ``name`` or a file path would escape the root.
            CheckpointError: ``local_dir`` is missing or holds a symbolic link.
            StorageUnavailable: transient errors outlasted the retry budget.
        """
        if name:
            check_name(name)
        local = Path(local_dir)
        if not local.is_dir():
            raise CheckpointError(f"local checkpoint folder {local} does not exist")
        files: dict[str, dict[str, Any]] = {}
        for p in sorted(local.rglob("*")):
            if p.is_symlink():
                raise CheckpointError(f"{p}: symbolic links are not saved in checkpoints")
            if p.is_file():
                rel = check_relpath(p.relative_to(local).as_posix())
                files[rel] = {"sha256": sha256_file(p), "size": p.stat().st_size}
        meta = dict(meta or {})
        json.dumps(meta, allow_nan=False)  # fail early (TypeError/ValueError) on meta that cannot be stored
        if not files:
            raise CheckpointError(f"local checkpoint folder {local} holds no files")

        def go() -> CheckpointInfo:
            self.fs.makedirs(self.root, exist_ok=True)
            entries = self._entries()
            seq = (entries[-1][0] + 1) if entries else 1
            dirname = f"{seq:06d}-{name}" if name else f"{seq:06d}"
            tmp = self._join(f".tmp-{seq:06d}-{uuid.uuid4().hex[:12]}")
            try:
                self.fs.makedirs(tmp, exist_ok=True)
                for rel in files:
                    if "/" in rel:
                        self.fs.makedirs(f"{tmp}/{rel.rsplit('/', 1)[0]}", exist_ok=True)
                    self.fs.put_file(str(local / rel), f"{tmp}/{rel}")
                manifest = {"seq": seq, "name": name, "created": time.time(), "meta": meta, "files": files}
                self.fs.pipe_file(f"{tmp}/{MANIFEST}", json.dumps(manifest, indent=1, allow_nan=False).encode())
                self.fs.mv(tmp, self._join(dirname))
            except BaseException:
                self._discard(tmp)
                raise
            return CheckpointInfo(dirname, seq, f"{self.root_uri}/{dirname}", manifest["created"], meta,
                                  tuple((r, v["sha256"], v["size"]) for r, v in files.items()))

        info = self._retrying("save", go)
        logger.info("checkpoint %s saved (%d files)", info.uri, len(files))
        self._prune()
        return info

    def _discard(self, path: str) -> None:
        try:
            self.fs.rm(path, recursive=True)
        except Exception as exc:  # noqa: BLE001 - best effort; a leftover .tmp-* is never read
            logger.debug("could not remove %s: %s", path, exc)

    def _prune(self) -> None:
        try:
            entries = self._entries()
        except Exception as exc:  # noqa: BLE001 - pruning is best effort, the save already succeeded
            logger.warning("could not list %s for pruning: %s", self.root_uri, exc)
            return
        for _, d in entries[: max(0, len(entries) - self.keep)]:
            logger.info("pruning old checkpoint %s/%s", self.root_uri, d)
            self._discard(self._join(d))

    def restore(self, local_dir: str | os.PathLike[str], name: str | None = None) -> CheckpointInfo:
        """Download a verified checkpoint into ``local_dir`` (emptied first) and return its info.

        With ``name`` (a directory name such as ``000007-final`` or just the job-supplied part)
        only that checkpoint is tried. Without it the newest valid one is used: a corrupt or
        incomplete one is skipped with its reason logged, and the previous one is tried.

        Raises:
            CheckpointNotFound: there is no checkpoint (or none named so) under the root.
            CheckpointError: checkpoints exist but none of them verifies (reasons included).
        """
        candidates = self.list()
        if name is not None:
            wanted = [c for c in candidates if c.dirname == name or c.dirname.split("-", 1)[-1] == name]
            if not wanted:
                raise CheckpointNotFound(f"no checkpoint named {name!r} under {self.root_uri}")
            candidates = wanted[-1:]
        if not candidates:
            raise CheckpointNotFound(f"no checkpoint under {self.root_uri}")
        reasons = []
        for info in reversed(candidates):
            try:
                self._retrying("restore", lambda info=info: self._download(info, Path(local_dir)))
                if reasons:
                    logger.warning("restored older checkpoint %s because: %s", info.uri, "; ".join(reasons))
                return info
            except CheckpointError as exc:
                if isinstance(exc, StorageUnavailable):
                    raise
                reasons.append(f"{info.dirname}: {exc}")
                logger.warning("checkpoint %s unusable, falling back: %s", info.uri, exc)
        raise CheckpointError(f"no valid checkpoint under {self.root_uri}: {'; '.join(reasons)}")

    def _download(self, info: CheckpointInfo, local: Path) -> None:
        if local.exists():
            shutil.rmtree(local)
        local.mkdir(parents=True)
        for rel, digest, size in info.files:
            dst = local / check_relpath(rel)
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.fs.get_file(self._join(info.dirname, rel), str(dst))
            except FileNotFoundError:
                raise CheckpointError(f"file {rel} is missing") from None
            if dst.stat().st_size != size or sha256_file(dst) != digest:
                raise CheckpointError(f"file {rel} fails its sha256 check")
        write_restore_manifest(local, info)

    def adopt_local(self, info: CheckpointInfo, src_dir: str | os.PathLike[str],
                    local_dir: str | os.PathLike[str]) -> CheckpointInfo:
        """Make ``local_dir`` the restore folder of the committed checkpoint ``info`` from the local
        folder it was uploaded from, instead of downloading it again (the executor that saved a
        final checkpoint restores the next generation's workers from its own copy).

        ``src_dir`` is moved (a rename on one file system). Its files must be exactly the ones the
        manifest lists, with the listed sizes; their sha256 were computed from these very files
        just before the upload, so they are not read again.

        Raises:
            CheckpointError: a file is missing, extra or of another size (``src_dir`` is left alone).
        """
        src, local = Path(src_dir), Path(local_dir)
        listed = {check_relpath(rel): size for rel, _digest, size in info.files}
        present = {p.relative_to(src).as_posix(): p for p in src.rglob("*") if p.is_file() or p.is_symlink()}
        if set(present) != set(listed):
            raise CheckpointError(f"local copy {src} of {info.dirname} holds other files than its manifest")
        for rel, p in present.items():
            if p.is_symlink() or p.stat().st_size != listed[rel]:
                raise CheckpointError(f"local copy of {rel} in {src} differs from {info.dirname}")
        if local.exists():
            shutil.rmtree(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(local))
        write_restore_manifest(local, info)
        return info


def write_restore_manifest(local: Path, info: CheckpointInfo) -> None:
    """The ``MANIFEST.json`` of a restore folder (written last: a reader waiting for the folder
    takes its presence as "complete")."""
    tmp = local / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps({"dirname": info.dirname, "seq": info.seq, "meta": dict(info.meta)}))
    os.replace(tmp, local / MANIFEST)
