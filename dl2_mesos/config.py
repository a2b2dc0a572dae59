"""The framework's one ``Config``: loaded once from a TOML file, then ``DL2_*`` environment
variables, then command-line flags (flags win).

Keys (TOML top level, env ``DL2_<KEY>`` upper-cased, flag ``--<key-with-dashes>``) are the
field names of :class:`Config`. Durations accept ``90``, ``90s``, ``5m``, ``1h``, ``1d``.
Every bad value raises :class:`~dl2_mesos.errors.ConfigError` naming the key, its source and
the rule it breaks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dl2_mesos.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ENV_PREFIX = "DL2_"
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any, key: str = "duration") -> float:
    """Seconds from ``90``, ``"90s"``, ``"5m"``, ``"1.5h"``, ``"1d"``, ``"250ms"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like 20m, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _DURATION_RE.match(str(value))
        if not m:
            raise ConfigError(f"{key}: expected a duration like 90s, 20m or 1h, got {value!r}")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(seconds):  # TOML has nan and inf
        raise ConfigError(f"{key}: expected a finite duration, got {value!r}")
    if seconds < 0:
        raise ConfigError(f"{key}: must be >= 0, got {value!r}")
    return seconds


def _default_executor_command() -> str:
    return f"{shlex.quote(sys.executable)} -m dl2_mesos.executor"


@dataclass(frozen=True)
class Config:
    """Every setting of ``dl2 framework``. See ``deploy/config/dl2.example.toml``."""

    # --- Mesos -----------------------------------------------------------------------------
    master: str = "127.0.0.1:5050"  # host:port or zk://host:2181/mesos
    framework_name: str = "dl2"
    role: str = "*"
    task_user: str = ""  # run executors and tasks as this user ("" = the invoking user, or nobody when root)
    principal: str = ""
    secret: str = ""
    failover_timeout: float = 7 * 86400.0  # how long Mesos keeps our tasks while no scheduler is up
    connect_timeout: float = 30.0  # give up when the master or ZooKeeper stays unreachable this long
    executor_command: str = field(default_factory=_default_executor_command)
    executor_cpus: float = 0.0  # resources of the executor itself (0 = none declared)
    executor_mem: float = 0.0
    kill_grace: float = 30.0  # SIGTERM -> SIGKILL grace for a task (kill policy)
    master_calls: int = 8  # calls to the master in flight at once (framework.outbound senders)
    # --- ZooKeeper / state -------------------------------------------------------------------
    zk: str = "none"  # zk://host:2181/dl2 or "none" (file store in state_dir, single replica)
    zk_timeout: float = 10.0  # session timeout
    zk_digest: str = ""  # "user:password" -> digest ACL on every node under zk's path (set at start)
    zk_insecure: bool = False  # allow a non-loopback ZooKeeper without zk_digest (world-writable znodes)
    state_dir: str = "./dl2-state"  # for zk = "none"
    # --- scheduling --------------------------------------------------------------------------
    policy: str = "dl2"
    policy_args: Mapping[str, Any] = field(default_factory=dict)
    slot: float = 1200.0  # the DL2 time slot (seconds)
    offer_hold: float = 30.0  # keep an offer at most this long before declining it
    offer_wait: float = 5.0  # at a slot boundary, wait at most this long for offers
    launch_timeout: float = 60.0  # a planned launch waits at most this long for its offers
    rescale_resend: float = 5.0  # re-send a RescaleRequest every ... until its report arrives
    max_task_failures: int = 3  # failed launches of a job before it is marked failed
    checkpoint_root: str = "file:///tmp/dl2/checkpoints"
    progress_interval: float = 5.0
    task_env: Mapping[str, str] = field(default_factory=dict)  # extra env for training processes
    # --- online learning ---------------------------------------------------------------------
    online_learning: bool = True
    online_window: int = 10  # slots per reward window (rollback check)
    rollback_margin: float = 0.2  # roll back when window reward < (1 - margin) * baseline
    model_keep: int = 5  # model versions kept in the state store
    # online updates imitate this teacher on the live states (online DAgger; it helps a model
    # that trails its teacher on a drifted workload, where reinforcement did not reliably; the
    # shipped model's own teacher); "none" learns by reinforcement from the slots' rewards
    # instead (the paper's online phase)
    online_teacher: str = "srpt-elastic-min"
    # with a teacher: learn on simulated futures of the live workload (the jobs in the system and
    # arrivals resampled from the recent ones), labelled by the teacher, instead of on the live
    # states alone (policy/dl2/twin.py)
    online_twin: bool = False
    # --- HTTP API ----------------------------------------------------------------------------
    api: str = "0.0.0.0:8080"  # listen host:port
    advertise_url: str = ""  # URL other replicas redirect to ("" = http://<hostname>:<port>)
    api_token: str = ""  # bearer token (env DL2_API_TOKEN, alias DL2_TOKEN); prefer api_token_file
    api_token_file: str = ""  # read api_token from this file (first line)
    insecure_no_auth: bool = False  # serve writes without a token on a non-loopback address
    max_body_bytes: int = 64 * 1024
    api_max_connections: int = 512  # open API connections at most (more are closed at once)
    api_header_timeout: float = 10.0  # a request's headers must arrive within this (slowloris guard)
    api_keep_alive: float = 5.0  # idle keep-alive connections are closed after this
    api_read_token: str = ""  # bearer token for reads only (the api_token reads too)
    api_open_reads: bool = False  # serve reads without a token even when tokens are set
    # --- retention of ended jobs (0 = no limit) ----------------------------------------------
    retain_ended_for: float = 30 * 86400.0  # delete finished/failed/cancelled jobs this long after they end
    retain_ended_jobs: int = 10000  # and keep at most this many ended jobs (oldest deleted first)

    # -- derived --------------------------------------------------------------------------------
    @property
    def api_host(self) -> str:
        return self.api.rsplit(":", 1)[0]

    @property
    def api_port(self) -> int:
        return int(self.api.rsplit(":", 1)[1])

    @property
    def uses_zookeeper(self) -> bool:
        return self.zk.startswith("zk://")

    @property
    def zk_hosts(self) -> str:
        """kazoo connection string of ``zk`` (host list without the path)."""
        rest = self.zk[len("zk://"):]
        return rest.split("/", 1)[0]

    @property
    def zk_path(self) -> str:
        rest = self.zk[len("zk://"):]
        path = "/" + rest.split("/", 1)[1] if "/" in rest else "/dl2"
        return path.rstrip("/") or "/dl2"

    def public_url(self) -> str:
        """The URL clients and the other replicas use to reach this replica's API."""
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        host = self.api_host
        if host in ("0.0.0.0", "", "::"):
            import socket

            host = socket.gethostname()
        return f"http://{host}:{self.api_port}"

    def redacted(self) -> dict[str, Any]:
        """The settings as a dict with secrets masked (for logs and the status page)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for k in ("secret", "api_token", "api_read_token", "zk_digest"):
            if out[k]:
                out[k] = "***"
        out["policy_args"] = dict(out["policy_args"])
        out["task_env"] = dict(out["task_env"])
        return out


_FIELDS = {f.name: f for f in fields(Config)}
_DURATIONS = {
    "api_header_timeout", "api_keep_alive", "failover_timeout", "connect_timeout", "kill_grace", "zk_timeout", "slot", "offer_hold",
    "offer_wait", "launch_timeout", "rescale_resend", "progress_interval", "retain_ended_for",
}
#: durations that must be above zero: a zero would time every call out at once or spin a loop
_POSITIVE_DURATIONS = ("slot", "api_header_timeout", "connect_timeout", "zk_timeout", "launch_timeout",
                       "rescale_resend", "progress_interval")
#: thread and connection counts: more would exhaust the process before it serves anything
_MAX_MASTER_CALLS = 256
_FLOATS = {"executor_cpus", "executor_mem", "rollback_margin"}
_INTS = {"master_calls", "max_task_failures", "online_window", "model_keep", "max_body_bytes", "api_max_connections",
         "retain_ended_jobs"}
_BOOLS = {"online_learning", "online_twin", "insecure_no_auth", "zk_insecure", "api_open_reads"}
#: older or alternative names: TOML key / flag -> field, and environment variable -> field
_KEY_ALIASES = {"user": "task_user"}
_ENV_ALIASES = {"DL2_TOKEN": "api_token", "DL2_USER": "task_user"}
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
_MAPPINGS = {"policy_args", "task_env"}


def _coerce(key: str, value: Any, source: str) -> Any:
    where = f"{key} (from {source})"
    if key in _DURATIONS:
        return parse_duration(value, where)
    if key in _FLOATS:
        try:
            if isinstance(value, bool):
                raise ValueError
            v = float(value)
            if not math.isfinite(v):
                raise ValueError
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a finite number, got {value!r}") from None
        if v < 0:
            raise ConfigError(f"{where}: must be >= 0, got {value!r}")
        return v
    if key in _INTS:
        try:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            v = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
        if v < 0:
            raise ConfigError(f"{where}: must be >= 0, got {value!r}")
        return v
    if key in _BOOLS:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if key in _MAPPINGS:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError:
                raise ConfigError(f"{where}: expected a JSON object, got {value!r}") from None
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a table / JSON object, got {value!r}")
        if key == "task_env":
            return {str(k): str(v) for k, v in value.items()}
        return dict(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _validate(cfg: Config) -> None:
    for key in _POSITIVE_DURATIONS:
        if getattr(cfg, key) <= 0:
            raise ConfigError(f"{key}: must be > 0 seconds, got {getattr(cfg, key)}")
    from dl2_mesos.policy.registry import policy_names  # the one list of policies

    if cfg.policy not in policy_names():
        raise ConfigError(f"policy: unknown policy {cfg.policy!r}; known: {', '.join(policy_names())}")
    if not (cfg.master.startswith("zk://") or re.fullmatch(r"[\w.\-]+(:\d+)?", cfg.master)):
        raise ConfigError(f"master: expected host:port or zk://host:2181/path, got {cfg.master!r}")
    if cfg.zk != "none" and not re.fullmatch(r"zk://[^/\s]+(/[\w.\-/]*)?", cfg.zk):
        raise ConfigError(f"zk: expected zk://host:2181/path or none, got {cfg.zk!r}")
    if not re.fullmatch(r"[^\s:]*:\d{1,5}", cfg.api) or not (0 <= cfg.api_port <= 65535):
        raise ConfigError(f"api: expected host:port (e.g. 0.0.0.0:8080), got {cfg.api!r}")
    if cfg.zk_digest and ":" not in cfg.zk_digest:
        raise ConfigError("zk_digest: expected user:password")
    if bool(cfg.principal) != bool(cfg.secret) and cfg.secret:
        raise ConfigError("secret: given without principal")
    if not cfg.executor_command.strip():
        raise ConfigError("executor_command: must not be empty")
    if cfg.online_window < 1:
        raise ConfigError("online_window: must be >= 1")
    if cfg.online_teacher:
        from dl2_mesos.policy.registry import teacher_names

        if cfg.online_teacher not in teacher_names():
            raise ConfigError(f"online_teacher: unknown teacher {cfg.online_teacher!r}; known: "
                              f"{', '.join(teacher_names())}, or none (reinforcement)")
    if cfg.online_twin and not cfg.online_teacher:
        raise ConfigError("online_twin: needs an online_teacher to label the simulated futures (not none)")
    if not 0 <= cfg.rollback_margin < 1:
        raise ConfigError(f"rollback_margin: must be in [0, 1), got {cfg.rollback_margin}")
    if not 1 <= cfg.master_calls <= _MAX_MASTER_CALLS:
        raise ConfigError(f"master_calls: must be between 1 and {_MAX_MASTER_CALLS}, got {cfg.master_calls}")
    if cfg.max_body_bytes < 1024:
        raise ConfigError("max_body_bytes: must be >= 1024")
    if cfg.api_max_connections < 1:
        raise ConfigError("api_max_connections: must be >= 1")
    if cfg.task_user and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}", cfg.task_user):
        raise ConfigError(f"task_user: not a user name: {cfg.task_user!r}")


def check_exposure(cfg: Config) -> None:
    """Refuse settings that would expose the cluster (checked when a replica starts):
    :func:`check_api_exposure` and :func:`check_zk_exposure`."""
    check_zk_exposure(cfg)
    check_api_exposure(cfg)


def check_api_exposure(cfg: Config) -> None:
    """The job API on a non-loopback address needs a token, unless ``insecure_no_auth``.

    Raises:
        ConfigError: naming the risk and the settings that fix it.
    """
    if not cfg.api_token and not cfg.insecure_no_auth and not is_loopback(cfg.api_host):
        raise ConfigError(
            f"api: refusing to serve the job API on {cfg.api} (not loopback) without a token: anyone who "
            "reaches it could run commands on every agent. Set api_token_file (or DL2_API_TOKEN), listen on "
            "127.0.0.1, or pass --insecure-no-auth to accept the risk")


def check_zk_exposure(cfg: Config) -> None:
    """A ZooKeeper that is not on loopback needs ``zk_digest``, unless ``zk_insecure``.

    Raises:
        ConfigError: naming the risk and the settings that fix it.
    """
    if cfg.uses_zookeeper and not cfg.zk_digest and not cfg.zk_insecure and not all(
            is_loopback(h.rsplit(":", 1)[0]) for h in cfg.zk_hosts.split(",")):
        raise ConfigError(
            f"zk: {cfg.zk_hosts} is not loopback and zk_digest is not set: every znode of the framework would "
            "be world-writable (anyone reaching ZooKeeper could inject jobs). Set zk_digest (DL2_ZK_DIGEST), "
            "or zk_insecure = true to accept the risk")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address) only reaches this machine."""
    import ipaddress

    if host.lower() in _LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_task_user() -> str:
    """Tasks run as the invoking user, or as ``nobody`` when that is root (root only when configured)."""
    import getpass

    try:
        if os.geteuid() != 0:
            return getpass.getuser()
    except (KeyError, OSError):
        pass
    return "nobody"


def read_secret_file(path: str | os.PathLike) -> str:
    """The secret on the first line of ``path`` (a token or password file), stripped.

    Raises:
        ConfigError: the file cannot be read, is not UTF-8 text, or its first line is empty.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").strip().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte offset {exc.start})") from None
    if not lines or not lines[0].strip():
        raise ConfigError(f"{path} is empty")
    return lines[0].strip()


def _read_secret_file(path: str, key: str) -> str:
    try:
        return read_secret_file(path)
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def load_config(
    path: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build the Config: defaults < TOML file < ``DL2_*`` env < ``overrides`` (CLI flags).

    Args:
        path: TOML file (None: ``DL2_CONFIG`` from ``env`` if set, else no file).
        env: environment (default ``os.environ``).
        overrides: flag values; ``None`` values are ignored (flag not given).

    Raises:
        ConfigError: unreadable file, unknown key, or a bad value (naming key and source).
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = path or env.get(ENV_PREFIX + "CONFIG") or None
    if path:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config file {path}: not UTF-8 text, as TOML must be (byte offset {exc.start})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
        # a [framework] table is accepted as well as top-level keys
        if isinstance(data.get("framework"), dict):
            data = {**{k: v for k, v in data.items() if k != "framework"}, **data["framework"]}
        for k, v in data.items():
            k = _KEY_ALIASES.get(k, k)
            if k not in _FIELDS:
                raise ConfigError(f"config file {path}: unknown key {k!r} (known: {', '.join(sorted(_FIELDS))})")
            values[k] = _coerce(k, v, f"file {path}")
    for alias, k in _ENV_ALIASES.items():
        if env.get(alias) is not None and env.get(ENV_PREFIX + k.upper()) is None:
            values[k] = _coerce(k, env[alias], f"env {alias}")
    for k in _FIELDS:
        ev = env.get(ENV_PREFIX + k.upper())
        if ev is not None:
            values[k] = _coerce(k, ev, f"env {ENV_PREFIX + k.upper()}")
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        k = _KEY_ALIASES.get(k, k)
        if k not in _FIELDS:
            raise ConfigError(f"unknown setting {k!r}")
        values[k] = _coerce(k, v, f"flag --{k.replace('_', '-')}")
    if values.get("api_token_file"):
        values["api_token"] = _read_secret_file(values["api_token_file"], "api_token_file")
    if str(values.get("online_teacher", "x")).strip().lower() in ("", "none"):
        values["online_teacher"] = ""  # reinforcement
    cfg = dataclasses.replace(Config(), **values)
    _validate(cfg)
    return cfg
