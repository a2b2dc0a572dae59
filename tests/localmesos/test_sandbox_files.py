"""The agents' files API (``/files/browse|read|download``) as Mesos agents serve it, confined to
the sandboxes: a real task writes its stdout, a real HTTP client reads it back."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from .conftest import RecordingScheduler, command_task


def _sandbox(cluster, agent_id: str, task_id: str) -> str:
    """The sandbox directory of ``task_id``'s executor, from the agent's ``/state`` (as the Mesos UI
    finds it)."""
    state = httpx.get(f"http://{cluster.agents[agent_id]}/state", timeout=10).json()
    for fw in state["frameworks"]:
        for ex in fw["executors"] + fw["completed_executors"]:
            if any(t["id"] == task_id for t in ex["tasks"]):
                return ex["directory"]
    raise AssertionError(f"no executor of {task_id} on {agent_id}")


@pytest.fixture
def finished_task(cluster, make_driver):
    sched = RecordingScheduler()
    sched.queue(command_task("files-t1", "printf 'line one\\nline two é\\n'; echo oops >&2"))
    make_driver(sched)
    done = sched.wait_state("files-t1", "TASK_FINISHED")
    aid = done["agent_id"]["value"]
    return f"http://{cluster.agents[aid]}", _sandbox(cluster, aid, "files-t1")


def test_read_browse_download_a_sandbox(finished_task):
    base, sandbox = finished_task
    listing = httpx.get(f"{base}/files/browse", params={"path": sandbox}, timeout=10)
    assert listing.status_code == 200
    entries = {e["path"]: e for e in listing.json()}
    assert f"{sandbox}/stdout" in entries and f"{sandbox}/stderr" in entries
    out = entries[f"{sandbox}/stdout"]
    assert out["mode"].startswith("-") and out["size"] == len("line one\nline two é\n".encode())

    size = httpx.get(f"{base}/files/read", params={"path": f"{sandbox}/stdout", "offset": -1}).json()
    assert size == {"data": "", "offset": out["size"]}
    whole = httpx.get(f"{base}/files/read", params={"path": f"{sandbox}/stdout", "offset": 0}).json()
    assert whole == {"data": "line one\nline two é\n", "offset": 0}
    part = httpx.get(
        f"{base}/files/read", params={"path": f"{sandbox}/stdout", "offset": 5, "length": 3}
    ).json()
    assert part == {"data": "one", "offset": 5}
    # a read never ends inside a UTF-8 character: "é" is two bytes at offset 18
    cut = httpx.get(
        f"{base}/files/read", params={"path": f"{sandbox}/stdout", "offset": 9, "length": 10}
    ).json()
    assert cut == {"data": "line two ", "offset": 9}
    past = httpx.get(f"{base}/files/read", params={"path": f"{sandbox}/stdout", "offset": 999}).json()
    assert past == {"data": "", "offset": out["size"]}
    err = httpx.get(f"{base}/files/read", params={"path": f"{sandbox}/stderr"}).json()
    assert "oops" in err["data"]

    dl = httpx.get(f"{base}/files/download", params={"path": f"{sandbox}/stdout"})
    assert dl.status_code == 200 and dl.content == "line one\nline two é\n".encode()
    assert "attachment" in dl.headers["content-disposition"]


def test_bad_requests_get_mesos_style_reasons(finished_task):
    base, sandbox = finished_task
    r = httpx.get(f"{base}/files/read")
    assert r.status_code == 400 and "path" in r.text
    r = httpx.get(f"{base}/files/read", params={"path": f"{sandbox}/stdout", "offset": "x"})
    assert r.status_code == 400 and "offset" in r.text
    r = httpx.get(f"{base}/files/read", params={"path": f"{sandbox}/stdout", "offset": -5})
    assert r.status_code == 400
    r = httpx.get(f"{base}/files/read", params={"path": f"{sandbox}/stdout", "length": -1})
    assert r.status_code == 400
    r = httpx.get(f"{base}/files/read", params={"path": sandbox})
    assert r.status_code == 400 and "directory" in r.text
    r = httpx.get(f"{base}/files/browse", params={"path": f"{sandbox}/stdout"})
    assert r.status_code == 400
    assert httpx.get(f"{base}/files/read", params={"path": f"{sandbox}/nope"}).status_code == 404
    assert httpx.get(f"{base}/files/download", params={"path": sandbox}).status_code == 400


def test_paths_outside_the_sandboxes_are_not_served(cluster, finished_task, tmp_path):
    base, sandbox = finished_task
    secret = tmp_path / "secret.txt"
    secret.write_text("do not serve me")
    os.symlink(secret, Path(sandbox) / "escape")
    os.symlink("/etc", Path(sandbox) / "etc-link")
    depth = len(Path(sandbox).parts)
    for path in (
        str(secret),
        "/etc/passwd",
        f"{sandbox}/../../../../../../../../../../etc/passwd",
        f"{sandbox}/{'../' * depth}{str(secret).lstrip('/')}",
        f"{sandbox}/escape",
        f"{sandbox}/etc-link/passwd",
        str(cluster.work_dir),  # the parent of every agent's sandboxes
        "stdout",  # relative
        f"{sandbox}/stdout\x00",
    ):
        for endpoint in ("read", "download", "browse"):
            r = httpx.get(f"{base}/files/{endpoint}", params={"path": path}, timeout=10)
            assert r.status_code in (400, 404), (endpoint, path, r.status_code)
            assert b"do not serve me" not in r.content and b"root:" not in r.content
    # the symlinked folder is not listed through browse either, but the sandbox itself is
    assert httpx.get(f"{base}/files/browse", params={"path": f"{sandbox}/etc-link"}).status_code == 404
    assert httpx.get(f"{base}/files/browse", params={"path": sandbox}).status_code == 200


def test_an_agent_does_not_serve_another_agents_sandbox(cluster, finished_task):
    base, sandbox = finished_task
    other = next(f"http://{e}" for e in cluster.agents.values() if f"http://{e}" != base)
    assert httpx.get(f"{other}/files/read", params={"path": f"{sandbox}/stdout"}).status_code == 404
