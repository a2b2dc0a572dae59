"""The eight reference job types (models) and their task demands.

Numbers come from the DL2 prototype's trace table (see dl2_mesos/data/PROVENANCE.md). Task
demands are converted from the prototype's slots (1 CPU = 1 slot, 1 GPU = 4 slots) to Mesos
units; memory is not in the prototype and is set to values that never bind on the reference
node (8 cpus, 2 gpus, 48 GiB) so that CPU and GPU decide placement as they did there.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources as ilr

from dl2_mesos.resources import Resources

#: Memory (MiB) per task, not in the reference; chosen so that it never binds before CPU/GPU.
WORKER_MEM_MIB = 8192.0
PS_MEM_MIB = 4096.0
#: Reference per-slot restart cost (paper section 5): about 1 min to checkpoint and stop, about
#: 5 min to restore (data preprocessing reruns). Seconds.
DEFAULT_STOP_SECONDS = 60.0
DEFAULT_RESTORE_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class JobType:
    """One model family with its measured characteristics."""

    type_id: int  # 1..8, the reference's order
    name: str
    epoch_size: float  # divisor turning samples/s into epochs (reference semantics)
    model_size_mb: float
    local_comp_time_s: float
    worker: Resources
    ps: Resources
    num_epochs_fraction: float  # x MAX_NUM_EPOCHS = the reference job length
    stop_seconds: float = DEFAULT_STOP_SECONDS
    restore_seconds: float = DEFAULT_RESTORE_SECONDS

    @property
    def restart_seconds(self) -> float:
        """Seconds a rescale costs this type's job: checkpoint-and-stop plus restore."""
        return self.stop_seconds + self.restore_seconds


@lru_cache(maxsize=1)
def _load() -> tuple[JobType, ...]:
    text = ilr.files("dl2_mesos.data").joinpath("dl2_job_types.csv").read_text()
    out = []
    for row in csv.DictReader(text.splitlines()):
        out.append(
            JobType(
                type_id=int(row["type_id"]),
                name=row["model"],
                epoch_size=float(row["epoch_size"]),
                model_size_mb=float(row["model_size_MB"]),
                local_comp_time_s=float(row["local_comp_time_s"]),
                worker=Resources(
                    cpus=float(row["worker_cpu_slots"]),
                    gpus=float(row["worker_gpu_slots"]) / 4.0,
                    mem=WORKER_MEM_MIB,
                ),
                ps=Resources(
                    cpus=float(row["ps_cpu_slots"]),
                    gpus=float(row["ps_gpu_slots"]) / 4.0,
                    mem=PS_MEM_MIB,
                ),
                num_epochs_fraction=float(row["num_epochs_fraction_of_MAX_NUM_EPOCHS"]),
            )
        )
    return tuple(sorted(out, key=lambda t: t.type_id))


def all_job_types() -> tuple[JobType, ...]:
    """The eight job types in reference order (type ids 1..8)."""
    return _load()


def job_type_names() -> tuple[str, ...]:
    return tuple(t.name for t in _load())


def get_job_type(name_or_id: str | int) -> JobType:
    """Look a type up by model name (``resnet-50``) or id (1..8).

    Raises:
        KeyError: no such type; the message lists the known names.
    """
    for t in _load():
        if t.name == name_or_id or t.type_id == name_or_id or str(t.type_id) == str(name_or_id):
            return t
    raise KeyError(f"unknown job type {name_or_id!r}; known: {', '.join(job_type_names())}")


NUM_JOB_TYPES = 8
