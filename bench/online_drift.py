"""Online learning under workload drift, live on the local cluster; and rollback on a bad update.

    .venv/bin/python bench/online_drift.py                   # 40 jobs, 8 agents, 2 s slots (about 7 min)
    .venv/bin/python bench/online_drift.py --jobs 20 --agents 6
    .venv/bin/python bench/online_drift.py --agents 4 --only frozen,imitate --model runs/pre-drift/model.pt

Four live runs of the same workload (:mod:`dl2_rigs.online_drift`: light executors whose jobs
train at the speed table's pace, one 2 s live slot = one 1200 s simulated slot; the first half
of the jobs as the model was trained on, the second half drifted: other types, three times as
long, arriving faster): DL2 frozen, DL2 with online updates by reinforcement (the paper's),
DL2 with online updates imitating a teacher on the live states (``--teacher``, online DAgger),
DL2 imitating that teacher on simulated futures of the live workload (``online_twin``), and DL2 with online updates by reinforcement where one update is replaced by a corrupted one
(every job grown or paused every slot) that the rollback must catch.
Prints the average JCT of the drifted half (and of all jobs) for frozen vs each online mode, the
model versions created, and the rollbacks with their reasons. ``--model`` starts every arm from
another model than the shipped one, e.g. one trained only on the workload before the drift (the
README's recipe): the shipped model was trained on many workloads, this drift among them.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

# the test rigs are not installed; pytest finds them through its `pythonpath` setting, we add it here
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from dl2_rigs.online_drift import drift_workload, injection_slot, run_drift  # noqa: E402


def _fmt(v: float | None, unit: str = "s") -> str:
    return "-" if v is None else f"{v:.1f}{unit}"


@click.command("online-drift")
# 40 jobs: with 30 the workload ends within two windows of the injection (slot 24), before a
# drop can be confirmed
@click.option("--jobs", default=40, show_default=True, type=click.IntRange(4, 400))
@click.option("--agents", default=8, show_default=True, type=click.IntRange(1, 200))
@click.option("--slot", "slot_seconds", default=2.0, show_default=True, type=click.FloatRange(0.5, 60))
@click.option("--window", default=8, show_default=True, type=click.IntRange(2, 100),
              help="Online window (slots per rollback check).")
@click.option("--inject-window", default=4, show_default=True, type=click.IntRange(2, 100),
              help="Online window of the injected-regression run: it injects after six windows "
                   "(dl2_rigs.online_drift.injection_slot), which must fall inside the run.")
@click.option("--seed", default=101, show_default=True)
@click.option("--timeout", default=240.0, show_default=True, help="Seconds per run.")
@click.option("--skip-rollback", is_flag=True, help="Only the frozen/online comparison.")
@click.option("--teacher", default="srpt-elastic-min", show_default=True,
              help="A third run whose online updates imitate this teacher on the live states (online DAgger); "
                   "'' skips it.")
@click.option("--only", default="", help="Comma-separated arms to run (frozen, online, imitate, twin; default all).")
@click.option("--model", "model_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The DL2 model every arm starts from (default: the shipped one), e.g. one trained on the "
                   "workload before the drift (dl2 train sl --trace ...).")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False))
def main(jobs: int, agents: int, slot_seconds: float, window: int, inject_window: int, seed: int, timeout: float,
         skip_rollback: bool, teacher: str, only: str, model_path: str | None, json_path: str | None) -> None:
    logging.basicConfig(level=logging.WARNING)
    only = {a.strip() for a in only.split(",") if a.strip()}
    workload = drift_workload(jobs, slot_seconds, seed=seed)
    late = sum(d.late for d in workload)
    click.echo(f"workload: {len(workload)} jobs, the last {late} drifted (from {min(d.at for d in workload if d.late):.0f}s),"
               f" {agents} agents, {slot_seconds:g}s slots, window {window}")
    runs = {}
    arms = [("frozen", False, None, False), ("online", True, "none", False)]
    if teacher:
        arms += [("imitate", True, teacher, False), ("twin", True, teacher, True)]
    arms = [a for a in arms if not only or a[0] in only]
    for name, online, arm_teacher, twin in arms:
        r = run_drift(workload, online=online, agents=agents, slot_seconds=slot_seconds, window=window,
                      timeout=timeout, echo=click.echo, online_teacher=arm_teacher, online_twin=twin,
                      model=model_path)
        runs[name] = r
        click.echo(f"{name:>7}: avg JCT drifted half {_fmt(r.avg_jct(late=True))} ({r.finished(True)}/{late} finished),"
                   f" first half {_fmt(r.avg_jct(late=False))}, all {_fmt(r.avg_jct())}; {r.slots} slots,"
                   f" {r.versions} model versions, {len(r.rollbacks)} rollbacks, wall {r.wall_seconds:.0f}s")
        for rb in r.rollbacks:
            click.echo(f"         rollback {rb['from']} -> {rb['to']}: {rb['reason']}")
    fz = runs["frozen"].avg_jct(late=True) if "frozen" in runs else None
    for name in ("online", "imitate", "twin"):
        on = runs[name].avg_jct(late=True) if name in runs else None
        if fz and on:
            how = {"online": "reinforcement", "imitate": f"imitating {teacher}",
                   "twin": f"imitating {teacher} on simulated futures"}[name]
            click.echo(f"drifted half: {name} ({how}) / frozen avg JCT = {on / fz:.3f}")
    if not skip_rollback:
        at = injection_slot(inject_window)
        r = run_drift(workload, online=True, agents=agents, slot_seconds=slot_seconds, window=inject_window,
                      inject_after_slot=at, stop_after_rollback=True, timeout=timeout, echo=click.echo,
                      online_teacher="none", model=model_path)  # imitation repairs a corrupted model by itself (README)
        runs["injected"] = r
        if r.injected_version is None:
            # a window so long that the workload ends first tests nothing: say so, never "not caught"
            click.echo(f"injected corrupted update: none (window {inject_window}: the run ended after {r.slots} slots, "
                       f"before slot {at}); use a shorter --inject-window or more --jobs")
        else:
            caught = [rb for rb in r.rollbacks if rb["from"] >= r.injected_version]
            click.echo(f"injected corrupted update (window {inject_window}): version {r.injected_version}; "
                       f"rollbacks: {len(r.rollbacks)} ({'caught' if caught else 'NOT caught'})")
        for rb in r.rollbacks:
            click.echo(f"         rollback {rb['from']} -> {rb['to']}: {rb['reason']}")
    if json_path:
        Path(json_path).write_text(json.dumps({k: {"online": v.online, "jobs": list(v.jobs), "versions": v.versions,
                                                   "rollbacks": list(v.rollbacks), "slots": v.slots,
                                                   "injected_version": v.injected_version,
                                                   "wall_seconds": v.wall_seconds} for k, v in runs.items()},
                                              indent=2))


if __name__ == "__main__":
    main()
