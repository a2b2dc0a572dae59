"""Executors started by a small helper process instead of the cluster's own event loop.

The local cluster runs the master and every agent in one Python process. Starting an executor
(fork/exec plus the subprocess transport) held that process's event loop for milliseconds each
time, and a launch wave of a thousand executors spent about a third of the process's time there
(a sampling profile of ``bench/faults.py --agents 500 --load-jobs 1000``), while status updates and
the master's calls waited. A real Mesos agent runs on its own host; here the starts go to a helper
process (``python -m dl2_mesos.localmesos.spawner``) that forks from a small image, on the other
core, and reports each child's pid and, later, its exit code.

Protocol, one JSON object per line:

* to the helper: ``{"id": n, "argv": [...], "executable": ..., "env": {...}, "cwd": ...,
  "stdout": path, "stderr": path, "uid": int|null, "gid": int|null}``;
* from the helper: ``{"id": n, "pid": pid}`` or ``{"id": n, "errno": e, "error": text}``, and
  ``{"exit": pid, "code": c}`` when a child ends (``c`` as ``Popen.returncode``: negative for a
  signal). An exit can arrive before its start's reply (the child ended at once); the client keeps
  it until the reply comes.

The children run in their own sessions (process groups), so the agent signals them with
``killpg`` as before. If the helper dies, its children can no longer be waited for: they are
killed and reported as killed, and the next start runs a new helper.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

logger = logging.getLogger(__name__)

# Large enough for an environment of a few hundred variables on one line.
_LINE_LIMIT = 8 * 1024 * 1024


@dataclass(frozen=True)
class SpawnRequest:
    """One process to start: its argv, environment, folder and output files, and its ids."""

    argv: tuple[str, ...]
    executable: str
    env: Mapping[str, str]
    cwd: str
    stdout: str
    stderr: str
    uid: int | None = None
    gid: int | None = None

    def to_message(self, request_id: int) -> dict[str, Any]:
        return {"id": request_id, "argv": list(self.argv), "executable": self.executable, "env": dict(self.env),
                "cwd": self.cwd, "stdout": self.stdout, "stderr": self.stderr, "uid": self.uid, "gid": self.gid}


class SpawnedChild:
    """A child the helper started: its pid and a future for its exit code (``Popen.returncode``)."""

    def __init__(self, pid: int, exited: asyncio.Future[int]) -> None:
        self.pid = pid
        self.exited = exited

    @property
    def returncode(self) -> int | None:
        return self.exited.result() if self.exited.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self.exited)


class ExecutorSpawner:
    """The cluster side: starts the helper on first use and matches its replies to requests.

    Use from one event loop; :meth:`close` ends the helper (the children keep running, as
    executors outlive an agent process that exits)."""

    def __init__(self, helper_argv: Sequence[str] = (sys.executable, "-m", __name__)) -> None:
        self.helper_argv = tuple(helper_argv)  # the helper's command (tests give a broken one)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[int]] = {}
        self._children: dict[int, asyncio.Future[int]] = {}
        self._early_exits: dict[int, int] = {}

    async def spawn(self, request: SpawnRequest) -> SpawnedChild:
        """Start ``request``; raises ``OSError`` (with the child's errno) when it cannot start."""
        proc = await self._helper()
        loop = asyncio.get_running_loop()
        self._next_id += 1
        request_id = self._next_id
        started: asyncio.Future[int] = loop.create_future()
        self._pending[request_id] = started
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(request.to_message(request_id)).encode() + b"\n")
        try:
            await proc.stdin.drain()
        except (ConnectionError, BrokenPipeError) as exc:
            self._pending.pop(request_id, None)
            raise OSError(f"executor spawner is gone: {exc}") from exc
        pid = await started
        exited: asyncio.Future[int] = loop.create_future()
        if pid in self._early_exits:
            exited.set_result(self._early_exits.pop(pid))
        else:
            self._children[pid] = exited
        return SpawnedChild(pid, exited)

    async def _helper(self) -> asyncio.subprocess.Process:
        if self._proc is not None and self._proc.returncode is None and self._reader is not None \
                and not self._reader.done():
            return self._proc
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._proc is None or self._proc.returncode is not None or self._reader is None \
                    or self._reader.done():
                self._proc = await asyncio.create_subprocess_exec(
                    *self.helper_argv, stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, limit=_LINE_LIMIT,
                )
                self._reader = asyncio.create_task(self._read(self._proc))
                logger.info("executor spawner started (pid %d)", self._proc.pid)
        return self._proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while True:
                line = await proc.stdout.readline()
                if not line:
                    break
                self._dispatch(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:  # a broken helper: end it, treat it as gone
            logger.error("executor spawner sent an unreadable line: %s", exc)
            if proc.returncode is None:
                proc.kill()
        finally:
            self._helper_gone(proc)

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "exit" in message:
            pid, code = int(message["exit"]), int(message["code"])
            exited = self._children.pop(pid, None)
            if exited is None:
                self._early_exits[pid] = code
            elif not exited.done():
                exited.set_result(code)
            return
        started = self._pending.pop(int(message["id"]), None)
        if started is None or started.done():
            return
        if "pid" in message:
            started.set_result(int(message["pid"]))
        else:
            started.set_exception(OSError(int(message.get("errno") or 0), str(message.get("error"))))

    def _helper_gone(self, proc: asyncio.subprocess.Process) -> None:
        if proc is not self._proc:
            return
        if self._pending or self._children:
            logger.error("executor spawner (pid %d) ended with %d starts pending and %d children running: "
                         "killing those children", proc.pid, len(self._pending), len(self._children))
        for started in self._pending.values():
            if not started.done():
                started.set_exception(OSError("executor spawner ended before starting the process"))
        self._pending.clear()
        for pid, exited in self._children.items():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if not exited.done():
                exited.set_result(-signal.SIGKILL)
        self._children.clear()
        self._early_exits.clear()

    async def close(self) -> None:
        """End the helper; children still running are reported as killed (and killed)."""
        proc, reader = self._proc, self._reader
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        if reader is not None:
            await reader
        self._proc = None


# ---- the helper process -----------------------------------------------------------------------

def _start_child(message: Mapping[str, Any]) -> subprocess.Popen[bytes]:
    ids: dict[str, Any] = {}
    if message.get("uid") is not None:
        ids = {"user": int(message["uid"]), "group": int(message["gid"]), "extra_groups": []}
    with open(message["stdout"], "ab") as out, open(message["stderr"], "ab") as err:
        return subprocess.Popen(  # noqa: S603 - the agent's executor command, as a Mesos agent runs it
            list(message["argv"]), executable=message["executable"], env=dict(message["env"]),
            cwd=message["cwd"], stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True, **ids,
        )


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """The helper's loop: start what is asked, report pids and, from a reaper thread, exit codes."""
    write_lock = threading.Lock()
    lock = threading.Condition()
    popens: dict[int, subprocess.Popen[bytes]] = {}
    starts = [0]  # starts so far: the reaper waits for a new one when it has no child to wait for

    def send(message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\n"
        with write_lock:
            replies.write(data)
            replies.flush()

    def reap() -> None:
        while True:
            with lock:
                seen = starts[0]
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                with lock:
                    while starts[0] == seen:
                        lock.wait()
                continue
            with lock:  # a started child's Popen is stored before this lock is let go
                popen = popens.pop(pid, None)
            if popen is None:
                continue  # a child whose exec failed: its start already answered with the error
            code = os.waitstatus_to_exitcode(status)
            popen.returncode = code  # reaped here: Popen must not wait for it again
            send({"exit": pid, "code": code})

    threading.Thread(target=reap, name="reaper", daemon=True).start()
    for line in requests:
        message = json.loads(line)
        try:
            with lock:
                popen = _start_child(message)
                popens[popen.pid] = popen
                starts[0] += 1
                lock.notify()
        except OSError as exc:
            send({"id": message["id"], "errno": exc.errno or 0, "error": str(exc)})
            continue
        send({"id": message["id"], "pid": popen.pid})


def main() -> None:
    # The cluster closing its end is the signal to stop; SIGINT (Ctrl-C to the group) is its to handle.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
