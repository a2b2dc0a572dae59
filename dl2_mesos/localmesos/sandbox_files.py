"""An agent's ``/files/*`` endpoints: sandbox files served as a Mesos agent serves them.

Mesos's files API (``/files/browse``, ``/files/read``, ``/files/download``) takes the sandbox
directory as the master or agent state reports it (an executor's ``directory``) plus a file below
it. ``read`` answers ``{"data": ..., "offset": ...}``; ``offset=-1`` asks for the file's size
(``data`` empty, ``offset`` the size), which is how the Mesos UI and ``mesos tail`` start tailing.

Every path is resolved (symlinks included) and must lie inside this agent's own sandbox root
``<work_dir>/slaves/<agent_id>``: ``..`` segments, symlinks out of a sandbox, and other agents'
folders answer 404 like a missing file, so nothing outside the sandboxes can be read.

Bytes that are not UTF-8 travel as lone surrogates (Python's ``surrogateescape``) in a JSON
string escaped to ASCII, so ``len(data.encode('utf-8', 'surrogateescape'))`` is the number of
bytes read and a client's next ``offset`` is exact.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response

# Mesos caps one read at 16 pages.
MAX_READ_BYTES = 16 * 4096


class FileRequestError(Exception):
    """A files-API request that Mesos would refuse: ``status`` and the text/plain reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def confined_path(root: Path, raw: str | None) -> Path:
    """The real path named by the ``path`` query parameter, if it lies inside ``root``."""
    if raw is None or raw == "":
        raise FileRequestError(400, "Expecting 'path=value' in query.")
    if "\x00" in raw:
        raise FileRequestError(400, "Path contains a NUL byte")
    candidate = Path(raw)
    if not candidate.is_absolute():
        raise FileRequestError(404, f"Path '{raw}' is not an absolute sandbox path")
    real_root = root.resolve()
    try:
        real = candidate.resolve(strict=True)
    except (OSError, RuntimeError):
        raise FileRequestError(404, f"No such file or directory: {raw}") from None
    if real != real_root and not real.is_relative_to(real_root):
        # Answer like a missing file: do not tell what exists outside the sandboxes.
        raise FileRequestError(404, f"No such file or directory: {raw}")
    return real


def _mode_string(mode: int) -> str:
    return stat.filemode(mode)


def browse_entries(directory: Path, shown_as: str) -> list[dict[str, Any]]:
    """Mesos's ``/files/browse`` entries of one directory (``path`` as the client named it)."""
    if not directory.is_dir():
        raise FileRequestError(400, f"Cannot browse a file: {shown_as}")
    out = []
    for entry in sorted(directory.iterdir()):
        try:
            st = entry.lstat()
        except OSError:
            continue
        out.append(
            {
                "path": f"{shown_as.rstrip('/')}/{entry.name}",
                "nlink": st.st_nlink,
                "size": st.st_size,
                "mtime": int(st.st_mtime),
                "mode": _mode_string(st.st_mode),
                "uid": str(st.st_uid),
                "gid": str(st.st_gid),
            }
        )
    return out


def _int_param(request: Request, name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise FileRequestError(400, f"Failed to parse {name}: '{raw}' is not a number") from None


def read_chunk(path: Path, offset: int, length: int | None) -> dict[str, Any]:
    """``{"data", "offset"}`` of ``path`` from ``offset`` (``-1``: the size, no data)."""
    if path.is_dir():
        raise FileRequestError(400, "Cannot read a directory")
    size = path.stat().st_size
    if offset == -1:
        return {"data": "", "offset": size}
    if offset < -1:
        raise FileRequestError(400, "Negative offset provided")
    if length is not None and length < 0:
        raise FileRequestError(400, "Negative length provided")
    want = MAX_READ_BYTES if length is None else min(length, MAX_READ_BYTES)
    if offset >= size or want == 0:
        return {"data": "", "offset": min(offset, size)}
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read(want)
    data = _whole_utf8(data)
    return {"data": data.decode("utf-8", "surrogateescape"), "offset": offset}


def _whole_utf8(data: bytes) -> bytes:
    """``data`` without a UTF-8 character cut at its end (the next read starts with it)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back for the lead byte
            continue
        need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
        if need > back and len(data) > back:  # cut; keep it when nothing else would be returned
            return data[: len(data) - back]
        return data
    return data


def _json(payload: Any) -> Response:
    # ensure_ascii: lone surrogates (undecodable bytes) must be \\u-escaped to be valid JSON text.
    return Response(json.dumps(payload, ensure_ascii=True), media_type="application/json")


def make_files_endpoints(sandbox_root: Any) -> dict[str, Any]:
    """The three handlers, for ``sandbox_root()`` (a callable: the agent id is known only after
    registration) as the confinement root."""

    def root() -> Path:
        return Path(sandbox_root())

    async def browse(request: Request) -> Response:
        raw = request.query_params.get("path")
        try:
            return _json(browse_entries(confined_path(root(), raw), raw or ""))
        except FileRequestError as exc:
            return PlainTextResponse(exc.reason, status_code=exc.status)

    async def read(request: Request) -> Response:
        try:
            path = confined_path(root(), request.query_params.get("path"))
            offset = _int_param(request, "offset", 0)
            length = _int_param(request, "length", None)
            return _json(read_chunk(path, offset if offset is not None else 0, length))
        except FileRequestError as exc:
            return PlainTextResponse(exc.reason, status_code=exc.status)

    async def download(request: Request) -> Response:
        try:
            path = confined_path(root(), request.query_params.get("path"))
        except FileRequestError as exc:
            return PlainTextResponse(exc.reason, status_code=exc.status)
        if path.is_dir():
            return PlainTextResponse("Cannot download a directory", status_code=400)
        return FileResponse(path, filename=path.name, media_type="application/octet-stream")

    return {"/files/browse": browse, "/files/read": read, "/files/download": download}
