"""JobSpec validation and allocation validation."""

from __future__ import annotations

import pytest

from dl2_mesos.allocation import Allocation, JobAllocation, validate_allocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView
from dl2_mesos.errors import InvalidAllocation, InvalidJobSpec
from dl2_mesos.jobs import JobSpec
from dl2_mesos.resources import Resources


def test_defaults_from_job_type():
    s = JobSpec(job_type="resnext-110", epochs=10)
    assert s.job_type == "resnext-110" and s.worker == Resources(2, 1, 8192) and s.ps == Resources(2, 0, 4096)
    assert s.restart_cost_seconds == 360.0 and s.uses_ps
    assert JobSpec(job_type="dssm", epochs=1, restart_seconds=5).restart_cost_seconds == 5.0


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"job_type": "nope"}, "job_type"),
        ({"job_type": ""}, "job_type"),
        ({"epochs": 0}, "epochs"),
        ({"epochs": -3}, "epochs"),
        ({"epochs": True}, "epochs"),
        ({"epochs": float("nan")}, "epochs"),
        ({"name": "bad name!"}, "name"),
        ({"worker": Resources(1, 0.5, 10)}, "worker.gpus"),
        ({"worker": Resources(-1, 0, 10)}, "worker.cpus"),
        ({"worker": Resources(0, 0, 0)}, "worker"),
        ({"min_ps": 3, "max_ps": 2}, "max_ps"),
        ({"max_workers": 0}, "max_workers"),
        ({"min_workers": 0}, "min_workers"),
        ({"min_ps": 0}, "min_ps"),
        ({"max_workers": 1001}, "max_workers"),
        ({"runtime": "tf"}, "runtime"),
        ({"command": "python train.py"}, "command"),
        ({"priority": 1.5}, "priority"),
        ({"restart_seconds": -1}, "restart_seconds"),
    ],
)
def test_invalid_specs_name_the_field(kw, field):
    base = {"job_type": "vgg-16", "epochs": 10}
    base.update(kw)
    with pytest.raises(InvalidJobSpec) as ei:
        JobSpec(**base)
    assert ei.value.field == field
    assert f"field '{field}'" in str(ei.value)


def test_pytorch_has_no_ps():
    s = JobSpec(job_type="vgg-16", epochs=1, runtime="pytorch", min_ps=1, max_ps=4)
    assert s.min_ps == s.max_ps == 0 and not s.uses_ps


def test_from_dict_round_trip_and_errors():
    s = JobSpec(job_type="dssm", epochs=5, worker=Resources(1, 0, 100), command=("a", "b"))
    assert JobSpec.from_dict(s.to_dict()) == s
    for data, field in [
        ({"epochs": 1}, "job_type"),
        ({"job_type": "dssm", "epochs": 1, "bogus": 1}, "bogus"),
        ({"job_type": "dssm", "epochs": 1, "worker": {"cpus": "x"}}, "worker.cpus"),
        ({"job_type": "dssm", "epochs": 1, "worker": {"tpus": 1}}, "worker.tpus"),
        ([], "<root>"),
    ]:
        with pytest.raises(InvalidJobSpec) as ei:
            JobSpec.from_dict(data)
        assert ei.value.field == field


def _state():
    node = Resources(8, 2, 49152)
    agents = (AgentView("n0", "n0", node, node), AgentView("n1", "n1", node, node))
    jobs = (
        JobView("a", JobSpec(job_type="vgg-16", epochs=10, max_workers=4), 0, 0.0, 0.0),
        JobView("b", JobSpec(job_type="dssm", epochs=10), 0, 0.0, 0.0),
    )
    return ClusterState(0, 1200.0, 0.0, jobs, agents)


def test_valid_allocations_pass():
    st = _state()
    validate_allocation(Allocation({"a": (1, 4), "b": (1, 1)}), st)
    validate_allocation(Allocation({"a": (0, 0)}), st)  # zero = nothing
    validate_allocation(Allocation(), st)
    assert Allocation({"a": (1, 2)}) == Allocation({"a": JobAllocation(1, 2), "b": (0, 0)})


@pytest.mark.parametrize(
    "counts, msg",
    [
        ({"zzz": (1, 1)}, "unknown or finished job"),
        ({"a": (-1, 1)}, "negative"),
        ({"a": (1, 5)}, "workers outside"),
        ({"a": (0, 1)}, "PS outside"),
        ({"a": (17, 1)}, "PS outside"),
        ({"a": (1, 4), "b": (4, 4)}, "cluster has"),  # 8 + 16 cpus > 16
    ],
)
def test_invalid_allocations(counts, msg):
    with pytest.raises(InvalidAllocation, match=msg):
        validate_allocation(Allocation(counts), _state())
