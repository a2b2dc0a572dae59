"""Executors are started off the agent's event loop, their exit is awaited on it, and a start
cancelled half-way leaves no process behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid

import pytest

from dl2_mesos.localmesos import executor_process
from dl2_mesos.localmesos.executor_process import ExecutorProcess


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_slow_start_does_not_stall_the_loop(monkeypatch, tmp_path):
    real_popen = subprocess.Popen

    def slow_popen(*args, **kwargs):  # a fork + exec that takes 0.5 s (a busy machine)
        time.sleep(0.5)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(executor_process.subprocess, "Popen", slow_popen)

    async def run() -> tuple[int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.ensure_future(ticker())
        proc = await ExecutorProcess.spawn({"shell": True, "value": "exit 3"}, dict(os.environ), tmp_path / "sb")
        status = await proc.wait()
        t.cancel()
        return ticks, status

    ticks, status = asyncio.run(run())
    assert ticks >= 20, ticks  # the loop ran on while the start took 0.5 s
    assert status == 3 << 8
    assert (tmp_path / "sb" / "stdout").exists()


def test_exit_by_signal_and_the_process_group_is_cleaned_up(tmp_path):
    async def run() -> tuple[int, ExecutorProcess]:
        proc = await ExecutorProcess.spawn({"shell": True, "value": "sleep 30 & sleep 30"}, dict(os.environ), tmp_path)
        assert proc.running
        await asyncio.sleep(0.2)
        os.kill(proc.pid, signal.SIGTERM)
        status = await asyncio.wait_for(proc.wait(), 10)
        return status, proc

    status, proc = asyncio.run(run())
    assert status == signal.SIGTERM and not proc.running
    with pytest.raises(ProcessLookupError):  # the background sleep went with its group
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            os.killpg(proc.pid, 0)
            time.sleep(0.05)


def test_a_start_cancelled_half_way_leaves_no_process(monkeypatch, tmp_path):
    real_popen = subprocess.Popen
    started: list[int] = []
    marker = f"dl2-spawn-{uuid.uuid4().hex[:8]}"

    def slow_popen(*args, **kwargs):
        time.sleep(0.3)
        p = real_popen(*args, **kwargs)
        started.append(p.pid)
        return p

    monkeypatch.setattr(executor_process.subprocess, "Popen", slow_popen)

    async def run() -> None:
        task = asyncio.ensure_future(ExecutorProcess.spawn(
            {"shell": True, "value": f"exec -a {marker} sleep 60"}, dict(os.environ), tmp_path))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.6)  # the thread finished the start meanwhile

    asyncio.run(run())
    assert started, "the start never happened"
    deadline = time.monotonic() + 5
    while _alive(started[0]) and time.monotonic() < deadline:
        try:
            os.waitpid(started[0], os.WNOHANG)  # reap it: killed, it stays a zombie of this process
        except ChildProcessError:
            break
        time.sleep(0.05)
    assert not _alive(started[0])
