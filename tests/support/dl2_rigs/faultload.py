"""Bad input and load against the framework's HTTP API.

* :func:`fuzz_api`: property-based fuzzing from the app's own OpenAPI document with schemathesis
  (valid and schema-violating cases, with a good, a wrong and no bearer token), against the
  FastAPI app backed by a real :class:`~dl2_mesos.framework.core.SchedulerCore` on a memory
  store. Counts cases, status codes and 5xx answers.
* :func:`api_burst`: N concurrent job submissions to a live ``dl2 framework`` replica; every
  submission must be accepted (201, then listed) or refused with a 4xx/503 and a reason. p50/p99
  latency of the submissions.
* :func:`agents_load`: many jobs on many local agents with light executors
  (:mod:`dl2_rigs.lightexec`): time until all run, slot decision, OFFERS and UPDATE
  handling latencies, status lag, the outbound call queue, jobs lost.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FuzzResult:
    """What the fuzzer sent and what came back."""

    cases: int
    server_errors: int
    status_codes: dict[int, int]
    unclear_rejections: int  # 4xx answers without a JSON "error" (or FastAPI "detail") reason
    examples: tuple[str, ...] = ()  # a few offending requests, for the report


class CoreBackend:
    """The API's Backend over a real SchedulerCore (memory store, no Mesos driver): submissions are
    validated, stored and listed exactly as on a leader."""

    def __init__(self) -> None:
        from dl2_mesos.config import Config
        from dl2_mesos.framework.core import SchedulerCore
        from dl2_mesos.framework.kv import MemoryKV
        from dl2_mesos.framework.state_store import StateStore
        from dl2_mesos.policy.registry import make_policy

        self.core = SchedulerCore(Config(policy="fifo"), make_policy("fifo"), StateStore(MemoryKV()))
        self.core.restore()
        self._lock = threading.Lock()

    def view(self) -> dict[str, Any]:
        with self._lock:
            return self.core.view()

    def is_leader(self) -> bool:
        return True

    def leader_url(self) -> str | None:
        return None

    def submit(self, spec: Any, idempotency_key: str = "") -> dict[str, Any]:
        with self._lock:
            job = self.core.submit(spec, idempotency_key)
            self.core.flush()
            return job.public()

    def cancel(self, job_id: str) -> dict[str, Any]:
        from dl2_mesos.framework.core import UnknownJob

        with self._lock:
            try:
                job = self.core.cancel(job_id)
            except UnknownJob as exc:
                raise KeyError(job_id) from exc
            self.core.flush()
            return job.public()

    def metrics(self) -> bytes:
        return self.core.metrics.render() if getattr(self.core, "metrics", None) else b""

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "role": "leader", "url": "http://fuzz", "leader": None, "registered": False,
                "framework_id": None}


def fuzz_api(cases: int = 300, token: str = "fuzz-token", seed: int | None = 0) -> FuzzResult:
    """Fuzz every operation of the API's OpenAPI document; returns counts (never raises on 5xx)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from dl2_mesos.framework.api import create_app

    app = create_app(CoreBackend(), api_token=token)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    strategy = schema.as_strategy() | schema.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE)
    codes: Counter[int] = Counter()
    errors: list[str] = []
    unclear: list[str] = []

    @settings(max_examples=cases, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              derandomize=seed is not None)
    @given(case=strategy, auth=st.sampled_from([f"Bearer {token}", None, "Bearer wrong", token]))
    def one(case: Any, auth: str | None) -> None:
        headers = dict(case.headers or {})
        if auth is not None:
            headers["Authorization"] = auth
        resp = case.call(headers=headers)
        codes[resp.status_code] += 1
        where = f"{case.method} {case.formatted_path} body={str(case.body)[:120]!r} -> {resp.status_code}"
        if resp.status_code >= 500:
            errors.append(where)
        elif 400 <= resp.status_code < 500:
            try:
                body = json.loads(resp.content or b"{}")
            except ValueError:
                body = {}
            if not (isinstance(body, dict) and (body.get("error") or body.get("detail"))):
                unclear.append(where)

    one()
    return FuzzResult(sum(codes.values()), len(errors), dict(sorted(codes.items())), len(unclear),
                      tuple(errors[:5] + unclear[:5]))


def list_jobs(api: str, headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every job of ``GET /api/v1/jobs``, following its pages."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
        page = requests.get(api + "/api/v1/jobs", params=params, headers=headers or {}, timeout=60).json()
        out += page["jobs"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out


@dataclass(frozen=True)
class BurstResult:
    """A burst of submissions and what became of each."""

    submitted: int
    accepted: int
    refused: int  # clean refusals: 4xx/503 with a reason
    lost: int  # accepted but not listed afterwards, or no clear answer at all
    p50_ms: float
    p99_ms: float
    seconds: float
    refusal_codes: dict[int, int] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    unsent: int = 0  # not sent: the burst's time ran out first
    stored_refused: int = 0  # cleanly refused submissions whose job was stored anyway


def api_burst(api: str, token: str, count: int = 1000, concurrency: int = 32,
              spec: dict[str, Any] | None = None, within: float | None = None) -> BurstResult:
    """Submit ``count`` jobs with ``concurrency`` client threads, then check the job list.
    With ``within`` seconds, submissions not started by then are not sent (``BurstResult.unsent``)."""
    stop_at = None if within is None else time.monotonic() + within
    spec = spec or {"job_type": "resnet-50", "epochs": 1}
    headers = {"Authorization": f"Bearer {token}"}
    local = threading.local()

    def session() -> requests.Session:
        if not hasattr(local, "s"):
            local.s = requests.Session()
        return local.s

    def submit(i: int) -> tuple[float, int | None, str, str | None] | None:
        if stop_at is not None and time.monotonic() > stop_at:
            return None
        t0 = time.perf_counter()
        try:
            r = session().post(api + "/api/v1/jobs", json={**spec, "name": f"burst{i}"}, headers=headers, timeout=60)
        except requests.RequestException as exc:
            return time.perf_counter() - t0, None, str(exc), None
        dt = time.perf_counter() - t0
        try:
            body = r.json()
        except ValueError:
            body = {}
        if r.status_code == 201:
            return dt, 201, "", body.get("id")
        return dt, r.status_code, str(body.get("error") or ""), None

    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        sent = list(pool.map(submit, range(count)))
    seconds = time.monotonic() - t0
    results = [r for r in sent if r is not None]
    unsent = count - len(results)
    lat = sorted(r[0] * 1000 for r in results)
    accepted = {r[3] for r in results if r[1] == 201}
    refusals = [r for r in results if _clean_refusal(r)]
    unclear = [r for r in results if r[1] != 201 and r not in refusals]
    jobs = list_jobs(api, headers)
    listed = {j["id"] for j in jobs}
    missing = accepted - listed
    problems = [f"accepted but not listed: {j}" for j in sorted(missing)[:5]]
    # a refusal must mean "not stored": a job stored anyway would be doubled by the client's retry
    names = Counter(j.get("name") for j in jobs)
    refused_names = {f"burst{i}" for i, r in enumerate(sent) if r is not None and _clean_refusal(r)}
    stored_refused = sum(names[n] for n in refused_names)
    if stored_refused:
        problems.append(f"{stored_refused} refused submissions were stored anyway")
    problems += [f"unclear answer {r[1]}: {r[2][:100]}" for r in unclear[:5]]
    reasons = Counter(f"{r[1]} {r[2][:100]}" for r in refusals)
    problems += [f"refused {n}x: {why}" for why, n in reasons.most_common(3)]
    if unsent:
        problems.append(f"{unsent} of {count} submissions not sent within {within or 0:.0f} s")
    return BurstResult(len(results), len(accepted), len(refusals), len(missing) + len(unclear),
                       statistics.median(lat), lat[min(len(lat) - 1, int(0.99 * len(lat)))], seconds,
                       dict(Counter(r[1] for r in refusals)), tuple(problems), unsent=unsent,
                       stored_refused=stored_refused)


def _clean_refusal(r: tuple[float, int | None, str, str | None]) -> bool:
    """A 4xx or 503 answer with a reason (not a 201, not a lost connection)."""
    return r[1] is not None and r[1] != 201 and (400 <= r[1] < 500 or r[1] == 503) and bool(r[2])


@dataclass(frozen=True)
class AgentsLoadResult:
    """Many jobs on many local agents with light executors: how the framework copes."""

    agents: int
    jobs: int
    running: int  # jobs seen running (tasks launched, TASK_RUNNING) before the deadline
    seconds_to_all_running: float | None  # from the end of the submission burst
    decisions: int
    decision_p50_ms: float
    decision_max_ms: float
    offer_events: int
    offers: int
    offer_event_p50_ms: float
    offer_event_p99_ms: float
    submit_p50_ms: float
    submit_p99_ms: float
    executors: int  # executors the master knew at the end (one bash stand-in each)
    problems: tuple[str, ...] = ()
    decision_p99_ms: float = 0.0
    seconds_from_first_submit: float | None = None  # first POST until every accepted job runs
    accepted: int = 0
    lost: int = 0  # accepted but not listed at the end, or failed/cancelled
    restarted: int = 0  # jobs that had to be restarted (tasks lost or failed) during the run
    status_events: int = 0
    status_event_p50_ms: float = 0.0  # handling one UPDATE event on the loop thread
    status_event_p99_ms: float = 0.0
    status_lag_p50_ms: float = 0.0  # executor's timestamp -> the loop handles the update
    status_lag_p99_ms: float = 0.0
    status_lag_max_ms: float = 0.0
    outbound_peak_queued: int = 0  # calls to the master waiting at once (see framework.outbound)
    outbound_max_lag_ms: float = 0.0
    outbound_sent: int = 0
    outbound_failed: int = 0
    outbound_dropped: int = 0
    outbound_coalesced: int = 0  # acknowledgements of re-sent updates answered by one already queued
    outbound_call_mean_ms: float = 0.0  # one call's HTTP round trip to the master, on average
    outbound_peak_in_flight: int = 0  # calls to the master in flight at once (concurrent senders)
    calls_by_kind: dict[str, int] = field(default_factory=dict)  # driver method -> calls made
    ack_p50_ms: float = 0.0  # an update reaches the loop -> the master answered its acknowledgement
    ack_p99_ms: float = 0.0
    wave_tasks: int = 0  # the largest launch wave: tasks launched in one burst of launch calls
    wave_launched_s: float | None = None  # first launch call queued -> the last one answered
    wave_acknowledged_s: float | None = None  # first launch call queued -> every TASK_RUNNING acknowledged
    wave_unacknowledged: int = 0  # tasks of the wave whose TASK_RUNNING was never acknowledged
    flushes: int = 0  # the loop's writes of changed jobs (once per batch of events), then their acks
    flush_p50_ms: float = 0.0
    flush_p99_ms: float = 0.0
    first_lag_p50_ms: float = 0.0  # the lag of each update's first delivery (re-sends left out)
    first_lag_p99_ms: float = 0.0
    redeliveries: int = 0  # updates the agent sent again because their acknowledgement was late
    #: CPU seconds from the first submission to the end, by process: "framework" (this process),
    #: "master and agents" (the local cluster), "executor spawner" (its helper that starts
    #: executors), "executors" (the bash stand-ins alive at the end), "hub" (the light executors'
    #: hub), "API clients" (the process submitting the jobs)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0  # the same interval, wall clock
    #: the largest launch wave (first launch call queued -> last TASK_RUNNING acknowledged), CPU
    #: sampled every 0.25 s: the window the samples cover, each main process's CPU seconds in it,
    #: and the whole machine's busy core-seconds in it (every process, the kernel's work included)
    wave_window_s: float = 0.0
    wave_cpu_seconds: dict[str, float] = field(default_factory=dict)
    wave_machine_busy_s: float = 0.0
    cores: int = 0


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


class _CallLog:
    """Records the outbound calls (an :class:`~dl2_mesos.framework.outbound.OutboundDriver`
    observer, on its sender threads) and when the loop first saw each status update."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kinds: Counter[str] = Counter()
        self.launches: dict[str, tuple[float, float]] = {}  # task -> (launch queued, answered)
        self.running_acked: dict[str, float] = {}  # task -> its TASK_RUNNING acknowledgement answered
        self.seen: dict[tuple[str, str], float] = {}  # (task, uuid) -> first handled by the loop
        self.ack_delays: list[float] = []

    def update_seen(self, status: dict[str, Any]) -> bool:
        """Note that the loop got ``status``; True the first time (False: the agent sent it again)."""
        key = (str((status.get("task_id") or {}).get("value")), str(status.get("uuid")))
        with self.lock:
            if key in self.seen:
                return False
            self.seen[key] = time.monotonic()
            return True

    def __call__(self, rec: Any) -> None:
        with self.lock:
            self.kinds[rec.name] += 1
            if not rec.ok:
                return
            if rec.name == "launchTasks":
                for t in rec.args[1] if len(rec.args) > 1 else ():
                    self.launches[t["task_id"]["value"]] = (rec.queued_at, rec.finished_at)
            elif rec.name == "acknowledgeStatusUpdate":
                st = rec.args[0]
                tid = str((st.get("task_id") or {}).get("value"))
                if st.get("state") == "TASK_RUNNING":
                    self.running_acked.setdefault(tid, rec.finished_at)
                seen = self.seen.get((tid, str(st.get("uuid"))))
                if seen is not None:
                    self.ack_delays.append(rec.finished_at - seen)

    def largest_wave(self, gap: float = 1.0) -> tuple[int, float | None, float | None, int, float]:
        """(tasks, seconds until all launched, seconds until all TASK_RUNNING acknowledged, not
        acknowledged, its first launch call's ``time.monotonic()``) of the largest burst of launch
        calls queued less than ``gap`` s apart."""
        with self.lock:
            items = sorted((q, a, tid) for tid, (q, a) in self.launches.items())
            acked = dict(self.running_acked)
        waves: list[list[tuple[float, float, str]]] = []
        for it in items:
            if waves and it[0] - waves[-1][-1][0] < gap:
                waves[-1].append(it)
            else:
                waves.append([it])
        if not waves:
            return 0, None, None, 0, 0.0
        wave = max(waves, key=len)
        start = wave[0][0]
        missing = sum(1 for _, _, tid in wave if tid not in acked)
        all_acked = None if missing else max(acked[tid] for _, _, tid in wave) - start
        return len(wave), max(a for _, a, _ in wave) - start, all_acked, missing, start


BUSY_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
"""The resolution of the machine's busy time (``/proc/stat`` counts clock ticks)."""


class _CpuSampler:
    """CPU seconds of the run's main processes and the machine's busy time, sampled from a thread.

    Only a handful of processes are read (not the thousand executors: reading each of them four
    times a second would itself cost the framework's process CPU), and the whole machine's busy
    time (``psutil.cpu_times``) covers the rest. :meth:`window` gives the use between two times."""

    def __init__(self, pids: Callable[[], dict[str, int]], period: float = 0.25) -> None:
        import psutil

        self._psutil = psutil
        self._pids = pids
        self._procs: dict[int, Any] = {}
        self._last: dict[int, float] = {}  # a process that has ended keeps its last reading
        self.period = period
        self.samples: list[tuple[float, dict[str, float], float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> _CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _cpu(self, pid: int) -> float:
        try:
            proc = self._procs.get(pid)
            if proc is None:
                proc = self._procs[pid] = self._psutil.Process(pid)
            t = proc.cpu_times()
            self._last[pid] = t.user + t.system
        except self._psutil.Error:
            pass
        return self._last.get(pid, 0.0)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            cpu = {name: self._cpu(pid) for name, pid in self._pids().items()}
            # stamp the machine reading itself (not the process reads before it), so that the busy
            # time between two samples fits in the time between their stamps
            before = time.monotonic()
            t = self._psutil.cpu_times()
            stamp = (before + time.monotonic()) / 2
            busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) \
                + getattr(t, "steal", 0.0)
            self.samples.append((stamp, cpu, busy))

    def window(self, start: float, end: float) -> tuple[float, dict[str, float], float] | None:
        """(seconds covered, CPU seconds by process, machine busy core-seconds) from the last sample
        at or before ``start`` to the first at or after ``end``; None when the samples miss it.
        The kernel counts busy time in clock ticks, so the busy figure may pass cores x seconds by
        up to a tick per core at each end (:data:`BUSY_TICK_S`)."""
        before = [s for s in self.samples if s[0] <= start]
        after = [s for s in self.samples if s[0] >= end]
        if not before or not after:
            return None
        a, b = before[-1], after[0]
        return b[0] - a[0], {k: b[1][k] - a[1].get(k, 0.0) for k in b[1]}, b[2] - a[2]


def _burst_and_cpu(api: str, jobs: int, spec: dict[str, Any], within: float | None) -> tuple[BurstResult, float]:
    """:func:`api_burst` (16 clients, no token) and the CPU seconds it took, for a client process."""
    t = time.process_time()
    burst = api_burst(api, "", jobs, concurrency=16, spec=spec, within=within)
    return burst, time.process_time() - t


def _cpu_by_process(cluster: Any, hub_pid: int) -> dict[str, float]:
    """User + system CPU seconds so far of this process, the local cluster's, its executors'
    (every live descendant) and the hub's."""
    import psutil

    def cpu(p: psutil.Process) -> float:
        try:
            t = p.cpu_times()
            return t.user + t.system
        except psutil.Error:
            return 0.0

    def is_spawner(p: psutil.Process) -> bool:
        try:
            return "dl2_mesos.localmesos.spawner" in p.cmdline()
        except psutil.Error:
            return False

    out = {"framework": cpu(psutil.Process()), "master and agents": 0.0, "executor spawner": 0.0,
           "executors": 0.0, "hub": 0.0}
    proc = getattr(cluster, "_proc", None)
    if proc is not None:
        try:
            master = psutil.Process(proc.pid)
            out["master and agents"] = cpu(master)
            for child in master.children(recursive=True):
                out["executor spawner" if is_spawner(child) else "executors"] += cpu(child)
        except psutil.Error:
            pass
    try:
        out["hub"] = cpu(psutil.Process(hub_pid))
    except psutil.Error:
        pass
    return out


def _main_pids(cluster: Any, hub_pid: int, client_pids: list[int]) -> Callable[[], dict[str, int]]:
    """A function giving the pids to sample: this process (the framework), the local cluster's,
    its executor spawner's (once it has started one), the hub's and the API clients'."""
    import psutil

    found: dict[str, int] = {}

    def pids() -> dict[str, int]:
        out = {"framework": os.getpid(), "hub": hub_pid}
        proc = getattr(cluster, "_proc", None)
        if proc is not None:
            out["master and agents"] = proc.pid
            if "spawner" not in found:
                try:
                    for child in psutil.Process(proc.pid).children():
                        if "dl2_mesos.localmesos.spawner" in child.cmdline():
                            found["spawner"] = child.pid
                except psutil.Error:
                    pass
            if "spawner" in found:
                out["executor spawner"] = found["spawner"]
        if client_pids:
            out["API clients"] = client_pids[0]
        return out

    return pids


def psutil_cores() -> int:
    """Logical CPUs this machine has."""
    import psutil

    return psutil.cpu_count() or 1


def agents_load(agents: int = 500, jobs: int = 1000, workdir: str | None = None, slot: str = "5s",
                settle_slots: int = 3, timeout: float = 300.0, master_calls: int | None = None,
                burst_seconds: float | None = None) -> AgentsLoadResult:
    """``jobs`` jobs (1 PS + 1 worker each) on ``agents`` local agents, executors from the light hub.

    The framework runs in this process (a real :class:`Replica` with the real pymesos driver), the
    local cluster and the hub in their own processes. Slot decisions (policy + placement + launch
    planning, ``SchedulerCore.decide``), OFFERS and UPDATE events (``SchedulerCore.handle``) are
    timed; an update's lag runs from the executor's timestamp until the loop handles it (it
    includes the agent's re-sends of updates whose acknowledgement is still queued). The calls to
    the master come from the outbound queue's counters (:mod:`dl2_mesos.framework.outbound`).
    Executors report progress at the framework's default interval (5 s). ``master_calls``
    overrides the config's calls to the master in flight at once (1: one after the other);
    ``burst_seconds`` bounds the submission burst (the rest is not sent, and said). The largest launch wave
    is timed from its first launch call until the master answered the acknowledgement of every
    one of its tasks' TASK_RUNNING.
    """
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from dl2_mesos.config import load_config
    from dl2_mesos.framework import events as ev
    from dl2_mesos.framework.runner import Replica
    from dl2_rigs.lightexec import executor_command, start_hub
    from dl2_mesos.services.localcluster import LocalCluster
    from dl2_mesos.services.zookeeper import free_port

    work = Path(workdir or tempfile.mkdtemp(prefix="dl2-load-"))
    # progress reports at the framework's default interval (the LaunchSpec's progress_interval_s)
    # the rigs are not installed: the hub finds dl2_rigs through PYTHONPATH
    rigs_root = str(Path(__file__).resolve().parents[1])
    hub_env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (rigs_root, os.environ.get("PYTHONPATH")) if p)}
    work.mkdir(parents=True, exist_ok=True)
    hub, hub_port = start_hub(["--eps", "0.01"], hub_env, str(work))
    cluster = LocalCluster(agents=0, in_subprocess=True, cpus=8, mem="32GiB", work_dir=str(work / "cluster"),
                           executor_registration_timeout=120.0, status_update_retry_interval=5.0)
    decisions: list[float] = []
    offer_events: list[float] = []
    offers = [0]
    status_events: list[float] = []
    registrations = [0]  # subscriptions after the first (a dropped event stream shows here)
    status_lag: list[float] = []
    first_lag: list[float] = []
    submits: list[float] = []
    problems: list[str] = []
    calls = _CallLog()
    replica = None
    runner = None
    sampler: _CpuSampler | None = None
    try:
        t_start = time.monotonic()

        def say(what: str) -> None:  # progress on stderr: a long run shows where it is
            print(f"load {time.monotonic() - t_start:7.1f} s: {what}", file=sys.stderr, flush=True)

        cluster.start(timeout=60)
        ports_each = max(20, min(1000, 40000 // max(agents, 1)))
        with ThreadPoolExecutor(8) as pool:  # the cluster starts agents concurrently
            list(pool.map(lambda i: cluster.add_agent(ports=(20000 + i * ports_each, 20000 + (i + 1) * ports_each - 1)),
                          range(agents)))
        say(f"{agents} agents up")
        api_port = free_port()  # after the agents: each of them took an ephemeral port meanwhile
        cfg = load_config(env={}, overrides={
            "master": cluster.master, "zk": "none", "state_dir": str(work / "state"), "policy": "fifo",
            "slot": slot, "offer_wait": "1s", "api": f"127.0.0.1:{api_port}", "launch_timeout": "120s",
            "executor_command": executor_command(hub_port), "checkpoint_root": f"file://{work}/ckpt",
            "online_learning": False, **({"master_calls": master_calls} if master_calls else {}),
        })
        replica = Replica(cfg)
        runner = threading.Thread(target=replica.run, daemon=True)
        runner.start()
        api = f"http://127.0.0.1:{api_port}"
        deadline = time.monotonic() + 60
        while not (replica.core is not None and replica.core.registered):
            if time.monotonic() > deadline:
                raise RuntimeError("the framework did not register")
            time.sleep(0.2)
        core = replica.core
        handle, decide = core.handle, core.decide
        if hasattr(core.driver, "observer"):
            core.driver.observer = calls

        def timed_handle(event: Any) -> None:
            t0 = time.perf_counter()
            if isinstance(event, ev.StatusUpdate):
                ts = event.status.get("timestamp")
                lag = max(0.0, time.time() - ts) if isinstance(ts, (int, float)) and ts > 0 else None
                if lag is not None:
                    status_lag.append(lag)
                if calls.update_seen(event.status) and lag is not None:
                    first_lag.append(lag)
            handle(event)
            spent = time.perf_counter() - t0
            if isinstance(event, ev.Registered):
                registrations[0] += 1
            elif isinstance(event, ev.Offers):
                offer_events.append(spent)
                offers[0] += len(event.offers)
            elif isinstance(event, ev.StatusUpdate):
                status_events.append(spent)

        def timed_decide(slot_no: int) -> Any:
            t0 = time.perf_counter()
            try:
                return decide(slot_no)
            finally:
                decisions.append(time.perf_counter() - t0)

        flush = core.flush
        flushes: list[float] = []

        def timed_flush() -> None:
            t0 = time.perf_counter()
            try:
                flush()
            finally:
                flushes.append(time.perf_counter() - t0)

        core.handle, core.decide = timed_handle, timed_decide  # instance attributes: the loop looks them up
        core.flush = timed_flush
        say("framework registered; submitting")
        spec = {"job_type": "resnet-50", "epochs": 1000, "max_ps": 1, "max_workers": 1,
                "worker": {"cpus": 1, "gpus": 0, "mem": 512}, "ps": {"cpus": 0.5, "gpus": 0, "mem": 256}}
        # The clients run in a process of their own, as API clients do: 16 client threads inside
        # the framework's process took the GIL from its scheduling loop, which the lag counts.
        clients = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        clients.submit(time.monotonic).result()  # started (and its imports done) before the clock starts
        sampled = _main_pids(cluster, hub.pid, list(clients._processes))  # noqa: SLF001 - the one client process
        sampler = _CpuSampler(sampled).start()
        t_first = time.monotonic()
        cpu_first = _cpu_by_process(cluster, hub.pid)
        try:
            burst, clients_cpu = clients.submit(_burst_and_cpu, api, jobs, spec, burst_seconds).result()
        finally:
            clients.shutdown()
        submits = [burst.p50_ms, burst.p99_ms]
        problems += list(burst.problems)
        say(f"{burst.accepted}/{jobs} submissions accepted in {burst.seconds:.0f} s")
        t0 = time.monotonic()
        all_running = None
        running = 0
        listed: list[dict[str, Any]] = []
        said = t0
        while time.monotonic() - t0 < timeout:
            listed = list_jobs(api)
            running = sum(j["phase"] == "running" for j in listed)
            if running >= burst.accepted:
                all_running = time.monotonic() - t0
                break
            if time.monotonic() - said >= 30:
                said = time.monotonic()
                say(f"{running}/{burst.accepted} jobs running")
            time.sleep(1.0)
        say(f"{running}/{burst.accepted} jobs running; settling")
        if all_running is None:
            phases = Counter(j["phase"] for j in listed)
            problems.append(f"only {running}/{burst.accepted} jobs running after {timeout:.0f}s ({dict(phases)})")
        n = len(decisions)
        slot_s = cfg.slot
        wait_until = time.monotonic() + slot_s * (settle_slots + 1)
        while len(decisions) < n + settle_slots and time.monotonic() < wait_until:
            time.sleep(0.2)
        final = replica.view()["jobs"]  # the published view: full job records
        lost = sum(1 for j in final.values() if j["phase"] in ("failed", "cancelled"))
        if registrations[0]:
            problems.append(f"the framework re-subscribed {registrations[0]} times during the run")
        lost += burst.lost + max(0, burst.accepted - len(final))
        restarted = sum(1 for j in final.values() if j["restart_count"] > 0 or j["generation"] > 0)
        cpu_end = _cpu_by_process(cluster, hub.pid)
        wall = time.monotonic() - t_first
        out = getattr(core.driver, "stats", None)
        ob = out() if callable(out) else None
        wave = calls.largest_wave()
        sampler.stop()
        in_wave = sampler.window(wave[4], wave[4] + wave[2]) if wave[2] is not None else None
        try:
            hub_execs = sum(len(f.get("executors", [])) for f in cluster.state()["frameworks"])
        except (OSError, ValueError, KeyError):
            hub_execs = -1
        return AgentsLoadResult(
            agents, jobs, running, all_running, len(decisions), _pct(decisions, 0.5) * 1000,
            max(decisions or [0.0]) * 1000, len(offer_events), offers[0], _pct(offer_events, 0.5) * 1000,
            _pct(offer_events, 0.99) * 1000, submits[0], submits[1], hub_execs, tuple(problems),
            decision_p99_ms=_pct(decisions, 0.99) * 1000,
            seconds_from_first_submit=None if all_running is None else t0 + all_running - t_first,
            accepted=burst.accepted, lost=lost, restarted=restarted,
            status_events=len(status_events), status_event_p50_ms=_pct(status_events, 0.5) * 1000,
            status_event_p99_ms=_pct(status_events, 0.99) * 1000,
            status_lag_p50_ms=_pct(status_lag, 0.5) * 1000, status_lag_p99_ms=_pct(status_lag, 0.99) * 1000,
            status_lag_max_ms=max(status_lag or [0.0]) * 1000,
            outbound_peak_queued=ob.peak_queued if ob else 0,
            outbound_max_lag_ms=ob.max_lag_seconds * 1000 if ob else 0.0,
            outbound_sent=ob.sent if ob else 0, outbound_failed=ob.failed if ob else 0,
            outbound_dropped=ob.dropped if ob else 0, outbound_coalesced=ob.coalesced if ob else 0,
            outbound_call_mean_ms=ob.call_seconds / max(1, ob.sent + ob.failed) * 1000 if ob else 0.0,
            outbound_peak_in_flight=getattr(ob, "peak_in_flight", 0), calls_by_kind=dict(calls.kinds),
            ack_p50_ms=_pct(calls.ack_delays, 0.5) * 1000, ack_p99_ms=_pct(calls.ack_delays, 0.99) * 1000,
            wave_tasks=wave[0], wave_launched_s=wave[1], wave_acknowledged_s=wave[2],
            wave_unacknowledged=wave[3], flushes=len(flushes), flush_p50_ms=_pct(flushes, 0.5) * 1000,
            flush_p99_ms=_pct(flushes, 0.99) * 1000,
            first_lag_p50_ms=_pct(first_lag, 0.5) * 1000, first_lag_p99_ms=_pct(first_lag, 0.99) * 1000,
            redeliveries=len(status_lag) - len(first_lag),
            cpu_seconds={**{k: round(cpu_end[k] - cpu_first.get(k, 0.0), 1) for k in cpu_end},
                         "API clients": round(clients_cpu, 1)}, wall_seconds=wall,
            wave_window_s=in_wave[0] if in_wave else 0.0,
            wave_cpu_seconds={k: round(v, 1) for k, v in in_wave[1].items()} if in_wave else {},
            wave_machine_busy_s=in_wave[2] if in_wave else 0.0, cores=psutil_cores())
    finally:
        if sampler is not None:
            sampler.stop()
        if replica is not None:
            replica.stop()
        if runner is not None:
            runner.join(30)
        cluster.stop(timeout=60)
        hub.terminate()
        try:
            hub.wait(10)
        except subprocess.TimeoutExpired:
            hub.kill()
            hub.wait()
