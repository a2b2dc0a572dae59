"""Bad input and load against the framework's HTTP API.

* :func:`fuzz_api`: property-based fuzzing from the app's own OpenAPI document with schemathesis
  (valid and schema-violating cases, with a good, a wrong and no bearer token), against the
  FastAPI app backed by a real :class:`~dl2_mesos.framework.core.SchedulerCore` on a memory
  store. Counts cases, status codes and 5xx answers.
* :func:`api_burst`: N concurrent job submissions to a live ``dl2 framework`` replica; every
  submission must be accepted (201, then listed) or refused with a 4xx/503 and a reason. p50/p99
  latency of the submissions.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
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

    def submit(self, spec: Any) -> dict[str, Any]:
        with self._lock:
            job = self.core.submit(spec)
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


def api_burst(api: str, token: str, count: int = 1000, concurrency: int = 32,
              spec: dict[str, Any] | None = None) -> BurstResult:
    """Submit ``count`` jobs with ``concurrency`` client threads, then check the job list."""
    spec = spec or {"job_type": "resnet-50", "epochs": 1}
    headers = {"Authorization": f"Bearer {token}"}
    local = threading.local()

    def session() -> requests.Session:
        if not hasattr(local, "s"):
            local.s = requests.Session()
        return local.s

    def submit(i: int) -> tuple[float, int | None, str, str | None]:
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
        results = list(pool.map(submit, range(count)))
    seconds = time.monotonic() - t0
    lat = sorted(r[0] * 1000 for r in results)
    accepted = {r[3] for r in results if r[1] == 201}
    refusals = [r for r in results if r[1] is not None and r[1] != 201 and (400 <= r[1] < 500 or r[1] == 503) and r[2]]
    unclear = [r for r in results if r[1] != 201 and r not in refusals]
    listed = {j["id"] for j in requests.get(api + "/api/v1/jobs", timeout=60).json()["jobs"]}
    missing = accepted - listed
    problems = [f"accepted but not listed: {j}" for j in sorted(missing)[:5]]
    problems += [f"unclear answer {r[1]}: {r[2][:100]}" for r in unclear[:5]]
    return BurstResult(count, len(accepted), len(refusals), len(missing) + len(unclear),
                       statistics.median(lat), lat[min(len(lat) - 1, int(0.99 * len(lat)))], seconds,
                       dict(Counter(r[1] for r in refusals)), tuple(problems))
