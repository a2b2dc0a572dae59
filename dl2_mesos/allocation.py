"""Allocations: the number of parameter servers and workers each job gets for one slot."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from dl2_mesos.cluster import ClusterState
from dl2_mesos.errors import InvalidAllocation
from dl2_mesos.resources import ZERO


@dataclass(frozen=True, slots=True)
class JobAllocation:
    """PS and worker counts of one job."""

    num_ps: int
    num_workers: int

    @property
    def is_zero(self) -> bool:
        return self.num_ps == 0 and self.num_workers == 0


NONE = JobAllocation(0, 0)


class Allocation(Mapping[str, JobAllocation]):
    """Immutable mapping job id -> :class:`JobAllocation`. Jobs absent from it get nothing."""

    __slots__ = ("_data",)

    def __init__(self, counts: Mapping[str, JobAllocation | tuple[int, int]] | None = None) -> None:
        data: dict[str, JobAllocation] = {}
        for job_id, c in (counts or {}).items():
            ja = c if isinstance(c, JobAllocation) else JobAllocation(int(c[0]), int(c[1]))
            data[job_id] = ja
        self._data = MappingProxyType(data)

    def __getitem__(self, job_id: str) -> JobAllocation:
        return self._data[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def get_counts(self, job_id: str) -> JobAllocation:
        """Counts of ``job_id`` (zero when absent)."""
        return self._data.get(job_id, NONE)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: ({v.num_ps}ps, {v.num_workers}w)" for k, v in self._data.items())
        return f"Allocation({{{inner}}})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Allocation):
            return NotImplemented
        a = {k: v for k, v in self._data.items() if not v.is_zero}
        b = {k: v for k, v in other._data.items() if not v.is_zero}
        return a == b

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, v) for k, v in self._data.items() if not v.is_zero)))


def validate_allocation(allocation: Allocation, state: ClusterState) -> None:
    """Check ``allocation`` against the jobs' limits and the cluster's aggregate capacity.

    Per-agent fit is the placement's business; this only rejects what can never fit.

    Raises:
        InvalidAllocation: naming the job and the broken rule.
    """
    total = ZERO
    for job_id, ja in allocation.items():
        if job_id not in state.jobs_by_id:
            raise InvalidAllocation(f"allocation names unknown or finished job {job_id!r}")
        job = state.job(job_id)
        spec = job.spec
        if ja.num_ps < 0 or ja.num_workers < 0:
            raise InvalidAllocation(f"job {job_id}: negative counts {ja}")
        if ja.is_zero:
            continue
        if not (spec.min_ps <= ja.num_ps <= spec.max_ps):
            raise InvalidAllocation(f"job {job_id}: {ja.num_ps} PS outside [{spec.min_ps}, {spec.max_ps}]")
        if not (spec.min_workers <= ja.num_workers <= spec.max_workers):
            raise InvalidAllocation(
                f"job {job_id}: {ja.num_workers} workers outside [{spec.min_workers}, {spec.max_workers}]"
            )
        total = total + job.demand(ja.num_ps, ja.num_workers)
    if not total.fits_in(state.capacity):
        raise InvalidAllocation(f"allocation needs {total} but the cluster has {state.capacity}")
