"""The fault-injection benchmark behind ``dl2 bench faults`` and ``bench/faults.py``: every fault
scenario, the API fuzzing run, the submission burst and the many-agents load, as one table."""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dl2_rigs.faultload import AgentsLoadResult, BurstResult, FuzzResult

logger = logging.getLogger(__name__)


@dataclass
class FaultBenchReport:
    """Everything one run measured (any part may be missing when skipped or failed)."""

    faults: list[Any] = field(default_factory=list)  # FaultResult
    fuzz: FuzzResult | None = None
    burst: BurstResult | None = None
    load: AgentsLoadResult | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        conv = lambda x: dataclasses.asdict(x) if x is not None else None  # noqa: E731
        return {"faults": [dataclasses.asdict(f) for f in self.faults], "fuzz": conv(self.fuzz),
                "burst": conv(self.burst), "load": conv(self.load), "notes": list(self.notes)}

    @property
    def ok(self) -> bool:
        return (all(f.ok for f in self.faults)
                and (self.fuzz is None or (self.fuzz.server_errors == 0 and self.fuzz.unclear_rejections == 0))
                and (self.burst is None or self.burst.lost == 0)
                and (self.load is None or (self.load.lost == 0 and not self.load.problems)))


def run_fault_bench(scenarios: list[str] | None = None, fuzz_cases: int = 1000, burst: int = 1000,
                    agents: int = 500, load_jobs: int = 1000, workdir: str | None = None,
                    load_timeout: float = 300.0, master_calls: int | None = None,
                    burst_seconds: float | None = None) -> FaultBenchReport:
    """Start ZooKeeper and HDFS, run the scenarios, then fuzzing, the burst and the load."""
    from dl2_rigs.fault_scenarios import run_scenarios
    from dl2_rigs.faultload import agents_load, fuzz_api
    from dl2_mesos.services.hdfs import HdfsCluster
    from dl2_mesos.services.zookeeper import ZooKeeperServer

    report = FaultBenchReport()
    work = Path(workdir or tempfile.mkdtemp(prefix="dl2-bench-faults-"))
    if scenarios != []:
        with ZooKeeperServer() as zk, HdfsCluster() as hdfs:
            report.faults = run_scenarios(hdfs, zk, work, scenarios)
    if fuzz_cases:
        report.fuzz = fuzz_api(fuzz_cases)
    if burst:
        report.burst = burst_on_live_framework(burst, work / "burst")
    if agents and load_jobs:
        try:
            report.load = agents_load(agents, load_jobs, workdir=str(work / "load"), timeout=load_timeout,
                                      master_calls=master_calls, burst_seconds=burst_seconds)
        except (RuntimeError, OSError) as exc:
            report.notes.append(f"load at {agents} agents / {load_jobs} jobs failed: {exc}")
    return report


def burst_on_live_framework(count: int, workdir: Path) -> BurstResult:
    """``count`` submissions to a real ``dl2 framework`` (ZooKeeper state store) on a local cluster
    without agents, so jobs stay pending and only the API + store are measured."""
    from dl2_rigs.faultload import api_burst
    from dl2_rigs.faults import TOKEN, FaultRig, RigOptions
    from dl2_mesos.services.zookeeper import ZooKeeperServer

    with ZooKeeperServer() as zk, FaultRig("burst", _NoHdfs(), zk, workdir,  # type: ignore[arg-type]
                                           RigOptions(agents=0)) as rig:
        return api_burst(rig.api(), TOKEN, count)


class _NoHdfs:
    """Stands in for an HDFS where no job ever runs (checkpoint root is never touched)."""

    url = "hdfs://127.0.0.1:1"


def format_report(r: FaultBenchReport) -> str:
    """The table printed by ``dl2 bench faults``."""
    lines = ["fault                              recovery (s)  jobs finished  checkpoints intact",
             "---------------------------------  ------------  -------------  ------------------"] if r.faults else []
    for f in r.faults:
        rec = f"{f.recovery_s:.1f}" if f.recovery_s is not None else "no recovery"
        ck = f"yes ({f.checkpoints} verified)" if f.checkpoints_ok else "NO"
        lines.append(f"{f.fault:<33}  {rec:>12}  {f.finished:>6} / {f.submitted:<4}  {ck}")
        for p in f.problems[:3]:
            lines.append(f"    problem: {p[:150]}")
    if r.fuzz is not None:
        z = r.fuzz
        lines += ["", f"API fuzzing (schemathesis, OpenAPI): {z.cases} cases, {z.server_errors} 5xx, "
                      f"{z.unclear_rejections} rejections without a reason; status codes {z.status_codes}"]
        lines += [f"    example: {e}" for e in z.examples[:3]]
    if r.burst is not None:
        b = r.burst
        lines += ["", f"submission burst: {b.submitted} POSTs -> {b.accepted} accepted (all listed: {b.lost == 0}), "
                      f"{b.refused} refused {b.refusal_codes or ''}, {b.lost} lost; latency p50 {b.p50_ms:.1f} ms, "
                      f"p99 {b.p99_ms:.1f} ms; {b.seconds:.1f} s in all"]
    if r.load is not None:
        lines += ["", *format_load(r.load)]
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines)


def _wave_cpu_line(ld: AgentsLoadResult) -> list[str]:
    """Where the machine's CPU went during the largest launch wave: its work in core-seconds, and
    so the least time that work takes on this machine's cores."""
    if not ld.wave_cpu_seconds or ld.wave_window_s <= 0:
        return []
    cores = max(1, ld.cores)
    return [f"      CPU in that wave (sampled over {ld.wave_window_s:.1f} s): "
            + ", ".join(f"{k} {v:.1f} s" for k, v in ld.wave_cpu_seconds.items())
            + f"; the machine busy {ld.wave_machine_busy_s:.1f} core-seconds of {cores * ld.wave_window_s:.1f} "
            f"({cores} cores, {ld.wave_machine_busy_s / (cores * ld.wave_window_s):.0%}): that work takes "
            f">= {ld.wave_machine_busy_s / cores:.1f} s on {cores} cores"]


def format_load(ld: AgentsLoadResult) -> list[str]:
    """The load run's lines of the table."""
    def secs(v: float | None) -> str:
        return f"{v:.1f} s" if v is not None else "not reached"

    out = [
        f"load: {ld.jobs} jobs on {ld.agents} agents (light executors): {ld.accepted} accepted, "
        f"{ld.running} running; all running {secs(ld.seconds_to_all_running)} after the burst "
        f"({secs(ld.seconds_from_first_submit)} after the first submission); jobs lost {ld.lost}, "
        f"restarted {ld.restarted}",
        f"      slot decision p50 {ld.decision_p50_ms:.1f} ms, p99 {ld.decision_p99_ms:.1f} ms, "
        f"max {ld.decision_max_ms:.1f} ms ({ld.decisions} slots); OFFERS events p50 "
        f"{ld.offer_event_p50_ms:.2f} ms, p99 {ld.offer_event_p99_ms:.2f} ms ({ld.offer_events} events, "
        f"{ld.offers} offers)",
        f"      status updates: handling p50 {ld.status_event_p50_ms:.2f} ms, p99 {ld.status_event_p99_ms:.2f} ms; "
        f"executor -> loop lag p50 {ld.status_lag_p50_ms:.0f} ms, p99 {ld.status_lag_p99_ms:.0f} ms, "
        f"max {ld.status_lag_max_ms:.0f} ms ({ld.status_events} updates); writes of changed jobs before "
        f"their acks p50 {ld.flush_p50_ms:.2f} ms, p99 {ld.flush_p99_ms:.2f} ms ({ld.flushes})",
        f"      submissions p50 {ld.submit_p50_ms:.1f} ms, p99 {ld.submit_p99_ms:.1f} ms; calls to the master "
        f"(off the loop): {ld.outbound_sent} sent, {ld.outbound_failed} failed, {ld.outbound_dropped} dropped, "
        f"{ld.outbound_coalesced} repeated acks merged, "
        f"peak queue {ld.outbound_peak_queued}, max wait {ld.outbound_max_lag_ms:.0f} ms, "
        f"{ld.outbound_call_mean_ms:.1f} ms per call, at most {ld.outbound_peak_in_flight} at once",
        f"      calls by kind: {', '.join(f'{k} {v}' for k, v in sorted(ld.calls_by_kind.items())) or '-'}; "
        f"update at the loop -> its acknowledgement answered p50 {ld.ack_p50_ms:.0f} ms, p99 {ld.ack_p99_ms:.0f} ms",
        f"      largest launch wave: {ld.wave_tasks} tasks, launch calls answered {secs(ld.wave_launched_s)}, "
        f"every TASK_RUNNING acknowledged {secs(ld.wave_acknowledged_s)} after its first launch call"
        + (f" ({ld.wave_unacknowledged} never acknowledged)" if ld.wave_unacknowledged else ""),
        *_wave_cpu_line(ld),
        f"      first deliveries: lag p50 {ld.first_lag_p50_ms:.0f} ms, p99 {ld.first_lag_p99_ms:.0f} ms; "
        f"{ld.redeliveries} updates sent again by their agent (acknowledgement late)",
    ]
    if ld.cpu_seconds and ld.wall_seconds > 0:
        total = sum(ld.cpu_seconds.values())
        out.append(f"      CPU from the first submission on ({ld.wall_seconds:.0f} s): "
                   + ", ".join(f"{k} {v:.1f} s" for k, v in ld.cpu_seconds.items())
                   + f"; {total:.1f} s in all = {total / ld.wall_seconds:.2f} cores on average")
    out += [f"    problem: {p}" for p in ld.problems[:3]]
    return out


def write_json(r: FaultBenchReport, path: str) -> None:
    Path(path).write_text(json.dumps(r.to_dict(), indent=1, default=str))

