"""How many scheduler calls a second the local master answers, idle and with nothing else to do.

The ceiling under the load run of ``bench/faults.py``: a launch wave of N tasks needs about N
acknowledgements plus one launch call per offer used, all answered by the local master's one
Python process (which also runs every agent and spawns every executor). Subscribes a framework
over the v1 Scheduler HTTP API, then ``--threads`` threads POST ACKNOWLEDGE calls (for tasks the
agent does not know, which the master forwards and the agent ignores, as for any late
acknowledgement) on keep-alive connections, as the framework's outbound senders do.

    .venv/bin/python bench/master_calls.py [--calls 3000] [--threads 8] [--agents 500]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import statistics
import threading
import time
import uuid
from urllib.parse import urlparse

from dl2_mesos.services.localcluster import LocalCluster


def _subscribe(host: str, port: int) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, str, str]:
    """Open the event stream; (its connection, its response, the stream id, the framework id)."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    body = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "bench", "name": "master-calls"}}}
    conn.request("POST", "/api/v1/scheduler", json.dumps(body),
                 {"Content-Type": "application/json", "Accept": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"SUBSCRIBE answered {resp.status}")
    stream_id = resp.getheader("Mesos-Stream-Id") or ""
    length = int(resp.readline())  # RecordIO in a chunked body: the first event is SUBSCRIBED
    event = json.loads(resp.read(length))
    return conn, resp, stream_id, event["subscribed"]["framework_id"]["value"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--agents", type=int, default=500, help="agents in the local master's process")
    args = ap.parse_args()
    with LocalCluster(agents=0, in_subprocess=True, cpus=8, mem="32GiB") as cluster:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: cluster.add_agent(ports=(20000 + i * 20, 20000 + i * 20 + 19)),
                          range(args.agents)))
        agents = list(cluster.agent_ids) or ["none"]
        url = urlparse(cluster.master if "://" in cluster.master else f"http://{cluster.master}")
        host, port = url.hostname or "127.0.0.1", url.port or 5050
        _conn, stream, stream_id, fid = _subscribe(host, port)
        drained = threading.Event()

        def drain() -> None:  # keep reading the event stream (offers, heartbeats) as a framework does
            try:
                while not drained.is_set() and stream.read1(1 << 16):
                    pass
            except (OSError, ValueError, http.client.HTTPException):
                pass

        threading.Thread(target=drain, daemon=True).start()
        per_thread = args.calls // args.threads
        latencies: list[float] = []
        lock = threading.Lock()

        def sender(i: int) -> None:
            conn = http.client.HTTPConnection(host, port, timeout=30)
            mine = []
            for n in range(per_thread):
                body = {"type": "ACKNOWLEDGE", "framework_id": {"value": fid}, "acknowledge": {
                    "agent_id": {"value": agents[(i * per_thread + n) % len(agents)]},
                    "task_id": {"value": f"bench-{i}-{n}"},
                    "uuid": base64.b64encode(uuid.uuid4().bytes).decode()}}
                t0 = time.perf_counter()
                conn.request("POST", "/api/v1/scheduler", json.dumps(body),
                             {"Content-Type": "application/json", "Mesos-Stream-Id": stream_id})
                resp = conn.getresponse()
                resp.read()
                if resp.status != 202:
                    raise RuntimeError(f"ACKNOWLEDGE answered {resp.status}")
                mine.append(time.perf_counter() - t0)
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=sender, args=(i,)) for i in range(args.threads)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        drained.set()
        lat = sorted(latencies)
        print(f"local master, {args.agents} agents, idle: {len(lat)} ACKNOWLEDGE calls from {args.threads} threads "
              f"in {wall:.2f} s = {len(lat) / wall:.0f} calls/s; latency p50 {statistics.median(lat) * 1000:.1f} ms, "
              f"p99 {lat[int(0.99 * (len(lat) - 1))] * 1000:.1f} ms")
        print(f"a 2000-task launch wave needs >= 2000 acknowledgements + 1 launch call per agent used: at this rate "
              f">= {2000 / (len(lat) / wall):.1f} s for the acknowledgements alone")


if __name__ == "__main__":
    main()
