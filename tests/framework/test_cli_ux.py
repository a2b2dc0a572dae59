"""What people read from the CLI: human times and a JCT column in ``dl2 jobs``, ``dl2 cancel`` of an
ended job (the API answers 409), and ``dl2 framework --help`` naming every default."""

from __future__ import annotations

import time

from click.testing import CliRunner

from dl2_mesos.framework import client_cli
from dl2_mesos.framework.human_time import clock, duration, jct
from dl2_mesos.framework.scheduler_cli import framework

from .test_api import AUTH, client  # noqa: F401 (the API-on-a-real-core fixture)


def test_duration_and_clock():
    assert [duration(x) for x in (None, -1, 0, 44.6, 60, 192, 3600, 7500, 86400 + 4 * 3600)] == [
        "-",
        "-",
        "0s",
        "45s",
        "1m00s",
        "3m12s",
        "1h00m",
        "2h05m",
        "1d04h",
    ]
    now = time.time()
    assert clock(None) == "-" and clock(now - 5, now) == time.strftime("%H:%M:%S", time.localtime(now - 5))
    assert clock(now - 3 * 86400, now) == time.strftime("%Y-%m-%d %H:%M", time.localtime(now - 3 * 86400))


def test_jct_only_for_ended_jobs():
    job = {
        "phase": "finished",
        "submitted_at": 100.0,
        "phase_times": {"pending": 100.0, "running": 150.0, "finished": 400.0},
    }
    assert jct(job) == 300.0
    assert jct({**job, "phase": "running"}) is None
    assert jct({**job, "phase": "cancelled", "phase_times": {"cancelled": 130.0}}) == 30.0


def test_jobs_table_shows_submitted_age_and_jct(monkeypatch):
    now = time.time()
    page = {
        "jobs": [
            {
                "id": "j-done",
                "job_type": "resnet-50",
                "phase": "finished",
                "epochs": 5,
                "epochs_done": 5,
                "num_ps": 0,
                "num_workers": 0,
                "submitted_at": now - 3700,
                "phase_times": {"finished": now - 100},
            },
            {
                "id": "j-run",
                "job_type": "vgg-16",
                "phase": "running",
                "epochs": 5,
                "epochs_done": 1.25,
                "num_ps": 1,
                "num_workers": 2,
                "submitted_at": now - 75,
                "started_at": now - 60,
                "phase_times": {"running": now - 60},
            },
            {
                "id": "j-wait",
                "job_type": "resnet-50",
                "phase": "pending",
                "epochs": 5,
                "epochs_done": 0,
                "num_ps": 0,
                "num_workers": 0,
                "submitted_at": now - 40,
                "phase_times": {"pending": now - 40},
                "pending_reason": {"code": "waiting_for_capacity", "short": "needs 1 gpus/worker, free 0",
                                   "message": "..."},
            },
        ],
        "next_cursor": None,
    }
    monkeypatch.setattr(client_cli, "_call", lambda *a, **k: page)
    r = CliRunner().invoke(client_cli.jobs, [])
    assert r.exit_code == 0, r.output
    header, done, run, waiting = r.output.splitlines()
    assert header.split()[-5:] == ["SUBMITTED", "AGE", "WAIT", "JCT", "REASON"]
    assert done.split()[-3:] == ["1h01m", "-", "1h00m"]  # age 3700 s; never ran: no wait; JCT 3600 s
    assert run.split()[-3:] == ["1m15s", "15s", "-"] and "1.2/5" in run  # started 15 s after submission
    # a pending job: its wait so far and why it waits
    assert waiting.split()[-8:-5] == ["40s", "40s", "-"]  # age, wait so far, no JCT yet
    assert waiting.endswith("  needs 1 gpus/worker, free 0")


def test_cancel_of_an_ended_job_is_a_409_and_the_cli_says_so(client, monkeypatch):  # noqa: F811
    c, h = client
    job_id = c.post("/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 3}, headers=AUTH).json()["id"]
    assert c.delete(f"/api/v1/jobs/{job_id}", headers=AUTH).json()["phase"] == "cancelled"
    again = c.delete(f"/api/v1/jobs/{job_id}", headers=AUTH)
    assert again.status_code == 409 and again.json()["phase"] == "cancelled"
    assert "already cancelled" in again.json()["error"]
    assert c.get(f"/api/v1/jobs/{job_id}", headers=AUTH).json()["phase"] == "cancelled"  # nothing changed

    def call(method, api, path, token="", body=None):
        r = c.request(method, path, headers=AUTH)
        if r.status_code >= 400:
            raise client_cli.ApiError(r.status_code, r.json()["error"], r.json())
        return r.json()

    monkeypatch.setattr(client_cli, "_call", call)
    out = CliRunner().invoke(client_cli.cancel, [job_id])
    assert out.exit_code == 1 and f"{job_id} already cancelled: nothing to cancel" in out.output
    missing = CliRunner().invoke(client_cli.cancel, ["nope"])
    assert missing.exit_code == 1 and "404" in missing.output


def test_framework_help_names_the_defaults():
    out = CliRunner().invoke(framework, ["--help"], terminal_width=200)
    assert out.exit_code == 0
    lines = {ln.split()[0]: ln for ln in out.output.splitlines() if ln.strip().startswith("--")}
    assert "[default: 127.0.0.1:5050]" in lines["--master"]
    assert "[default: 1200s (20m00s)]" in lines["--slot"] and "[default: dl2]" in lines["--policy"]
    assert "[default: none]" in lines["--zk"] and "[default: 0.0.0.0:8080]" in lines["--api"]
    assert "127.0.0.1:5050" in out.output.split("Options:")[0]  # the fallback master, in the text too
    assert all(
        "default" in ln
        for flag, ln in lines.items()
        if flag in ("--offer-wait", "--launch-timeout", "--kill-grace", "--failover-timeout")
    )


def test_a_bad_token_file_is_one_clear_line_before_any_call(tmp_path):
    api = "http://127.0.0.1:9"  # nothing listens: a call would fail differently
    cases = {
        "latin1": (b"s\xe9cret\n", "is not UTF-8 text (byte offset 1)"),
        "empty": (b"\n  \n", "is empty"),
    }
    for name, (content, msg) in cases.items():
        f = tmp_path / name
        f.write_bytes(content)
        for command, args in ((client_cli.jobs, []), (client_cli.submit, ["--type", "resnet-50", "--epochs", "1"])):
            res = CliRunner().invoke(command, [*args, "--api", api, "--token-file", str(f)])
            assert res.exit_code == 1 and f"token file: {f} {msg}" in res.output, res.output
            assert isinstance(res.exception, SystemExit)
    ok = tmp_path / "ok"
    ok.write_text("  tok-1 \nsecond line ignored\n")
    assert client_cli.resolve_token("flag", str(ok)) == "tok-1"
    assert client_cli.resolve_token("flag", None) == "flag"


def test_a_job_argument_that_is_not_a_job_id_is_refused_before_any_call(monkeypatch):
    calls = []
    monkeypatch.setattr(client_cli, "_call", lambda *a, **k: calls.append(a) or {"id": a[2], "phase": "x"})
    for command in (client_cli.job, client_cli.cancel, client_cli.logs):
        for bad in ("../../v1/jobs", "a?phase=running", "a/b", "Upper-1", "", ".hidden"):
            res = CliRunner().invoke(command, [bad, "--api", "http://127.0.0.1:9"])
            assert res.exit_code == 2 and "is not a job id" in res.output, (command.name, bad, res.output)
    assert calls == []
    res = CliRunner().invoke(client_cli.cancel, ["resnet-50-1a2b3c4d", "--api", "http://127.0.0.1:9"])
    assert res.exit_code == 0 and calls[0][:3] == ("DELETE", "http://127.0.0.1:9", "/api/v1/jobs/resnet-50-1a2b3c4d")
