"""Prometheus metrics of the framework (one registry per process, served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from dl2_mesos.jobs import JobPhase


class FrameworkMetrics:
    """The framework's counters and gauges, in their own registry (tests create many)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("dl2_jobs", "Jobs by phase.", ["phase"], registry=r)
        self.tasks = Gauge("dl2_tasks", "Live tasks by role.", ["role"], registry=r)
        self.allocated = Gauge("dl2_allocated_resources", "Resources held by live tasks.", ["resource"], registry=r)
        self.decisions = Counter("dl2_decisions", "Scheduling decisions (one per slot).", registry=r)
        self.decision_errors = Counter("dl2_decision_errors", "Policy calls that failed or were invalid.", registry=r)
        self.decision_latency = Histogram(
            "dl2_decision_latency_seconds", "Time spent in policy.decide.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30), registry=r,
        )
        self.round_latency = Histogram(
            "dl2_round_latency_seconds", "A scheduling round without the policy (snapshot, place, launch).",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5), registry=r,
        )
        self.offers = Counter("dl2_offers", "Offers by what happened to them.", ["action"], registry=r)
        self.launched = Counter("dl2_tasks_launched", "Tasks launched.", ["role"], registry=r)
        self.rescales = Counter("dl2_rescales", "Job rescales started.", registry=r)
        self.status_updates = Counter("dl2_status_updates", "Task status updates.", ["state"], registry=r)
        self.slot = Gauge("dl2_slot", "Current slot index.", registry=r)
        self.leader = Gauge("dl2_is_leader", "1 on the leading replica.", registry=r)
        self.outbound_queue = Gauge("dl2_outbound_queue", "Calls to the master waiting to be sent.", registry=r)
        self.outbound_calls = Counter("dl2_outbound_calls", "Calls to the master by method and result.",
                                      ["call", "result"], registry=r)
        self.outbound_lag = Histogram(
            "dl2_outbound_lag_seconds", "Time a call to the master waited in the outbound queue.",
            buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 30), registry=r,
        )
        self.outbound_call_latency = Histogram(
            "dl2_outbound_call_seconds", "Time one call to the master took (HTTP round trip).",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5), registry=r,
        )
        self.loop_errors = Counter("dl2_loop_errors", "Exceptions the scheduling loop caught and survived, by stage.",
                                   ["stage"], registry=r)
        self.quarantined_records = Gauge("dl2_quarantined_records",
                                         "State store records that could not be read (moved to quarantine/).",
                                         registry=r)
        self.jobs_expired = Counter("dl2_jobs_expired", "Ended jobs deleted by the retention rule.", registry=r)
        self.model_version = Gauge("dl2_model_version", "Version of the online-learned policy model.", registry=r)
        for p in JobPhase:
            self.jobs.labels(p.value).set(0)

    def render(self) -> bytes:
        return generate_latest(self.registry)
