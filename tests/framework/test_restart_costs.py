"""Measured restart costs: executors' RescaleReports -> one cost per job type -> the job view the
policy sees (default until measured) and an exported file the simulator's job specs can take."""

from __future__ import annotations

import json

import pytest

from dl2_mesos.cluster import JobView
from dl2_mesos.job_types import get_job_type, job_type_names
from dl2_mesos.jobs import JobSpec
from dl2_mesos.messages import RescaleReport
from dl2_mesos.restart_costs import (
    RestartCostBook, RestartCostsError, apply_restart_costs, load_restart_costs, parse_restart_costs,
)


def report(gen: int, total: float, ok: bool = True, task: str = "t") -> RescaleReport:
    phases = (("stop", total / 3), ("upload", total / 3), ("first_batch", total / 3), ("total", total))
    return RescaleReport(job_id="j", task_id=task, generation=gen, ok=ok, phases=phases)


def view(job_type: str = "resnet-50", measured: float | None = None, **spec) -> JobView:
    return JobView("j1", JobSpec(job_type=job_type, epochs=10, **spec), 0, 0.0, 0.0,
                   measured_restart_seconds=measured)


def test_a_rescale_costs_its_slowest_executor_and_a_type_the_median_of_its_rescales():
    book = RestartCostBook(window=3)
    assert book.seconds("resnet-50") is None
    book.record("resnet-50", "j1", report(1, 10.0, task="a"))
    book.record("resnet-50", "j1", report(1, 14.0, task="b"))  # same rescale, slower executor
    book.record("resnet-50", "j2", report(1, 30.0))
    book.record("resnet-50", "j1", report(2, 20.0))
    assert book.seconds("resnet-50") == 20.0  # median of 14, 30, 20
    book.record("resnet-50", "j3", report(1, 100.0, ok=False))  # failed: not a cost
    book.record("resnet-50", "j3", report(2, 1.0))  # the window keeps the last 3: 30, 20, 1
    assert book.seconds("resnet-50") == 20.0 and book.to_json()["types"]["resnet-50"]["rescales"] == 3
    assert book.seconds("vgg-16") is None


def test_the_view_shows_the_measurement_until_then_the_default_and_a_jobs_own_value_wins():
    default = get_job_type("resnet-50").restart_seconds
    assert view().restart_cost_seconds == default == 360.0
    assert view(measured=21.5).restart_cost_seconds == 21.5
    assert view(measured=21.5, restart_seconds=5.0).restart_cost_seconds == 5.0


def test_export_and_load_round_trip_into_simulator_job_specs(tmp_path):
    book = RestartCostBook()
    book.record("resnet-50", "j1", report(1, 22.0))
    book.record("vgg-16", "j2", report(1, 40.0))
    path = tmp_path / "costs.json"
    book.export(path)
    costs = load_restart_costs(path, job_type_names())
    assert costs == {"resnet-50": 22.0, "vgg-16": 40.0}
    specs = [JobSpec(job_type="resnet-50", epochs=1), JobSpec(job_type="vgg-16", epochs=1, restart_seconds=9.0),
             JobSpec(job_type="inception-bn", epochs=1)]
    out = apply_restart_costs(specs, costs)
    assert [s.restart_cost_seconds for s in out] == [22.0, 9.0, get_job_type("inception-bn").restart_seconds]


@pytest.mark.parametrize("doc, match", [
    ([], "not a restart-cost document"),
    ({"format": "other", "types": {}}, "not a restart-cost document"),
    ({"format": "dl2-restart-costs/1", "types": {"no-such-type": {"seconds": 1}}}, "unknown job type"),
    ({"format": "dl2-restart-costs/1", "types": {"resnet-50": {"seconds": -1}}}, "finite number"),
    ({"format": "dl2-restart-costs/1", "types": {"resnet-50": {"seconds": "1"}}}, "finite number"),
    ({"format": "dl2-restart-costs/1", "types": {"resnet-50": 3}}, "finite number"),
])
def test_bad_documents_are_refused_with_the_reason(doc, match):
    with pytest.raises(RestartCostsError, match=match):
        parse_restart_costs(doc, job_type_names())


def test_unreadable_or_non_json_files_are_refused(tmp_path):
    with pytest.raises(RestartCostsError, match="cannot read"):
        load_restart_costs(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "dl2-restart-costs/1", "types": {"resnet-50": {"seconds": NaN}}}')
    with pytest.raises(RestartCostsError, match="not valid JSON"):
        load_restart_costs(bad)
    bad.write_text(json.dumps({"format": "dl2-restart-costs/1", "types": {"resnet-50": {"seconds": 1e400}}}))
    with pytest.raises(RestartCostsError):
        load_restart_costs(bad)


def test_simulate_takes_measured_costs_from_the_exported_file(tmp_path):
    from click.testing import CliRunner

    from dl2_mesos.policy.simulate_cli import simulate

    costs = tmp_path / "restart_costs.json"
    costs.write_text(json.dumps({"format": "dl2-restart-costs/1",
                                 "types": {t: {"seconds": 0.0} for t in job_type_names()}}))

    def avg_jct(*extra):
        out = tmp_path / f"r{len(extra)}.json"
        res = CliRunner().invoke(simulate, ["--preset", "tiny", "--seeds", "1", "-p", "optimus",
                                            "--json", str(out), *extra])
        assert res.exit_code == 0, res.output
        doc = json.loads(out.read_text())["policies"]["optimus"]
        return doc["avg_jct"], doc["rescales"]

    default_jct, rescales = avg_jct()
    measured_jct, _ = avg_jct("--restart-costs", str(costs))
    assert rescales > 0 and measured_jct < default_jct  # the default charges 360 s a rescale
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "dl2-restart-costs/1", "types": {"resnet-50": {"seconds": -3}}}))
    res = CliRunner().invoke(simulate, ["--preset", "tiny", "--seeds", "1", "--restart-costs", str(bad)])
    assert res.exit_code == 2 and "finite number" in res.output and "Traceback" not in res.output


def test_the_framework_feeds_measured_rescales_into_the_policys_job_view_and_exports_them(tmp_path):
    from dataclasses import replace as dc_replace

    from dl2_mesos.framework import events as ev
    from dl2_mesos.messages import RescaleRequest, decode_b64, encode_b64
    from dl2_mesos.restart_costs import RESTART_COSTS_FILE

    from .conftest import Harness, ScriptedPolicy, make_offer

    policy = ScriptedPolicy()
    h = Harness(policy)
    h.core.cfg = h.cfg = dc_replace(h.cfg, state_dir=str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    h.register()
    job = h.submit()
    h.offer(make_offer("a1"))
    h.tick()
    h.run_all(job)
    default = h.core.snapshot(h.core.current_slot(), h.clock()).jobs[0]
    assert default.measured_restart_seconds is None and default.restart_cost_seconds == 360.0
    policy.counts[0] = (1, 2)
    h.offer(make_offer("a1", cpus=3, gpus=1, mem=30000, ports=(32000, 32010)))
    h.next_slot()
    (ex, agent, data), = h.driver.named("sendFrameworkMessage")
    req = decode_b64(data)
    assert isinstance(req, RescaleRequest)
    phases = (("stop", 4.0), ("upload", 3.0), ("download", 0.1), ("first_batch", 5.4), ("total", 12.5))
    h.core.handle(ev.FrameworkMessage(ex["value"], agent["value"], encode_b64(
        RescaleReport(job.job_id, "t", req.cluster.generation, True, phases))))
    seen = h.core.snapshot(h.core.current_slot(), h.clock()).jobs[0]
    assert seen.measured_restart_seconds == 12.5 and seen.restart_cost_seconds == 12.5
    exported = load_restart_costs(tmp_path / "state" / RESTART_COSTS_FILE, job_type_names())
    assert exported == {job.spec.job_type: 12.5}
