"""A batch of changed jobs is stored as one group commit on the file store (``FileKV.put_many``,
``StateStore.put_jobs``): same values and versions as one by one, every check before any write,
and the leader-term fence still holds."""

from __future__ import annotations

import pytest

from dl2_mesos.framework.kv import FileKV, MemoryKV, StaleVersion
from dl2_mesos.framework.records import FrameworkJob
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.jobs import JobSpec


def _job(job_id: str, epochs: float = 5) -> FrameworkJob:
    return FrameworkJob(job_id=job_id, spec=JobSpec(job_type="vgg-16", epochs=epochs), submitted_at=1.0,
                        arrival_slot=0, arrival_time=0.0)


@pytest.mark.parametrize("backend", ["file", "memory"])
def test_put_jobs_stores_every_job_and_later_writes_follow_the_versions(tmp_path, backend):
    kv = FileKV(tmp_path / "state") if backend == "file" else MemoryKV()
    store = StateStore(kv)
    store.begin_term(0.0)
    jobs = [_job(f"j{i}") for i in range(20)]
    store.put_jobs(jobs)
    jobs[3].epochs_done = 2.5
    store.put_jobs([jobs[3], jobs[4]])  # CAS against the versions the batch returned
    store.put_job(jobs[3])
    again = StateStore(FileKV(tmp_path / "state") if backend == "file" else kv).load_jobs()
    assert sorted(again) == sorted(j.job_id for j in jobs)
    assert again["j3"].epochs_done == 2.5
    if backend == "file":
        assert kv.get("jobs/j3")[1] == 2 and kv.get("jobs/j4")[1] == 1 and kv.get("jobs/j0")[1] == 0
        assert not list((tmp_path / "state").rglob("*.tmp"))


def test_a_stale_version_in_a_batch_writes_nothing(tmp_path):
    kv = FileKV(tmp_path / "state")
    kv.put("jobs/a/x", b"1", -1)
    with pytest.raises(StaleVersion):
        kv.put_many([("jobs/b/x", b"new", -1), ("jobs/a/x", b"2", 7)])
    assert kv.get("jobs/b/x") is None and kv.get("jobs/a/x") == (b"1", 0)
    with pytest.raises(ValueError):
        kv.put_many([("k", b"1", None), ("k", b"2", None)])


def test_a_newer_leaders_term_fences_a_batch(tmp_path):
    old = StateStore(FileKV(tmp_path / "state"))
    old.begin_term(0.0)
    old.put_jobs([_job("j1"), _job("j2")])
    new = StateStore(FileKV(tmp_path / "state"))
    new.begin_term(1.0)  # bumps the term: the old leader's writes must fail
    with pytest.raises(StaleVersion):
        old.put_jobs([_job("j1", 9), _job("j3")])
    stored = new.load_jobs()
    assert sorted(stored) == ["j1", "j2"] and stored["j1"].spec.epochs == 5


def test_replaced_values_are_deleted_off_the_writing_thread_and_never_read_as_keys(tmp_path):
    import time

    kv = FileKV(tmp_path / "state")
    for i in range(5):
        kv.put("jobs/a", f"v{i}".encode(), None)
        kv.put_many([("jobs/b", f"w{i}".encode(), None), ("jobs/c", b"c", None)])
    assert kv.get("jobs/a") == (b"v4", 4) and kv.get("jobs/b") == (b"w4", 4)
    assert kv.children("jobs") == ["a", "b", "c"] and kv.children("") == ["jobs"]
    trash = tmp_path / "state" / ".trash"
    deadline = time.monotonic() + 10
    while any(trash.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(trash.iterdir())  # the old values' files are gone
