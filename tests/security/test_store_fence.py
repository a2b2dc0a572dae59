"""The leader-term fence cannot be bypassed: a stale leader's writes fail on every backend, meta
included (issue 14, item 10)."""

from __future__ import annotations

import pytest

from dl2_mesos.framework.kv import StaleVersion
from dl2_mesos.framework.state_store import StateStore

from ..framework.conftest import Harness
from ..framework.test_state_store import _job, kv_factory  # noqa: F401 - the fixture, over memory/file/ZooKeeper


def test_a_stale_leader_cannot_write_last_slot_or_anything_else(kv_factory):  # noqa: F811
    old, new = StateStore(kv_factory()), StateStore(kv_factory())
    old.begin_term(1.0)
    old.put_job(_job("j1"))
    assert new.begin_term(2.0)["term"] == 2
    # what the core's flush does with last_slot: this used to re-read meta, adopt term 2 and succeed
    meta = old.meta()
    meta["last_slot"] = 99
    with pytest.raises(StaleVersion):
        old.put_meta(meta)
    with pytest.raises(StaleVersion):
        old.set_last_slot(100)
    assert old.term == 1 and old.meta()["term"] == 1  # it never adopts the newer term
    for write in (lambda: old.put_job(_job("j2")), lambda: old.put_job(_job("j1")),
                  lambda: old.delete_job("j1"), lambda: old.set_framework_id("stolen"),
                  lambda: old.put_model(1, b"x", {}), lambda: old.put_models({"current": 1})):
        with pytest.raises(StaleVersion):
            write()
    reader = StateStore(kv_factory())
    assert reader.meta()["term"] == 2 and "last_slot" not in reader.meta()
    assert set(reader.load_jobs()) == {"j1"} and reader.framework_id() is None and not reader.model_versions()
    # the new leader writes normally, and cannot write a term it does not hold
    new.set_last_slot(5)
    new.put_job(_job("j2"))
    with pytest.raises(StaleVersion):
        new.put_meta({**new.meta(), "term": 7})
    assert StateStore(kv_factory()).meta() == {**new.meta(), "last_slot": 5}


def test_a_stale_core_gives_up_on_its_next_slot_write():
    old = Harness()
    new = Harness(kv=old.kv)  # a second leader on the same store (its begin_term fences the first)
    old.core.last_slot = 41
    old.core._meta_dirty = True
    with pytest.raises(StaleVersion):
        old.core.flush()
    new.core.last_slot = 3
    new.core._meta_dirty = True
    new.core.flush()
    assert StateStore(old.kv).meta()["last_slot"] == 3 and StateStore(old.kv).meta()["term"] == 2
