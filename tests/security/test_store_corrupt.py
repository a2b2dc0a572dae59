"""A corrupt job record or meta does not stop a leader, is quarantined and counted, and its job's
running tasks are not killed; FileKV syncs to disk before a rename (issue 14, item 5)."""

from __future__ import annotations

import json
import os

import pytest

from dl2_mesos.framework.kv import FileKV, StaleVersion, ZooKeeperKV
from dl2_mesos.framework.state_store import StateStore

from ..framework.conftest import Harness, make_offer, status


@pytest.fixture(params=["file", "zookeeper"])
def backend(request, tmp_path):
    """(make a KV on one shared store, damage(key, data) that writes raw bytes under the framework's nose)."""
    if request.param == "file":
        root = tmp_path / "state"

        def damage(key: str, data: bytes) -> None:
            path = root.joinpath(*key.split("/"), "_value.json")
            path.write_bytes(path.read_bytes()[: len(data)] if data == b"TRUNCATE" else data)

        yield (lambda: FileKV(root)), damage
        return
    from kazoo.client import KazooClient

    zk = request.getfixturevalue("zookeeper")
    c = KazooClient(hosts=zk.hosts)
    c.start(timeout=10)
    root = f"/sec-corrupt-{request.node.name.replace('[', '_').replace(']', '')}/state"

    def damage_zk(key: str, data: bytes) -> None:
        node = f"{root}/{key}"
        if data == b"TRUNCATE":
            data = c.get(node)[0][:8]
        c.set(node, data)

    yield (lambda: ZooKeeperKV(c, root)), damage_zk
    c.delete(root.rsplit("/", 1)[0], recursive=True)
    c.stop()
    c.close()


def _running_job(h: Harness, **kw):
    h.register()
    job = h.submit(**kw)
    h.offer(make_offer("a1"), make_offer("a2"))
    h.next_slot()
    h.run_all(job)
    assert job.phase.value == "running"
    return job


@pytest.mark.parametrize("damage_with", [b"TRUNCATE", b'{"job_id": "x"}', b"\xff\xfe", b""])
def test_a_corrupt_job_record_is_quarantined_and_its_tasks_survive(backend, damage_with):
    make_kv, damage = backend
    first = Harness(kv=make_kv())
    bad = _running_job(first)
    good = first.submit(job_type="vgg-16", epochs=2)
    damage(f"jobs/{bad.job_id}", damage_with if damage_with else b"")
    # a new leader starts (this used to raise JSONDecodeError / KeyError out of restore)
    second = Harness(kv=make_kv())
    assert set(second.core.jobs) == {good.job_id}
    assert bad.job_id in second.store.quarantined
    view_metrics = second.core.metrics.render().decode()
    assert "dl2_quarantined_records 1.0" in view_metrics
    moved = StateStore(make_kv()).kv.get(f"quarantine/jobs/{bad.job_id}")
    assert moved is not None and json.loads(moved[0])["key"] == f"jobs/{bad.job_id}"
    assert StateStore(make_kv()).kv.get(f"jobs/{bad.job_id}") is None
    # reconciliation reports the quarantined job's running tasks: they are left alone ...
    second.register()
    for task in bad.tasks.values():
        second.core.handle(status(task.task_id, "TASK_RUNNING", task.agent_id))
    assert not second.driver.named("killTask")
    # ... while a task nobody knows is still killed
    second.core.handle(status("stranger-1234abcd.worker.1", "TASK_RUNNING"))
    assert [a[0]["value"] for a in second.driver.named("killTask")] == ["stranger-1234abcd.worker.1"]
    # and a third leader still knows the job is quarantined (its tasks still safe)
    third = Harness(kv=make_kv())
    assert bad.job_id in third.store.quarantined
    third.register()
    third.core.handle(status(next(iter(bad.tasks)), "TASK_RUNNING"))
    assert not third.driver.named("killTask")


@pytest.mark.parametrize("damage_with", [b"TRUNCATE", b"[1, 2]", b'{"term": "x"}'])
def test_a_corrupt_meta_is_replaced_and_the_leader_starts(backend, damage_with):
    make_kv, damage = backend
    first = Harness(kv=make_kv())
    job = first.submit()
    damage("meta", damage_with)
    second = Harness(kv=make_kv())  # used to fail in begin_term
    assert job.job_id in second.core.jobs and second.store.term >= 1
    assert "dl2_quarantined_records 1.0" in second.core.metrics.render().decode()
    assert StateStore(make_kv()).kv.get("quarantine/meta") is not None
    # the new meta is a proper fence: a third leader's term fences the second
    third = Harness(kv=make_kv())
    assert third.store.term == second.store.term + 1
    second.core._meta_dirty = True
    with pytest.raises(StaleVersion):
        second.core.flush()


def test_filekv_syncs_the_value_and_the_folder_around_the_rename(tmp_path, monkeypatch):
    kv = FileKV(tmp_path / "s")
    log: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        log.append(("replace", str(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    kv.put("jobs/a", b"data", -1)
    target = str(tmp_path / "s" / "jobs" / "a" / "_value.json")
    kinds = [(k, p.endswith(".tmp"), p) for k, p in log]
    assert kinds[0][0] == "fsync" and kinds[0][1], log  # the temporary file, before the rename
    assert kinds[1][:1] == ("replace",) and kinds[1][2] == target
    assert kinds[2] == ("fsync", False, str(tmp_path / "s" / "jobs" / "a")), log  # then its folder
    assert kv.get("jobs/a") == (b"data", 0)


def test_a_corrupt_model_record_does_not_stop_the_leader(backend):
    # the online learner starts from these two calls: an unreadable record reads as "no model"
    make_kv, damage = backend
    first = Harness(kv=make_kv())
    first.store.put_model(1, b"weights", {"parent": None})
    first.store.put_models({"current": 1, "history": [1]})
    damage("models/current", b"TRUNCATE")
    damage("models/v000001/meta", b"{")
    second = Harness(kv=make_kv())
    assert second.store.models() == {} and second.store.get_model(1) is None
    assert "dl2_quarantined_records 1.0" in second.core.metrics.render().decode()
    assert StateStore(make_kv()).kv.get("quarantine/models-current") is not None
    second.store.put_models({"current": 2, "history": [2]})  # and the leader can store a new one
    assert StateStore(make_kv()).models()["current"] == 2
