"""``bench/train_from_scratch.py``: the chain it runs is the one that made the shipped models
(each step starts where the one before ended, every file it names exists), and its comparison
tells identical weights from different ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from .conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    yield from load_bench("train_from_scratch")


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_each_step_starts_from_the_one_before_and_ends_at_the_shipped_model(bench, tmp_path):
    chain = bench.CHAIN
    assert len({s.name for s in chain}) == len(chain)
    assert chain[-1].shipped == "dl2.pt", "the chain ends at the shipped model"
    first = bench.command(chain[0], tmp_path, 2)
    assert "--init" not in first, "from random weights"
    for before, step in zip(chain, chain[1:]):
        args = bench.command(step, tmp_path, 2)
        starts = [a for a in args if a == str(tmp_path / f"{before.name}.pt")]
        assert starts, f"{step.name} starts from {before.name}'s output"
        assert _value(args, "--out") == str(tmp_path / f"{step.name}.pt")
    for step in chain:
        assert step.shipped is None or (bench.MODELS / step.shipped).is_file()
        for arg in bench.command(step, tmp_path, 2):
            if arg.startswith("trace:"):
                assert Path(arg[len("trace:"):].split(";")[0]).is_file(), arg


def test_start_model_replaces_only_the_first_steps_checkpoint(bench, tmp_path):
    step = next(s for s in bench.CHAIN if s.name == "L4")
    args = bench.command(step, tmp_path, 3, start_model=Path("/m/v.pt"))
    assert _value(args, "--init") == "/m/v.pt" and _value(args, "--out") == str(tmp_path / "L4.pt")
    assert _value(args, "--workers") == "3"


def test_compare_tells_identical_weights_from_different_ones(bench, tmp_path):
    shipped = bench.MODELS / "dl2.pt"
    assert bench.compare(shipped, shipped) == "identical"
    copy = tmp_path / "copy.pt"
    shutil.copy(shipped, copy)
    doc = torch.load(copy, weights_only=False)
    name = next(iter(doc["actor"]))
    doc["actor"][name] = doc["actor"][name] + 0.5
    torch.save(doc, copy)
    assert bench.compare(copy, shipped) == "max |diff| 0.5"
    assert bench.compare(copy, bench.MODELS / "dl2-elastic-v8.pt") == "config differs"  # v8: no pruning
