"""The executor spawner: a helper process starts executors off the cluster's event loop and
reports their pids and exit codes (real processes throughout)."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
from pathlib import Path

import psutil
import pytest

from dl2_mesos.localmesos.executor_process import ExecutorProcess
from dl2_mesos.localmesos.spawner import ExecutorSpawner, SpawnRequest


def _request(tmp_path: Path, script: str, env: dict[str, str] | None = None) -> SpawnRequest:
    return SpawnRequest(argv=("sh", "-c", script), executable="/bin/sh", env=env or {"PATH": os.environ["PATH"]},
                        cwd=str(tmp_path), stdout=str(tmp_path / "stdout"), stderr=str(tmp_path / "stderr"))


def test_children_start_in_their_folder_with_their_env_and_exit_codes_come_back(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        spawner = ExecutorSpawner()
        try:
            children = [await spawner.spawn(_request(tmp_path, f'echo "$GREETING $(pwd)"; exit {code}',
                                                     {"GREETING": f"hello{code}", "PATH": os.environ["PATH"]}))
                        for code in (0, 3, 7)]
            codes = [await asyncio.wait_for(c.wait(), 10) for c in children]
            return [c.pid for c in children], codes
        finally:
            await spawner.close()

    pids, codes = asyncio.run(scenario())
    assert codes == [0, 3, 7]
    assert len(set(pids)) == 3
    # The three children run at once and append to one file, so their lines come in any order.
    out = (tmp_path / "stdout").read_text().splitlines()
    assert sorted(out) == sorted(f"hello{code} {tmp_path}" for code in (0, 3, 7))


def test_a_child_that_ends_at_once_is_reported_even_before_its_start_reply(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        spawner = ExecutorSpawner()
        try:
            children = [await spawner.spawn(_request(tmp_path, "exit 5")) for _ in range(30)]
            return [await asyncio.wait_for(c.wait(), 10) for c in children]
        finally:
            await spawner.close()

    assert asyncio.run(scenario()) == [5] * 30


def test_a_signalled_child_reports_the_signal_and_runs_in_its_own_process_group(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, int, int]:
        spawner = ExecutorSpawner()
        try:
            child = await spawner.spawn(_request(tmp_path, "sleep 30"))
            group = os.getpgid(child.pid)
            os.killpg(child.pid, signal.SIGTERM)
            return child.pid, group, await asyncio.wait_for(child.wait(), 10)
        finally:
            await spawner.close()

    pid, group, code = asyncio.run(scenario())
    assert group == pid  # a session of its own: the agent can signal the whole group
    assert code == -signal.SIGTERM


def test_a_command_that_cannot_start_raises_oserror_with_its_errno(tmp_path: Path) -> None:
    async def scenario() -> OSError:
        spawner = ExecutorSpawner()
        try:
            bad = SpawnRequest(argv=("nope",), executable=str(tmp_path / "no-such-program"), env={},
                               cwd=str(tmp_path), stdout=str(tmp_path / "stdout"), stderr=str(tmp_path / "stderr"))
            with pytest.raises(OSError) as info:
                await spawner.spawn(bad)
            # the helper goes on serving after a failed start
            good = await spawner.spawn(_request(tmp_path, "exit 0"))
            assert await asyncio.wait_for(good.wait(), 10) == 0
            return info.value
        finally:
            await spawner.close()

    exc = asyncio.run(scenario())
    assert exc.errno == errno.ENOENT
    assert "no-such-program" in str(exc)


def test_if_the_helper_dies_its_children_are_killed_and_reported_and_the_next_start_works(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, int, int]:
        spawner = ExecutorSpawner()
        try:
            child = await spawner.spawn(_request(tmp_path, "sleep 60"))
            helper = psutil.Process(child.pid).ppid()
            os.kill(helper, signal.SIGKILL)
            code = await asyncio.wait_for(child.wait(), 10)
            again = await spawner.spawn(_request(tmp_path, "exit 4"))
            return child.pid, code, await asyncio.wait_for(again.wait(), 10)
        finally:
            await spawner.close()

    pid, code, next_code = asyncio.run(scenario())
    assert code == -signal.SIGKILL
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert next_code == 4


def test_an_executor_process_through_the_helper_runs_waits_and_is_signalled_as_a_group(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, bool, bool]:
        spawner = ExecutorSpawner()
        try:
            # the executor starts a grandchild in its group: a group SIGKILL ends both
            command = {"shell": True, "value": "sleep 60 & echo $! > grandchild; wait"}
            process = await ExecutorProcess.spawn(command, {"PATH": os.environ["PATH"]}, tmp_path / "a", spawner)
            assert process.running
            while not (tmp_path / "a" / "grandchild").exists() or not (tmp_path / "a" / "grandchild").read_text():
                await asyncio.sleep(0.02)
            grandchild = int((tmp_path / "a" / "grandchild").read_text())
            process.signal_group(signal.SIGKILL)
            status = await asyncio.wait_for(process.wait(), 10)
            for _ in range(100):
                if not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE:
                    break
                await asyncio.sleep(0.05)
            gone = not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
            return status, process.running, gone
        finally:
            await spawner.close()

    status, running, grandchild_gone = asyncio.run(scenario())
    assert status == signal.SIGKILL  # waitpid-style: the signal number
    assert not running
    assert grandchild_gone
    assert (tmp_path / "a" / "stdout").exists() and (tmp_path / "a" / "stderr").exists()


def test_a_helper_that_answers_garbage_is_ended_and_the_start_fails_with_oserror(tmp_path: Path) -> None:
    async def scenario() -> tuple[OSError, int | None]:
        spawner = ExecutorSpawner(helper_argv=("sh", "-c", "read request; echo 'not json'; exec sleep 60"))
        with pytest.raises(OSError) as info:
            await asyncio.wait_for(spawner.spawn(_request(tmp_path, "exit 0")), 10)
        helper = spawner._proc  # noqa: SLF001 - the broken helper must not be left running
        assert helper is not None
        code = await asyncio.wait_for(helper.wait(), 10)
        await spawner.close()
        return info.value, code

    exc, code = asyncio.run(scenario())
    assert "spawner ended" in str(exc)
    assert code == -signal.SIGKILL
