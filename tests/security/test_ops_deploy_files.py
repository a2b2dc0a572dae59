"""Issue 14 items 1 and 4 in the shipped deployments: they give the framework its API token under a name
it reads (so the API is never open), no default token, an unprivileged task user, and room for file
descriptors (systemd ``LimitNOFILE``)."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

import yaml

from dl2_mesos.config import check_exposure, load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _framework_config(env: dict[str, str], api: str):  # noqa: ANN202
    return load_config(DEPLOY / "config" / "dl2.example.toml", env=env, overrides={"api": api})


def test_ops_compose_gives_the_framework_a_token_it_reads():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    env = compose["x-dl2-framework"]["environment"]
    token_vars = [k for k in env if "TOKEN" in k]
    assert token_vars, env
    for name in token_vars:
        assert ":?" in env[name], f"{name} has a default value ({env[name]}): a known token is no token"
        cfg = _framework_config({name: "0123456789abcdef", "DL2_ZK_DIGEST": "dl2:pw"}, "0.0.0.0:8080")
        assert cfg.api_token == "0123456789abcdef"
        check_exposure(cfg)  # the compose command serves on 0.0.0.0: must pass with the token
    assert env.get("DL2_TASK_USER", "").endswith("nobody}")
    agent = compose["services"]["mesos-agent-gpu"]["environment"]
    assert agent.get("MESOS_SWITCH_USER") == "true"


def test_ops_marathon_gives_the_framework_a_token_it_reads():
    app = json.loads((DEPLOY / "marathon" / "dl2-framework.json").read_text())
    secret_env = {k: v for k, v in app["env"].items() if isinstance(v, dict) and "secret" in v}
    token_vars = [k for k in secret_env if "TOKEN" in k]
    assert token_vars
    for name in token_vars:
        cfg = _framework_config({name: "t0k3n", "DL2_ZK_DIGEST": "dl2:pw"}, "0.0.0.0:31000")
        assert cfg.api_token == "t0k3n"
        check_exposure(cfg)
    assert app["env"].get("DL2_TASK_USER") == "nobody"


def test_ops_systemd_unit_raises_the_open_files_limit():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((DEPLOY / "systemd" / "dl2-framework@.service").read_text())
    limit = unit["Service"].get("LimitNOFILE", "")
    assert re.fullmatch(r"\d+", limit) and int(limit) >= 16384, limit
    assert "--api-token " not in unit["Service"]["ExecStart"]


def test_ops_example_config_runs_tasks_unprivileged():
    cfg = load_config(DEPLOY / "config" / "dl2.example.toml", env={})
    assert cfg.task_user and cfg.task_user != "root"
