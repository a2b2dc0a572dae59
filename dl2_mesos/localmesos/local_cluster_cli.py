"""``dl2 local-cluster``: run the Mesos-compatible local master and agents in the foreground.

Ctrl-C or SIGTERM stops the master, the agents and every executor process they started.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from dl2_mesos.cli_params import FiniteFloatRange

from .runtime import ClusterConfig, LocalMesos, agent_configs

logger = logging.getLogger(__name__)


def build_config(
    *,
    agents: int,
    cpus: float,
    gpus: int,
    mem: str,
    disk: str,
    host: str,
    port: int,
    zk: str | None,
    work_dir: str | None,
    heartbeat_interval: float,
    allocation_interval: float,
    port_base: int,
    attributes: tuple[str, ...] = (),
    **agent_options: Any,
) -> ClusterConfig:
    """Turn CLI-style options into a ClusterConfig (also used by LocalCluster)."""
    extra: list[tuple[str, str]] = []
    for item in attributes:
        if "=" not in item:
            raise click.BadParameter(f"attribute {item!r} is not NAME=VALUE")
        k, v = item.split("=", 1)
        extra.append((k, v))
    configs = agent_configs(
        agents, cpus=cpus, gpus=gpus, mem=mem, disk=disk, port_base=port_base, **agent_options
    )
    configs = tuple(replace(c, attributes=c.attributes + tuple(extra)) for c in configs)
    return ClusterConfig(
        agents=configs,
        host=host,
        port=port,
        zk=zk,
        work_dir=work_dir,
        heartbeat_interval=heartbeat_interval,
        allocation_interval=allocation_interval,
    )


async def run_until_signalled(config: ClusterConfig, ready_file: str | None, echo: bool = True) -> None:
    cluster = LocalMesos(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await cluster.start()
    try:
        info = cluster.info()
        if echo:
            click.echo(
                f"Mesos-compatible local master (test/dev stand-in, not Apache Mesos): {info['master_url']}"
            )
            if config.zk:
                click.echo(f"  registered in ZooKeeper: {config.zk}")
            for aid, endpoint in info["agents"].items():
                click.echo(f"  agent {aid} at {endpoint}")
            click.echo(f"  sandboxes under {info['work_dir']}; Ctrl-C to stop")
        if ready_file:
            tmp = Path(ready_file + ".tmp")
            tmp.write_text(json.dumps(info))
            os.replace(tmp, ready_file)
        await stop.wait()
    finally:
        await cluster.stop()
        if echo:
            click.echo("local cluster stopped")


@click.command("local-cluster")
@click.option("--agents", default=2, show_default=True, type=click.IntRange(0, 64), help="Number of agents.")
# the defaults are DL2's reference node (8 cpus, 2 gpus, 48 GiB; see job_types): one task of every
# job type fits an agent (the GPU types' workers need a GPU; 0-GPU agents run only cnn-text-classification
# and dssm, and the framework refuses the other types at submit)
@click.option("--cpus", default=8.0, show_default=True, type=FiniteFloatRange(0), help="CPUs per agent.")
@click.option("--gpus", default=2, show_default=True, type=click.IntRange(0),
              help="GPUs per agent (accounted resources, handed to tasks as CUDA_VISIBLE_DEVICES indices).")
@click.option("--mem", default="48GiB", show_default=True, help="Memory per agent (e.g. 16GiB, 4096MiB).")
@click.option("--disk", default="64GiB", show_default=True, help="Disk per agent.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", default=5050, show_default=True, type=click.IntRange(0, 65535), help="Master port (0: any)."
)
@click.option("--zk", default=None, help="Register the master in ZooKeeper, e.g. zk://127.0.0.1:2181/mesos.")
@click.option("--work-dir", default=None, help="Folder for executor sandboxes (default: a temporary folder).")
@click.option(
    "--port-base", default=31000, show_default=True, type=click.IntRange(1, 65535),
    help="First port of agent 0's port range.",
)
@click.option(
    "--attribute", "attributes", multiple=True, help="NAME=VALUE attribute for every agent (repeatable)."
)
@click.option(
    "--heartbeat-interval", default=15.0, show_default=True, type=FiniteFloatRange(min=0, min_open=True), help="Scheduler HEARTBEAT seconds."
)
@click.option(
    "--allocation-interval", default=1.0, show_default=True, type=FiniteFloatRange(min=0, min_open=True), help="Offer cycle seconds."
)
@click.option("--executor-shutdown-grace-period", default=5.0, show_default=True, type=FiniteFloatRange(min=0))
@click.option("--executor-registration-timeout", default=60.0, show_default=True, type=FiniteFloatRange(min=0, min_open=True))
@click.option(
    "--status-update-retry-interval",
    default=10.0,
    show_default=True,
    type=FiniteFloatRange(min=0, min_open=True),
    help="First re-send interval for unacknowledged status updates.",
)
@click.option(
    "--switch-user/--no-switch-user",
    default=True,
    show_default=True,
    help="Run executors as their FrameworkInfo/CommandInfo user (agent must be root), as Mesos's --switch_user.",
)
@click.option(
    "--ready-file", default=None, hidden=True, help="Write the cluster's URLs here as JSON once started."
)
def local_cluster(
    agents: int,
    cpus: float,
    gpus: int,
    mem: str,
    disk: str,
    host: str,
    port: int,
    zk: str | None,
    work_dir: str | None,
    port_base: int,
    attributes: tuple[str, ...],
    heartbeat_interval: float,
    allocation_interval: float,
    executor_shutdown_grace_period: float,
    executor_registration_timeout: float,
    status_update_retry_interval: float,
    switch_user: bool,
    ready_file: str | None,
) -> None:
    """Run a Mesos-compatible local master with AGENTS agents (v1 HTTP API; a test/dev stand-in)."""
    try:
        config = build_config(
            agents=agents,
            cpus=cpus,
            gpus=gpus,
            mem=mem,
            disk=disk,
            host=host,
            port=port,
            zk=zk,
            work_dir=work_dir,
            heartbeat_interval=heartbeat_interval,
            allocation_interval=allocation_interval,
            port_base=port_base,
            attributes=attributes,
            executor_shutdown_grace_period=executor_shutdown_grace_period,
            executor_registration_timeout=executor_registration_timeout,
            status_update_retry_min=status_update_retry_interval,
            switch_user=switch_user,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    try:
        asyncio.run(run_until_signalled(config, ready_file))
    except (OSError, ValueError) as exc:  # a taken port, an unreachable or malformed --zk: exit 2, one line
        click.echo(f"Error: could not start the local cluster: {exc}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    logging.basicConfig(
        level=os.environ.get("DL2_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    local_cluster()
