"""Issue 14 items 1 (token names, open API), 11 (secrets off the command line), 13 (one framework per
state folder) and 17 (exit codes): ``dl2 framework`` and ``dl2 local-cluster`` as real processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dl2_mesos.config import ConfigError, check_exposure, load_config
from dl2_mesos.services.zookeeper import free_port

DL2 = str(Path(sys.executable).with_name("dl2"))


def _run(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DL2_")}
    return subprocess.run([DL2, *args], capture_output=True, text=True, timeout=timeout,
                          env={**full_env, **(env or {})})


def _one_line_error(r: subprocess.CompletedProcess) -> str:
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    assert "Traceback" not in r.stderr, r.stderr
    assert len(errors) == 1, r.stderr
    return errors[0]


# -- item 1: one token variable name on both sides ---------------------------------------------------
def test_ops_framework_accepts_both_token_variable_names(tmp_path):
    assert load_config(env={"DL2_TOKEN": "a"}).api_token == "a"  # what compose/Marathon set
    assert load_config(env={"DL2_API_TOKEN": "b", "DL2_TOKEN": "a"}).api_token == "b"  # the documented name wins
    f = tmp_path / "token"
    f.write_text("from-file\n")
    assert load_config(env={"DL2_API_TOKEN_FILE": str(f)}).api_token == "from-file"
    assert load_config(env={}, overrides={"api_token_file": str(f)}).api_token == "from-file"
    with pytest.raises(ConfigError, match="api_token_file"):
        load_config(env={}, overrides={"api_token_file": str(tmp_path / "missing")})
    f.write_bytes(b"\xfftoken\n")
    with pytest.raises(ConfigError, match=r"api_token_file: .*token is not UTF-8 text \(byte offset 0\)"):
        load_config(env={}, overrides={"api_token_file": str(f)})


def test_ops_open_api_off_loopback_is_refused(tmp_path):
    for api in ("0.0.0.0:8080", "10.1.2.3:80", ":8080", "myhost:8080"):
        with pytest.raises(ConfigError, match="without a token"):
            check_exposure(load_config(env={}, overrides={"api": api}))
    check_exposure(load_config(env={}, overrides={"api": "127.0.0.1:8080"}))
    check_exposure(load_config(env={}, overrides={"api": "0.0.0.0:8080", "api_token": "t"}))
    check_exposure(load_config(env={}, overrides={"api": "0.0.0.0:8080", "insecure_no_auth": True}))
    r = _run("framework", "--zk", "none", "--state-dir", str(tmp_path / "s"), "--policy", "fifo",
             "--api", f"0.0.0.0:{free_port()}")
    assert r.returncode == 2
    assert "without a token" in _one_line_error(r) and "--insecure-no-auth" in r.stderr


def test_ops_insecure_no_auth_is_explicit_and_token_flag_warns(tmp_path):
    dead = free_port()
    common = ("framework", "--zk", "none", "--policy", "fifo", "--master", f"127.0.0.1:{dead}",
              "--connect-timeout", "1s", "--api", f"0.0.0.0:{free_port()}")
    r = _run(*common, "--state-dir", str(tmp_path / "a"), "--insecure-no-auth")
    assert r.returncode == 2 and "unreachable" in _one_line_error(r)  # past the check: it tried the master
    r = _run(*common, "--state-dir", str(tmp_path / "b"), "--api-token", "on-the-command-line")
    assert "visible to every user in ps" in r.stderr
    r = _run(*common, "--state-dir", str(tmp_path / "c"), env={"DL2_API_TOKEN": "from-env"})
    assert "visible to every user in ps" not in r.stderr and "from-env" not in r.stderr


# -- item 13: one framework per state folder --------------------------------------------------------
def test_ops_second_framework_on_the_same_state_dir_exits_2(tmp_path):
    state = tmp_path / "state"
    first = subprocess.Popen([DL2, "framework", "--zk", "none", "--state-dir", str(state), "--policy", "fifo",
                              "--master", f"127.0.0.1:{free_port()}", "--connect-timeout", "60s",
                              "--api", f"127.0.0.1:{free_port()}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (state / ".lock").exists() or not (state / ".lock").read_text().strip():
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        r = _run("framework", "--zk", "none", "--state-dir", str(state), "--policy", "fifo",
                 "--api", f"127.0.0.1:{free_port()}")
        assert r.returncode == 2
        assert "in use by another framework" in _one_line_error(r) and str(first.pid) in r.stderr
    finally:
        first.kill()  # it is still retrying the (absent) master; the lock goes with the process
        first.wait(30)
    r = _run("framework", "--zk", "none", "--state-dir", str(state), "--policy", "fifo",
             "--master", f"127.0.0.1:{free_port()}", "--connect-timeout", "1s", "--api", f"127.0.0.1:{free_port()}")
    assert "in use" not in r.stderr and "unreachable" in _one_line_error(r)


# -- item 17: exit codes -------------------------------------------------------------------------------
def test_ops_api_port_taken_is_one_line_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _run("framework", "--zk", "none", "--state-dir", str(tmp_path / "s"), "--policy", "fifo",
                 "--master", f"127.0.0.1:{free_port()}", "--api", f"127.0.0.1:{port}")
    assert r.returncode == 2
    assert "cannot listen on" in _one_line_error(r)


def test_ops_bad_master_exits_2(tmp_path):
    r = _run("framework", "--zk", "none", "--state-dir", str(tmp_path / "s"), "--master", "http://127.0.0.1:5050")
    assert r.returncode == 2
    assert "master" in _one_line_error(r)


def test_ops_local_cluster_with_unreachable_zookeeper_is_one_line_exit_2(tmp_path):
    r = _run("local-cluster", "--agents", "0", "--port", "0", "--zk", f"zk://127.0.0.1:{free_port()}/mesos",
             "--work-dir", str(tmp_path), timeout=90)
    assert r.returncode == 2
    assert "ZooKeeper" in _one_line_error(r) and "unreachable" in r.stderr
