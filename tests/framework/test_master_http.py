"""Scheduler calls over pooled keep-alive connections: the same v1 Call bodies pymesos sends, the
subscription's stream id and credential, connection reuse, and clear errors."""

from __future__ import annotations

import http.client
import http.server
import json
import threading

import pytest
from pymesos import MesosSchedulerDriver, Scheduler

from dl2_mesos.framework.master_http import MasterCallFailed, MasterHttp, NotSubscribed, call_body
from dl2_mesos.framework.outbound import OutboundDriver

STATUS = {"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}, "uuid": "AAAAAAAAAAAAAAAAAAAAAA==",
          "state": "TASK_RUNNING"}
CALLS = [
    ("launchTasks", ([{"value": "o1"}], [{"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}}],
                     {"refuse_seconds": 5})),
    ("launchTasks", ([{"value": "o1"}], [])),  # no tasks: a decline
    ("acceptOffers", ([{"value": "o1"}], [{"type": "LAUNCH", "launch": {"task_infos": []}}])),
    ("acceptOffers", ({"value": "o2"}, [])),
    ("declineOffer", ([{"value": "o1"}, {"value": "o2"}], {"refuse_seconds": 30})),
    ("declineOffer", ([{"value": "o1"}],)),
    ("acknowledgeStatusUpdate", (STATUS,)),
    ("killTask", ({"value": "t1"},)),
    ("reconcileTasks", ([{"task_id": {"value": "t1"}, "agent_id": {"value": "a1"}}],)),
    ("reconcileTasks", ([],)),
    ("sendFrameworkMessage", ({"value": "e1"}, {"value": "a1"}, "ZGF0YQ==")),
    ("reviveOffers", ()),
    ("suppressOffers", (["role-a"],)),
]


def _pymesos_driver() -> MesosSchedulerDriver:
    d = MesosSchedulerDriver(Scheduler(), {"user": "", "name": "t"}, "127.0.0.1:1", use_addict=False,
                             principal="fw", secret="s3cret")
    d.framework_id = "fw-1"
    d._stream_id = "stream-1"  # as if subscribed (pymesos sets it from the SUBSCRIBED response)
    return d


@pytest.mark.parametrize("name,args", CALLS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CALLS)])
def test_call_bodies_are_the_ones_pymesos_sends(name, args):
    d = _pymesos_driver()
    sent: list[dict] = []
    d._send = lambda body, *a, **k: sent.append(body)
    getattr(d, name)(*args)
    assert [call_body(name, "fw-1", args, {})] == sent


def test_an_ack_without_uuid_is_not_sent_and_unknown_calls_are_refused():
    assert call_body("acknowledgeStatusUpdate", "fw", ({"task_id": {"value": "t"}},), {}) is None
    with pytest.raises(ValueError, match="unknown scheduler call"):
        call_body("teardown", "fw", (), {})


class _Master(http.server.ThreadingHTTPServer):
    """A stand-in master endpoint: records requests; can answer an error or drop idle connections."""

    daemon_threads = True

    def __init__(self) -> None:
        self.requests: list[tuple[dict, dict]] = []
        self.connections = 0
        self.status = 202
        self.close_after_answer = False
        self.chunked = False  # answer in chunked transfer encoding
        self.raw_answer: bytes | None = None  # answer these bytes instead (then close)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                outer.connections += 1

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((dict(self.headers), body))
                if outer.raw_answer is not None:
                    self.wfile.write(outer.raw_answer)
                    self.close_connection = True
                    return
                payload = b"" if outer.status == 202 else b"Failed to validate scheduler::Call"
                self.send_response(outer.status)
                if outer.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    half = len(payload) // 2
                    for part in (payload[:half], payload[half:], b""):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                else:
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                if outer.close_after_answer:  # like a master closing an idle keep-alive connection
                    self.close_connection = True

            def log_message(self, *a) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class _Subscribed:
    def __init__(self, master: str, stream_id: str | None = "stream-9") -> None:
        self.master = master
        self.stream_id = stream_id
        self.framework_id = "fw-9"
        self._basic_credential = "Basic Znc6czNjcmV0"


@pytest.fixture
def master():
    m = _Master()
    yield m
    m.shutdown()
    m.server_close()


def test_calls_carry_the_stream_id_and_credential_on_one_reused_connection(master):
    h = MasterHttp(_Subscribed(master.address))
    for i in range(5):
        assert h.call("killTask", ({"value": f"t{i}"},))
    assert master.connections == 1
    headers, body = master.requests[0]
    assert headers["Mesos-Stream-Id"] == "stream-9" and headers["Authorization"] == "Basic Znc6czNjcmV0"
    assert body == {"type": "KILL", "framework_id": {"value": "fw-9"}, "kill": {"task_id": {"value": "t0"}}}
    h.close()


def test_a_connection_the_master_closed_is_replaced_without_losing_the_call(master):
    master.close_after_answer = True
    h = MasterHttp(_Subscribed(master.address))
    for i in range(3):
        assert h.call("killTask", ({"value": f"t{i}"},))
    assert [b["kill"]["task_id"]["value"] for _, b in master.requests] == ["t0", "t1", "t2"]
    assert master.connections == 3


def test_refusals_and_missing_subscription_raise_clear_errors(master):
    master.status = 400
    h = MasterHttp(_Subscribed(master.address))
    with pytest.raises(MasterCallFailed, match="KILL refused by the master: 400") as exc:
        h.call("killTask", ({"value": "t"},))
    assert exc.value.status == 400
    with pytest.raises(NotSubscribed):
        MasterHttp(_Subscribed(master.address, stream_id=None)).call("reviveOffers")


def test_a_chunked_refusal_is_read_whole_and_the_connection_is_kept(master):
    master.status, master.chunked = 400, True
    h = MasterHttp(_Subscribed(master.address))
    for _ in range(2):
        with pytest.raises(MasterCallFailed, match="Failed to validate scheduler::Call"):
            h.call("killTask", ({"value": "t"},))
    assert master.connections == 1
    h.close()


def test_an_unreadable_or_cut_answer_fails_the_call_and_the_next_call_uses_a_new_connection(master):
    h = MasterHttp(_Subscribed(master.address))
    master.raw_answer = b"NOT HTTP AT ALL\r\n\r\n"
    with pytest.raises(http.client.HTTPException):
        h.call("killTask", ({"value": "t1"},))
    master.raw_answer = b"HTTP/1.1 202 Accepted\r\nContent-Length: 10\r\n\r\nabc"
    with pytest.raises(http.client.IncompleteRead):
        h.call("killTask", ({"value": "t2"},))
    master.raw_answer = None
    assert h.call("killTask", ({"value": "t3"},))
    assert [b["kill"]["task_id"]["value"] for _, b in master.requests] == ["t1", "t2", "t3"]
    assert master.connections == 3
    h.close()


@pytest.mark.parametrize("field", ["stream_id", "_basic_credential"])
def test_a_header_value_with_a_line_break_is_refused_and_nothing_is_sent(master, field):
    subscribed = _Subscribed(master.address)
    setattr(subscribed, field, "stream-9\r\nX-Injected: yes")
    with pytest.raises(ValueError):
        MasterHttp(subscribed).call("reviveOffers")
    assert master.requests == []


def test_outbound_driver_sends_a_pymesos_drivers_calls_over_its_own_connections(master):
    d = _pymesos_driver()
    d._master = master.address  # as if started and subscribed with this master
    d._started = True
    d._send = lambda *a, **k: pytest.fail("pymesos's single connection must not be used")
    o = OutboundDriver(d, senders=4)
    try:
        for i in range(20):
            o.acknowledgeStatusUpdate({**STATUS, "task_id": {"value": f"t{i}"}, "agent_id": {"value": f"a{i}"}})
        assert o.flush(10)
        assert o.stats().sent == 20 and o.stats().failed == 0
        assert sorted(b["acknowledge"]["task_id"]["value"] for _, b in master.requests) == sorted(
            f"t{i}" for i in range(20))
        assert all(h["Mesos-Stream-Id"] == "stream-1" for h, _ in master.requests)
        assert 1 <= master.connections <= 4
    finally:
        o.stop(drain=False)
