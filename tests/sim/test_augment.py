"""Trace augmentation and ``trace:`` presets: episodes drawn from a cluster's own history."""

from __future__ import annotations

import numpy as np
import pytest

from dl2_mesos.errors import ConfigError
from dl2_mesos.policy.sim.augment import AugmentConfig, augment
from dl2_mesos.policy.sim.settings import TraceConfig, preset, trace_preset_name
from dl2_mesos.policy.sim.trace import generate_trace, write_trace

SOURCE = generate_trace(
    TraceConfig(num_jobs=80, arrival="poisson", max_arrivals_per_slot=2, fixed_length=False), 4
)
SPAN = SOURCE[-1].arrival_time


def _aug(seed=0, **kw):
    return augment(SOURCE, AugmentConfig(**kw), np.random.default_rng(seed))


def test_identity_keeps_the_trace():
    assert _aug() == SOURCE
    assert AugmentConfig().is_identity and not AugmentConfig(rate=2.0).is_identity


def test_random_window_is_a_shifted_contiguous_slice():
    w = SPAN / 4
    starts = set()
    by_id = {j.job_id: j for j in SOURCE}
    for seed in range(6):
        ep = _aug(seed, window_seconds=w)
        assert ep and ep[0].arrival_time == 0.0 and all(0 <= j.arrival_time < w for j in ep)
        start = by_id[ep[0].job_id].arrival_time
        starts.add(start)
        # exactly the source jobs arriving in [start, start + w), same relative times and specs
        inside = [j for j in SOURCE if start <= j.arrival_time < start + w]
        assert [j.job_id for j in ep] == [j.job_id for j in inside]
        assert all(e.arrival_time == s.arrival_time - start and e.spec == s.spec for e, s in zip(ep, inside))
    assert len(starts) > 1  # the seed moves the window


def test_rate_jitter_and_max_jobs():
    fast = _aug(rate=2.0)
    assert [j.arrival_time for j in fast] == [j.arrival_time / 2 for j in SOURCE]
    jit = _aug(1, jitter_seconds=300.0)
    orig = {j.job_id: j.arrival_time for j in SOURCE}
    moved = [abs(j.arrival_time - orig[j.job_id]) for j in jit]
    assert all(j.arrival_time >= 0 for j in jit) and max(moved) <= 300.0 and max(moved) > 0
    assert [j.arrival_time for j in jit] == sorted(j.arrival_time for j in jit)
    assert len(_aug(max_jobs=10)) == 10 and _aug(max_jobs=10) == SOURCE[:10]


def test_resampled_jobs_and_lengths():
    pool = {(j.spec.job_type, j.spec.epochs) for j in SOURCE}
    res = _aug(2, resample=True)
    assert [j.arrival_time for j in res] == [j.arrival_time for j in SOURCE]
    assert all((j.spec.job_type, j.spec.epochs) in pool for j in res)
    assert [j.spec.job_type for j in res] != [j.spec.job_type for j in SOURCE]
    longer = _aug(3, length_jitter=0.2)
    ratios = [a.spec.epochs / b.spec.epochs for a, b in zip(longer, SOURCE)]
    assert all(0.8 <= r <= 1.2 for r in ratios) and len({round(r, 6) for r in ratios}) > 1


def test_deterministic_for_a_generator_seed():
    kw = dict(window_seconds=SPAN / 3, rate=1.5, jitter_seconds=100.0, resample=True, length_jitter=0.1)
    assert _aug(9, **kw) == _aug(9, **kw) and _aug(9, **kw) != _aug(10, **kw)


@pytest.mark.parametrize(
    "kw",
    [{"window_seconds": 0.0}, {"rate": 0.0}, {"rate": float("inf")}, {"jitter_seconds": -1.0},
     {"length_jitter": 1.0}, {"max_jobs": 0}],
)
def test_bad_augment_config(kw):
    with pytest.raises(ConfigError):
        AugmentConfig(**kw)


def test_empty_source_is_an_error():
    with pytest.raises(ConfigError, match="empty"):
        augment((), AugmentConfig(rate=2.0), np.random.default_rng(0))


def test_trace_preset_round_trip(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_trace(SOURCE, a)
    write_trace(SOURCE[:5], b)
    aug = AugmentConfig(window_seconds=5000.0, rate=2.0, resample=True)
    name = trace_preset_name([str(a), str(b)], base="tiny", agents=5, augment=aug)
    sim, tc = preset(name)
    assert sim.num_agents == 5 and sim.slot_seconds == preset("tiny")[0].slot_seconds
    assert tc.files == (str(a), str(b)) and tc.augment == aug
    # the seed picks a file and draws the episode; same seed, same episode
    eps = [generate_trace(tc, s) for s in range(8)]
    assert eps[3] == generate_trace(tc, 3)
    assert {len(e) <= 5 for e in eps} == {True, False}  # both files used
    plain_sim, plain = preset(trace_preset_name([str(b)]))
    assert plain_sim.num_agents == preset("small")[0].num_agents and plain.augment is None
    assert generate_trace(plain, 1) == SOURCE[:5]


@pytest.mark.parametrize(
    "suffix, msg",
    [(";nope=1", "bad option"), (";rate=x", "not valid"), (";rate=0", "rate"), (";agents=0", "agents"),
     (";base=huge", "unknown preset"), (";resample=maybe", "not valid")],
)
def test_bad_trace_presets(tmp_path, suffix, msg):
    a = tmp_path / "a.csv"
    write_trace(SOURCE, a)
    with pytest.raises(ConfigError, match=msg):
        preset(f"trace:{a}{suffix}")


def test_trace_preset_missing_file_and_reserved_characters(tmp_path):
    with pytest.raises(ConfigError, match="no trace file"):
        preset(f"trace:{tmp_path / 'missing.csv'}")
    with pytest.raises(ConfigError, match="names no trace file"):
        preset("trace:")
    with pytest.raises(ConfigError, match="must not contain"):
        trace_preset_name([str(tmp_path / "a;b.csv")])
    with pytest.raises(ConfigError, match="at least one"):
        trace_preset_name([])
