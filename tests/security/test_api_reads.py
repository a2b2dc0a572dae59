"""Reads of the job API need a token, and secrets in job arguments are not shown (issue 14, item 11)."""

from __future__ import annotations

import base64

import pytest

from .api_helpers import AUTH, READ, READ_TOKEN, SPEC, TOKEN, api

READ_PATHS = ["/api/v1/jobs", "/api/v1/jobs/{id}", "/api/v1/cluster", "/api/v1/policy", "/api/v1/history", "/"]


@pytest.fixture
def secured():
    c, h = api(api_token=TOKEN, read_token=READ_TOKEN)
    job_id = c.post("/api/v1/jobs", json=SPEC, headers=AUTH).json()["id"]
    return c, h, job_id


@pytest.mark.parametrize("path", READ_PATHS)
def test_reads_need_a_token_by_default(secured, path):
    c, _, job_id = secured
    url = path.format(id=job_id)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + base64.b64encode(
            b"u:wrong").decode()}, {"Authorization": "Basic !!!"}):
        r = c.get(url, headers=headers)
        assert r.status_code == 401, (url, headers, r.text)
        assert r.headers["www-authenticate"].startswith("Basic")  # a browser prompts for it
        assert job_id not in r.text
    for headers in (AUTH, READ, {"Authorization": "Basic " + base64.b64encode(f"me:{READ_TOKEN}".encode()).decode()}):
        assert c.get(url, headers=headers).status_code == 200, (url, headers)


def test_the_read_token_cannot_write_and_health_stays_open(secured):
    c, _, job_id = secured
    assert c.post("/api/v1/jobs", json=SPEC, headers=READ).status_code == 401
    assert c.delete(f"/api/v1/jobs/{job_id}", headers=READ).status_code == 401
    assert c.get("/health").status_code == 200


def test_open_reads_is_an_explicit_choice():
    c, _ = api(api_token=TOKEN, open_reads=True)
    assert c.get("/api/v1/jobs").status_code == 200
    assert c.post("/api/v1/jobs", json=SPEC).status_code == 401


ARGV = ["python", "train.py", "--password=hunter2", "--api-key", "abc123", "DB_TOKEN=zzz",
        "--data", "s3://user:pa55@bucket/x", "--lr=0.1", "--secretKey", "k9", "-p", "not-a-secret"]
EXTRA = {"db": {"password": "pw1", "host": "db1"}, "aws_secret_access_key": "AKIAX", "lr": 0.1,
         "apiToken": "tk", "items": [{"auth": "a1"}]}
SECRETS = ["hunter2", "abc123", "zzz", "pa55", "k9", "pw1", "AKIAX", "tk", "a1"]


def test_secret_looking_values_are_redacted_and_the_write_token_sees_them(secured):
    c, h, _ = secured
    r = c.post("/api/v1/jobs", json={**SPEC, "command": ARGV, "extra": EXTRA}, headers=AUTH)
    assert r.status_code == 201
    job_id = r.json()["id"]
    for shown in (r.json(), c.get(f"/api/v1/jobs/{job_id}", headers=READ).json(),
                  c.get(f"/api/v1/jobs/{job_id}", headers=AUTH).json()):
        text = str(shown)
        assert not [s for s in SECRETS if f"'{s}'" in text or f"={s}'" in text or f":{s}@" in text], text
        cmd = shown["spec"]["command"]
        assert cmd[2] == "--password=***" and cmd[4] == "***" and cmd[5] == "DB_TOKEN=***"
        assert cmd[7] == "s3://user:***@bucket/x" and cmd[8] == "--lr=0.1" and cmd[10] == "***"
        assert cmd[12] == "not-a-secret"
        assert shown["spec"]["extra"]["db"] == {"password": "***", "host": "db1"} and shown["spec"]["extra"]["lr"] == 0.1
    # the stored job keeps them (the executor needs them), and the write token can read them back
    assert list(h.core.jobs[job_id].spec.command) == ARGV
    full = c.get(f"/api/v1/jobs/{job_id}?full=true", headers=AUTH)
    assert full.status_code == 200 and full.json()["spec"]["command"] == ARGV and full.json()["spec"]["extra"] == EXTRA
    assert c.get(f"/api/v1/jobs/{job_id}?full=true", headers=READ).status_code == 403
