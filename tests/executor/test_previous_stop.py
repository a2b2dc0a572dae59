"""``previous_stop``: the framework tells a new generation whether its predecessor stops gracefully
(wait for its final checkpoint) or crashed (restore the newest committed one at once). The message
field (schema 2, schema 1 still read) and the executor's decision."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from dl2_mesos.errors import MessageSchemaError
from dl2_mesos.messages import (
    PREVIOUS_STOPS, ClusterSpec, Endpoint, LaunchSpec, RescaleRequest, decode, decode_b64, encode, encode_b64,
    schema_version_of,
)
from dl2_mesos.storage import CheckpointStore

G1 = ClusterSpec(1, Endpoint("j-ps-0", "127.0.0.1", 9000), (Endpoint("j-ps-0", "127.0.0.1", 9001),),
                 (Endpoint("j-worker-0", "127.0.0.1", 9002),))


def spec(uri: str = "file:///tmp/none", **kw) -> LaunchSpec:
    return LaunchSpec(job_id="j", task_id="j-worker-0", role="worker", rank=0, runtime="mxnet", job_type="mlp",
                      epochs=5.0, command=("true",), checkpoint_uri=uri, cluster=G1, **kw)


# -- the message field -----------------------------------------------------------------------------
def test_default_previous_stop_is_still_a_schema_1_message():
    raw = json.loads(encode(spec()))
    assert raw["schema"] == 1 and "previous_stop" not in raw["body"]
    assert decode(encode(spec())) == spec() and spec().previous_stop == "graceful"


@pytest.mark.parametrize("value", PREVIOUS_STOPS)
def test_previous_stop_round_trips_in_schema_2(value):
    s = spec(previous_stop=value)
    raw = json.loads(encode(s))
    assert raw["schema"] == (1 if value == "graceful" else 2)
    assert decode_b64(encode_b64(s)) == s
    r = RescaleRequest("j", G1, (("j-worker-0", "worker", 0),), previous_stop=value)
    assert decode(encode(r)) == r and schema_version_of(r) == raw["schema"]


def test_old_schema_1_launch_spec_without_the_field_decodes_as_graceful():
    body = json.loads(encode(spec()))["body"]  # what a version-1 framework sent
    msg = decode(json.dumps({"schema": 1, "kind": "launch", "body": body}))
    assert isinstance(msg, LaunchSpec) and msg.previous_stop == "graceful" and msg.waits_for_final


@pytest.mark.parametrize("schema, body_extra, match", [
    (1, {"previous_stop": "crashed"}, "unknown fields"),  # a schema-2 field in a schema-1 message
    (2, {"previous_stop": "exploded"}, "previous_stop"),
    (2, {"previous_stop": 3}, "previous_stop"),
    (3, {}, "unknown schema version"),
    (True, {}, "unknown schema version"),
])
def test_malformed_previous_stop_is_refused(schema, body_extra, match):
    body = {**json.loads(encode(spec()))["body"], **body_extra}
    with pytest.raises(MessageSchemaError, match=match):
        decode(json.dumps({"schema": schema, "kind": "launch", "body": body}))


def test_waits_for_final_only_for_a_graceful_stop_after_generation_0():
    assert spec().waits_for_final
    assert not spec(previous_stop="crashed").waits_for_final and not spec(previous_stop="none").waits_for_final
    assert not dataclasses.replace(spec(), cluster=dataclasses.replace(G1, generation=0)).waits_for_final


# -- the executor's decision -----------------------------------------------------------------------
@pytest.fixture
def store_with_periodic_checkpoint(tmp_path):
    """A job root whose newest checkpoint is a periodic (non-final) one of generation 0, as a crash leaves it."""
    uri = f"file://{tmp_path}/ckpt/j"
    local = tmp_path / "local"
    local.mkdir()
    (local / "state.json").write_text(json.dumps({"epoch": 1.5}))
    CheckpointStore(uri).save(local, meta={"epoch": 1.5, "batch": 15, "final": False, "generation": 0})
    return uri


def _launch(make_runner, s, wait_s):
    runner = make_runner(s, restore_wait_s=wait_s)
    started = []
    runner._start_task = lambda task_id, restore: started.append((task_id, restore))  # no processes: the decision only
    t0 = time.monotonic()
    runner.launch(s)
    return time.monotonic() - t0, started


def test_crashed_predecessor_restores_the_newest_checkpoint_at_once(make_runner, store_with_periodic_checkpoint, sink):
    took, started = _launch(make_runner, spec(store_with_periodic_checkpoint, previous_stop="crashed"), wait_s=30.0)
    assert took < 10.0  # not the 30 s restore wait
    (task_id, restore), = started
    assert task_id == "j-worker-0" and json.loads((restore / "state.json").read_text()) == {"epoch": 1.5}
    assert sink.states("j-worker-0") == ["TASK_STARTING", "TASK_RUNNING"]


def test_graceful_predecessor_waits_for_its_final_checkpoint(make_runner, store_with_periodic_checkpoint):
    took, started = _launch(make_runner, spec(store_with_periodic_checkpoint), wait_s=1.5)
    assert took >= 1.5  # waited the whole restore wait: no final checkpoint came
    assert started and started[0][1] is not None  # then fell back to the newest one


def test_old_message_keeps_the_old_wait(make_runner, store_with_periodic_checkpoint):
    old = decode(json.dumps({"schema": 1, "kind": "launch",
                             "body": json.loads(encode(spec(store_with_periodic_checkpoint)))["body"]}))
    took, _ = _launch(make_runner, old, wait_s=1.0)
    assert took >= 1.0


def test_graceful_wait_ends_as_soon_as_the_final_checkpoint_is_committed(make_runner, store_with_periodic_checkpoint,
                                                                        tmp_path):
    local = tmp_path / "final"
    local.mkdir()
    (local / "state.json").write_text(json.dumps({"epoch": 2.0}))
    CheckpointStore(store_with_periodic_checkpoint).save(local, name="final",
                                                         meta={"epoch": 2.0, "batch": 20, "final": True, "generation": 0})
    took, started = _launch(make_runner, spec(store_with_periodic_checkpoint), wait_s=30.0)
    assert took < 10.0 and json.loads((started[0][1] / "state.json").read_text()) == {"epoch": 2.0}
