"""One supervised job process: own process group, log file, progress file, graceful kill, usage."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from dl2_mesos.executor.launch_env import ProcSpec
from dl2_mesos.job_runtime import read_events

logger = logging.getLogger(__name__)


# Job processes run in their own process group, so a SIGKILLed executor (agent removed, OOM
# killer, container destroyed without cgroups) would leave them running and holding their ports.
# The kernel can SIGKILL a child when its parent dies (PR_SET_PDEATHSIG), but setting that in a
# preexec_fn is unsafe in a threaded parent (the child can deadlock before exec; seen here), so a
# tiny single-threaded trampoline sets it after fork+exec and then execs the real program in place
# (same pid; the setting survives execve). The kernel ties it to the *thread* that forked the
# child, not to the process: a job process dies when the thread that started it ends, so only
# the executor's long-lived loop thread may start them.
_TRAMPOLINE = (
    "import ctypes, os, signal, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.prctl(1, signal.SIGKILL, 0, 0, 0)\n"  # PR_SET_PDEATHSIG
    "if os.getppid() != int(sys.argv[1]):\n"  # the executor died before prctl took effect
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def die_with_parent(argv: list[str]) -> list[str]:
    """``argv`` wrapped so the process is SIGKILLed when this (executor) process dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return argv
    if shutil.which(argv[0]) is None:  # keep Popen's own error for a missing program
        raise FileNotFoundError(2, "No such file or directory", argv[0])
    return [sys.executable, "-S", "-c", _TRAMPOLINE, str(os.getpid()), *argv]


class ManagedProcess:
    """A job process started with ``start_new_session`` (its own process group) and no shell."""

    def __init__(self, spec: ProcSpec, workdir: Path, env: dict[str, str]) -> None:
        self.spec = spec
        self.workdir = workdir
        self.progress_file = workdir / f"{spec.name}.progress.jsonl"
        self.log_file = workdir / f"{spec.name}.log"
        self.progress_file.unlink(missing_ok=True)
        self._offset = 0
        self.stop_requested = False
        self.exit_event: dict | None = None
        self.started_at = time.monotonic()
        env = {**env, "DL2_PROGRESS_FILE": str(self.progress_file)}
        with open(self.log_file, "ab") as log:
            self.popen = subprocess.Popen(
                die_with_parent(list(spec.argv)), env=env, cwd=str(workdir), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.pid = self.popen.pid
        try:
            self._ps: psutil.Process | None = psutil.Process(self.pid)
            self._ps.cpu_percent(None)
        except psutil.Error:
            self._ps = None
        logger.info("started %s (pid %d): %s", spec.name, self.pid, " ".join(spec.argv))

    @property
    def name(self) -> str:
        return self.spec.name

    def poll(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def read_events(self) -> list[dict]:
        """New complete events from the progress file (malformed lines logged and dropped)."""
        events, self._offset, bad = read_events(self.progress_file, self._offset)
        for line in bad:
            logger.warning("%s: malformed progress line dropped: %r", self.name, line)
        for ev in events:
            if ev.get("type") == "exit":
                self.exit_event = ev
        return events

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self) -> None:
        """Ask the process to stop (SIGTERM to its group); it checkpoints at its next safe point."""
        self.stop_requested = True
        self.signal_group(signal.SIGTERM)

    def kill(self) -> None:
        self.signal_group(signal.SIGKILL)
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            logger.error("%s (pid %d) did not die after SIGKILL", self.name, self.pid)

    def log_tail(self, n: int = 1500) -> str:
        try:
            data = self.log_file.read_bytes()[-n:]
        except OSError:
            return ""
        return data.decode(errors="replace").strip()

    def usage(self) -> tuple[float, int]:
        """CPU percent and RSS bytes of the process and its children."""
        if self._ps is None:
            return 0.0, 0
        cpu, rss = 0.0, 0
        try:
            procs = [self._ps, *self._ps.children(recursive=True)]
        except psutil.Error:
            return 0.0, 0
        for p in procs:
            try:
                cpu += p.cpu_percent(None) if p is self._ps else 0.0
                rss += p.memory_info().rss
            except psutil.Error:
                continue
        return cpu, rss


def stop_processes(procs: list[ManagedProcess], grace_s: float, poll_s: float = 0.05,
                   tick: Callable[[], None] | None = None) -> None:
    """SIGTERM every process group, wait up to ``grace_s`` for all, then SIGKILL the rest.

    ``tick`` is called at every poll while waiting (e.g. to read what the processes report)."""
    for p in procs:
        if p.alive():
            p.terminate()
    wait_exit(procs, grace_s, poll_s, tick)
    for p in procs:
        if p.alive():
            logger.warning("%s (pid %d) ignored SIGTERM for %.1fs; SIGKILL", p.name, p.pid, grace_s)
            p.kill()
        else:
            p.signal_group(signal.SIGKILL)  # leftover grandchildren in the group


def wait_exit(procs: list[ManagedProcess], timeout_s: float, poll_s: float = 0.05,
              tick: Callable[[], None] | None = None) -> bool:
    """Wait up to ``timeout_s`` until every process exited (True) or not (False); ``tick`` at every poll."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(not p.alive() for p in procs):
            return True
        if tick is not None:
            tick()
        time.sleep(poll_s)
    return all(not p.alive() for p in procs)


@dataclass(frozen=True)
class GpuProbe:
    """Mean GPU utilisation via ``nvidia-smi`` when present (None otherwise)."""

    path: str | None = shutil.which("nvidia-smi")

    def utilisation(self) -> float | None:
        if not self.path:
            return None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        cmd = [self.path, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        vals = []
        for line in out.splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) == 2 and parts[1].replace(".", "", 1).isdigit():
                if visible is None or parts[0] in visible.split(","):
                    vals.append(float(parts[1]))
        return sum(vals) / len(vals) if vals else None
