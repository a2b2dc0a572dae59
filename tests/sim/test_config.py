"""Simulator configs and presets."""

from __future__ import annotations

import pytest

from dl2_mesos.errors import ConfigError
from dl2_mesos.job_types import get_job_type, job_type_names
from dl2_mesos.policy.sim.settings import PRESETS, REFERENCE_AGENT, SimConfig, TraceConfig, preset
from dl2_mesos.policy.sim.trace import generate_trace


def test_presets():
    assert {"reference", "small", "tiny"} <= set(PRESETS)
    sim, tr = preset("reference")
    assert sim.num_agents == 500 and sim.agent == REFERENCE_AGENT and sim.slot_seconds == 1200.0
    assert tr.num_jobs == 200 and tr.max_arrivals_per_slot == 10 and tr.max_epochs == 30000
    assert tr.max_ps == tr.max_workers == 16 and len(tr.job_types) == 8
    assert preset("small")[0].num_agents == 13 and preset("small")[1].num_jobs == 30
    with pytest.raises(ConfigError, match="known: reference"):
        preset("huge")


def test_restart_seconds_resolution():
    assert SimConfig().restart_seconds_for("vgg-16") == 360.0
    assert SimConfig(restart_seconds={"vgg-16": 30.0}).restart_seconds_for("vgg-16") == 30.0
    assert SimConfig(restart_seconds={"vgg-16": 30.0}).restart_seconds_for("dssm") == 360.0
    assert SimConfig(charge_restart_cost=False).restart_seconds_for("dssm") == 0.0


@pytest.mark.parametrize(
    "kw",
    [
        {"num_agents": 0},
        {"slot_seconds": 0},
        {"max_slots": 0},
        {"speed_noise": 1.5},
        {"restart_seconds": {"nope": 1.0}},
        {"restart_seconds": {"dssm": -1.0}},
        {"agents": ()},
        {"num_agents": 100_001},
    ],
)
def test_bad_sim_config(kw):
    with pytest.raises(ConfigError):
        SimConfig(**kw)


@pytest.mark.parametrize(
    "kw",
    [
        {"num_jobs": 0},
        {"arrival": "bursty"},
        {"max_arrivals_per_slot": 0},
        {"max_epochs": -1},
        {"job_types": ()},
        {"arrival_scale": 0.0},
        {"arrival_scale": float("nan")},
        {"arrival_scale": float("inf")},
        {"num_jobs": 1_000_001},
        {"max_epochs": float("inf")},
        {"max_epochs": 1e300},
        {"max_ps": 1001},
        {"max_workers": 0},
    ],
)
def test_bad_trace_config(kw):
    with pytest.raises(ConfigError):
        TraceConfig(**kw)


def test_max_epochs_is_bounded_by_the_longest_job_it_generates():
    longest = max(get_job_type(t).num_epochs_fraction for t in job_type_names())
    fits = 1e6 / longest
    TraceConfig(max_epochs=fits)  # fixed length: exactly at the job limit
    with pytest.raises(ConfigError, match="above a job's limit"):
        TraceConfig(max_epochs=fits, fixed_length=False)  # up to 1.09 x that
    for seed in (1, 2):
        generate_trace(TraceConfig(num_jobs=40, max_epochs=fits / 1.09, fixed_length=False), seed)


def test_preset_suffixes_scale_nodes_and_job_lengths():
    base_sim, base_trace = preset("sweep-rho2")
    sim, trace = preset("sweep-rho2@30*2")
    assert sim.num_agents == 30 and trace.max_epochs == 2 * base_trace.max_epochs
    sim, trace = preset("sweep-rho2*0.5")
    assert sim == base_sim and trace.max_epochs == base_trace.max_epochs / 2
    assert trace.arrival == base_trace.arrival and trace.num_jobs == base_trace.num_jobs


@pytest.mark.parametrize(
    "name, message",
    [("sweep-rho2*", "job-length scale"), ("sweep-rho2*two", "job-length scale"),
     ("sweep-rho2*0", "job-length scale"), ("sweep-rho2*inf", "job-length scale"),
     ("sweep-rho2*nan", "job-length scale"), ("sweep-rho2@0", "node count"),
     ("sweep-rho2@x*2", "node count"), ("galactic*2", "unknown preset"),
     ("sweep-rho2*100", "limit")],
)
def test_bad_preset_suffixes_are_refused(name, message):
    with pytest.raises(ConfigError, match=message):
        preset(name)
