"""The state store over every backend, including a real ZooKeeper (CAS, fencing, ACLs)."""

from __future__ import annotations

import pytest

from dl2_mesos.jobs import JobSpec
from dl2_mesos.framework.kv import FileKV, MemoryKV, StaleVersion, ZooKeeperKV
from dl2_mesos.framework.records import FrameworkJob
from dl2_mesos.framework.state_store import CHUNK, StateStore


@pytest.fixture(params=["memory", "file", "zookeeper"])
def kv_factory(request, tmp_path):
    if request.param == "memory":
        kv = MemoryKV()
        yield lambda: kv
    elif request.param == "file":
        yield lambda: FileKV(tmp_path / "state")
    else:
        from kazoo.client import KazooClient

        zk = request.getfixturevalue("zookeeper")
        clients = []
        root = f"/t{request.node.name.replace('[', '_').replace(']', '')}"

        def make():
            c = KazooClient(hosts=zk.hosts)
            c.start(timeout=10)
            clients.append(c)
            return ZooKeeperKV(c, root + "/state")

        yield make
        clients[0].delete(root, recursive=True)
        for c in clients:
            c.stop()
            c.close()


def _job(job_id="j1"):
    return FrameworkJob(job_id=job_id, spec=JobSpec(job_type="vgg-16", epochs=5), submitted_at=1.0, arrival_slot=0,
                     arrival_time=0.0)


def test_round_trip_and_cas(kv_factory):
    s = StateStore(kv_factory())
    assert s.framework_id() is None and s.load_jobs() == {}
    s.set_framework_id("fw-1")
    meta = s.begin_term(100.0)
    assert meta["term"] == 1 and meta["epoch"] == 100.0
    job = _job()
    s.put_job(job)
    job.epochs_done = 2.5
    s.put_job(job)
    s2 = StateStore(kv_factory())
    assert s2.framework_id() == "fw-1"
    got = s2.load_jobs()["j1"]
    assert got.epochs_done == 2.5 and got.spec.job_type == "vgg-16" and got.to_dict() == job.to_dict()
    # a second writer that read the old version loses
    other = StateStore(kv_factory())
    other.load_jobs()
    s.put_job(job)
    with pytest.raises(StaleVersion):
        other.put_job(job)


def test_new_term_fences_the_old_leader(kv_factory):
    old = StateStore(kv_factory())
    old.begin_term(1.0)
    old.put_job(_job())
    new = StateStore(kv_factory())
    assert new.begin_term(2.0)["term"] == 2
    new.load_jobs()
    job = _job()
    with pytest.raises(StaleVersion):
        old.put_job(job)
    with pytest.raises(StaleVersion):
        old.put_job(_job("j2"))  # even a brand-new key
    new.put_job(job)


def test_models_in_chunks(kv_factory):
    s = StateStore(kv_factory())
    blob = bytes(range(256)) * (CHUNK // 256 * 2 + 10)
    s.put_model(1, blob, {"reason": "start"})
    s.put_model(2, b"small", {"reason": "x"})
    assert s.get_model(1) == blob and s.get_model(2) == b"small"
    assert s.model_versions() == [1, 2]
    s.delete_model(1)
    assert s.model_versions() == [2] and s.get_model(1) is None
    s.put_models({"current": 2, "history": [1, 2]})
    assert StateStore(kv_factory()).models()["current"] == 2


def test_zookeeper_digest_acl(zookeeper):
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError
    from kazoo.security import make_digest_acl

    owner = KazooClient(hosts=zookeeper.hosts, auth_data=[("digest", "dl2:pw")],
                        default_acl=[make_digest_acl("dl2", "pw", all=True)])
    owner.start(timeout=10)
    stranger = KazooClient(hosts=zookeeper.hosts)
    stranger.start(timeout=10)
    try:
        s = StateStore(ZooKeeperKV(owner, "/acl-test/state"))
        s.set_framework_id("fw-secret")
        with pytest.raises(NoAuthError):
            stranger.get("/acl-test/state/framework_id")
    finally:
        owner.delete("/acl-test", recursive=True)
        for c in (owner, stranger):
            c.stop()
            c.close()
