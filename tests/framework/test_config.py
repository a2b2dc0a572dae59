"""Config: TOML file < DL2_* env < flags, and clear errors."""

from __future__ import annotations

import pytest

from dl2_mesos.config import Config, load_config, parse_duration
from dl2_mesos.errors import ConfigError


def test_precedence_file_env_flags(tmp_path):
    f = tmp_path / "dl2.toml"
    f.write_text('master = "m1:5050"\nslot = "20m"\npolicy = "drf"\napi = "0.0.0.0:9000"\n'
                 '[policy_args]\nseed = 3\n')
    cfg = load_config(f, env={"DL2_POLICY": "tetris", "DL2_SLOT": "30s"}, overrides={"slot": "5s", "policy": None})
    assert cfg.master == "m1:5050" and cfg.policy == "tetris" and cfg.slot == 5.0
    assert cfg.api_port == 9000 and dict(cfg.policy_args) == {"seed": 3}
    assert load_config(env={"DL2_CONFIG": str(f)}).policy == "drf"


def test_defaults_and_derived():
    cfg = load_config(env={})
    assert cfg == Config() and cfg.zk == "none" and not cfg.uses_zookeeper
    z = load_config(env={"DL2_ZK": "zk://h1:2181,h2:2181/prod/dl2", "DL2_ONLINE_LEARNING": "false"})
    assert z.zk_hosts == "h1:2181,h2:2181" and z.zk_path == "/prod/dl2" and z.online_learning is False
    assert load_config(env={}, overrides={"api_token": "x"}).redacted()["api_token"] == "***"


@pytest.mark.parametrize("value,seconds", [(90, 90.0), ("90", 90.0), ("20m", 1200.0), ("1.5h", 5400.0),
                                           ("250ms", 0.25), ("1d", 86400.0)])
def test_durations(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"slot": "soon"}, "slot"),
        ({"slot": "0s"}, "slot"),
        ({"policy": "magic"}, "unknown policy"),
        ({"master": "http://x"}, "master"),
        ({"zk": "localhost:2181"}, "zk"),
        ({"api": "8080"}, "api"),
        ({"max_task_failures": "many"}, "max_task_failures"),
        ({"online_learning": "perhaps"}, "online_learning"),
        ({"policy_args": "{nope"}, "policy_args"),
        ({"zk_digest": "nocolon"}, "zk_digest"),
        ({"rollback_margin": "1.5"}, "rollback_margin"),
        ({"executor_mem": "nan"}, "executor_mem.*finite number"),
        ({"executor_cpus": float("inf")}, "executor_cpus.*finite number"),
        ({"slot": float("nan")}, "slot.*finite duration"),
        ({"zk_timeout": "0s"}, "zk_timeout: must be > 0"),
        ({"launch_timeout": 0}, "launch_timeout: must be > 0"),
        ({"progress_interval": "0ms"}, "progress_interval: must be > 0"),
        ({"rescale_resend": "0"}, "rescale_resend: must be > 0"),
        ({"api_header_timeout": "0"}, "api_header_timeout: must be > 0"),
        ({"connect_timeout": "0"}, "connect_timeout: must be > 0"),
        ({"master_calls": "100000000000"}, "master_calls: must be between 1 and 256"),
    ],
)
def test_bad_settings_name_the_key(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(env={}, overrides=kw)


def test_toml_nan_and_inf_are_refused_and_zero_stays_allowed_where_it_means_something(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("slot = inf\n")
    with pytest.raises(ConfigError, match="slot.*finite duration"):
        load_config(f, env={})
    f.write_text("executor_mem = nan\n")
    with pytest.raises(ConfigError, match="executor_mem.*finite number"):
        load_config(f, env={})
    f.write_text("kill_grace = 0\napi_keep_alive = '0s'\nfailover_timeout = 0\nmaster_calls = 256\n")
    cfg = load_config(f, env={})
    assert (cfg.kill_grace, cfg.api_keep_alive, cfg.failover_timeout, cfg.master_calls) == (0.0, 0.0, 0.0, 256)


def test_bad_file_and_unknown_key(tmp_path):
    with pytest.raises(ConfigError, match="config file"):
        load_config(tmp_path / "missing.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("slot = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, env={})
    bad.write_bytes(b'role = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"bad.toml: not UTF-8 text, as TOML must be \(byte offset 11\)"):
        load_config(bad, env={})
    unk = tmp_path / "unk.toml"
    unk.write_text("slott = 3")
    with pytest.raises(ConfigError, match="unknown key 'slott'"):
        load_config(unk, env={})
    with pytest.raises(ConfigError, match="DL2_SLOT"):
        load_config(env={"DL2_SLOT": "-3"})


def test_example_config_loads():
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "deploy" / "config" / "dl2.example.toml"
    cfg = load_config(example, env={})
    assert cfg.uses_zookeeper and cfg.policy == "dl2"
