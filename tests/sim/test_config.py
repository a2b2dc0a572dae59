"""Simulator configs and presets."""

from __future__ import annotations

import pytest

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.sim.settings import PRESETS, REFERENCE_AGENT, SimConfig, TraceConfig, preset


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
    ],
)
def test_bad_trace_config(kw):
    with pytest.raises(ConfigError):
        TraceConfig(**kw)
