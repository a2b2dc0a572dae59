"""How much online imitation could gain on a drifted workload, in the simulator.

    .venv/bin/python bench/online_headroom.py                        # the live bench's drift, 8 nodes
    .venv/bin/python bench/online_headroom.py --agents 4
    .venv/bin/python bench/online_headroom.py --epochs-factor 10 --types vgg-16,dssm

Online imitation (the framework's default online learning) pulls the model towards its teacher,
so the teacher's own avg JCT on the drifted jobs bounds what it can reach there. This runs the
workload of ``bench/online_drift.py`` (:func:`dl2_rigs.online_drift.drift_trace`, optionally
with a stronger drift) in the simulator under the frozen model, its teacher and DRF, and prints
each one's avg JCT over the drifted half and the ratio teacher / model per seed: below 1, the
teacher leads and imitation has that much to gain; at or above 1, imitation can only add its
updates' noise.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import click

# the test rigs are not installed; pytest finds them through its `pythonpath` setting, we add it here
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from dl2_rigs.online_drift import DRIFT, drift_trace  # noqa: E402

from dl2_mesos.errors import ConfigError  # noqa: E402
from dl2_mesos.policy.simulate_cli import parse_seeds  # noqa: E402
from dl2_mesos.policy.dl2.dl2_policy import DL2Policy  # noqa: E402
from dl2_mesos.policy.registry import make_policy, make_teacher  # noqa: E402
from dl2_mesos.policy.sim.settings import SimConfig  # noqa: E402
from dl2_mesos.policy.sim.simulator import run  # noqa: E402


def drifted_half_avg_jct(policy, trace, agents: int) -> float:  # noqa: ANN001 - any Policy
    """Avg JCT (simulated s) of the ``late-`` jobs when ``policy`` schedules ``trace`` on ``agents`` nodes."""
    metrics = run(policy, SimConfig(num_agents=agents), trace)
    return statistics.mean(r.jct for r in metrics.jobs if r.job_id.startswith("late-"))


@click.command("online-headroom")
@click.option("--jobs", type=click.IntRange(4, 400), default=40, show_default=True)
@click.option("--agents", type=click.IntRange(1, 500), default=8, show_default=True)
@click.option("--seeds", default="101-104", show_default=True)
@click.option("--epochs-factor", type=click.FloatRange(0.1, 100), default=DRIFT["epochs_factor"], show_default=True)
@click.option("--rate-factor", type=click.FloatRange(0.1, 100), default=DRIFT["rate_factor"], show_default=True)
@click.option("--types", default=",".join(DRIFT["job_types"]), show_default=True,
              help="The drifted half's job types, comma-separated.")
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Model to judge (default: the shipped one).")
@click.option("--teacher", default="srpt-elastic-min", show_default=True)
def main(jobs: int, agents: int, seeds: str, epochs_factor: float, rate_factor: float, types: str,
         model_path: str | None, teacher: str) -> None:
    drift = {"job_types": tuple(t.strip() for t in types.split(",") if t.strip()),
             "epochs_factor": epochs_factor, "rate_factor": rate_factor}
    click.echo(f"workload: {jobs} jobs, the last {jobs - jobs // 2} drifted ({', '.join(drift['job_types'])}; "
               f"epochs x{epochs_factor:g}; arrivals x{rate_factor:g}), {agents} nodes; drifted half's avg JCT (s)")
    click.echo(f"{'seed':>5} {'model':>9} {'teacher':>9} {'drf':>9} {'teacher/model':>14}")
    ratios = []
    for seed in parse_seeds(seeds):
        try:
            trace = drift_trace(jobs, seed, drift=drift)
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None
        model = drifted_half_avg_jct(DL2Policy(model_path) if model_path else DL2Policy(), trace, agents)
        taught = drifted_half_avg_jct(make_teacher(teacher), trace, agents)
        drf = drifted_half_avg_jct(make_policy("drf"), trace, agents)
        ratios.append(taught / model)
        click.echo(f"{seed:>5} {model:>9.0f} {taught:>9.0f} {drf:>9.0f} {ratios[-1]:>14.3f}")
    click.echo(f"mean teacher/model {statistics.mean(ratios):.3f}")


if __name__ == "__main__":
    main()
