"""Benchmark: train the shipped DL2 model from random weights, timed.

Runs the chain of training commands behind ``policy/models/dl2.pt`` (the model card,
``policy/models/MODEL.md``, gives each with its reasons): two supervised runs with DAgger from
random weights (v4, v5), DAgger fine-tuning runs with better teachers (v6, v7, v8), the
growth-pruning rule switched on (v9), four runs on wider workloads (v10) and one with more
Philly-style logs (v11, ``dl2.pt``). Every step is a ``dl2 train`` command run as a subprocess,
as an operator would type it, with ``--workers`` label processes. Training is deterministic, so
the last step's weights are compared with ``dl2.pt``, tensor by tensor: ``identical`` means the
chain made the shipped bytes from random weights. (v11 was trained at the end of this chain; the
earlier shipped checkpoints were not, the code having changed since the early steps were
trained, so the chain's intermediate steps are not compared with them.)

Printed: one row per step (seconds, the comparison, the command's own summary) and the total
wall time, the figure for the goal "training from scratch to the shipped model <= 60 min on
the 2 cores". Run with nothing else on the machine:

    .venv/bin/python bench/train_from_scratch.py --out runs/from_scratch [--workers 2]

``--from STEP`` resumes a chain whose earlier outputs are already in ``--out``; with
``--start-model M`` the first step starts from M instead (``--from L5 --start-model
runs/from_scratch/L4.pt`` re-makes the last run alone);
``--dry-run`` prints the commands.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click
from dl2_mesos.policy.dl2.checkpoint import load_checkpoint

MODELS = Path(__file__).resolve().parents[1] / "policy" / "models"
TRACES = MODELS / "training_traces"


@dataclass(frozen=True)
class Step:
    """One ``dl2 train`` command of the chain; ``shipped``: the checkpoint it must reproduce."""

    name: str
    args: tuple[str, ...]
    shipped: str | None = None


def _sl(name: str, init: str | None, *args: str, shipped: str | None = None) -> Step:
    head = ("train", "sl") + (("--init", f"{{out}}/{init}.pt") if init else ())
    return Step(name, head + args + ("--out", f"{{out}}/{name}.pt"), shipped)


def _also(*items: str) -> tuple[str, ...]:
    return tuple(a for item in items for a in ("--also", item))


def _trace(file: str, base: str) -> str:
    return f"trace:{TRACES / file};base={base}=1"


def _two_dagger_runs(teacher: str, init: str, first: str, second: str) -> tuple[Step, Step]:
    """The recipe of v7 (and, with another teacher, v8): two DAgger runs on the regular presets."""
    return (
        _sl(first, init, "--teacher", teacher, "--preset", "sweep-rho2", "--seeds", "10-12",
            *_also("testbed-rho2=19-22", "sweep-rho1=10-12", "sweep-rho4=9-10", "paper-rho2=2", "small@8=15-16",
                   "sweep-rho0.5=5-6"),
            "--epochs", "1", "--dagger", "1", "--dagger-epochs", "2", "--lr", "5e-4", "--seed", "8"),
        _sl(second, first, "--teacher", teacher, "--preset", "sweep-rho1", "--seeds", "13-16",
            *_also("testbed-rho2=23-26", "sweep-rho2=13-15", "sweep-rho4=11-12", "paper-rho1=3", "small@8=17-18",
                   "sweep-rho0.5=7-8"),
            "--epochs", "1", "--dagger", "2", "--dagger-epochs", "2", "--lr", "5e-4", "--seed", "9"),
    )


CHAIN: tuple[Step, ...] = (
    # v4, v5: from random weights, imitating srpt-elastic (arrival order, as they were trained)
    _sl("v4", None, "--teacher", "srpt-elastic", "--preset", "small", "--seeds", "1-8",
        *_also("small@8=1-8", "testbed-rho2=1-8", "sweep-rho1=1-3", "sweep-rho2=1-3", "sweep-rho4=1-3",
               "sweep-rho0.5=1-2"),
        "--epochs", "6", "--dagger", "1", "--dagger-epochs", "3", "--lr", "2e-3", "--window", "20",
        "--hidden", "128", "--actions", "elastic", "--order", "arrival"),
    _sl("v5", "v4", "--teacher", "srpt-elastic", "--preset", "sweep-rho2", "--seeds", "4-9",
        *_also("sweep-rho1=4-6", "sweep-rho4=4-6", "testbed-rho2=9-14", "small@8=9-12"),
        "--epochs", "1", "--dagger", "1", "--dagger-epochs", "3", "--lr", "1e-3", "--seed", "5",
),
    # v6: the jobs ranked by the teacher's priority
    _sl("v6", "v5", "--order", "priority", "--teacher", "srpt-elastic", "--preset", "paper-rho2", "--seeds", "1",
        *_also("sweep-rho2=4-6", "sweep-rho4=4-6", "testbed-rho2=9-12", "sweep-rho1=4-5", "small@8=9-10"),
        "--epochs", "1", "--dagger", "1", "--dagger-epochs", "2", "--lr", "1e-3", "--seed", "6"),
    _sl("v7", "v6", "--teacher", "srpt-elastic", "--preset", "sweep-rho1", "--seeds", "7-9",
        *_also("testbed-rho2=15-18", "sweep-rho2=7-9", "sweep-rho4=7-8", "small@8=13-14", "paper-rho1=2",
               "sweep-rho0.5=3-4"),
        "--epochs", "1", "--dagger", "1", "--dagger-epochs", "2", "--lr", "5e-4", "--seed", "7",
),
    # v7: teacher alpha 1; v8: the same two runs with every job admitted at its minimum
    *_two_dagger_runs("srpt-elastic-a1", "v7", "v8", "v9"),
    *_two_dagger_runs("srpt-elastic-min", "v9", "m1", "m2"),
    # v9: the growth-pruning rule on, weights unchanged
    Step("p9", ("train", "set-rules", "{out}/m2.pt", "--prune-growth", "--out", "{out}/p9.pt")),
    # v10: longer and shorter jobs, capped jobs, Philly-style logs
    _sl("L1", "p9", "--teacher", "srpt-elastic-min", "--preset", "sweep-rho2*2", "--seeds", "21-23",
        *_also("sweep-rho1*2=21-22", "testbed-rho2*3=21-24", "sweep-rho2*3=24-25", "sweep-rho4*1.5=21",
               "sweep-rho1*3=23", "testbed-rho2*1.5=25-27", "sweep-rho0.5*3=21", "sweep-rho2=26-28",
               "testbed-rho2=28-31", "sweep-rho1=24-26", "sweep-rho4=22-23", "sweep-rho0.5=22-23", "small@8=21-22"),
        "--epochs", "1", "--dagger", "2", "--dagger-epochs", "2", "--lr", "3e-4", "--seed", "10"),
    _sl("L2", "L1", "--teacher", "srpt-elastic-min", "--preset", "sweep-rho2", "--seeds", "31-33",
        *_also("testbed-rho2=31-35", "sweep-rho1=31-33", "sweep-rho4=31-32", "sweep-rho0.5=31-32", "small@8=31-32",
               "paper-rho2=4", "sweep-rho2*0.5=34-35", "testbed-rho2*0.5=36-37", "sweep-rho1*0.5=34",
               "sweep-rho2*2=36", "sweep-rho1*2=35", "testbed-rho2*3=38-39", "sweep-rho0.5*2=33",
               "testbed-rho2*1.5=40"),
        "--epochs", "1", "--dagger", "2", "--dagger-epochs", "2", "--lr", "2e-4", "--seed", "11"),
    _sl("L3", "L2", "--teacher", "srpt-elastic-min", "--preset", "sweep-rho2", "--seeds", "41-42",
        *_also("testbed-rho2=41-43", "sweep-rho1=41-42", "sweep-rho4=41", "sweep-rho0.5=41", "small@8=41",
               "sweep-rho2*2=43-45", "sweep-rho2*3=46-47", "sweep-rho4*2=42", "sweep-rho1*2=43",
               "sweep-rho2*1.5=48", "sweep-rho2*0.5=49", "testbed-rho2*2=44-45", "sweep-rho0.5*2=42"),
        "--epochs", "1", "--dagger", "2", "--dagger-epochs", "2", "--lr", "2e-4", "--seed", "12"),
    _sl("L4", "L3", "--teacher", "srpt-elastic-min", "--preset", "sweep-rho2", "--seeds", "71",
        *_also("testbed-rho2=71-72", "sweep-rho1=71", "sweep-rho4=71", "sweep-rho0.5=71", "sweep-rho2*2=72",
               "sweep-rho1*2=72", "testbed-rho2*3=73", "sweep-rho2*0.5=73",
               _trace("cap4-ref-61.csv", "sweep-rho2"), _trace("cap4-ref-62.csv", "sweep-rho1"),
               _trace("cap8-ref-63.csv", "sweep-rho2"), _trace("cap4-small-64.csv", "testbed-rho2"),
               _trace("cap4-small-65.csv", "testbed-rho2"),
               _trace("philly-21-16.csv", "small;agents=16"), _trace("philly-22-8.csv", "small;agents=8"),
               _trace("philly-23-16.csv", "small;agents=16"), _trace("philly-24-16.csv", "small;agents=16"),
               _trace("philly-21-16x3.csv", "small;agents=16")),
        "--epochs", "1", "--dagger", "2", "--dagger-epochs", "2", "--lr", "2e-4", "--seed", "15"),
    # v11: more Philly-style logs (new seeds, durations x 2 and x 3), the presets and their long
    # and short variants on new seeds beside them
    _sl("L5", "L4", "--teacher", "srpt-elastic-min", "--preset", "sweep-rho2", "--seeds", "81",
        *_also("testbed-rho2=81-82", "sweep-rho1=81", "sweep-rho4=81", "sweep-rho0.5=81", "sweep-rho0.25=81",
               "sweep-rho2*2=82", "testbed-rho2*3=83", "sweep-rho4*2=84", "testbed-rho2*2=84", "sweep-rho2*0.5=84",
               "testbed-rho2*0.5=84",
               _trace("cap4-ref-61.csv", "sweep-rho2"), _trace("cap4-small-64.csv", "testbed-rho2"),
               _trace("philly-25-16.csv", "small;agents=16"), _trace("philly-26-8.csv", "small;agents=8"),
               _trace("philly-27-32.csv", "small;agents=32"), _trace("philly-28-16x2.csv", "small;agents=16"),
               _trace("philly-29-8x3.csv", "small;agents=8")),
        "--epochs", "1", "--dagger", "2", "--dagger-epochs", "2", "--lr", "2e-4", "--seed", "16",
        shipped="dl2.pt"),
)


def command(step: Step, out: Path, workers: int, start_model: Path | None = None) -> list[str]:
    """The step's ``dl2`` command line, with ``{out}`` filled in; ``start_model`` replaces the
    checkpoint it starts from."""
    args = [a.replace("{out}", str(out)) for a in step.args]
    if start_model is not None:
        first = next(i for i, a in enumerate(step.args) if a.startswith("{out}/"))
        args[first] = str(start_model)
    if args[:2] == ["train", "sl"]:
        args += ["--workers", str(workers)]
    return [sys.executable, "-m", "dl2_mesos.cli", *args]


def compare(path: Path, shipped: Path) -> str:
    """``identical`` when the model configs and every actor and critic tensor are equal; else
    the largest absolute weight difference."""
    a, b = load_checkpoint(path).net, load_checkpoint(shipped).net
    if a.cfg != b.cfg:
        return "config differs"
    wa, wb = a.state_dict(), b.state_dict()
    diff = max(float((t - wb[k]).abs().max()) for k, t in wa.items())
    return "identical" if diff == 0.0 else f"max |diff| {diff:.3g}"


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/from_scratch"),
              show_default=True, help="Where the chain's checkpoints go.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Label processes per training run.")
@click.option("--from", "start", type=click.Choice([s.name for s in CHAIN]),
              help="Resume at this step (the earlier steps' outputs must be in --out).")
@click.option("--start-model", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="With --from: the checkpoint the first step starts from.")
@click.option("--dry-run", is_flag=True, help="Print the commands and stop.")
def main(out: Path, workers: int, start: str | None, start_model: Path | None, dry_run: bool) -> None:
    names = [s.name for s in CHAIN]
    if start_model is not None and start in (None, names[0]):
        raise click.UsageError("--start-model needs --from with a step that starts from a checkpoint")
    steps = CHAIN[names.index(start):] if start else CHAIN

    def cmd(i: int, step: Step) -> list[str]:
        return command(step, out, workers, start_model if i == 0 else None)

    if dry_run:
        for i, step in enumerate(steps):
            click.echo(" ".join(cmd(i, step)))
        return
    out.mkdir(parents=True, exist_ok=True)
    total = 0.0
    click.echo(f"{'step':5} {'seconds':>8}  {'shipped':20} {'comparison':12} summary")
    for i, step in enumerate(steps):
        t0 = time.monotonic()
        done = subprocess.run(cmd(i, step), capture_output=True, text=True)
        secs = time.monotonic() - t0
        total += secs
        if done.returncode != 0:
            click.echo(done.stdout + done.stderr, err=True)
            raise SystemExit(f"step {step.name} failed (exit {done.returncode})")
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        verdict = compare(out / f"{step.name}.pt", MODELS / step.shipped) if step.shipped else "-"
        click.echo(f"{step.name:5} {secs:8.0f}  {step.shipped or '-':20} {verdict:12} {summary}")
    click.echo(f"total {total:.0f} s ({total / 60:.1f} min) for {len(steps)} steps, {workers} label workers")


if __name__ == "__main__":
    main()
