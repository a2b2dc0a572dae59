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

``--online`` also runs the framework's online imitation itself (the model updated after every
slot, as ``dl2 serve`` does by default) and prints online / model: what imitation realises of
that bound within one workload. ``--last N`` judges only the last N drifted jobs (by arrival;
with ``--jobs`` large, after the learner has had most of the run). ``--speed-warp K`` runs every
policy on a cluster whose speed-ups differ from the measured table's, as a real cluster's may
(the paper's reason for learning online): a job trains at its smallest size's speed times the
table's speed-up to the power K (K < 1: adding tasks helps less than the table says, K > 1:
more), and adds the teacher *told* those speeds (``teacher*``), what a teacher with an exact
speed model of the drifted cluster could reach; with ``--online`` also ``online*``, online
imitation of that teacher.
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
from dl2_mesos.policy.dl2.online_model import DL2OnlineModel  # noqa: E402
from dl2_mesos.policy.registry import make_policy, make_teacher  # noqa: E402
from dl2_mesos.policy.sim.settings import SimConfig  # noqa: E402
from dl2_mesos.policy.sim.simulator import run  # noqa: E402
from dl2_mesos.speed_model import default_speed_model  # noqa: E402


class WarpedSpeeds:
    """The measured table with its speed-ups raised to the power ``k``: at ``(p, w)`` a job
    trains at its speed at one PS (none without PS) and one worker times (table speed at
    ``(p, w)`` / table speed there) ** k. ``k`` 1 is the table itself."""

    def __init__(self, k: float) -> None:
        self.k = k
        self.table = default_speed_model()

    def epochs_per_second(self, job_type: str, num_ps: int, num_workers: int, uses_ps: bool = True) -> float:
        eps = self.table.epochs_per_second(job_type, num_ps, num_workers, uses_ps)
        smallest = self.table.epochs_per_second(job_type, 1 if uses_ps else 0, 1, uses_ps)
        if eps <= 0 or smallest <= 0:
            return eps
        return smallest * (eps / smallest) ** self.k


def drifted_half_avg_jct(policy, trace, agents: int, speeds=None, last: int = 0,  # noqa: ANN001 - any Policy
                         on_slot=None) -> float:  # noqa: ANN001
    """Avg JCT (simulated s) of the ``late-`` jobs (the ``last`` of them by arrival, when > 0)
    when ``policy`` schedules ``trace`` on ``agents`` nodes whose speeds are ``speeds`` (None:
    the table); ``on_slot`` as :func:`~dl2_mesos.policy.sim.simulator.run`'s."""
    metrics = run(policy, SimConfig(num_agents=agents), trace, speed_model=speeds, on_slot=on_slot)
    late = sorted((r for r in metrics.jobs if r.job_id.startswith("late-")), key=lambda r: (r.arrival_time, r.job_id))
    return statistics.mean(r.jct for r in late[-last if last > 0 else 0:])


def online_imitation_avg_jct(model_path: str | None, teacher: str, trace, agents: int, speeds=None,  # noqa: ANN001
                             last: int = 0, labeller=None) -> float:  # noqa: ANN001
    """:func:`drifted_half_avg_jct` of the model learning online by imitating ``teacher`` (updated
    after every slot in which it decided, as the framework's default online learning); with
    ``labeller`` (a Policy), that policy's decisions are the labels instead (e.g. the teacher
    told the cluster's speeds)."""
    policy = DL2Policy(model_path) if model_path else DL2Policy()
    learner = DL2OnlineModel(policy, teacher=teacher)
    if labeller is not None:
        learner.trainer.teacher = labeller

    def after_slot(_outcome) -> None:  # noqa: ANN001
        if learner.complete_slot(reward=0.0):  # False: no job, nothing was decided
            learner.update()

    return drifted_half_avg_jct(policy, trace, agents, speeds, last, on_slot=after_slot)


def informed_teacher(name: str, speeds: WarpedSpeeds):  # noqa: ANN201 - a Policy or None
    """The teacher ``name`` told the drifted cluster's speeds (None: it takes no speed model)."""
    try:
        return type(make_teacher(name))(speed_model=speeds)
    except TypeError:
        return None


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
@click.option("--online", is_flag=True, help="Also run online imitation of the teacher from the model.")
@click.option("--last", type=click.IntRange(0, 400), default=0, show_default=True,
              help="Judge only the last N drifted jobs by arrival (0: all of them).")
@click.option("--speed-warp", type=click.FloatRange(0.1, 3.0), default=1.0, show_default=True,
              help="The cluster's speed-ups are the table's to this power (1: the table).")
def main(jobs: int, agents: int, seeds: str, epochs_factor: float, rate_factor: float, types: str,
         model_path: str | None, teacher: str, online: bool, last: int, speed_warp: float) -> None:
    drift = {"job_types": tuple(t.strip() for t in types.split(",") if t.strip()),
             "epochs_factor": epochs_factor, "rate_factor": rate_factor}
    if last > jobs - jobs // 2:
        raise click.UsageError(f"--last {last}: only {jobs - jobs // 2} jobs drift")
    speeds = WarpedSpeeds(speed_warp) if speed_warp != 1.0 else None
    told = informed_teacher(teacher, speeds) if speeds is not None else None
    judged = f"the last {last} drifted jobs'" if last else "drifted half's"
    warp = f", speed-ups ** {speed_warp:g}" if speeds is not None else ""
    click.echo(f"workload: {jobs} jobs, the last {jobs - jobs // 2} drifted ({', '.join(drift['job_types'])}; "
               f"epochs x{epochs_factor:g}; arrivals x{rate_factor:g}), {agents} nodes{warp}; {judged} avg JCT (s)")
    cols = (["model", "teacher"] + (["teacher*"] if told else []) + ["drf"] + (["online"] if online else [])
            + (["online*"] if online and told else []))
    ratio_cols = (["teacher/model"] + (["teacher*/model"] if told else []) + (["online/model"] if online else [])
                  + (["online*/model"] if online and told else []))
    click.echo(f"{'seed':>5} " + " ".join(f"{c:>9}" for c in cols) + " " + " ".join(f"{c:>14}" for c in ratio_cols))
    ratios: dict[str, list[float]] = {c: [] for c in ratio_cols}
    for seed in parse_seeds(seeds):
        try:
            trace = drift_trace(jobs, seed, drift=drift)
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None
        avg = {"model": drifted_half_avg_jct(DL2Policy(model_path) if model_path else DL2Policy(), trace, agents,
                                             speeds, last),
               "teacher": drifted_half_avg_jct(make_teacher(teacher), trace, agents, speeds, last)}
        if told:
            avg["teacher*"] = drifted_half_avg_jct(told, trace, agents, speeds, last)
        avg["drf"] = drifted_half_avg_jct(make_policy("drf"), trace, agents, speeds, last)
        if online:
            avg["online"] = online_imitation_avg_jct(model_path, teacher, trace, agents, speeds, last)
        if online and told:
            avg["online*"] = online_imitation_avg_jct(model_path, teacher, trace, agents, speeds, last,
                                                      labeller=informed_teacher(teacher, speeds))
        for c in ratio_cols:
            ratios[c].append(avg[c.split("/")[0]] / avg["model"])
        click.echo(f"{seed:>5} " + " ".join(f"{avg[c]:>9.0f}" for c in cols) + " "
                   + " ".join(f"{ratios[c][-1]:>14.3f}" for c in ratio_cols))
    click.echo("mean " + ", ".join(f"{c} {statistics.mean(v):.3f}" for c, v in ratios.items()))


if __name__ == "__main__":
    main()
