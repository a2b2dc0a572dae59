"""Policies by name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dl2_mesos.errors import UnknownPolicy
from dl2_mesos.policy.registry import BASELINES, make_policy, policy_names
from dl2_mesos.policy_api import Policy


def test_names():
    assert set(policy_names()) == {"drf", "tetris", "optimus", "fifo", "srtf", "srtf-gain", "pollux", "tiresias", "dl2"}


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_are_policies(name):
    p = make_policy(name)
    assert isinstance(p, Policy) and p.name == name


def test_unknown_policy_lists_known():
    with pytest.raises(UnknownPolicy, match="known: drf, tetris"):
        make_policy("lottery")


def test_baselines_do_not_import_torch():
    code = (
        "import sys\n"
        "from dl2_mesos.policy.registry import make_policy, BASELINES\n"
        "from dl2_mesos.policy.sim.settings import preset\n"
        "from dl2_mesos.policy.sim.trace import generate_trace\n"
        "from dl2_mesos.policy.sim.simulator import run\n"
        "s, t = preset('tiny')\n"
        "for n in BASELINES: run(make_policy(n), s, generate_trace(t, 0))\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
