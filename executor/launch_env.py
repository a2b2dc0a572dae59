"""Turn a LaunchSpec / ClusterSpec into the processes one task runs: argument vectors and environments.

A ``ps`` task runs an MXNet server; PS rank 0 also runs the MXNet scheduler (ps-lite root) on the
port of ``cluster.scheduler``. A ``worker`` task runs one worker. PyTorch jobs have workers only;
they rendezvous at worker rank 0's endpoint (``MASTER_ADDR``/``MASTER_PORT``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import dl2_mesos
from dl2_mesos.messages import ClusterSpec

REFERENCE_PROGRAMS = {"mxnet": "dl2_mesos.programs.mxnet_mlp", "pytorch": "dl2_mesos.programs.torch_mlp"}
PYTHON_PLACEHOLDERS = ("python", "python3", "{python}")


@dataclass(frozen=True)
class ProcSpec:
    """One job process to start: ``name`` is unique within the job on this agent (e.g. ``worker-1``)."""

    name: str
    task_id: str
    role: str  # scheduler | server | worker
    rank: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    generation: int = 0


def job_python(extra_env: dict[str, str] | None = None) -> str:
    """The interpreter for job processes: ``DL2_JOB_PYTHON`` (LaunchSpec env first, then ours), else the
    ``.venv-jobs`` next to the installed package, else this interpreter."""
    for env in (extra_env or {}, os.environ):
        if env.get("DL2_JOB_PYTHON"):
            return env["DL2_JOB_PYTHON"]
    candidate = Path(dl2_mesos.__file__).resolve().parents[1] / ".venv-jobs" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def job_argv(command: tuple[str, ...], runtime: str, python: str) -> tuple[str, ...]:
    """The argument vector (never a shell line): ``()`` runs the reference program of ``runtime``;
    a leading ``python``/``python3``/``{python}`` is replaced by the job interpreter."""
    if not command:
        if runtime not in REFERENCE_PROGRAMS:
            raise ValueError(f"unknown runtime {runtime!r}; expected one of {sorted(REFERENCE_PROGRAMS)}")
        return (python, "-m", REFERENCE_PROGRAMS[runtime])
    if command[0] in PYTHON_PLACEHOLDERS:
        return (python, *command[1:])
    return tuple(command)


def processes_for_task(
    *,
    job_id: str,
    task_id: str,
    role: str,
    rank: int,
    runtime: str,
    cluster: ClusterSpec,
    command: tuple[str, ...],
    epochs: float,
    host: str,
    extra_env: dict[str, str],
    base_env: dict[str, str],
) -> list[ProcSpec]:
    """The processes of one task of ``cluster``'s generation (scheduler + server for PS rank 0)."""
    python = job_python(extra_env)
    argv = job_argv(command, runtime, python)
    common = {
        **base_env,
        **extra_env,
        "DL2_JOB_ID": job_id,
        "DL2_RUNTIME": runtime,
        "DL2_GENERATION": str(cluster.generation),
        "DL2_NUM_SERVERS": str(len(cluster.servers)),
        "DL2_NUM_WORKERS": str(len(cluster.workers)),
        "DL2_EPOCHS": repr(float(epochs)),
        "OMP_NUM_THREADS": extra_env.get("OMP_NUM_THREADS", "1"),
        "PYTHONUNBUFFERED": "1",
    }
    roles: list[tuple[str, int]] = []
    if runtime == "mxnet":
        if cluster.scheduler is None:
            raise ValueError("an MXNet job needs cluster.scheduler (the ps-lite root endpoint)")
        common.update({
            "DMLC_PS_ROOT_URI": cluster.scheduler.host,
            "DMLC_PS_ROOT_PORT": str(cluster.scheduler.port),
            "DMLC_NUM_SERVER": str(len(cluster.servers)),
            "DMLC_NUM_WORKER": str(len(cluster.workers)),
            "DMLC_NODE_HOST": host,  # without it ps-lite binds a non-loopback interface
        })
        if role == "ps":
            if rank == 0:
                roles.append(("scheduler", 0))
            roles.append(("server", rank))
        else:
            roles.append(("worker", rank))
    elif runtime == "pytorch":
        if role != "worker":
            raise ValueError("PyTorch jobs have workers only (no parameter servers)")
        if not cluster.workers:
            raise ValueError("a PyTorch job needs at least one worker endpoint")
        master = cluster.workers[0]
        common.update({"MASTER_ADDR": master.host, "MASTER_PORT": str(master.port),
                       "RANK": str(rank), "WORLD_SIZE": str(len(cluster.workers))})
        roles.append(("worker", rank))
    else:
        raise ValueError(f"unknown runtime {runtime!r}")
    out = []
    for proc_role, proc_rank in roles:
        env = dict(common)
        env.update({"DL2_TASK_ID": task_id if proc_role != "scheduler" else "", "DL2_ROLE": proc_role,
                    "DL2_RANK": str(proc_rank), "DL2_SAVER": "1" if (proc_role, proc_rank) == ("worker", 0) else "0"})
        if runtime == "mxnet":
            env["DMLC_ROLE"] = proc_role
        out.append(ProcSpec(f"{proc_role}-{proc_rank}", task_id, proc_role, proc_rank, argv, tuple(sorted(env.items())),
                            cluster.generation))
    return out
