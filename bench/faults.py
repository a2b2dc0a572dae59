"""Fault-injection benchmark: each fault's recovery time, jobs finished / submitted, checkpoints
intact; API fuzzing (cases, 5xx); a 1000-submission burst (p50/p99); many jobs on many agents.

    .venv/bin/python bench/faults.py                      # everything (several minutes on 2 cores)
    .venv/bin/python bench/faults.py --scenarios mesos --agents 100 --load-jobs 200
    .venv/bin/python bench/faults.py --scenarios none --fuzz-cases 0 --burst 0 --large-load  # 5000 jobs, 2000 agents
    ... --master-calls 1                                  # calls to the master one after the other (as before)

Same as ``dl2 bench faults`` (options: ``--help``). The scenarios and rigs are the test suite's
(``tests/support/dl2_rigs``: ``tests/faults`` asserts what this script measures).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

# the test rigs are not installed; pytest finds them through its `pythonpath` setting, we add it here
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from dl2_rigs.fault_scenarios import SCENARIOS  # noqa: E402
from dl2_rigs.faultbench import format_report, run_fault_bench, write_json  # noqa: E402


@click.command("faults")
@click.option("--scenarios", default="all", show_default=True,
              help="Comma-separated fault scenarios (leader-kill, zk-outage, agent-removed, process-kills, "
                   "namenode-outage, mesos), 'all' or 'none'.")
@click.option("--fuzz-cases", default=1000, show_default=True, type=click.IntRange(min=0),
              help="schemathesis cases against the API (0: skip).")
@click.option("--burst", default=1000, show_default=True, type=click.IntRange(min=0),
              help="Concurrent job submissions to a live framework (0: skip).")
@click.option("--agents", default=500, show_default=True, type=click.IntRange(min=0),
              help="Local agents for the load run (0: skip).")
@click.option("--load-jobs", default=1000, show_default=True, type=click.IntRange(min=0),
              help="Jobs for the load run (light executors, no training).")
@click.option("--large-load", is_flag=True,
              help="The scale run: 5000 jobs on 2000 agents (instead of --agents/--load-jobs); submissions "
                   "for up to 600 s, then up to 480 s until the accepted jobs run.")
@click.option("--master-calls", default=None, type=click.IntRange(min=1),
              help="Calls to the master in flight at once in the load run (default: the config's master_calls).")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False), help="Also write the figures here.")
@click.option("--workdir", default=None, type=click.Path(file_okay=False), help="Logs and sandboxes (default: temp).")
def faults(scenarios: str, fuzz_cases: int, burst: int, agents: int, load_jobs: int, large_load: bool,
           master_calls: int | None, json_path: str | None, workdir: str | None) -> None:
    """Inject faults into a real local deployment and print recovery, job and checkpoint figures.

    Needs ZooKeeper, the HDFS jars and the MXNet job environment (scripts/install_services.sh).
    Exits 1 when a job was lost, a checkpoint failed verification or the API answered 5xx.
    """
    if scenarios == "all":
        names = None
    elif scenarios == "none":
        names = []
    else:
        names = [s.strip() for s in scenarios.split(",") if s.strip()]
        unknown = [n for n in names if n not in SCENARIOS]
        if unknown:
            raise click.BadParameter(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}",
                                     param_hint="--scenarios")
    load_timeout, burst_seconds = 300.0, None
    if large_load:
        # bounded, so that the run prints its figures within ~20 minutes even on a busy machine
        # (the submissions not sent by then are reported)
        agents, load_jobs, load_timeout, burst_seconds = 2000, 5000, 480.0, 600.0
    report = run_fault_bench(names, fuzz_cases=fuzz_cases, burst=burst, agents=agents, load_jobs=load_jobs,
                             workdir=workdir, load_timeout=load_timeout, master_calls=master_calls,
                             burst_seconds=burst_seconds)
    click.echo(format_report(report))
    if json_path:
        write_json(report, json_path)
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    faults()
