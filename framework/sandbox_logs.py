"""Find a job's task sandboxes through Mesos and read their files (what ``dl2 logs`` does).

Only Mesos's own HTTP endpoints are used, so this works against Apache Mesos as well as the local
stand-in: the master's ``/master/state`` names every task (live and completed) with its agent and
executor; the agent's ``/state`` gives that executor's sandbox ``directory`` (the way the Mesos UI
builds its sandbox links); the agent's ``/files/read`` returns the file in pieces
(``{"data", "offset"}``; ``offset=-1`` answers the size).

Task ids of this framework are ``<job id>.<role>.<n>`` and task names ``<job id> <role> <rank>``
(see ``records.JobRecord.new_task_id`` and ``task_info.task_info``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import requests

from dl2_mesos.errors import Dl2Error

TERMINAL_STATES = frozenset(
    {
        "TASK_FINISHED",
        "TASK_FAILED",
        "TASK_KILLED",
        "TASK_LOST",
        "TASK_ERROR",
        "TASK_DROPPED",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
        "TASK_UNKNOWN",
    }
)
READ_CHUNK = 64 * 1024


class LogsError(Dl2Error):
    """The task, its agent or its sandbox could not be found or read."""


@dataclass(frozen=True)
class TaskRef:
    """One task of a job as the Mesos master reports it."""

    task_id: str
    name: str
    state: str
    framework_id: str
    executor_id: str
    agent_id: str

    @property
    def role(self) -> str:
        parts = self.name.split()
        return (
            parts[1]
            if len(parts) >= 3
            else self.task_id.split(".")[-2]
            if self.task_id.count(".") >= 2
            else ""
        )

    @property
    def rank(self) -> int | None:
        parts = self.name.split()
        try:
            return int(parts[2]) if len(parts) >= 3 else None
        except ValueError:
            return None

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL_STATES

    def process_log(self, job_id: str) -> str:
        """The job process's log file below the sandbox (the executor's ``dl2-jobs/<job>/<proc>.log``;
        a PS task's process is ``server-<rank>``)."""
        proc = "server" if self.role == "ps" else self.role
        return f"dl2-jobs/{job_id}/{proc}-{self.rank if self.rank is not None else 0}.log"


@dataclass(frozen=True)
class Sandbox:
    """Where a task's files are: the agent's HTTP base URL and the sandbox directory on it."""

    task: TaskRef
    agent_url: str
    directory: str


def http_url(address: str) -> str:
    """``host:port`` or a URL as an ``http://`` base URL; ``zk://`` is refused (no HTTP there)."""
    address = address.strip().rstrip("/")
    if address.startswith("zk://"):
        raise LogsError("give the Mesos master's HTTP address (host:5050), not a zk:// URL")
    return address if "://" in address else f"http://{address}"


class MesosFiles:
    """The master's and agents' HTTP endpoints that ``dl2 logs`` reads."""

    def __init__(self, master: str, session: requests.Session | None = None, timeout: float = 15.0) -> None:
        self.master = http_url(master)
        self.http = session or requests.Session()
        self.timeout = timeout

    def _get(self, url: str, **params: Any) -> Any:
        try:
            r = self.http.get(url, params=params or None, timeout=self.timeout)
        except requests.RequestException as exc:
            raise LogsError(f"cannot reach {url}: {exc}") from None
        if r.status_code == 404:
            raise LogsError(f"{url}: not found ({r.text.strip()[:200]})")
        if r.status_code >= 400:
            raise LogsError(f"{url}: {r.status_code} {r.text.strip()[:200]}")
        try:
            return r.json()
        except ValueError:
            raise LogsError(f"{url}: answer is not JSON") from None

    # ---- master ---------------------------------------------------------------------------------
    def master_state(self) -> dict[str, Any]:
        return self._get(self.master + "/master/state")

    def job_tasks(
        self, job_id: str, framework_id: str | None = None, state: dict[str, Any] | None = None
    ) -> list[TaskRef]:
        """Every task of ``job_id`` the master knows (live first, then completed; oldest first)."""
        state = state if state is not None else self.master_state()
        out: list[TaskRef] = []
        for fw in list(state.get("frameworks", [])) + list(state.get("completed_frameworks", [])):
            if framework_id and fw.get("id") != framework_id:
                continue
            for t in (
                list(fw.get("tasks", []))
                + list(fw.get("unreachable_tasks", []))
                + list(fw.get("completed_tasks", []))
            ):
                tid = str(t.get("id", ""))
                if tid.startswith(job_id + "."):
                    out.append(
                        TaskRef(
                            tid,
                            str(t.get("name", "")),
                            str(t.get("state", "")),
                            str(t.get("framework_id", fw.get("id", ""))),
                            str(t.get("executor_id") or ""),
                            str(t.get("slave_id") or t.get("agent_id", "")),
                        )
                    )
        seen: set[str] = set()
        unique = []
        for t in out:  # a task can be listed twice while its final update is in flight
            if t.task_id not in seen:
                seen.add(t.task_id)
                unique.append(t)
        return unique

    def agent_url(self, agent_id: str, state: dict[str, Any] | None = None) -> str:
        state = state if state is not None else self.master_state()
        for slave in state.get("slaves", []):
            if slave.get("id") == agent_id:
                pid = str(slave.get("pid", ""))  # slave(1)@host:port
                if "@" in pid:
                    return "http://" + pid.split("@", 1)[1]
                return f"http://{slave['hostname']}:{slave.get('port', 5051)}"
        raise LogsError(
            f"agent {agent_id} is no longer registered with the master; its sandboxes are out of reach"
        )

    # ---- agent ----------------------------------------------------------------------------------
    def sandbox(self, task: TaskRef, state: dict[str, Any] | None = None) -> Sandbox:
        """The sandbox of ``task``'s executor, from its agent's ``/state``."""
        agent = self.agent_url(task.agent_id, state)
        astate = self._get(agent + "/state")
        executor_id = task.executor_id or task.task_id  # a command task runs as its own executor
        fallback = None
        for fw in list(astate.get("frameworks", [])) + list(astate.get("completed_frameworks", [])):
            if fw.get("id") != task.framework_id:
                continue
            for ex in list(fw.get("executors", [])) + list(fw.get("completed_executors", [])):
                if ex.get("id") != executor_id or not ex.get("directory"):
                    continue
                task_ids = {
                    str(t.get("id"))
                    for key in ("tasks", "queued_tasks", "completed_tasks")
                    for t in ex.get(key, []) or []
                }
                if task.task_id in task_ids:
                    return Sandbox(task, agent, ex["directory"])
                fallback = fallback or ex["directory"]
        if fallback is None:
            raise LogsError(
                f"agent {task.agent_id} has no sandbox for executor {executor_id} of task "
                f"{task.task_id} (garbage-collected?)"
            )
        return Sandbox(task, agent, fallback)

    def read(self, sandbox: Sandbox, path: str, offset: int, length: int = READ_CHUNK) -> tuple[bytes, int]:
        """(bytes read, offset they start at); ``offset=-1`` returns (b"", size)."""
        data = self._get(
            sandbox.agent_url + "/files/read",
            path=f"{sandbox.directory}/{path}",
            offset=offset,
            length=length,
        )
        if not isinstance(data, dict) or "offset" not in data:
            raise LogsError(f"{sandbox.agent_url}/files/read: unexpected answer")
        return str(data.get("data", "")).encode("utf-8", "surrogateescape"), int(data["offset"])


def pick_task(tasks: list[TaskRef], wanted: str | None, job_id: str) -> TaskRef:
    """The task ``wanted`` names (its id, the id without ``<job>.``, or ``role-rank`` like
    ``worker-0``); without a name, the live worker of lowest rank, else the last task."""
    if not tasks:
        raise LogsError(f"the Mesos master knows no task of job {job_id}")
    if wanted:
        for t in tasks:
            if wanted in (t.task_id, t.task_id[len(job_id) + 1 :], f"{t.role}-{t.rank}"):
                return t
        names = ", ".join(f"{t.task_id} ({t.role}-{t.rank})" for t in tasks)
        raise LogsError(f"job {job_id} has no task {wanted!r}; its tasks: {names}")
    live = [t for t in tasks if not t.ended]
    workers = sorted((t for t in live if t.role == "worker"), key=lambda t: (t.rank is None, t.rank or 0))
    return workers[0] if workers else (live[0] if live else tasks[-1])


def stream_file(
    files: MesosFiles,
    sandbox: Sandbox,
    path: str,
    *,
    follow: bool = False,
    poll: float = 1.0,
    task_ended: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[bytes]:
    """The file's bytes in pieces from its start; with ``follow``, keep reading as it grows until
    ``task_ended()`` says the task is over and the file is read to its end."""
    offset = 0
    ended = False
    while True:
        data, at = files.read(sandbox, path, offset)
        if data:
            offset = at + len(data)
            yield data
            continue
        if not follow or ended:
            return
        sleep(poll)
        ended = task_ended() if task_ended is not None else False  # one more read after the end


def tail(master: str, framework_id: str | None, job_id: str, task_id: str, path: str,
         limit: int = READ_CHUNK, timeout: float = 5.0) -> tuple[TaskRef, bytes, int]:
    """The last ``limit`` bytes of ``path`` in ``task_id``'s sandbox (what the job page links to):
    (the task, the bytes, the file's size).

    Raises:
        LogsError: the task, its agent or its sandbox cannot be found or read.
    """
    files = MesosFiles(master, timeout=timeout)
    state = files.master_state()
    tasks = [t for t in files.job_tasks(job_id, framework_id, state) if t.task_id == task_id]
    if not tasks:
        raise LogsError(f"the Mesos master knows no task {task_id} of job {job_id}")
    sandbox = files.sandbox(tasks[0], state)
    _, size = files.read(sandbox, path, -1)
    start = max(0, size - limit)
    data, _ = files.read(sandbox, path, start, min(limit, size - start)) if size > start else (b"", start)
    return tasks[0], data, size
