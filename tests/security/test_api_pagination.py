"""GET /api/v1/jobs is paginated with a stable order, and `dl2 jobs` follows the pages (issue 14, item 15)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from .api_helpers import AUTH, SPEC, api


def _all_pages(c, limit, headers=AUTH, **extra):
    ids, cursor, pages = [], None, 0
    while True:
        params = {"limit": limit, **extra, **({"cursor": cursor} if cursor else {})}
        r = c.get("/api/v1/jobs", params=params, headers=headers)
        assert r.status_code == 200, r.text
        pages += 1
        ids += [j["id"] for j in r.json()["jobs"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return ids, pages


def test_pages_cover_every_job_once_in_submission_order():
    c, h = api(api_token="write-s3cret")
    ids = []
    for _ in range(7):
        ids.append(c.post("/api/v1/jobs", json=SPEC, headers=AUTH).json()["id"])
        h.clock.advance(1)
    got, pages = _all_pages(c, 3)
    assert got == ids and pages == 3
    # a job submitted between two page requests neither repeats nor hides a job
    first = c.get("/api/v1/jobs", params={"limit": 3}, headers=AUTH).json()
    late = c.post("/api/v1/jobs", json=SPEC, headers=AUTH).json()["id"]
    rest = c.get("/api/v1/jobs", params={"limit": 100, "cursor": first["next_cursor"]}, headers=AUTH).json()
    assert [j["id"] for j in first["jobs"] + rest["jobs"]] == ids + [late] and rest["next_cursor"] is None
    # the default page is bounded, and a filter pages too
    assert len(c.get("/api/v1/jobs", headers=AUTH).json()["jobs"]) == 8
    c.delete(f"/api/v1/jobs/{ids[1]}", headers=AUTH)
    assert _all_pages(c, 1, phase="cancelled") == ([ids[1]], 1)


@pytest.mark.parametrize("params", [{"limit": "0"}, {"limit": "1001"}, {"limit": "ten"}, {"limit": "1\n"},
                                    {"cursor": "garbage"}, {"cursor": "W10="}, {"cursor": "WyJ4IiwgMV0="}])
def test_bad_page_parameters_are_422(params):
    c, _ = api()
    r = c.get("/api/v1/jobs", params=params)
    assert r.status_code == 422 and r.json()["error"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_cli_lists_every_page(monkeypatch):
    import uvicorn
    from click.testing import CliRunner

    from dl2_mesos.framework import api as api_module
    from dl2_mesos.framework.client_cli import jobs as jobs_cmd

    monkeypatch.setattr(api_module, "DEFAULT_PAGE", 2)  # the CLI must follow next_cursor
    c, h = api(api_token="write-s3cret")
    ids = [c.post("/api/v1/jobs", json=SPEC, headers=AUTH).json()["id"] for _ in range(5)]
    app = c.app
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        out = CliRunner().invoke(jobs_cmd, ["--api", f"http://127.0.0.1:{port}", "--token", "write-s3cret"])
        assert out.exit_code == 0, out.output
        assert all(i in out.output for i in ids), out.output
        refused = CliRunner().invoke(jobs_cmd, ["--api", f"http://127.0.0.1:{port}"])
        assert refused.exit_code != 0 and "401" in refused.output
    finally:
        server.should_exit = True
        t.join(5)
