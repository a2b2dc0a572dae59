"""Malformed calls get a 4xx with a reason (as Mesos answers them), never a 5xx or a crash."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dl2_mesos.localmesos.protocol import EXECUTOR_CALL_TYPES, SCHEDULER_CALL_TYPES

from .conftest import RecordingScheduler, executor_task

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def subscribed(cluster, make_driver):
    """A real pymesos framework with one running task; returns (driver, scheduler, running status)."""
    sched = RecordingScheduler()
    sched.queue(executor_task("http-t1", {}))
    driver = make_driver(sched)
    running = sched.wait_state("http-t1", "TASK_RUNNING")
    return driver, sched, running


def post(url: str, body, headers=None) -> httpx.Response:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url, content=data, headers=headers if headers is not None else JSON, timeout=10)


def test_scheduler_endpoint_rejects_bad_requests_with_reasons(cluster, subscribed):
    driver, sched, _ = subscribed
    url = cluster.master_url + "/api/v1/scheduler"
    fid = {"value": sched.framework_id}
    sid = {**JSON, "Mesos-Stream-Id": driver.stream_id}
    assert httpx.get(url).status_code == 405
    r = post(url, {"type": "REVIVE", "framework_id": fid}, headers={})
    assert r.status_code == 400 and "Content-Type" in r.text
    assert post(url, "x", headers={"Content-Type": "text/plain"}).status_code == 415
    assert post(url, b"\x08\x01", headers={"Content-Type": "application/x-protobuf"}).status_code == 415
    r = post(url, b"{not json")
    assert r.status_code == 400 and r.text.startswith("Failed to parse body into JSON")
    assert post(url, [1, 2]).status_code == 400
    r = post(url, {"type": "NOPE"})
    assert r.status_code == 400 and "type" in r.text
    r = post(url, {"type": "ACCEPT", "framework_id": fid}, headers=sid)
    assert (r.status_code, r.text) == (400, "Expecting 'accept' to be present")
    r = post(url, {"type": "REVIVE"}, headers=sid)
    assert (r.status_code, r.text) == (400, "Expecting 'framework_id' to be present")
    r = post(url, {"type": "REVIVE", "framework_id": {"value": "nope"}}, headers=sid)
    assert (r.status_code, r.text) == (400, "Framework cannot be found")
    r = post(url, {"type": "REVIVE", "framework_id": fid})
    assert r.status_code == 400 and "Mesos-Stream-Id" in r.text
    r = post(url, {"type": "REVIVE", "framework_id": fid}, headers={**JSON, "Mesos-Stream-Id": "wrong"})
    assert r.status_code == 400 and "didn't match" in r.text
    r = post(
        url,
        {
            "type": "ACKNOWLEDGE",
            "framework_id": fid,
            "acknowledge": {"agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": "AAAA"},
        },
        headers=sid,
    )
    assert r.status_code == 400 and "UUID" in r.text
    r = post(url, {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"name": "no user"}}})
    assert r.status_code == 400 and "user" in r.text
    r = post(
        url, {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "", "name": "x"}}}, headers=sid
    )
    assert r.status_code == 400 and "should not include" in r.text
    r = post(
        url,
        {
            "type": "SUBSCRIBE",
            "framework_id": {"value": "a"},
            "subscribe": {"framework_info": {"user": "", "name": "x", "id": {"value": "b"}}},
        },
    )
    assert r.status_code == 400 and "differs" in r.text
    r = post(
        url,
        {
            "type": "ACCEPT",
            "framework_id": fid,
            "accept": {"offer_ids": [], "operations": [{"type": "RESERVE"}]},
        },
        headers=sid,
    )
    assert r.status_code == 400 and "not supported" in r.text
    assert post(url, {"type": "REVIVE", "framework_id": fid}, headers=sid).status_code == 202
    driver.stop(failover=True)
    driver.join()
    r = post(url, {"type": "REVIVE", "framework_id": fid}, headers=sid)
    assert (r.status_code, r.text) == (403, "Framework is not subscribed")


def test_executor_endpoint_rejects_bad_requests_with_reasons(cluster, make_driver, subscribed):
    driver, sched, running = subscribed
    endpoint = cluster.agents[running["agent_id"]["value"]]
    url = f"http://{endpoint}/api/v1/executor"
    fid, eid = {"value": sched.framework_id}, running["executor_id"]
    assert post(url, b"[").status_code == 400
    r = post(
        url,
        {
            "type": "UPDATE",
            "framework_id": {"value": "x"},
            "executor_id": eid,
            "update": {
                "status": {
                    "task_id": {"value": "t"},
                    "state": "TASK_RUNNING",
                    "uuid": "AAAAAAAAAAAAAAAAAAAAAA==",
                }
            },
        },
    )
    assert (r.status_code, r.text) == (400, "Framework cannot be found")
    r = post(
        url,
        {
            "type": "UPDATE",
            "framework_id": fid,
            "executor_id": {"value": "nope"},
            "update": {
                "status": {
                    "task_id": {"value": "t"},
                    "state": "TASK_RUNNING",
                    "uuid": "AAAAAAAAAAAAAAAAAAAAAA==",
                }
            },
        },
    )
    assert (r.status_code, r.text) == (400, "Executor cannot be found")
    r = post(
        url,
        {
            "type": "UPDATE",
            "framework_id": fid,
            "executor_id": eid,
            "update": {"status": {"task_id": {"value": "t"}, "state": "TASK_RUNNING"}},
        },
    )
    assert (r.status_code, r.text) == (400, "Expecting 'uuid' to be present")
    r = post(
        url,
        {
            "type": "UPDATE",
            "framework_id": fid,
            "executor_id": eid,
            "update": {
                "status": {
                    "task_id": {"value": "t"},
                    "state": "TASK_STAGING",
                    "uuid": "AAAAAAAAAAAAAAAAAAAAAA==",
                }
            },
        },
    )
    assert r.status_code == 400 and "TASK_STAGING" in r.text
    r = post(
        url, {"type": "MESSAGE", "framework_id": fid, "executor_id": eid, "message": {"data": "not base64!"}}
    )
    assert r.status_code == 400 and "base64" in r.text
    # an executor process that never subscribes: its calls are Forbidden
    silent = dict(
        executor_task("http-silent"),
        executor={"executor_id": {"value": "silent"}, "command": {"value": "exec sleep 30 # localmesos-cmd"}},
    )
    sched.queue(silent)
    driver.reviveOffers()
    task = cluster.wait_until(lambda s: [t for t in s["frameworks"][0]["tasks"] if t["id"] == "http-silent"])[
        0
    ]
    silent_url = f"http://{cluster.agents[task['slave_id']]}/api/v1/executor"
    r = post(
        silent_url,
        {"type": "MESSAGE", "framework_id": fid, "executor_id": {"value": "silent"}, "message": {"data": ""}},
    )
    assert (r.status_code, r.text) == (403, "Executor is not subscribed")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=10), c, max_size=4),
    max_leaves=12,
)
ids_ = st.fixed_dictionaries({"value": st.text(max_size=10)}) | json_values
resources = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["cpus", "mem", "gpus", "ports", "disk", "x"]),
            "type": st.sampled_from(["SCALAR", "RANGES", "SET", "TEXT"]),
        },
        optional={
            "scalar": st.fixed_dictionaries({"value": st.floats(allow_nan=False) | st.integers()}),
            "ranges": st.fixed_dictionaries(
                {
                    "range": st.lists(
                        st.fixed_dictionaries(
                            {"begin": st.integers(-5, 2**64), "end": st.integers(-5, 2**64)}
                        ),
                        max_size=2,
                    )
                }
            ),
        },
    ),
    max_size=3,
)
task = st.fixed_dictionaries(
    {"name": st.text(max_size=5), "task_id": ids_, "agent_id": ids_},
    optional={
        "resources": resources,
        "command": st.fixed_dictionaries({"value": st.text(max_size=5)}) | json_values,
        "executor": st.fixed_dictionaries({"executor_id": ids_}, optional={"resources": resources})
        | json_values,
    },
)


def scheduler_calls(fid):
    fw = st.just({"value": fid}) | ids_
    return (
        st.fixed_dictionaries(
            {"type": st.sampled_from([t for t in SCHEDULER_CALL_TYPES if t != "TEARDOWN"])},
            optional={
                "framework_id": fw,
                "accept": st.fixed_dictionaries(
                    {
                        "offer_ids": st.lists(ids_, max_size=2),
                        "operations": st.lists(
                            st.fixed_dictionaries(
                                {
                                    "type": st.sampled_from(["LAUNCH", "RESERVE"]),
                                    "launch": st.fixed_dictionaries(
                                        {"task_infos": st.lists(task, max_size=2)}
                                    ),
                                }
                            ),
                            max_size=2,
                        ),
                    }
                )
                | json_values,
                "decline": st.fixed_dictionaries(
                    {"offer_ids": st.lists(ids_, max_size=2)},
                    optional={"filters": st.fixed_dictionaries({"refuse_seconds": json_values})},
                ),
                "kill": st.fixed_dictionaries({"task_id": ids_}) | json_values,
                "acknowledge": st.fixed_dictionaries(
                    {"agent_id": ids_, "task_id": ids_, "uuid": st.text(max_size=30)}
                ),
                "reconcile": st.fixed_dictionaries(
                    {"tasks": st.lists(st.fixed_dictionaries({"task_id": ids_}), max_size=2)}
                ),
                "message": st.fixed_dictionaries(
                    {"agent_id": ids_, "executor_id": ids_, "data": st.text(max_size=8)}
                ),
                "shutdown": st.fixed_dictionaries({"agent_id": ids_, "executor_id": ids_}),
                "subscribe": st.fixed_dictionaries(
                    {
                        "framework_info": json_values
                        | st.fixed_dictionaries(
                            {"user": st.text(max_size=3), "name": st.text(max_size=3)},
                            optional={"id": ids_, "capabilities": json_values},
                        )
                    }
                ),
            },
        )
        | json_values
    )


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_json_never_gets_a_5xx(cluster, subscribed, data):
    driver, sched, running = subscribed
    headers = {**JSON, "Mesos-Stream-Id": driver.stream_id or ""}
    call = data.draw(scheduler_calls(sched.framework_id))
    if isinstance(call, dict) and call.get("type") == "SUBSCRIBE":
        headers = JSON  # a subscribe would open a stream: keep it short
        call["framework_id"] = {"value": "x"}  # always rejected before subscribing (differs / missing info)
    r = post(cluster.master_url + "/api/v1/scheduler", call, headers=headers)
    assert r.status_code < 500, (call, r.status_code, r.text)
    endpoint = cluster.agents[running["agent_id"]["value"]]
    ex_call = data.draw(
        st.fixed_dictionaries(
            {"type": st.sampled_from(list(EXECUTOR_CALL_TYPES[1:]) + ["BOGUS"])},
            optional={
                "framework_id": st.just({"value": sched.framework_id}) | ids_,
                "executor_id": st.just(running["executor_id"]) | ids_,
                "update": st.fixed_dictionaries(
                    {
                        "status": st.fixed_dictionaries(
                            {
                                "task_id": ids_,
                                "state": st.sampled_from(["TASK_RUNNING", "TASK_FAILED", "BAD"])
                                | json_values,
                            },
                            optional={
                                "uuid": st.sampled_from(["AAAAAAAAAAAAAAAAAAAAAA==", "x"]) | json_values
                            },
                        )
                    }
                ),
                "message": st.fixed_dictionaries({"data": st.text(max_size=8)}),
            },
        )
        | json_values
    )
    r = post(f"http://{endpoint}/api/v1/executor", ex_call)
    assert r.status_code < 500, (ex_call, r.status_code, r.text)
    assert httpx.get(cluster.master_url + "/master/state", timeout=10).status_code == 200


def test_version_health_and_state_shape(cluster):
    v = httpx.get(cluster.master_url + "/version").json()
    assert tuple(int(x) for x in v["version"].split(".")) >= (1, 0, 0)  # pymesos parses it this way
    assert "stand-in" in v["build_user"]
    assert httpx.get(cluster.master_url + "/health").status_code == 200
    s = httpx.get(cluster.master_url + "/state").json()
    assert {"id", "pid", "hostname", "slaves", "frameworks", "completed_frameworks", "leader_info"} <= set(s)
    assert s["slaves"][0]["resources"]["ports"].startswith("[")
    assert httpx.get(f"http://{list(cluster.agents.values())[0]}/state").json()["id"] in cluster.agent_ids


def _read_events(resp: httpx.Response, seconds: float) -> list[dict]:
    """Parse RecordIO records from a streaming response for about ``seconds``."""
    events, buf, deadline = [], b"", time.monotonic() + seconds
    for chunk in resp.iter_raw():
        buf += chunk
        while b"\n" in buf:
            length, rest = buf.split(b"\n", 1)
            if len(rest) < int(length):
                break
            events.append(json.loads(rest[: int(length)]))
            buf = rest[int(length) :]
        if time.monotonic() > deadline:
            break
    return events


def test_raw_subscribe_stream_and_gpu_filtering(cluster):
    """Over plain HTTP: 200 chunked RecordIO with Mesos-Stream-Id; a framework without GPU_RESOURCES gets
    no offers from GPU agents (every agent here has a GPU), one with it does."""
    url = cluster.master_url + "/api/v1/scheduler"
    for caps, expect_offers in (([], False), ([{"type": "GPU_RESOURCES"}], True)):
        body = {
            "type": "SUBSCRIBE",
            "subscribe": {"framework_info": {"user": "", "name": "raw", "capabilities": caps}},
        }
        with httpx.stream("POST", url, json=body, timeout=10) as resp:
            assert resp.status_code == 200 and resp.headers["transfer-encoding"] == "chunked"
            assert resp.headers["mesos-stream-id"]
            events = _read_events(resp, 1.5)
        assert (
            events[0]["type"] == "SUBSCRIBED" and events[0]["subscribed"]["heartbeat_interval_seconds"] == 1.0
        )
        assert any(e["type"] == "HEARTBEAT" for e in events)
        assert any(e["type"] == "OFFERS" for e in events) == expect_offers
