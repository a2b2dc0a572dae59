"""DRF on small hand-checked clusters."""

from __future__ import annotations

from dl2_mesos.allocation import JobAllocation, validate_allocation
from dl2_mesos.cluster import AgentView, ClusterState, JobView
from dl2_mesos.jobs import JobSpec
from dl2_mesos.policy.baselines.drf import DRFPolicy
from dl2_mesos.resources import Resources


def state(agents, *jobs):
    avs = tuple(AgentView(f"n{i}", f"n{i}", r, r) for i, r in enumerate(agents))
    views = tuple(
        JobView(
            job_id=jid,
            spec=JobSpec(job_type=t, epochs=1000.0, **kw),
            arrival_slot=0,
            arrival_time=float(i),
            epochs_done=0.0,
        )
        for i, (jid, t, kw) in enumerate(jobs)
    )
    return ClusterState(slot=0, slot_seconds=1200.0, now=0.0, jobs=views, agents=avs)


def test_progressive_filling_by_dominant_share_continues_past_failures():
    # two nodes of 16 cpus / 1 GPU: cap 32 cpus, 2 GPUs. a and c (GPU jobs) reach share 0.5
    # with one bundle each; b (CPU-only, 4 cpus a bundle = 0.125) catches up to 0.5, then a
    # fails (no GPU left) -- the prototype would stop there; here b keeps growing to 0.75.
    st = state(
        [Resources(16, 1, 65536), Resources(16, 1, 65536)],
        ("a", "vgg-16", {}),
        ("b", "dssm", {}),
        ("c", "vgg-16", {}),
    )
    alloc = DRFPolicy().decide(st)
    assert dict(alloc) == {"a": JobAllocation(1, 1), "b": JobAllocation(6, 6), "c": JobAllocation(1, 1)}
    validate_allocation(alloc, st)


def test_equal_jobs_split_evenly_and_ties_go_to_earlier_arrival():
    st = state([Resources(8, 2, 49152)] * 2, ("a", "vgg-16", {}), ("b", "vgg-16", {}))
    assert dict(DRFPolicy().decide(st)) == {"a": JobAllocation(2, 2), "b": JobAllocation(2, 2)}
    # one bundle's worth of room left over for three equal jobs goes to the earliest
    st3 = state([Resources(12, 3, 49152)], ("a", "vgg-16", {}), ("b", "vgg-16", {}), ("c", "vgg-16", {}))
    assert dict(DRFPolicy().decide(st3)) == {
        "a": JobAllocation(1, 1),
        "b": JobAllocation(1, 1),
        "c": JobAllocation(1, 1),
    }
    st2 = state([Resources(12, 3, 49152)], ("a", "vgg-16", {}), ("b", "vgg-16", {}))
    assert dict(DRFPolicy().decide(st2)) == {"a": JobAllocation(2, 2), "b": JobAllocation(1, 1)}


def test_caps_and_minimums():
    st = state([Resources(8, 2, 49152)] * 10, ("a", "vgg-16", {"max_ps": 3, "max_workers": 5}))
    assert dict(DRFPolicy().decide(st)) == {"a": JobAllocation(3, 5)}
    st = state([Resources(8, 2, 49152)] * 10, ("a", "vgg-16", {}))
    assert dict(DRFPolicy().decide(st)) == {"a": JobAllocation(16, 16)}
    # a first unit that cannot reach the minimum gives nothing
    st = state([Resources(8, 2, 49152)], ("a", "vgg-16", {"min_workers": 3}), ("b", "dssm", {}))
    alloc = DRFPolicy().decide(st)
    assert alloc.get_counts("a").is_zero and alloc.get_counts("b") == JobAllocation(2, 2)
