"""The framework's own part of a launch wave: N tasks decided, launched and acknowledged, against a
master that answers at once.

``bench/faults.py``'s load run times a whole wave on this machine: the framework, the local
master with its 500 agents, the executors' hub and the executor spawner share two cores, and that
run prints the machine busy during the wave. This benchmark takes the framework alone: the
scheduling core (the same ``SchedulerCore`` as the framework, the policy's answer precomputed)
decides a slot that launches every task, its calls go through the framework's real outbound path
(``OutboundDriver`` with 8 concurrent senders, ``MasterHttp`` building the v1 Scheduler API
bodies, keep-alive HTTP) to a minimal HTTP server in another process that answers each call with
202 as soon as it has read it; then every task's TASK_RUNNING update is handled by the core
(written to the state store, in memory here) and acknowledged through the same path. The clock
runs from the slot's start until the master answered the last acknowledgement.

    .venv/bin/python bench/launch_wave.py [--jobs 1000] [--agents 500] [--senders 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import multiprocessing
import socket
import statistics
import time
import uuid
from typing import Any

import pymesos  # noqa: F401 - imported in the main thread first, as the framework does (it sets signal handlers)

from dl2_mesos.allocation import Allocation
from dl2_mesos.config import Config
from dl2_mesos.framework import events as ev
from dl2_mesos.framework.core import SchedulerCore
from dl2_mesos.framework.kv import MemoryKV
from dl2_mesos.framework.master_http import MasterHttp
from dl2_mesos.framework.outbound import OutboundDriver
from dl2_mesos.framework.state_store import StateStore
from dl2_mesos.job_types import job_type_names
from dl2_mesos.jobs import JobSpec

_ids = itertools.count()


def _serve(sock: socket.socket, answered: Any) -> None:
    """The instant master: read each request (headers, then Content-Length bytes), answer 202."""

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
                with answered.get_lock():
                    answered.value += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(client, sock=sock)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class HttpDriver:
    """What the outbound path needs of a subscribed pymesos driver: the master, the stream id, the
    framework id; every scheduler call goes to :class:`MasterHttp`."""

    def __init__(self, master: str) -> None:
        self.master, self.stream_id, self.framework_id = master, "bench-stream", "bench"
        self.http = MasterHttp(self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *a, **k: self.http.call(name, a, k)


class Precomputed:
    """The policy's answer, fixed: its time is not what this benchmark measures."""

    name = "precomputed"

    def __init__(self) -> None:
        self.answer: Allocation | None = None

    def decide(self, state: Any) -> Allocation | None:
        return self.answer


def _offer(agent: int) -> dict[str, Any]:
    return {
        "id": {"value": f"o{next(_ids)}"}, "agent_id": {"value": f"agent-{agent:04d}"}, "hostname": f"host{agent}",
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 32.0}, "role": "*"},
            {"name": "gpus", "type": "SCALAR", "scalar": {"value": 8.0}, "role": "*"},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": 256 * 1024.0}, "role": "*"},
            {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 31000, "end": 32000}]}, "role": "*"},
        ],
    }


def one_wave(jobs: int, agents: int, senders: int, master: str) -> dict[str, float]:
    """One wave: 1 PS + 1 worker for each of ``jobs`` jobs; the phases' seconds from the slot's start."""
    cfg = Config(slot=60.0, policy="fifo", offer_wait=0.0)
    policy = Precomputed()
    core = SchedulerCore(cfg, policy, StateStore(MemoryKV()), clock=lambda: 1000.0)
    core.restore()
    outbound = OutboundDriver(HttpDriver(master), senders=senders)
    try:
        core.handle(ev.Registered(outbound, "bench", master, False))
        types = job_type_names()
        submitted = [core.submit(JobSpec(job_type=types[i % len(types)], epochs=10)) for i in range(jobs)]
        core.handle(ev.Offers(tuple(_offer(a) for a in range(agents))))
        outbound.flush(60)
        policy.answer = Allocation({j.job_id: (1, 1) for j in submitted})
        sent_before = outbound.stats().sent
        cpu0, t0 = time.process_time(), time.perf_counter()
        core.decide(core.current_slot())
        core.flush()
        decided = time.perf_counter() - t0
        launched = [t for j in submitted for t in j.live_tasks()]
        outbound.flush(120)
        launches_answered = time.perf_counter() - t0
        launch_calls = outbound.stats().sent - sent_before
        for t in launched:  # each executor reports TASK_RUNNING, as the event stream delivers it
            core.handle(ev.StatusUpdate({
                "task_id": {"value": t.task_id}, "agent_id": {"value": t.agent_id}, "state": "TASK_RUNNING",
                "source": "SOURCE_EXECUTOR", "timestamp": time.time(),
                "uuid": base64.b64encode(uuid.uuid4().bytes).decode()}))
        core.flush()  # stored, then acknowledged
        outbound.flush(120)
        total = time.perf_counter() - t0
        stats = outbound.stats()
        return {"tasks": len(launched), "launch_calls": launch_calls, "failed": stats.failed,
                "acks": stats.sent - sent_before - launch_calls, "decided_s": decided,
                "launches_answered_s": launches_answered, "all_acked_s": total,
                "framework_cpu_s": time.process_time() - cpu0}
    finally:
        outbound.stop(timeout=10)
        http = getattr(outbound.driver, "http", None)
        if http is not None:
            http.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000, help="jobs, each launched as 1 PS + 1 worker")
    ap.add_argument("--agents", type=int, default=500)
    ap.add_argument("--senders", type=int, default=8, help="calls to the master in flight at once")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)
    master = f"127.0.0.1:{sock.getsockname()[1]}"
    answered = multiprocessing.get_context("spawn").Value("q", 0)
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(sock, answered), daemon=True)
    server.start()
    try:
        runs = [one_wave(args.jobs, args.agents, args.senders, master) for _ in range(args.repeat)]
    finally:
        server.terminate()
        server.join(5)
    r0 = runs[0]
    print(f"launch wave, the framework's part: {int(r0['tasks'])} tasks ({args.jobs} jobs x 1 PS + 1 worker) on "
          f"{args.agents} agents, {int(r0['launch_calls'])} launch calls + {int(r0['acks'])} acknowledgements, "
          f"{args.senders} senders, a master that answers at once; {args.repeat} runs, {answered.value} calls "
          f"answered in all, {sum(int(r['failed']) for r in runs)} failed")
    for key, label in (("decided_s", "slot decided and stored"), ("launches_answered_s", "launch calls answered"),
                       ("all_acked_s", "every TASK_RUNNING acknowledged"), ("framework_cpu_s", "framework CPU")):
        vals = [r[key] for r in runs]
        print(f"  {label:<34} median {statistics.median(vals):.2f} s   max {max(vals):.2f} s")
    worst = max(r["all_acked_s"] for r in runs)
    print(f"  goal: a 2000-task wave acknowledged within 3 s: the framework's part "
          f"{'within' if worst <= 3.0 else 'NOT within'} it (worst {worst:.2f} s)")


if __name__ == "__main__":
    main()
