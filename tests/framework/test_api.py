"""The HTTP API through FastAPI's TestClient, backed by a real core on fakes."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from dl2_mesos.framework.api import create_app

from .conftest import Harness, make_offer


class CoreBackend:
    """Synchronous backend: the test thread plays the loop thread."""

    def __init__(self, h: Harness, leader: bool = True, leader_url: str | None = None) -> None:
        self.h = h
        self.leader = leader
        self.url = leader_url

    def view(self):
        return self.h.core.view()

    def is_leader(self):
        return self.leader

    def leader_url(self):
        return self.url

    def submit(self, spec):
        return self.h.core.submit(spec).public()

    def cancel(self, job_id):
        return self.h.core.cancel(job_id).public()

    def metrics(self):
        self.h.core.view()
        return self.h.core.metrics.render()

    def health(self):
        return {"status": "ok", "role": "leader" if self.leader else "standby"}


@pytest.fixture
def client():
    h = Harness()
    h.register()
    return TestClient(create_app(CoreBackend(h), api_token="s3cret")), h


AUTH = {"Authorization": "Bearer s3cret"}


def test_submit_list_get_cancel(client):
    c, h = client
    r = c.post("/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 3, "name": "r1"}, headers=AUTH)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert r.headers["location"] == f"/api/v1/jobs/{job_id}"
    assert h.store.load_jobs()[job_id].spec.epochs == 3
    jobs = c.get("/api/v1/jobs", headers=AUTH).json()["jobs"]
    assert [j["id"] for j in jobs] == [job_id] and jobs[0]["phase"] == "pending"
    assert c.get("/api/v1/jobs?phase=running", headers=AUTH).json()["jobs"] == []
    assert c.get(f"/api/v1/jobs/{job_id}", headers=AUTH).json()["spec"]["job_type"] == "resnet-50"
    h.offer(make_offer("a1"))
    h.tick()
    cl = c.get("/api/v1/cluster", headers=AUTH).json()
    assert cl["allocations"][job_id] == {"num_ps": 1, "num_workers": 1}
    assert cl["agents"][0]["agent_id"] == "a1" and cl["policy"] == "scripted"
    r = c.delete(f"/api/v1/jobs/{job_id}", headers=AUTH)
    assert r.status_code == 200 and r.json()["phase"] == "cancelled"
    m = c.get("/metrics").text
    assert 'dl2_jobs{phase="cancelled"} 1.0' in m and "dl2_decision_latency_seconds_count 1.0" in m
    assert "dl2_offers_total" in m
    assert c.get("/api/v1/policy", headers=AUTH).status_code == 200
    assert c.get("/health").json()["role"] == "leader"
    page = c.get("/", headers=AUTH)
    assert page.status_code == 200 and job_id in page.text and "<table" in page.text


def test_openapi_lists_the_endpoints(client):
    c, _ = client
    spec = c.get("/openapi.json").json()
    for path in ("/api/v1/jobs", "/api/v1/jobs/{job_id}", "/api/v1/cluster", "/api/v1/policy", "/health", "/metrics"):
        assert path in spec["paths"]
    assert "requestBody" in spec["paths"]["/api/v1/jobs"]["post"]


@pytest.mark.parametrize(
    "body,status,field",
    [
        ('{"job_type": "resnet-50", "epochs": ', 400, None),
        ("[1, 2]", 422, "<root>"),
        ('{"job_type": "gpt-17", "epochs": 3}', 422, "job_type"),
        ('{"job_type": "resnet-50", "epochs": -1}', 422, "epochs"),
        ('{"job_type": "resnet-50"}', 422, "epochs"),
        ('{"job_type": "resnet-50", "epochs": 3, "bogus": 1}', 422, "bogus"),
        ('{"job_type": "resnet-50", "epochs": 3, "worker": {"cpus": "x"}}', 422, "worker.cpus"),
        ('{"job_type": "resnet-50", "epochs": 3, "command": "rm -rf /"}', 422, "command"),
        ('\xff\xfe', 400, None),
    ],
)
def test_bad_job_specs_get_4xx_naming_the_problem(client, body, status, field):
    c, h = client
    r = c.post("/api/v1/jobs", content=body.encode("latin-1"), headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == status, r.text
    if field:
        assert r.json()["field"] == field
    assert not h.store.load_jobs()


def test_oversized_body_is_413(client):
    c, _ = client
    big = json.dumps({"job_type": "resnet-50", "epochs": 3, "extra": {"x": "a" * 70000}})
    assert c.post("/api/v1/jobs", content=big, headers=AUTH).status_code == 413

    def gen():  # chunked, no Content-Length
        for _ in range(80):
            yield b"a" * 1024

    assert c.post("/api/v1/jobs", content=gen(), headers=AUTH).status_code == 413


def test_writes_need_the_token(client):
    c, h = client
    ok = {"job_type": "resnet-50", "epochs": 3}
    assert c.post("/api/v1/jobs", json=ok).status_code == 401
    assert c.post("/api/v1/jobs", json=ok, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.post("/api/v1/jobs", json=ok, headers={"Authorization": "Basic s3cret"}).status_code == 401
    job_id = c.post("/api/v1/jobs", json=ok, headers=AUTH).json()["id"]
    assert c.delete(f"/api/v1/jobs/{job_id}").status_code == 401
    assert c.get("/api/v1/jobs").status_code == 401  # reads need a token too
    assert c.get("/api/v1/jobs", headers=AUTH).status_code == 200
    assert c.delete("/api/v1/jobs/nope", headers=AUTH).status_code == 404
    assert c.get("/api/v1/jobs/nope", headers=AUTH).status_code == 404
    assert c.get("/api/v1/jobs?phase=weird", headers=AUTH).status_code == 422


def test_standby_redirects_or_names_no_leader():
    h = Harness()
    c = TestClient(create_app(CoreBackend(h, leader=False, leader_url="http://leader:8080")), follow_redirects=False)
    r = c.post("/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 3})
    assert r.status_code == 307 and r.headers["location"] == "http://leader:8080/api/v1/jobs"
    assert c.get("/api/v1/jobs?phase=running").headers["location"] == "http://leader:8080/api/v1/jobs?phase=running"
    assert c.get("/health").status_code == 200
    c2 = TestClient(create_app(CoreBackend(h, leader=False, leader_url=None)))
    r = c2.get("/api/v1/jobs")
    assert r.status_code == 503 and "not the leader" in r.json()["error"]
    assert "standby" in c2.get("/").text
