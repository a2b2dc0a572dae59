"""Resource vectors (cpus, gpus, mem) in Mesos units: cores, whole GPUs, MiB."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of scalar resources. Negative amounts are allowed only as differences."""

    cpus: float = 0.0
    gpus: float = 0.0
    mem: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpus + other.cpus, self.gpus + other.gpus, self.mem + other.mem)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpus - other.cpus, self.gpus - other.gpus, self.mem - other.mem)

    def scale(self, k: float) -> Resources:
        """This amount times ``k``."""
        return Resources(self.cpus * k, self.gpus * k, self.mem * k)

    def fits_in(self, capacity: Resources, eps: float = 1e-9) -> bool:
        """True when every component is at most ``capacity``'s."""
        return (
            self.cpus <= capacity.cpus + eps
            and self.gpus <= capacity.gpus + eps
            and self.mem <= capacity.mem + eps
        )

    def is_zero(self) -> bool:
        return self.cpus == 0 and self.gpus == 0 and self.mem == 0

    def share_of(self, capacity: Resources) -> float:
        """Dominant share: the largest fraction of ``capacity`` this amount takes (0 for empty types)."""
        shares = [0.0]
        if capacity.cpus > 0:
            shares.append(self.cpus / capacity.cpus)
        if capacity.gpus > 0:
            shares.append(self.gpus / capacity.gpus)
        if capacity.mem > 0:
            shares.append(self.mem / capacity.mem)
        return max(shares)

    def load_of(self, capacity: Resources) -> float:
        """Summed fractions of ``capacity`` over cpus and gpus: the placement load measure.

        With the reference's nodes (8 CPU slots, 2 GPUs = 8 GPU slots) this orders nodes exactly
        like the reference's "total used slots" (CPU slots + GPU slots).
        """
        load = 0.0
        if capacity.cpus > 0:
            load += self.cpus / capacity.cpus
        if capacity.gpus > 0:
            load += self.gpus / capacity.gpus
        return load

    def to_dict(self) -> dict[str, float]:
        return {"cpus": self.cpus, "gpus": self.gpus, "mem": self.mem}

    @classmethod
    def from_dict(cls, data: dict) -> Resources:
        return cls(float(data.get("cpus", 0.0)), float(data.get("gpus", 0.0)), float(data.get("mem", 0.0)))


ZERO = Resources()
