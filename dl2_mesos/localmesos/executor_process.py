"""Starting and stopping executor processes the way a Mesos agent's containerizer does.

Each executor (or command task) runs as a real subprocess in its own session/process group, in
its sandbox folder (``MESOS_SANDBOX``) with ``stdout``/``stderr`` files there, and with the
environment the Mesos agent gives executors (``executorEnvironment()`` in the Mesos source):
``MESOS_AGENT_ENDPOINT``, ``MESOS_FRAMEWORK_ID``, ``MESOS_EXECUTOR_ID``, ``MESOS_DIRECTORY``,
``MESOS_SANDBOX``, ``MESOS_SLAVE_ID``/``MESOS_AGENT_ID``, ``MESOS_SLAVE_PID``, ``MESOS_CHECKPOINT``,
``MESOS_HTTP_COMMAND_EXECUTOR``, ``MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD`` (and
``MESOS_RECOVERY_TIMEOUT``/``MESOS_SUBSCRIPTION_BACKOFF_MAX`` for checkpointing frameworks).

Two deliberate choices (documented in the README):

* ``MESOS_LOCAL=1`` is set (as Mesos's own ``mesos-local`` does). Its only effect on pymesos's
  executor driver is that on SHUTDOWN (or a disconnect of a non-checkpointing executor) the
  driver does not SIGKILL its own process group; this agent does that itself after the shutdown
  grace period, as a Mesos agent destroys the container.
* With ``switch_user`` (Mesos's ``--switch_user``, on by default) an executor runs as the user its
  ``CommandInfo.user`` (else ``FrameworkInfo.user``) names: the agent, when root, chowns the sandbox
  to that user and starts the process with its uid, gid and no supplementary groups. An agent that
  is not root can only run executors as itself; asking for another user fails the launch.
* ``CUDA_VISIBLE_DEVICES`` lists the GPU indices this agent gave the container (executor plus the
  task it was started for), standing in for Mesos's GPU isolator, which exposes only the
  allocated devices. On an agent without GPUs the variable is left as inherited.
"""

from __future__ import annotations

import logging
import os
import pwd
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .spawner import ExecutorSpawner, SpawnedChild, SpawnRequest

logger = logging.getLogger(__name__)


def format_duration(seconds: float) -> str:
    """Mesos's stringified Duration ("5secs"), which pymesos's ``parse_duration`` reads."""
    return f"{seconds:g}secs"


def sandbox_path(
    work_dir: Path, agent_id: str, framework_id: str, executor_id: str, container_id: str
) -> Path:
    """``<work_dir>/slaves/<agent>/frameworks/<fw>/executors/<ex>/runs/<container>`` as in Mesos."""
    return (
        work_dir
        / "slaves"
        / agent_id
        / "frameworks"
        / framework_id
        / "executors"
        / _safe(executor_id)
        / "runs"
        / container_id
    )


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.:" else "_" for c in name) or "_"


def executor_environment(
    *,
    agent_endpoint: str,
    agent_id: str,
    framework_id: str,
    executor_id: str,
    directory: Path,
    checkpoint: bool,
    grace_period: float,
    gpus: Sequence[int] | None,
    mesos_local: bool,
    command: Mapping[str, Any] | None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of an executor process (agent's own environment, then Mesos's variables)."""
    env = dict(os.environ if base is None else base)
    for var in ((command or {}).get("environment") or {}).get("variables") or []:
        if var.get("type") in (None, "UNKNOWN", "VALUE") and isinstance(var.get("name"), str):
            env[var["name"]] = str(var.get("value") or "")
    env.update(
        {
            "MESOS_AGENT_ENDPOINT": agent_endpoint,
            "MESOS_SLAVE_PID": f"slave(1)@{agent_endpoint}",
            "MESOS_FRAMEWORK_ID": framework_id,
            "MESOS_EXECUTOR_ID": executor_id,
            "MESOS_DIRECTORY": str(directory),
            "MESOS_SANDBOX": str(directory),
            "MESOS_SLAVE_ID": agent_id,
            "MESOS_AGENT_ID": agent_id,
            "MESOS_CHECKPOINT": "1" if checkpoint else "0",
            "MESOS_HTTP_COMMAND_EXECUTOR": "0",
            "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": format_duration(grace_period),
        }
    )
    if checkpoint:
        env["MESOS_RECOVERY_TIMEOUT"] = "15mins"
        env["MESOS_SUBSCRIPTION_BACKOFF_MAX"] = "2secs"
    if mesos_local:
        env["MESOS_LOCAL"] = "1"
    else:
        env.pop("MESOS_LOCAL", None)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpus)
    return env


def command_argv(command: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(executable, argv) for a CommandInfo: ``shell`` (default) runs ``/bin/sh -c value``;
    otherwise ``value`` is the executable and ``arguments`` the full argv (argv[0] included)."""
    value = command.get("value") or ""
    if command.get("shell", True):
        return "/bin/sh", ["sh", "-c", value]
    args = [str(a) for a in command.get("arguments") or []]
    return value, args or [value]


class SwitchUserError(OSError):
    """The executor cannot run as the user it asks for (unknown user, or the agent is not root)."""


def resolve_user(name: str) -> pwd.struct_passwd | None:
    """The account executors of ``name`` run as; None when no switch is needed (the agent's own user).

    Raises:
        SwitchUserError: no such user, or the agent is not root and ``name`` is another user.
    """
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise SwitchUserError(f"Failed to switch to user {name!r}: no such user on this agent") from None
    if account.pw_uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        raise SwitchUserError(
            f"Failed to switch to user {name!r}: the agent does not run as root "
            "(start it with --no-switch-user to run executors as the agent's user)")
    return account


def hand_over(directory: Path, account: pwd.struct_passwd) -> None:
    """Give the sandbox (and what the agent created in it) to the executor's user, as Mesos does."""
    for root, dirs, files in os.walk(directory):
        for name in (root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)):
            os.chown(name, account.pw_uid, account.pw_gid)


class ExecutorProcess:
    """A running executor (or command task) process group."""

    def __init__(self, proc: SpawnedChild, directory: Path) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.directory = directory
        self.returncode: int | None = None

    @classmethod
    async def spawn(
        cls, command: Mapping[str, Any], env: Mapping[str, str], directory: Path, spawner: ExecutorSpawner,
        user: str = "",
    ) -> ExecutorProcess:
        """Start ``command`` in ``directory`` through ``spawner``'s helper process; as ``user`` when
        given (see :func:`resolve_user`)."""
        account = resolve_user(user) if user else None
        directory.mkdir(parents=True, exist_ok=True)
        executable, argv = command_argv(command)
        env = dict(env)
        if account is not None:
            env.update({"USER": account.pw_name, "LOGNAME": account.pw_name})
        for name in ("stdout", "stderr"):
            (directory / name).touch()
        if account is not None:
            hand_over(directory, account)
        child = await spawner.spawn(SpawnRequest(
            argv=tuple(argv), executable=executable, env=env, cwd=str(directory),
            stdout=str(directory / "stdout"), stderr=str(directory / "stderr"),
            uid=account.pw_uid if account is not None else None,
            gid=account.pw_gid if account is not None else None,
        ))
        logger.info("started %s (pid %d) in %s%s", argv, child.pid, directory,
                    f" as {account.pw_name}" if account is not None else "")
        return cls(child, directory)

    def signal_group(self, sig: int) -> None:
        """Signal the whole process group (the executor and everything it started)."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def wait(self) -> int:
        """Wait for exit; returns a waitpid-style status (exit code << 8, or the signal number)."""
        code = await self.proc.wait()
        self.returncode = code
        # Anything the executor left behind in its group goes with it, as with a destroyed container.
        self.signal_group(signal.SIGKILL)
        return (-code) if code < 0 else (code << 8)

    @property
    def running(self) -> bool:
        return self.returncode is None and self.proc.returncode is None
