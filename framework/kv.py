"""Versioned key-value stores underneath the framework state: memory, file and ZooKeeper.

Keys are ``/``-separated paths relative to the store's root. Every write is a
compare-and-set against the version the writer last saw (``expected=-1`` creates a new key,
``None`` writes unconditionally); a mismatch raises :class:`StaleVersion`, which the framework
takes as "another leader wrote here: stop".
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from dl2_mesos.errors import Dl2Error

logger = logging.getLogger(__name__)

WRITER_THREADS = 8  # FileKV.put_many: files written and fsynced at once


class StaleVersion(Dl2Error):
    """A compare-and-set write found a different version than expected."""


class StoreUnavailable(Dl2Error):
    """The state store cannot be reached."""


class CorruptValue(Dl2Error):
    """A stored value cannot be read (a truncated or overwritten file); ``version`` when known."""

    def __init__(self, key: str, reason: str, version: int | None = None, raw: bytes = b"") -> None:
        self.key = key
        self.version = version
        self.raw = raw
        super().__init__(f"{key}: unreadable ({reason})")


class KVStore(Protocol):
    """What :class:`~dl2_mesos.framework.state_store.StateStore` needs from a backend."""

    def get(self, key: str) -> tuple[bytes, int] | None:
        """(data, version) or None when absent."""
        ...

    def put(self, key: str, data: bytes, expected: int | None, guard: tuple[str, int] | None = None) -> int:
        """Write; ``expected`` -1 = must not exist, an int = CAS, None = unconditional. Returns the new version.

        ``guard`` = (other key, version): the write happens only if that key still has that
        version, atomically (the leader-term fence).
        """
        ...

    def delete(self, key: str, expected: int | None = None, guard: tuple[str, int] | None = None) -> None:
        """Remove ``key`` and everything under it (absent is fine); ``guard`` as for :meth:`put`."""
        ...

    def children(self, key: str) -> list[str]:
        """Names directly under ``key`` (sorted; [] when absent)."""
        ...


class MemoryKV:
    """In-process store for tests."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[bytes, int]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[bytes, int] | None:
        with self._lock:
            return self._data.get(key.strip("/"))

    def put(self, key: str, data: bytes, expected: int | None, guard: tuple[str, int] | None = None) -> int:
        key = key.strip("/")
        with self._lock:
            if guard is not None:
                g = self._data.get(guard[0].strip("/"))
                _check(guard[0], g[1] if g else None, guard[1])
            cur = self._data.get(key)
            _check(key, cur[1] if cur else None, expected)
            version = cur[1] + 1 if cur else 0
            self._data[key] = (bytes(data), version)
            return version

    def delete(self, key: str, expected: int | None = None, guard: tuple[str, int] | None = None) -> None:
        key = key.strip("/")
        with self._lock:
            if guard is not None:
                g = self._data.get(guard[0].strip("/"))
                _check(guard[0], g[1] if g else None, guard[1])
            for k in [k for k in self._data if k == key or k.startswith(key + "/")]:
                del self._data[k]

    def children(self, key: str) -> list[str]:
        key = key.strip("/")
        prefix = key + "/" if key else ""
        with self._lock:
            names = {k[len(prefix):].split("/", 1)[0] for k in self._data if k.startswith(prefix)}
        return sorted(n for n in names if n)


def _check(key: str, current: int | None, expected: int | None) -> None:
    if expected is None:
        return
    if expected == -1 and current is not None:
        raise StaleVersion(f"{key}: exists already (version {current})")
    if expected >= 0 and current != expected:
        raise StaleVersion(f"{key}: version {current}, expected {expected}")


class FileKV:
    """One JSON-wrapped file per key under a folder (the single-machine store, no ZooKeeper).

    Writes go to a temporary file that is fsynced and renamed into place, then the folder is
    fsynced, so neither a crash nor a power cut leaves a torn or lost value. Versions live inside
    the file. A file that cannot be read anyway (damaged outside the framework) raises
    :class:`CorruptValue`. Only one process may use a folder at a time.
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # put_many's concurrent writes (made on first use)
        # replaced values wait here until a thread of their own deletes them (see _replace); no
        # StateStore key starts with a dot
        self._trash = self.root / ".trash"
        self._trash_seq = itertools.count()
        self._trash_pool: ThreadPoolExecutor | None = None
        self._trash_pending = threading.Event()

    def _path(self, key: str) -> Path:
        parts = [p for p in key.strip("/").split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise ValueError(f"bad key {key!r}")
        return self.root.joinpath(*parts, "_value.json") if parts else self.root / "_value.json"

    def get(self, key: str) -> tuple[bytes, int] | None:
        p = self._path(key)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            return None
        try:
            env = json.loads(raw.decode("utf-8"))
            return env["data"].encode("latin-1"), int(env["version"])
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeError) as exc:
            raise CorruptValue(key, f"{p}: {type(exc).__name__}", raw=raw) from None

    def _version(self, key: str) -> int | None:
        """The version of ``key``; a corrupt file counts as version -2 (only an unconditional
        write or a delete replaces it)."""
        try:
            got = self.get(key)
        except CorruptValue:
            return -2
        return got[1] if got else None

    def put(self, key: str, data: bytes, expected: int | None, guard: tuple[str, int] | None = None) -> int:
        p = self._path(key)
        with self._lock:
            if guard is not None:
                _check(guard[0], self._version(guard[0]), guard[1])
            cur = self._version(key)
            _check(key, cur, expected)
            version = cur + 1 if cur is not None and cur >= 0 else 0
            _write_synced(p, version, data)  # the data is on disk before the rename makes it the value
            self._replace(p)
            _fsync_dir(p.parent)  # and the rename itself survives a power cut
            self._empty_trash_later()
            return version

    def put_many(self, items: list[tuple[str, bytes, int | None]],
                 guard: tuple[str, int] | None = None) -> list[int]:
        """Several :meth:`put` calls (``(key, data, expected)`` each, distinct keys) as one group
        commit: every version is checked before anything is written (a mismatch raises
        :class:`StaleVersion` and writes nothing), then the files are written and fsynced
        concurrently (the file system commits its journal once for many of them; one by one, each
        fsync was one commit, ~14 ms here), renamed into place and their folders fsynced. Each key
        ends with its new value or its old one, as with :meth:`put`. Returns the new versions."""
        if len({k for k, _, _ in items}) != len(items):
            raise ValueError("put_many: a key appears twice")
        with self._lock:
            if guard is not None:
                _check(guard[0], self._version(guard[0]), guard[1])
            plans = []
            for key, data, expected in items:
                p = self._path(key)
                cur = self._version(key)
                _check(key, cur, expected)
                plans.append((p, cur + 1 if cur is not None and cur >= 0 else 0, data))
            pool = self._writers()
            list(pool.map(lambda plan: _write_synced(*plan), plans))
            for p, _, _ in plans:
                self._replace(p)
            list(pool.map(_fsync_dir, {p.parent for p, _, _ in plans}))
            self._empty_trash_later()
            return [version for _, version, _ in plans]

    def _replace(self, p: Path) -> None:
        """Rename ``p``'s ``.tmp`` over it. The old value's file is first linked into the trash
        folder: the rename then does not free its blocks, which on a file system mounted with
        ``discard`` waits for the disk to trim them (tens of ms a file here); the trash is emptied
        on a thread of its own."""
        with contextlib.suppress(FileNotFoundError):
            self._trash.mkdir(exist_ok=True)
            os.link(p, self._trash / f"{os.getpid()}-{next(self._trash_seq)}")
        os.replace(p.with_suffix(".tmp"), p)

    def _empty_trash_later(self) -> None:
        if self._trash_pool is None:
            self._trash_pool = ThreadPoolExecutor(1, thread_name_prefix="dl2-filekv-trash")
        if not self._trash_pending.is_set():
            self._trash_pending.set()
            self._trash_pool.submit(self._empty_trash)

    def _empty_trash(self) -> None:
        self._trash_pending.clear()
        try:
            names = os.listdir(self._trash)
        except FileNotFoundError:
            return
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._trash / name)

    def _writers(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="dl2-filekv")
        return self._pool

    def delete(self, key: str, expected: int | None = None, guard: tuple[str, int] | None = None) -> None:
        import shutil

        p = self._path(key).parent
        with self._lock:
            if guard is not None:
                _check(guard[0], self._version(guard[0]), guard[1])
            if p == self.root:
                return
            shutil.rmtree(p, ignore_errors=True)

    def children(self, key: str) -> list[str]:
        d = self._path(key).parent
        if not d.is_dir():
            return []
        return sorted(c.name for c in d.iterdir() if c.is_dir() and c != self._trash)


def _write_synced(path: Path, version: int, data: bytes) -> None:
    """Write ``path``'s next value to its ``.tmp`` sibling and fsync it (the caller renames it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"version": version, "data": bytes(data).decode("latin-1")}))
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _zk_errors(fn):  # noqa: ANN001, ANN202
    """Turn kazoo connection failures into :class:`StoreUnavailable` (CAS errors pass through)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
        from kazoo.handlers.threading import KazooTimeoutError

        try:
            return fn(*args, **kwargs)
        except (ConnectionLoss, SessionExpiredError, ConnectionClosedError, KazooTimeoutError) as exc:
            raise StoreUnavailable(f"ZooKeeper: {type(exc).__name__}") from exc

    return wrapper


class ZooKeeperKV:
    """Keys as znodes under ``root`` on a connected :class:`kazoo.client.KazooClient`.

    Args:
        client: a started KazooClient (its connection is the caller's business).
        root: absolute znode path, e.g. ``/dl2/state``.
        acl: ACL list applied to every node created (digest ACLs), or None for the default.
    """

    def __init__(self, client, root: str, acl: list | None = None) -> None:  # noqa: ANN001 - kazoo
        self.client = client
        self.root = "/" + root.strip("/")
        self.acl = acl
        client.ensure_path(self.root, acl=acl)

    def _p(self, key: str) -> str:
        key = key.strip("/")
        return f"{self.root}/{key}" if key else self.root

    @_zk_errors
    def get(self, key: str) -> tuple[bytes, int] | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self.client.get(self._p(key))
        except NoNodeError:
            return None
        return data or b"", stat.version

    @_zk_errors
    def put(self, key: str, data: bytes, expected: int | None, guard: tuple[str, int] | None = None) -> int:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = self._p(key)
        if guard is not None:
            return self._guarded_put(path, data, expected, guard)
        try:
            if expected == -1:
                self.client.create(path, data, acl=self.acl, makepath=True)
                return 0
            if expected is None:
                try:
                    return self.client.set(path, data).version
                except NoNodeError:
                    self.client.create(path, data, acl=self.acl, makepath=True)
                    return 0
            return self.client.set(path, data, version=expected).version
        except BadVersionError:
            raise StaleVersion(f"{path}: version changed (expected {expected})") from None
        except NodeExistsError:
            raise StaleVersion(f"{path}: exists already") from None
        except NoNodeError:
            raise StaleVersion(f"{path}: deleted by someone else (expected version {expected})") from None

    @_zk_errors
    def _guarded_put(self, path: str, data: bytes, expected: int | None, guard: tuple[str, int]) -> int:
        """check(guard) + create/set in one ZooKeeper transaction."""
        if expected is None:
            got = self.client.exists(path)
            expected = -1 if got is None else got.version
        missing = []  # parents are created inside the transaction: a fenced writer creates nothing
        parent = path.rsplit("/", 1)[0]
        while parent.startswith(self.root + "/") and self.client.exists(parent) is None:
            missing.append(parent)
            parent = parent.rsplit("/", 1)[0]
        t = self.client.transaction()
        t.check(self._p(guard[0]), guard[1])
        for node in reversed(missing):
            t.create(node, b"", acl=self.acl)
        if expected == -1:
            t.create(path, data, acl=self.acl)
        else:
            t.set_data(path, data, version=expected)
        results = t.commit()
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            raise StaleVersion(f"{path}: fenced or changed ({', '.join(type(e).__name__ for e in errors)})")
        return 0 if expected == -1 else results[-1].version

    @_zk_errors
    def delete(self, key: str, expected: int | None = None, guard: tuple[str, int] | None = None) -> None:
        from kazoo.exceptions import NoNodeError

        if guard is not None:
            self._guarded_delete(self._p(key), guard)
            return
        try:
            self.client.delete(self._p(key), recursive=True)
        except NoNodeError:
            pass

    def _guarded_delete(self, path: str, guard: tuple[str, int]) -> None:
        """check(guard) + delete of ``path`` and its descendants (deepest first) in one transaction."""
        from kazoo.exceptions import NoNodeError

        order: list[str] = []
        todo = [path]
        while todo:
            node = todo.pop()
            try:
                kids = self.client.get_children(node)
            except NoNodeError:
                continue
            order.append(node)
            todo.extend(f"{node}/{k}" for k in kids)
        if not order:
            return
        t = self.client.transaction()
        t.check(self._p(guard[0]), guard[1])
        for node in reversed(order):  # children before their parents
            t.delete(node)
        errors = [r for r in t.commit() if isinstance(r, Exception)]
        if errors:
            raise StaleVersion(f"{path}: not deleted, fenced or changed ({', '.join(type(e).__name__ for e in errors)})")

    @_zk_errors
    def children(self, key: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return sorted(self.client.get_children(self._p(key)))
        except NoNodeError:
            return []
