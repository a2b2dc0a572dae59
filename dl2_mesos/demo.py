"""``dl2 demo``: the whole system on one machine, on embedded defaults.

It starts the Mesos-compatible local cluster (a few agents), one framework replica with the
chosen policy (the shipped DL2 model by default), a state store (an embedded ZooKeeper when
Java and ZooKeeper are installed, else a local file store) and checkpoints on ``file://``; it
submits a small workload of real training jobs (the reference MXNet program) through the HTTP
API, shows live progress (jobs, per-slot allocations, rescales), and ends with a JCT summary
and the status page's address. Ctrl-C stops everything, leaving no process behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import requests

from dl2_mesos.cli_params import FiniteFloatRange, output_file, output_folder
from dl2_mesos.services.zookeeper import ZooKeeperServer, free_port, zookeeper_available

logger = logging.getLogger(__name__)

#: The demo workload: (job type, epochs, submit after seconds). Every job runs the reference
#: MXNet program (a small MLP); types differ so the policy has something to tell apart. With one
#: worker the program trains a few hundred batches a second here.
#: Contended on purpose: ten jobs of very different lengths arrive (eight at once, two later) on
#: two agents of 8 cpus / 2 gpus / 16 GiB. Memory binds first: a job at its smallest size (1 PS
#: + 1 worker) books 12 GiB (8 GiB worker, 4 GiB PS), so each agent runs one job plus at most
#: one extra PS -- two jobs at a time, which matches the machine's 2 real cores (the advertised 8
#: cpus each are far above them). The order and sizes the policy picks decide how long jobs
#: wait. By default each type's epoch is sized to the speed table (:data:`DEFAULT_TABLE_SIZED`),
#: so the jobs take 1-40 s at their smallest size. ``tests/demo`` runs the first three alone,
#: shortened.
WORKLOAD: tuple[tuple[str, float, float], ...] = (
    ("resnet-50", 60.0, 0.0),
    ("dssm", 12.0, 0.0),
    ("seq2seq", 40.0, 0.0),
    ("vgg-16", 10.0, 0.0),
    ("wlm", 50.0, 0.0),
    ("inception-bn", 15.0, 0.0),
    ("cnn-text-classification", 20.0, 0.0),
    ("resnext-110", 30.0, 0.0),
    ("dssm", 10.0, 40.0),
    ("vgg-16", 12.0, 40.0),
)
#: The restart cost the demo's jobs declare (``restart_seconds``, what ``JobView`` shows the
#: policy). Left unset, a job would show its type's default, the paper's 60 s stop + 300 s
#: restore (section 5) of a full-size model on a GPU cluster: 36 of the demo's 10 s slots, where
#: the model was trained on 1200 s slots (restart / slot = 0.3; its feature is clipped at 4).
#: The decision changes with it (the first slot: ``inception-bn`` 3 PS + 1 worker with 360 s, 1 PS
#: + 1 worker with 5 s or with 360 s on a 1200 s slot). The reference program restarts in about
#: 5 s here (a ``resnet-50`` job rescaled at 56.4/60 epochs finished 6.3 s later, training
#: ~2.9 epochs/s), which keeps restart / slot (0.5) of the order of the training range's.
DEMO_RESTART_SECONDS = 5.0
DEFAULT_AGENTS = 2
#: Slots of 10 s: at the table-sized speeds the demo's jobs last 1-4 slots at their smallest size
#: (most of them under one 20 s slot, which left freed room idle until the next slot under every
#: policy and hid the order; 5 s slots made the model pause jobs it had just started, with a
#: restart cost of a whole slot).
DEFAULT_SLOT = "10s"
#: Epochs sized to the speed table by default (:func:`table_sized_batches`): the policy ranks jobs
#: by the table's speeds, and with every type running the same program at the same pace that
#: ranking would be wrong here (on a GPU cluster a job's speed is the table's).
DEFAULT_TABLE_SIZED = True


@dataclass(frozen=True)
class DemoResult:
    """What the demo measured."""

    policy: str
    jobs: tuple[dict[str, Any], ...]  # id, job_type, phase, jct_seconds, rescales
    status_url: str
    wall_seconds: float

    @property
    def avg_jct(self) -> float | None:
        jcts = [j["jct_seconds"] for j in self.jobs if j["jct_seconds"] is not None]
        return statistics.fmean(jcts) if jcts else None

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "avg_jct": self.avg_jct, "jobs": list(self.jobs),
                "status_url": self.status_url, "wall_seconds": self.wall_seconds}


#: batches per epoch of the reference program (its default)
REFERENCE_BATCHES_PER_EPOCH = 50


def table_sized_batches(job_type: str) -> int:
    """Batches per epoch that make the reference program's epochs of ``job_type`` relate to the
    other types' as the speed table's do at 1 PS + 1 worker (``--table-sized``).

    Every demo job runs the same small MXNet program, so on this machine all types train at
    about the same epochs/s, while the speed table the DL2 model learned from spans a factor of
    17 between types. An epoch of a type the table finds k times slower than the geometric mean
    of the types gets k times the reference program's batches.
    """
    import math

    from dl2_mesos.job_types import all_job_types
    from dl2_mesos.speed_model import default_speed_model

    model = default_speed_model()
    speeds = {t.name: model.epochs_per_second(t.name, 1, 1, True) for t in all_job_types()}
    mean = math.exp(statistics.fmean(math.log(v) for v in speeds.values()))
    return max(1, round(REFERENCE_BATCHES_PER_EPOCH * mean / speeds[job_type]))


def job_request(job_type: str, epochs: float, restart_seconds: float | None = DEMO_RESTART_SECONDS,
                table_sized: bool = False) -> dict[str, Any]:
    """The JSON body the demo submits for one job (``POST /api/v1/jobs``); every policy compared
    gets the same bodies. ``table_sized``: the reference MXNet program with
    :func:`table_sized_batches` batches per epoch instead of its default."""
    body: dict[str, Any] = {"job_type": job_type, "epochs": epochs}
    if restart_seconds is not None:
        body["restart_seconds"] = restart_seconds
    if table_sized:
        body["command"] = ["python", "-m", "dl2_mesos.programs.mxnet_mlp",
                           "--batches-per-epoch", str(table_sized_batches(job_type))]
    return body


class Stopped(Exception):
    """Ctrl-C or SIGTERM while the demo ran."""


def _dl2_command() -> list[str]:
    exe = Path(sys.executable).with_name("dl2")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dl2_mesos.cli"]


def _last_error(log_path: Path) -> str:
    """The framework's last 'Error:' line, to say why it stopped."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("Error:")]
    return errors[-1] if errors else (lines[-1] if lines else "")


def _wait_leader(api: str, timeout: float, proc: subprocess.Popen) -> None:
    """Wait until the framework replica leads and is registered with the master."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"the framework exited with code {proc.returncode} while starting")
        try:
            health = requests.get(f"{api}/health", timeout=1).json()
            if health.get("role") == "leader" and health.get("registered"):
                return
        except (requests.RequestException, ValueError):
            pass
        time.sleep(0.3)
    raise click.ClickException(f"the framework at {api} did not become leader within {timeout:.0f}s")


def _jct(job: dict[str, Any]) -> float | None:
    fin = (job.get("phase_times") or {}).get("finished")
    return None if fin is None else round(fin - job["submitted_at"], 1)


class _Progress:
    """Prints what changed since the last poll: phases, allocations, rescales, one line each."""

    def __init__(self, echo: Any) -> None:
        self.echo = echo
        self.seen: dict[str, tuple] = {}
        self.slot: int | None = None

    def update(self, elapsed: float, cluster: dict[str, Any], jobs: list[dict[str, Any]]) -> None:
        slot = cluster.get("slot")
        if slot != self.slot and slot is not None:
            self.slot = slot
            running = [j for j in jobs if j["phase"] in ("running", "rescaling")]
            alloc = ", ".join(f"{j['id']}={j['num_ps']}ps/{j['num_workers']}w" for j in running) or "-"
            self.echo(f"[{elapsed:6.1f}s] slot {slot}: {len(running)} running, allocation: {alloc}")
        for j in jobs:
            key = (j["phase"], j["num_ps"], j["num_workers"], j["rescales"])
            old = self.seen.get(j["id"])
            if old == key:
                continue
            self.seen[j["id"]] = key
            ep = f"{j['epochs_done']:.1f}/{j['epochs']:g} epochs"
            if old is None:
                self.echo(f"[{elapsed:6.1f}s]   {j['id']} ({j['job_type']}) submitted")
            elif old[3] != key[3]:
                self.echo(f"[{elapsed:6.1f}s]   {j['id']} rescaled to {key[1]} PS + {key[2]} workers ({ep})")
            elif old[0] != key[0]:
                self.echo(f"[{elapsed:6.1f}s]   {j['id']} {old[0]} -> {j['phase']} ({ep})")
            else:
                self.echo(f"[{elapsed:6.1f}s]   {j['id']} now {key[1]} PS + {key[2]} workers ({ep})")


def run_demo(*, policy: str = "dl2", agents: int = DEFAULT_AGENTS, cpus: float = 8, gpus: int = 2, mem: str = "16GiB",
             num_jobs: int = len(WORKLOAD), epochs_scale: float = 1.0, slot: str = DEFAULT_SLOT, state: str = "auto", api_port: int = 0,
             timeout: float = 900.0, workdir: str | None = None, keep_running: bool = False,
             echo: Any = click.echo, json_out: str | None = None,
             on_finished: Callable[[str], None] | None = None,
             restart_seconds: float | None = DEMO_RESTART_SECONDS, table_sized: bool = DEFAULT_TABLE_SIZED) -> DemoResult:
    """Run the demo and return what it measured (see the module docstring).

    ``on_finished(api_url)`` is called once every job has ended, while everything still runs
    (tests use it to look at the status page).

    Raises:
        Stopped: on Ctrl-C / SIGTERM (everything started has been stopped by then).
        click.ClickException: when a part fails to start or the jobs do not finish in ``timeout``.
    """
    from dl2_mesos.services.localcluster import LocalCluster

    own_dir = workdir is None
    root = Path(workdir or tempfile.mkdtemp(prefix="dl2-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    zk: ZooKeeperServer | None = None
    framework: subprocess.Popen | None = None
    cluster: LocalCluster | None = None
    stop_flag = {"stop": False}

    def on_signal(signum: int, frame: object) -> None:
        stop_flag["stop"] = True

    old_handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    t0 = time.monotonic()
    try:
        if state == "zookeeper" or (state == "auto" and zookeeper_available()):
            zk = ZooKeeperServer(workdir=str(root / "zookeeper")).start()
            zk_arg = zk.url("/dl2-demo")
            echo(f"state store: embedded ZooKeeper at {zk.hosts}")
        else:
            zk_arg = "none"
            echo(f"state store: local files in {root / 'state'}")
        cluster = LocalCluster(agents=agents, cpus=cpus, gpus=gpus, mem=mem, work_dir=str(root / "agents"),
                               executor_shutdown_grace_period=20.0)
        cluster.start()
        echo(f"local Mesos-compatible master: {cluster.master_url} ({agents} agents, "
             f"{cpus:g} cpus / {gpus} gpus / {mem} each)")
        port = api_port or free_port()
        api = f"http://127.0.0.1:{port}"
        cmd = _dl2_command() + [
            "framework", "--master", cluster.mesos_master, "--zk", zk_arg, "--state-dir", str(root / "state"),
            "--policy", policy, "--slot", slot, "--api", f"127.0.0.1:{port}",
            "--executor-command", f"{sys.executable} -m dl2_mesos.executor",
            "--checkpoint-root", (root / "checkpoints").resolve().as_uri(),
        ]
        log = open(root / "framework.log", "ab")
        framework = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_leader(api, 90, framework)
        except click.ClickException as exc:
            framework.wait(5)
            raise click.ClickException(f"{exc.message}: {_last_error(root / 'framework.log')}") from None
        echo(f"framework ({policy} policy, {slot} slots): {api}  (log: {root / 'framework.log'})")
        echo("jobs declare a restart cost of " + (f"{restart_seconds:g} s" if restart_seconds is not None
                                                   else "their type's default (60 s + 300 s)")
             + f"; the agents advertise {agents * cpus:g} cpus in all on {os.cpu_count()} real cores"
             + ("; epochs sized to the speed table" if table_sized else ""))

        workload = [(jt, max(1.0, round(ep * epochs_scale)), after * epochs_scale)
                    for jt, ep, after in (WORKLOAD[i % len(WORKLOAD)] for i in range(num_jobs))]
        pending = sorted(((after, jt, ep) for jt, ep, after in workload), key=lambda x: x[0])
        progress = _Progress(echo)
        submitted: list[str] = []
        offsets: list[float] = []  # seconds after the first submission, as submitted
        start = time.monotonic()
        deadline = start + timeout
        done = False
        while not done:
            if stop_flag["stop"]:
                raise Stopped()
            if time.monotonic() > deadline:
                raise click.ClickException(f"jobs did not finish within {timeout:.0f}s (see {root / 'framework.log'})")
            if framework.poll() is not None:
                raise click.ClickException(f"the framework exited with code {framework.returncode}: "
                                           f"{_last_error(root / 'framework.log')}")
            elapsed = time.monotonic() - start
            while pending and pending[0][0] <= elapsed:
                _after, jt, ep = pending.pop(0)
                r = requests.post(f"{api}/api/v1/jobs", json=job_request(jt, ep, restart_seconds, table_sized), timeout=10)
                if r.status_code != 201:
                    raise click.ClickException(f"submit {jt} failed: {r.status_code} {r.text}")
                submitted.append(r.json()["id"])
                offsets.append(round(time.monotonic() - start, 1))
            try:
                jobs = requests.get(f"{api}/api/v1/jobs", timeout=5).json()["jobs"]
                cluster_view = requests.get(f"{api}/api/v1/cluster", timeout=5).json()
            except (requests.RequestException, ValueError, KeyError) as exc:
                logger.info("poll failed: %s", exc)
                time.sleep(1)
                continue
            progress.update(elapsed, cluster_view, jobs)
            mine = [j for j in jobs if j["id"] in submitted]
            done = not pending and len(mine) == num_jobs and all(
                j["phase"] in ("finished", "failed", "cancelled") for j in mine)
            # wake for the next submission on time: a compared run submits at the same offsets
            next_at = pending[0][0] - (time.monotonic() - start) if pending else 1.0
            time.sleep(min(1.0, max(0.05, next_at)))

        final = {jid: requests.get(f"{api}/api/v1/jobs/{jid}", timeout=5).json() for jid in submitted}
        rows = tuple(
            {"id": jid, "job_type": final[jid]["job_type"], "phase": final[jid]["phase"],
             "epochs": final[jid].get("epochs"), "submitted_after": offsets[i],
             "jct_seconds": _jct(final[jid]), "rescales": final[jid]["rescales"],
             "phase_times": final[jid].get("phase_times") or {}}
            for i, jid in enumerate(submitted)
        )
        result = DemoResult(policy, rows, f"{api}/", round(time.monotonic() - t0, 1))
        echo("")
        echo(f"{'job':<28} {'type':<24} {'phase':<10} {'JCT (s)':>8} {'rescales':>8}")
        for r in rows:
            jct = "-" if r["jct_seconds"] is None else f"{r['jct_seconds']:.1f}"
            echo(f"{r['id']:<28} {r['job_type']:<24} {r['phase']:<10} {jct:>8} {r['rescales']:>8}")
        avg = result.avg_jct
        echo(f"average JCT: {'-' if avg is None else f'{avg:.1f}s'} over {len(rows)} jobs, policy {policy}, "
             f"wall {result.wall_seconds:.0f}s")
        echo(f"status page: {api}/  (the webui_url the Mesos UI links to)")
        if json_out:
            Path(json_out).write_text(json.dumps(result.to_dict(), indent=2))
        if on_finished is not None:
            on_finished(api)
        if keep_running:
            echo("services keep running; press Ctrl-C to stop")
            while not stop_flag["stop"]:
                if framework.poll() is not None:
                    break
                time.sleep(0.5)
        return result
    finally:
        if framework is not None and framework.poll() is None:
            framework.terminate()
            try:
                framework.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(framework.pid, signal.SIGKILL)
                framework.wait()
        if cluster is not None:
            cluster.stop()
        if zk is not None:
            zk.stop()
        for s, h in old_handlers.items():
            signal.signal(s, h)
        if own_dir and not keep_running:
            shutil.rmtree(root, ignore_errors=True)


def comparison_lines(first: DemoResult, second: DemoResult) -> list[str]:
    """Both runs of the same workload side by side: per job, then the average JCTs and their ratio."""
    a, b = first.policy, second.policy
    lines = [f"same workload, {a} vs {b}:",
             f"{'#':>3} {'type':<24} {'epochs':>6} {'at (s)':>6} {f'JCT {a} (s)':>14} {f'JCT {b} (s)':>14}"]

    def cell(row: dict[str, Any]) -> str:
        if row["phase"] != "finished" or row["jct_seconds"] is None:
            return str(row["phase"])
        return f"{row['jct_seconds']:.1f}"

    for i, (ra, rb) in enumerate(zip(first.jobs, second.jobs)):
        epochs = ra.get("epochs")
        lines.append(f"{i + 1:>3} {ra['job_type']:<24} {'-' if epochs is None else f'{epochs:g}':>6} "
                     f"{ra.get('submitted_after', 0.0):>6.1f} {cell(ra):>14} {cell(rb):>14}")
    avg_a, avg_b = first.avg_jct, second.avg_jct
    fin_a = sum(r["phase"] == "finished" for r in first.jobs)
    fin_b = sum(r["phase"] == "finished" for r in second.jobs)

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}s"

    lines.append(f"average JCT: {a} {fmt(avg_a)} ({fin_a}/{len(first.jobs)} finished, wall {first.wall_seconds:.0f}s)"
                 f" | {b} {fmt(avg_b)} ({fin_b}/{len(second.jobs)} finished, wall {second.wall_seconds:.0f}s)")
    if avg_a is not None and avg_b:
        lines.append(f"ratio {a}/{b}: {avg_a / avg_b:.2f}")
    return lines


def run_comparison(policy: str, compare: str, *, echo: Any = click.echo, workdir: str | None = None,
                   api_port: int = 0, json_out: str | None = None, **kw: Any) -> tuple[DemoResult, DemoResult]:
    """Run the demo under ``policy`` and then, on a fresh cluster, the same workload (same
    submissions at the same offsets) under ``compare``; print both average JCTs side by side."""
    results = []
    for i, name in enumerate((policy, compare)):
        echo(f"=== run {i + 1}/2: policy {name} ===")
        wd = None if workdir is None else str(Path(workdir) / f"{i + 1}-{name}")
        results.append(run_demo(policy=name, echo=echo, workdir=wd, api_port=api_port, keep_running=False, **kw))
        echo("")
    first, second = results
    for line in comparison_lines(first, second):
        echo(line)
    if json_out:
        Path(json_out).write_text(json.dumps({"runs": [first.to_dict(), second.to_dict()],
                                              "ratio": (first.avg_jct / second.avg_jct
                                                        if first.avg_jct and second.avg_jct else None)}, indent=2))
    return first, second


@click.command()
@click.option("--policy", default="dl2", show_default=True, help="dl2 | drf | tetris | optimus | fifo | srtf | srtf-gain | pollux | tiresias.")
@click.option("--compare", default=None, metavar="POLICY",
              help="Afterwards run the same workload (same submissions, same offsets) under this policy "
                   "on a fresh cluster and print both average JCTs side by side, e.g. --compare drf.")
@click.option("--agents", default=DEFAULT_AGENTS, show_default=True, type=click.IntRange(1, 64))
@click.option("--cpus", default=8.0, show_default=True, type=FiniteFloatRange(1))
@click.option("--gpus", default=2, show_default=True, type=click.IntRange(0, 16))
@click.option("--mem", default="16GiB", show_default=True)
@click.option("--jobs", "num_jobs", default=len(WORKLOAD), show_default=True, type=click.IntRange(1, 100))
@click.option("--epochs-scale", default=1.0, show_default=True, type=FiniteFloatRange(0.01, 100),
              help="Multiply every job's epochs (and submission delays) by this.")
@click.option("--slot", default=DEFAULT_SLOT, show_default=True, help="Slot length (short, so the demo takes minutes).")
@click.option("--restart-seconds", default=DEMO_RESTART_SECONDS, show_default=True, type=FiniteFloatRange(0, 3600),
              help="Restart cost every job declares (the reference program's, measured here).")
@click.option("--paper-restart-costs", is_flag=True,
              help="Declare none: jobs show their type's default (60 s + 300 s, paper section 5).")
@click.option("--table-sized/--uniform-epochs", default=DEFAULT_TABLE_SIZED, show_default=True,
              help="Size each job's epoch (batches of the MXNet program) so the types' speeds relate as in "
                   "the speed table the model learned from; --uniform-epochs: the program's default epoch for "
                   "every type (on this machine all types then train at about the same pace).")
@click.option("--state", type=click.Choice(["auto", "zookeeper", "file"]), default="auto", show_default=True,
              help="auto: embedded ZooKeeper when Java and ZooKeeper are installed, else local files.")
@click.option("--api-port", default=0, type=click.IntRange(0, 65535), help="Framework API/status page port.")
@click.option("--timeout", default=900.0, show_default=True, type=FiniteFloatRange(10))
@click.option("--workdir", default=None, type=click.Path(file_okay=False), callback=output_folder,
              help="Keep sandboxes/logs here.")
@click.option("--keep-running/--no-keep-running", default=None,
              help="Keep the cluster and status page up after the summary (default: when on a terminal; "
                   "never with --compare).")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False), callback=output_file,
              help="Write the result here.")
def demo(policy: str, compare: str | None, agents: int, cpus: float, gpus: int, mem: str, num_jobs: int,
         epochs_scale: float, slot: str, restart_seconds: float, paper_restart_costs: bool, table_sized: bool, state: str,
         api_port: int, timeout: float, workdir: str | None, keep_running: bool | None,
         json_out: str | None) -> None:
    """Run the local-cluster demo: real training jobs scheduled by the DL2 policy."""
    from dl2_mesos.policy.registry import policy_names

    for name, hint in ((policy, "--policy"), (compare, "--compare")):
        if name is not None and name not in policy_names():
            raise click.BadParameter(f"unknown policy {name!r}; known: {', '.join(policy_names())}",
                                     param_hint=hint)
    if keep_running is None:
        keep_running = sys.stdout.isatty() and compare is None
    # the in-process local cluster logs task-level warnings that would interleave with the
    # progress lines; its errors still show
    logging.getLogger("dl2_mesos.localmesos").setLevel(logging.ERROR)
    size = dict(agents=agents, cpus=cpus, gpus=gpus, mem=mem, num_jobs=num_jobs, epochs_scale=epochs_scale,
                slot=slot, state=state, timeout=timeout,
                restart_seconds=None if paper_restart_costs else restart_seconds, table_sized=table_sized)
    try:
        if compare is not None:
            run_comparison(policy, compare, workdir=workdir, api_port=api_port, json_out=json_out, **size)
        else:
            run_demo(policy=policy, api_port=api_port, workdir=workdir, keep_running=keep_running,
                     json_out=json_out, **size)
    except Stopped:
        click.echo("stopped; every process has been shut down", err=True)
        sys.exit(130)
