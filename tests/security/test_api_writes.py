"""Attacks on the job API's write path: cross-site (non-JSON) posts, bodies that used to answer 500
after the job was stored, retried submissions (Idempotency-Key), deep nesting (issue 14, items 1, 2, 8, 16)."""

from __future__ import annotations

import json

import pytest

from .api_helpers import SPEC, api, stored_jobs


@pytest.mark.parametrize("content_type", ["text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          None])
def test_a_cross_site_simple_post_cannot_submit_a_job(content_type):
    # no token configured (a loopback deployment): a web page's form/fetch "simple request" used to
    # submit a job, since the API parsed any body as JSON
    c, h = api()
    headers = {"Content-Type": content_type} if content_type else {}
    r = c.post("/api/v1/jobs", content=json.dumps(SPEC).encode(), headers=headers)
    assert r.status_code == 415, r.text
    assert "application/json" in r.json()["error"]
    assert not h.core.jobs and not stored_jobs(h)
    assert c.post("/api/v1/jobs", json=SPEC).status_code == 201  # a JSON client still can


def test_cancel_with_a_non_json_body_is_refused():
    c, h = api()
    job_id = c.post("/api/v1/jobs", json=SPEC).json()["id"]
    r = c.request("DELETE", f"/api/v1/jobs/{job_id}", content=b"x", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415
    assert h.core.jobs[job_id].phase.value == "pending"
    assert c.delete(f"/api/v1/jobs/{job_id}").status_code == 200  # no body: fine


SURROGATE_COMMAND = '{"job_type": "resnet-50", "epochs": 3, "command": ["python", "\\ud800"]}'
SURROGATE_EXTRA = '{"job_type": "resnet-50", "epochs": 3, "extra": {"k": "\\udfff"}}'
SURROGATE_KEY = '{"job_type": "resnet-50", "epochs": 3, "extra": {"\\ud83d": 1}}'
HUGE_EPOCHS = '{"job_type": "resnet-50", "epochs": 1' + "0" * 400 + "}"
HUGE_PRIORITY = '{"job_type": "resnet-50", "epochs": 3, "priority": 1' + "0" * 3999 + "}"
HUGE_CPUS = '{"job_type": "resnet-50", "epochs": 3, "worker": {"cpus": 1' + "0" * 400 + ', "gpus": 0, "mem": 1}}'
DEEP_BRACKETS = '{"job_type": "resnet-50", "epochs": 3, "extra": {"x": ' + "[" * 5000 + "]" * 5000 + "}}"
DEEP_EXTRA_700 = '{"job_type": "resnet-50", "epochs": 3, "extra": ' + '{"a": ' * 700 + "1" + "}" * 700 + "}"
NAN_EXTRA = '{"job_type": "resnet-50", "epochs": 3, "extra": {"lr": NaN}}'
INFINITE_EPOCHS = '{"job_type": "resnet-50", "epochs": Infinity}'
DUPLICATE_KEYS = '{"job_type": "resnet-50", "epochs": 3, "epochs": 300}'
TYPE_ID = '{"job_type": "3", "epochs": 3}'


@pytest.mark.parametrize("body,status", [
    (SURROGATE_COMMAND, 422), (SURROGATE_EXTRA, 422), (SURROGATE_KEY, 422), (HUGE_EPOCHS, 422),
    (HUGE_PRIORITY, 422), (HUGE_CPUS, 422), (DEEP_BRACKETS, 400), (DEEP_EXTRA_700, 400), (NAN_EXTRA, 400),
    (INFINITE_EPOCHS, 400), (DUPLICATE_KEYS, 400), (TYPE_ID, 422),
], ids=["surrogate-command", "surrogate-extra", "surrogate-key", "401-digit-epochs", "4000-digit-priority",
        "401-digit-cpus", "5000-nested-brackets", "700-deep-extra", "nan", "infinity", "duplicate-keys",
        "type-id"])
def test_hostile_bodies_get_4xx_and_nothing_is_stored(body, status):
    c, h = api(api_token="t")
    r = c.post("/api/v1/jobs", content=body.encode(), headers={"Authorization": "Bearer t",
                                                               "Content-Type": "application/json"})
    assert r.status_code == status, r.text[:300]
    assert "error" in r.json() and len(r.text) < 2000  # the answer does not echo a huge number
    assert not h.core.jobs and not stored_jobs(h)
    # and the API still works
    r = c.post("/api/v1/jobs", json=SPEC, headers={"Authorization": "Bearer t"})
    assert r.status_code == 201 and c.get(f"/api/v1/jobs/{r.json()['id']}",
                                          headers={"Authorization": "Bearer t"}).status_code == 200


def test_a_stored_job_with_odd_values_still_reads_back():
    # records written before this validation (or values the executors report) must never make
    # a GET answer 500: non-ASCII is escaped, a non-finite number shows as null
    c, h = api()
    job_id = c.post("/api/v1/jobs", json=SPEC).json()["id"]
    job = h.core.jobs[job_id]
    job.message = "bad \ud800 text"
    job.measured_eps = float("nan")
    r = c.get(f"/api/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    assert r.json()["measured_epochs_per_second"] is None and r.json()["message"] == "bad \ud800 text"
    assert c.get("/api/v1/jobs").status_code == 200


def test_idempotency_key_makes_retries_safe():
    c, h = api(api_token="t")
    headers = {"Authorization": "Bearer t", "Idempotency-Key": "retry-0001"}
    first = c.post("/api/v1/jobs", json=SPEC, headers=headers)
    again = c.post("/api/v1/jobs", json=SPEC, headers=headers)
    assert first.status_code == 201 and again.status_code == 201
    assert first.json()["id"] == again.json()["id"] and len(h.core.jobs) == 1
    # the same key with another spec is a client bug: refused, nothing new stored
    other = c.post("/api/v1/jobs", json={**SPEC, "epochs": 4}, headers=headers)
    assert other.status_code == 409 and other.json()["job_id"] == first.json()["id"]
    assert len(stored_jobs(h)) == 1
    # another key is another job; a bad key is refused
    assert c.post("/api/v1/jobs", json=SPEC, headers={**headers, "Idempotency-Key": "retry-0002"}).json()["id"] \
        != first.json()["id"]
    assert c.post("/api/v1/jobs", json=SPEC, headers={**headers, "Idempotency-Key": "a b"}).status_code == 400
    assert len(stored_jobs(h)) == 2


def test_idempotency_key_survives_a_new_leader():
    c, h = api(api_token="t")
    headers = {"Authorization": "Bearer t", "Idempotency-Key": "k-1"}
    job_id = c.post("/api/v1/jobs", json=SPEC, headers=headers).json()["id"]
    from ..framework.conftest import Harness

    c2, h2 = api(Harness(kv=h.kv), api_token="t")  # a new leader on the same store
    r = c2.post("/api/v1/jobs", json=SPEC, headers=headers)
    assert r.status_code == 201 and r.json()["id"] == job_id and len(h2.core.jobs) == 1
