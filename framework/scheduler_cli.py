"""``dl2 framework``: run one framework replica (settings: TOML file < DL2_* env < flags)."""

from __future__ import annotations

import logging
import signal
import sys

import click

from dl2_mesos.errors import ConfigError

logger = logging.getLogger(__name__)


@click.command("framework")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="TOML config file (default: $DL2_CONFIG).")
@click.option("--master", default=None, help="Mesos master: host:port or zk://host:2181/mesos.")
@click.option("--zk", default=None, help="zk://host:2181/dl2 for state + leader election, or 'none' (file store).")
@click.option("--state-dir", default=None, help="State folder when --zk none.")
@click.option("--policy", default=None, help="dl2 | drf | tetris | optimus | fifo | srtf | srtf-gain | pollux | tiresias.")
@click.option("--policy-args", default=None, help="JSON object of policy constructor arguments.")
@click.option("--slot", default=None, help="Scheduling slot length, e.g. 20m, 30s.")
@click.option("--api", default=None, help="HTTP API listen address host:port.")
@click.option("--advertise-url", default=None, help="URL other replicas and clients use for this one.")
@click.option("--api-token", default=None,
              help="Bearer token for the API (visible in ps: prefer --api-token-file or env DL2_API_TOKEN).")
@click.option("--api-token-file", default=None, help="Read the API bearer token from this file (first line).")
@click.option("--insecure-no-auth", is_flag=True, default=None,
              help="Serve the job API on a non-loopback address without a token (anyone reaching it can run jobs).")
@click.option("--task-user", default=None,
              help="Run executors and tasks as this user (default: yours, or nobody when root).")
@click.option("--name", "framework_name", default=None, help="Framework name.")
@click.option("--role", default=None, help="Mesos role.")
@click.option("--principal", default=None, help="Mesos principal the framework authenticates as.")
@click.option("--secret", default=None,
              help="Mesos secret of the principal (visible in ps: prefer env DL2_SECRET).")
@click.option("--failover-timeout", default=None, help="How long Mesos keeps our tasks without a scheduler.")
@click.option("--connect-timeout", default=None, help="Give up when ZooKeeper/master stay unreachable this long.")
@click.option("--executor-command", default=None, help="Command that starts the executor on agents.")
@click.option("--checkpoint-root", default=None, help="Root URI for job checkpoints (hdfs://..., file://...).")
@click.option("--zk-digest", default=None,
              help="user:password for digest ACLs on our znodes (visible in ps: prefer env DL2_ZK_DIGEST).")
@click.option("--zk-insecure", is_flag=True, default=None,
              help="Allow a non-loopback ZooKeeper without --zk-digest (world-writable znodes).")
@click.option("--online-learning/--no-online-learning", default=None,
              help="Update the DL2 model online from observed rewards (default on).")
@click.option("--online-teacher", default=None,
              help="Online updates imitate this teacher on the live states (online DAgger); "
                   "'none': learn by reinforcement from the rewards (the paper's).")
@click.option("--online-twin/--no-online-twin", default=None,
              help="With a teacher: learn on simulated futures of the live workload, labelled by the "
                   "teacher, instead of on the live states alone.")
@click.option("--offer-wait", default=None, help="At a slot boundary, wait at most this long for offers.")
@click.option("--launch-timeout", default=None,
              help="A planned launch waits at most this long for its offers.")
@click.option("--kill-grace", default=None, help="SIGTERM to SIGKILL grace when a task is killed.")
def framework(config_path: str | None, **flags: object) -> None:
    """Run the DL2 Mesos framework (one replica; several replicas elect a leader in ZooKeeper).

    Each setting comes from the flag, else DL2_<NAME> in the environment, else the TOML config
    file, else the default shown with it: with nothing set, the framework connects to the Mesos
    master at 127.0.0.1:5050 and keeps its state in ./dl2-state.
    """
    from dl2_mesos.config import check_exposure, load_config
    from dl2_mesos.framework.http_guard import raise_nofile_limit
    from dl2_mesos.framework.runner import Replica, Unreachable

    try:
        cfg = load_config(config_path, overrides=flags)
        check_exposure(cfg)
    except ConfigError as exc:
        click.echo(f"Error: bad setting: {exc}", err=True)
        sys.exit(2)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    elif logging.getLogger().level > logging.INFO:
        logging.getLogger("dl2_mesos").setLevel(logging.INFO)
    for name in ("api_token", "secret", "zk_digest"):
        if flags.get(name):
            logger.warning("--%s on the command line is visible to every user in ps; use the environment "
                           "(DL2_%s) or a file%s", name.replace("_", "-"), name.upper(),
                           " (--api-token-file)" if name == "api_token" else "")
    soft, _ = raise_nofile_limit()
    logger.info("settings: %s (open files limit %d)", cfg.redacted(), soft)
    try:
        replica = Replica(cfg)
    except (Unreachable, ConfigError) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)

    def on_signal(signum: int, frame: object) -> None:
        replica.stop(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    code = replica.run()
    if code:
        click.echo(f"Error: {replica._reason}", err=True)
    sys.exit(code)


def _shown_default(value: object) -> str | None:
    """A setting's built-in default as ``--help`` shows it (None: not worth showing)."""
    if isinstance(value, bool) or value in ("", {}, None):
        return None
    if isinstance(value, float):
        from dl2_mesos.framework.human_time import duration

        return f"{value:g}s" + (f" ({duration(value)})" if value >= 60 else "")
    return str(value)


def _add_defaults_to_help(command: click.Command) -> None:
    """Flags default to None (so the config file and environment can set them); their help names
    the built-in default of the setting they override instead."""
    from dataclasses import MISSING, fields

    from dl2_mesos.config import Config

    defaults = {}
    for f in fields(Config):
        if f.default is not MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not MISSING:  # type: ignore[misc]
            defaults[f.name] = f.default_factory()  # type: ignore[misc]
    for param in command.params:
        shown = _shown_default(defaults.get(param.name or ""))
        wanted = shown is not None and param.help and "default" not in param.help
        if isinstance(param, click.Option) and wanted:
            param.help = f"{param.help} [default: {shown}]"


_add_defaults_to_help(framework)
