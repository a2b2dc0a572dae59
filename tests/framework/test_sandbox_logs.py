"""Unit tests of ``dl2 logs``'s task choice and follow loop (the end-to-end test is test_logs_e2e)."""

from __future__ import annotations

import pytest

from dl2_mesos.framework.sandbox_logs import LogsError, Sandbox, TaskRef, http_url, pick_task, stream_file


def _task(tid: str, role: str, rank: int, state: str = "TASK_RUNNING") -> TaskRef:
    return TaskRef(f"j1.{tid}", f"j1 {role} {rank}", state, "fw", "ex", "a1")


TASKS = [
    _task("ps.1", "ps", 0),
    _task("worker.2", "worker", 1),
    _task("worker.3", "worker", 0),
    _task("worker.4", "worker", 2, "TASK_FINISHED"),
]


def test_pick_task_by_id_short_id_and_role_rank():
    assert pick_task(TASKS, "j1.worker.2", "j1").task_id == "j1.worker.2"
    assert pick_task(TASKS, "worker.2", "j1").task_id == "j1.worker.2"
    assert pick_task(TASKS, "ps-0", "j1").task_id == "j1.ps.1"
    assert pick_task(TASKS, None, "j1").task_id == "j1.worker.3"  # live worker of lowest rank
    assert pick_task([TASKS[3]], None, "j1").task_id == "j1.worker.4"
    with pytest.raises(LogsError, match="no task 'worker-7'.*worker-1"):
        pick_task(TASKS, "worker-7", "j1")
    with pytest.raises(LogsError, match="knows no task"):
        pick_task([], None, "j1")


def test_process_log_names_the_executors_process_file():
    assert TASKS[0].process_log("j1") == "dl2-jobs/j1/server-0.log"
    assert TASKS[1].process_log("j1") == "dl2-jobs/j1/worker-1.log"


def test_http_url():
    assert http_url("10.0.0.1:5050") == "http://10.0.0.1:5050"
    assert http_url("https://m:5050/") == "https://m:5050"
    with pytest.raises(LogsError):
        http_url("zk://h:2181/mesos")


class GrowingFile:
    """A fake agent whose file grows on every poll until the task ends."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.content = b""
        self.pieces = list(pieces)
        self.reads: list[int] = []

    def read(self, sandbox, path, offset, length=65536):
        self.reads.append(offset)
        return self.content[offset : offset + 4], offset  # small pages: several reads per piece

    def poll(self, seconds: float) -> None:
        if self.pieces:
            self.content += self.pieces.pop(0)


def test_follow_reads_appended_data_until_the_task_ended_and_the_file_is_drained():
    f = GrowingFile([b"abcdef", b"ghi", b""])
    f.content = b"0123"
    sb = Sandbox(TASKS[0], "http://a", "/s")
    got = b"".join(stream_file(f, sb, "stdout", follow=True, task_ended=lambda: not f.pieces, sleep=f.poll))
    assert got == b"0123abcdefghi"
    no_follow = GrowingFile([b"later"])
    no_follow.content = b"now"
    assert b"".join(stream_file(no_follow, sb, "stdout", sleep=no_follow.poll)) == b"now"
