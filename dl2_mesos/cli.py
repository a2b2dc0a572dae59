"""The ``dl2`` command line.

Each sub-command lives in the module of the component it drives and is loaded only when it
is run, so ``dl2 jobs`` never imports torch and ``dl2 simulate`` never imports pymesos.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import click

# command name -> ("module:attribute" of a click.Command, one-line help shown by `dl2 --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("dl2_mesos.policy.simulate_cli:simulate", "Compare policies in the cluster simulator."),
    "trace": ("dl2_mesos.policy.simulate_cli:trace", "Generate job traces or import Philly-style logs."),
    "train": ("dl2_mesos.policy.train_cli:train", "Train the DL2 policy (supervised warm-up, then RL)."),
    "evaluate": ("dl2_mesos.policy.train_cli:evaluate", "Evaluate DL2 and baselines on held-out seeds."),
    "matrix": ("dl2_mesos.policy.simulate_cli:matrix", "Evaluate policies on the load sweep and contended presets."),
    "bench": ("dl2_mesos.bench_cli:bench", "Run a benchmark script of the source checkout (bench/NAME.py)."),
    "local-cluster": ("dl2_mesos.localmesos.local_cluster_cli:local_cluster", "Run the Mesos-compatible local master and agents."),
    "framework": ("dl2_mesos.framework.scheduler_cli:framework", "Run the DL2 Mesos framework (scheduler)."),
    "submit": ("dl2_mesos.framework.client_cli:submit", "Submit a training job to the framework."),
    "jobs": ("dl2_mesos.framework.client_cli:jobs", "List jobs."),
    "job": ("dl2_mesos.framework.client_cli:job", "Show one job."),
    "cancel": ("dl2_mesos.framework.client_cli:cancel", "Cancel a job."),
    "logs": ("dl2_mesos.framework.client_cli:logs", "Print or follow a job task's logs from its Mesos sandbox."),
    "demo": ("dl2_mesos.demo:demo", "Run the local-cluster demo end to end."),
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                raise click.ClickException(f"'dl2 {cmd_name}' is not available in this installation") from exc
            raise
        return getattr(module, attr)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as exc:
            if exc.filename is None:  # not about a file the user named: a real fault, keep its traceback
                raise
            # an output folder that cannot be made, a file that cannot be written or read: one line
            # (its traceback at -vv)
            logging.getLogger(__name__).debug("file error", exc_info=True)
            where = f"{exc.filename} -> {exc.filename2}" if exc.filename2 else str(exc.filename)
            raise click.ClickException(f"{where}: {exc.strerror or exc}") from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # list from the static table: showing help must not import every component
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in sorted(COMMANDS)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dl2-mesos", prog_name="dl2", message="%(prog)s %(version)s")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """dl2: an elastic deep-learning scheduler for Apache Mesos with a learned policy."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":
    main()
