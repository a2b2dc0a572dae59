"""FIFO, SRTF, Tetris and Optimus on small hand-checked clusters."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dl2_mesos.allocation import JobAllocation, validate_allocation
from dl2_mesos.policy.baselines.fifo import FIFOPolicy
from dl2_mesos.policy.baselines import optimus
from dl2_mesos.policy.baselines.optimus import (
    OptimusPolicy,
    OptimusSpeedModel,
    comparable_utility,
    fit_optimus_model,
    optimus_speed_model,
)
from dl2_mesos.policy.baselines.srtf import SRTFPolicy
from dl2_mesos.policy.baselines.tetris import TetrisPolicy
from dl2_mesos.policy.registry import BASELINES, make_policy
from dl2_mesos.policy.sim.settings import preset
from dl2_mesos.policy.sim.simulator import run
from dl2_mesos.policy.sim.trace import generate_trace
from dl2_mesos.resources import Resources
from dl2_mesos.speed_model import clean_measurements, load_measurements

NODE = Resources(8, 2, 49152)
WIDE = Resources(16, 2, 65536)  # 16 cpus, 2 GPUs


def counts(alloc):
    return {k: (v.num_ps, v.num_workers) for k, v in alloc.items()}


def test_fifo_fills_in_arrival_order_and_continues_past_a_failure(make_state):
    st = make_state([WIDE], [("a", "vgg-16", {}, {}), ("b", "vgg-16", {}, {}), ("c", "dssm", {}, {})])
    # a takes both GPUs (2 bundles); b's bundle fits nowhere -- the prototype stopped here --
    # c (CPU-only) still gets the 8 cpus left
    assert counts(FIFOPolicy().decide(st)) == {"a": (2, 2), "c": (2, 2)}


def test_fifo_starter_bundle_gives_everyone_one_first(make_state):
    st = make_state([WIDE], [("a", "vgg-16", {}, {}), ("b", "vgg-16", {}, {}), ("c", "dssm", {}, {})])
    assert counts(FIFOPolicy(starter_bundle=True).decide(st)) == {"a": (1, 1), "b": (1, 1), "c": (2, 2)}


def test_fifo_respects_caps(make_state):
    st = make_state(
        [NODE] * 4, [("a", "vgg-16", {"max_ps": 1, "max_workers": 3}, {}), ("b", "vgg-16", {}, {})]
    )
    alloc = FIFOPolicy().decide(st)
    assert counts(alloc) == {"a": (1, 3), "b": (5, 5)}  # a: 8 cpus, 3 GPUs; b: the other 24 cpus / 5 GPUs
    validate_allocation(alloc, st)


def test_srtf_orders_by_remaining_time_not_fraction(make_state):
    # x: resnext-110, nothing done (fraction 1.0) but ~0.98 epochs/s -> ~1000 s left
    # y: vgg-16, half done (fraction 0.5) but ~0.08 epochs/s -> ~6000 s left
    st = make_state([NODE], [("y", "vgg-16", {}, {"epochs_done": 500.0}), ("x", "resnext-110", {}, {})])
    assert counts(SRTFPolicy().decide(st)) == {"x": (2, 2)}


def test_srtf_estimates_at_the_caps_whatever_the_current_counts(make_state):
    from dl2_mesos.policy.baselines.srtf import remaining_seconds
    from dl2_mesos.speed_model import default_speed_model

    sm = default_speed_model()
    st = make_state(
        [NODE], [("a", "resnet-50", {"max_ps": 4, "max_workers": 6}, {"num_ps": 3, "num_workers": 3})]
    )
    assert remaining_seconds(st.jobs[0], sm) == pytest.approx(
        1000.0 / sm.epochs_per_second("resnet-50", 4, 6)
    )


def test_tetris_prefers_shortest_remaining_time(make_state):
    st = make_state([NODE], [("long", "vgg-16", {}, {}), ("short", "vgg-16", {}, {"epochs_done": 900.0})])
    assert counts(TetrisPolicy().decide(st)) == {"short": (2, 2)}


def test_tetris_walks_nodes_and_keeps_adding_to_the_top_job(make_state):
    st = make_state(
        [NODE, NODE],
        [("a", "vgg-16", {}, {}), ("b", "vgg-16", {"max_ps": 1, "max_workers": 1}, {"epochs_done": 900.0})],
    )
    alloc = TetrisPolicy().decide(st)
    assert counts(alloc) == {"b": (1, 1), "a": (3, 3)}
    validate_allocation(alloc, st)


def test_tetris_moves_on_to_nodes_where_a_unit_fits(make_state):
    # the short GPU job fills the GPU node; the CPU-only job then goes to the GPU-less node
    st = make_state(
        [NODE, Resources(8, 0, 49152)],
        [("g", "vgg-16", {}, {"epochs_done": 990.0}), ("c", "dssm", {}, {})],
    )
    alloc = TetrisPolicy().decide(st)
    assert counts(alloc) == {"g": (2, 2), "c": (2, 2)}


def test_optimus_fit_is_close_to_measurements():
    for model, pts in load_measurements().items():
        pts = clean_measurements(pts)
        a, b, c, d, e = fit_optimus_model(pts)
        rel = [abs(1 / (a / w + b + c * w / p + d * w + e * p) - s) / s for p, w, s in pts]
        assert np.mean(rel) < 0.15, model


def test_optimus_gives_every_job_its_minimum_first(make_state):
    st = make_state([NODE], [("a", "vgg-16", {}, {}), ("b", "vgg-16", {}, {}), ("c", "vgg-16", {}, {})])
    alloc = OptimusPolicy().decide(st)
    assert alloc.get_counts("a") == JobAllocation(1, 1) and alloc.get_counts("b") == JobAllocation(1, 1)
    assert alloc.get_counts("c").is_zero  # arrival order: no GPU left for the third


@pytest.mark.parametrize("model", ["resnet-50", "vgg-16", "seq2seq", "dssm"])
def test_optimus_stops_at_a_local_optimum_of_its_estimate(make_state, model):
    st = make_state([NODE] * 40, [("a", model, {}, {})])
    alloc = OptimusPolicy().decide(st)
    ps, w = alloc["a"].num_ps, alloc["a"].num_workers
    sm = optimus_speed_model()
    here = sm.epochs_per_second(model, ps, w)
    assert (ps, w) != (1, 1) or here >= max(
        sm.epochs_per_second(model, 2, 1), sm.epochs_per_second(model, 1, 2)
    )
    # no single extra task would help (capacity is ample, caps are 16)
    if ps < 16:
        assert sm.epochs_per_second(model, ps + 1, w) <= here + 1e-12
    if w < 16:
        assert sm.epochs_per_second(model, ps, w + 1) <= here + 1e-12


def test_comparable_utility_keeps_ten_significant_digits():
    assert comparable_utility(336780.81727701996) == comparable_utility(336780.8172770217) == 336780.8173
    assert comparable_utility(-173974.83807022538) == -173974.8381
    assert comparable_utility(1.2345678901234e-7) == 1.23456789e-7
    assert comparable_utility(1.0) != comparable_utility(1.0 + 1e-9)  # a real difference stays
    assert comparable_utility(0.0) == 0.0
    assert comparable_utility(float("inf")) == float("inf")
    assert np.isnan(comparable_utility(float("nan")))


def _optimus_decisions(speed_model, slots):
    """What Optimus was granted in each slot of ``sweep-rho2`` seed 108 (the run's own record)."""
    sim, tc = preset("sweep-rho2")
    granted = []
    run(
        OptimusPolicy(speed_model=speed_model),
        replace(sim, max_slots=slots),
        generate_trace(tc, 108),
        seed=108,
        on_slot=lambda out: granted.append(
            sorted((j, a.num_ps, a.num_workers) for j, a in out.granted.items())
        ),
    )
    return granted


@pytest.mark.parametrize("noise_seed", [1, 2, 3])
def test_optimus_decisions_do_not_depend_on_the_last_bits_of_the_fit(monkeypatch, noise_seed):
    """The fit's solver gives coefficients that differ in their last bits between scipy/BLAS builds
    (1e-15 relative, measured); the speed model has exact ties between different task counts, so
    unrounded utilities let those bits pick the winner (this trace: a different allocation from
    slot 12 on, avg JCT 41,346 s against 41,502 s). With comparable utilities the tie rule decides."""
    slots = 30
    exact = _optimus_decisions(OptimusSpeedModel(), slots)
    rng = np.random.default_rng(noise_seed)
    fit = optimus.fit_optimus_model
    monkeypatch.setattr(
        optimus, "fit_optimus_model", lambda pts: fit(pts) * (1 + 1e-13 * rng.standard_normal(5))
    )
    noisy = _optimus_decisions(OptimusSpeedModel(), slots)
    assert len(exact) == len(noisy) == slots
    assert noisy == exact


def test_optimus_true_speed_option():
    assert OptimusPolicy(speed="true").speed_model is not optimus_speed_model()
    with pytest.raises(ValueError):
        OptimusPolicy(speed="psychic")


@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_completes_the_tiny_preset_with_valid_allocations(name):
    sim, tc = preset("tiny")
    trace = generate_trace(tc, 2)
    policy = make_policy(name)

    class Checked:
        def __init__(self):
            self.name = policy.name
            self.calls = 0

        def decide(self, state):
            alloc = policy.decide(state)
            validate_allocation(alloc, state)
            self.calls += 1
            return alloc

    p = Checked()
    m = run(p, sim, trace, seed=2)
    assert m.num_finished == len(trace) and not m.truncated and p.calls > 0


def test_tetris_starter_bundle(make_state):
    jobs = [("a", "vgg-16", {}, {}), ("b", "vgg-16", {}, {"epochs_done": 900.0}), ("c", "dssm", {}, {})]
    st = make_state([WIDE], jobs)
    assert counts(TetrisPolicy().decide(st)) == {"b": (2, 2), "c": (2, 2)}
    assert counts(TetrisPolicy(starter_bundle=True).decide(st)) == {"a": (1, 1), "b": (1, 1), "c": (2, 2)}
