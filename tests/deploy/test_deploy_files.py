"""What can be validated of deploy/ without a real Mesos cluster (see deploy/README.md).

The compose file parses and wires the expected services; the framework commands that the
compose file, the systemd unit and the Marathon app run exist and accept their flags; the
example config loads; the executor command an agent runs is importable.
"""

from __future__ import annotations

import configparser
import json
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from dl2_mesos.cli import main as dl2_main
from dl2_mesos.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _parse_dl2(argv: list[str]) -> click.Context:
    """Parse a `dl2 ...` command line with the real CLI, without running it."""
    assert argv[0].endswith("dl2"), argv
    with click.Context(dl2_main) as group_ctx:
        cmd = dl2_main.get_command(group_ctx, argv[1])
    assert cmd is not None, f"no such dl2 command: {argv[1]}"
    return cmd.make_context(argv[1], list(argv[2:]))


def test_compose_file_parses_and_has_the_cluster():
    doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = doc["services"]
    for name in ("zookeeper", "mesos-master", "mesos-agent-gpu", "namenode", "datanode",
                 "dl2-framework-a", "dl2-framework-b"):
        assert name in services, name
    agent_env = services["mesos-agent-gpu"]["environment"]
    assert "gpu/nvidia" in agent_env["MESOS_ISOLATION"]
    json.loads(agent_env["MESOS_EXECUTOR_ENVIRONMENT_VARIABLES"])
    for replica in ("dl2-framework-a", "dl2-framework-b"):
        ctx = _parse_dl2(services[replica]["command"])
        assert ctx.params["config_path"] == "/etc/dl2/dl2.toml"
        for dep in services[replica]["depends_on"]:
            assert dep in services
        for vol in services[replica].get("volumes", []):
            src = vol.split(":")[0]
            assert (DEPLOY / src).exists(), src


def test_example_config_loads():
    cfg = load_config(DEPLOY / "config" / "dl2.example.toml", env={})
    assert cfg.master.startswith("zk://") or ":" in cfg.master
    assert cfg.policy in ("dl2", "drf", "tetris", "optimus", "fifo", "srtf")


def test_bad_config_is_refused_with_a_clear_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('policy = "dl2"\nslot = "twenty minutes"\nnot_a_key = 1\n')
    with pytest.raises(Exception) as info:
        load_config(bad, env={})
    assert "not_a_key" in str(info.value) or "slot" in str(info.value)


def test_systemd_unit_runs_an_existing_command():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(DEPLOY / "systemd" / "dl2-framework@.service")
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0] == "/opt/dl2/venv/bin/dl2"  # the path the Dockerfiles/bootstrap install to
    ctx = _parse_dl2(["dl2"] + argv[1:])
    assert ctx.params["config_path"] == "/etc/dl2/dl2.toml"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_marathon_app_runs_an_existing_command():
    app = json.loads((DEPLOY / "marathon" / "dl2-framework.json").read_text())
    argv = shlex.split(app["cmd"].replace("$PORT0", "8080"))
    ctx = _parse_dl2(["dl2"] + argv[1:])
    assert ctx.params["api"] == "0.0.0.0:8080"
    assert app["healthChecks"][0]["path"] == "/health"
    assert app["instances"] >= 2


def test_executor_command_of_the_agents_starts(tmp_path):
    # The command the framework puts in ExecutorInfo; without the agent's MESOS_* environment
    # it must exit with a clear error instead of hanging.
    out = subprocess.run([sys.executable, "-m", "dl2_mesos.executor"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode != 0
    assert "MESOS_" in (out.stderr + out.stdout)
