"""A rescale reads what the stopping workers report while they stop: the final checkpoint's upload
starts as soon as it is written, not once every worker has exited."""

from __future__ import annotations

import time

from dl2_mesos.executor.processes import stop_processes


class SlowToExit:
    """A process stand-in that exits ``after`` seconds after SIGTERM."""

    def __init__(self, after: float) -> None:
        self.after = after
        self.term_at: float | None = None
        self.name, self.pid = "slow", 0

    def alive(self) -> bool:
        return self.term_at is None or time.monotonic() - self.term_at < self.after

    def terminate(self) -> None:
        self.term_at = time.monotonic()

    def kill(self) -> None:
        self.term_at = -1e9

    def signal_group(self, sig: int) -> None:
        pass


def test_stopping_processes_calls_the_tick_while_they_are_still_running():
    p = SlowToExit(0.5)
    seen_alive: list[bool] = []
    stop_processes([p], grace_s=5.0, tick=lambda: seen_alive.append(p.alive()))
    assert not p.alive()
    assert len(seen_alive) >= 3 and all(seen_alive)  # called during the wait, not after it
