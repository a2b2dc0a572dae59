"""Names, ids and types are validated with a full match: a trailing newline is refused before
anything is stored, on the file store and on ZooKeeper, and the leader keeps leading (issue 14, item 3)."""

from __future__ import annotations

import queue

import pytest
from fastapi.testclient import TestClient

from dl2_mesos.errors import InvalidJobSpec
from dl2_mesos.framework.api import create_app
from dl2_mesos.framework.kv import FileKV, ZooKeeperKV
from dl2_mesos.framework.loop import SchedulingLoop
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.jobs import JobSpec

from ..framework.conftest import Harness
from .api_helpers import LoopBackend

NEWLINE_NAMES = ["ok\n", "ok\r\n", "\nok", "ok\n\n", "ok\x00"]


@pytest.mark.parametrize("name", NEWLINE_NAMES)
def test_jobspec_refuses_a_trailing_newline(name):
    with pytest.raises(InvalidJobSpec) as ei:
        JobSpec(job_type="resnet-50", epochs=1, name=name)
    assert ei.value.field == "name"
    for bad_type in ("resnet-50\n", "3"):
        with pytest.raises(InvalidJobSpec):
            JobSpec(job_type=bad_type, epochs=1)


def test_store_keys_are_full_matched():
    from dl2_mesos.framework.records import valid_job_id

    assert valid_job_id("ok-1234abcd") and not valid_job_id("ok\n") and not valid_job_id("ok-1\n")
    h = Harness()
    job = h.submit()
    job.job_id = "evil\n-1234abcd"
    with pytest.raises(ValueError):
        h.store.put_job(job)


@pytest.fixture(params=["file", "zookeeper"])
def store_kv(request, tmp_path):
    if request.param == "file":
        yield FileKV(tmp_path / "state")
        return
    from kazoo.client import KazooClient

    zk = request.getfixturevalue("zookeeper")
    c = KazooClient(hosts=zk.hosts)
    c.start(timeout=10)
    root = f"/sec-names-{tmp_path.name}"
    yield ZooKeeperKV(c, root + "/state")
    c.delete(root, recursive=True)
    c.stop()
    c.close()


@pytest.mark.parametrize("name", ["ok\n", "a\r\n"])
def test_a_trailing_newline_name_is_422_and_the_leader_keeps_leading(store_kv, name):
    h = Harness(kv=store_kv)
    fatal: list[str] = []
    loop = SchedulingLoop(h.core, queue.Queue(), on_fatal=fatal.append)
    loop.start()
    try:
        c = TestClient(create_app(LoopBackend(loop)))
        r = c.post("/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 1, "name": name})
        assert r.status_code == 422 and r.json()["field"] == "name", r.text
        # the leader did not give up (ZooKeeper: the znode write used to fail and be taken for a
        # conflict, exit 75) and the store holds nothing half-written (file store: stored, no 201)
        r = c.post("/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 1, "name": "ok"})
        assert r.status_code == 201, r.text
        assert loop.running and not fatal
        assert list(StateStore(store_kv).load_jobs()) == [r.json()["id"]]
    finally:
        loop.stop()
