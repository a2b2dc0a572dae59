"""``bench/rollout_improvement.py``: the rollout algorithm's guarantee holds, and its forks replay
the run they were forked from exactly (otherwise the model card's gain would be an artefact)."""

from __future__ import annotations

import pytest

from dl2_mesos.policy.dl2.dl2_policy import DL2Policy
from dl2_mesos.policy.dl2.rollout import make_sim

from .conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    yield from load_bench("rollout_improvement")


@pytest.fixture(scope="module")
def policy():
    return DL2Policy()


def test_a_fork_replays_the_greedy_run_exactly(bench, policy):
    """Forked at slot 0 with the greedy decision and run to the end, a fork spends the greedy
    run's job-slots (less the first slot's): the simulator state is copied, not shared."""
    preset, seed = "tiny@1", 1
    _, greedy_cost = bench.greedy_run(preset, seed, policy)
    sim = make_sim(preset, seed)
    state = sim.state()
    first = policy.decide(state)
    assert bench.job_slots_after(sim, first, policy, 0) + len(state.jobs) == greedy_cost
    assert sim.slot == 0 and sim.state() is state  # the original did not move


def test_the_improved_run_never_costs_more_and_does_deviate(bench, policy):
    results = [bench.improved_run("tiny@1", seed, policy, candidates=4, horizon=0) for seed in (1, 2, 3)]
    for r in results:
        assert r.improved_job_slots <= r.greedy_job_slots, r
    assert sum(r.switched for r in results) > 0, "no deviation was ever better: the candidates are not reaching anything"
    assert any(r.improved_job_slots < r.greedy_job_slots for r in results)


def test_bad_options_are_refused(bench, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--candidates", "0"])
    assert exc.value.code == 2
    assert "--candidates must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        bench.main(["--seeds", "9-3"])
    assert exc.value.code == 2
    assert "is not a seed, list (1,2,5) or range (1-5)" in capsys.readouterr().err
