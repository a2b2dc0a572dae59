"""deploy/ as shipped, checked without Docker or Mesos (see deploy/README.md).

The replicas' configuration -- the example config plus the compose file's environment -- goes
through the framework's own loader and start-up checks. Every host it names must resolve under
the compose file's network mode, and every path and ``DL2_*`` variable that deploy/ names must
exist in the layout the Dockerfiles build (parsed from their instructions below), or be read by
the framework or the executor.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

from dl2_mesos.config import _ENV_ALIASES, Config, check_api_exposure, check_zk_exposure, load_config
from dl2_mesos.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLE = DEPLOY / "config" / "dl2.example.toml"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# directories every base image (Debian/Ubuntu) has
SYSTEM_DIRS = {"/", "/bin", "/usr", "/usr/bin", "/usr/local", "/usr/local/bin", "/sbin", "/usr/sbin", "/etc",
               "/tmp", "/var", "/var/lib"}
# what the test runner supplies for the compose file's required secrets (${VAR:?message})
COMPOSE_SHELL_ENV = {"DL2_API_TOKEN": "a-long-random-test-token", "DL2_ZK_DIGEST": "dl2:test-password"}


# -- the images' layout, from the Dockerfiles ------------------------------------------------------
@dataclass
class ImageLayout:
    """What a Dockerfile's instructions create (the parts deploy/ refers to)."""

    base: str = ""
    env: dict[str, str] = field(default_factory=dict)
    user: str = "root"
    users: set[str] = field(default_factory=lambda: {"root", "nobody"})
    dirs: set[str] = field(default_factory=lambda: set(SYSTEM_DIRS))
    owned: dict[str, str] = field(default_factory=dict)  # path -> owner (chown -R)
    links: dict[str, str] = field(default_factory=dict)
    venvs: dict[str, bool] = field(default_factory=dict)  # venv -> the dl2 package is installed in it
    checkout: str = ""  # where COPY . . put the source tree
    runs: list[str] = field(default_factory=list)

    def resolve(self, path: str) -> str:
        p = str(PurePosixPath(path))
        for _ in range(10):
            for link, target in self.links.items():
                if p == link or p.startswith(link + "/"):
                    p = target + p[len(link):]
                    break
            else:
                return p
        raise AssertionError(f"link loop at {path}")

    def venv_of(self, path: str) -> tuple[str, str] | None:
        p = self.resolve(path)
        for v in self.venvs:
            if p.startswith(v + "/"):
                return v, p[len(v) + 1:]
        return None

    def exists(self, path: str) -> bool:
        p = self.resolve(path)
        if p in self.dirs or p in self.venvs:
            return True
        inside = self.venv_of(p)
        if inside is not None:
            venv, rel = inside
            return rel in ("bin", "bin/python", "bin/pip") or (rel == "bin/dl2" and self.venvs[venv])
        if self.checkout and p.startswith(self.checkout + "/"):
            return (ROOT / p[len(self.checkout) + 1:]).exists()
        return False

    def has_package(self, python: str) -> bool:
        """``python`` is a venv interpreter with the dl2 package installed."""
        inside = self.venv_of(python)
        return inside is not None and inside[1] == "bin/python" and self.venvs[inside[0]]

    def which(self, command: str) -> str | None:
        for d in self.env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":"):
            if self.exists(f"{d}/{command}"):
                return f"{d}/{command}"
        return None


def _instructions(text: str) -> list[tuple[str, str]]:
    out, buf = [], ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def _run_steps(run: str) -> list[list[str]]:
    """The commands of a RUN, which must be one ``&&`` chain (a failed step fails the build)."""
    steps = []
    for part in re.split(r"\s&&\s", run):
        argv = shlex.split(part)
        assert argv, f"empty step in RUN {run!r}"
        bad = [t for t in argv if t in ("||", ";", "|", "&") or t.endswith(";")]
        assert not bad, f"RUN {run!r}: {bad} would let a failed step pass; chain steps with && only"
        while argv and re.fullmatch(r"[A-Z_]+=.*", argv[0]):
            argv = argv[1:]  # VAR=value command ...
        steps.append(argv)
    return steps


def parse_dockerfile(path: Path) -> ImageLayout:
    image = ImageLayout()
    cwd = "/"

    def absolute(p: str) -> str:
        return str(PurePosixPath(cwd) / p) if not p.startswith("/") else p

    for word, rest in _instructions(path.read_text()):
        if word == "FROM":
            image.base = rest.split()[0]
        elif word == "WORKDIR":
            cwd = absolute(rest)
            image.dirs.add(cwd)
        elif word == "ENV":
            for k, v in re.findall(r"(\w+)=(\S+)", rest):
                image.env[k] = v.replace("$PATH", image.env.get("PATH", "/usr/local/bin:/usr/bin:/bin"))
        elif word == "USER":
            image.user = rest.split(":")[0]
        elif word == "COPY" and rest.split() == [".", "."]:
            image.checkout = cwd
        elif word == "RUN":
            image.runs.append(rest)
            for argv in _run_steps(rest):
                _apply(image, argv, cwd, absolute)
    return image


def _apply(image: ImageLayout, argv: list[str], cwd: str, absolute) -> None:  # noqa: ANN001
    cmd = PurePosixPath(argv[0]).name
    if argv[1:3] == ["-m", "venv"]:
        image.venvs[image.resolve(absolute(argv[3]))] = False
    elif cmd == "ln" and "-s" in argv:
        image.links[absolute(argv[-1])] = argv[-2]
    elif cmd == "mkdir":
        image.dirs.update(absolute(p) for p in argv[1:] if not p.startswith("-"))
    elif cmd == "useradd":
        image.users.add(argv[-1])
    elif cmd == "chown":
        owner = argv[-2].split(":")[0]
        image.owned[absolute(argv[-1])] = owner
    elif cmd == "bash" and argv[1:2] == ["scripts/bootstrap.sh"]:
        # bootstrap.sh: the package (editable) in .venv, and the job and Pollux environments
        image.venvs[image.resolve(absolute(".venv"))] = True
        image.venvs[absolute(".venv-jobs")] = True
        image.venvs[absolute(".venv-pollux")] = False
    elif "pip" in argv and "install" in argv and ("." in argv or "-e" in argv):
        venv = image.venv_of(argv[0])
        assert venv is not None, f"pip of no virtual environment: {argv}"
        image.venvs[venv[0]] = True


AGENT = parse_dockerfile(DEPLOY / "docker" / "Dockerfile.agent")
FRAMEWORK = parse_dockerfile(DEPLOY / "docker" / "Dockerfile.framework")


# -- the compose file --------------------------------------------------------------------------------
def _interpolate(value: str, shell_env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} against ``shell_env``."""
    def sub(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        if shell_env.get(name):
            return shell_env[name]
        if op == ":?":
            raise KeyError(f"{name}: {arg}")
        return arg if op == ":-" else ""
    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", sub, value)


COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
REPLICAS = [n for n, s in SERVICES.items() if s.get("image", "").startswith("dl2-mesos/framework")]


def replica_env(name: str, shell_env: dict[str, str] | None = None) -> dict[str, str]:
    env = SERVICES[name].get("environment", {})
    return {k: _interpolate(str(v), COMPOSE_SHELL_ENV if shell_env is None else shell_env) for k, v in env.items()}


def replica_config(name: str) -> Config:
    """The replica's settings as ``dl2 framework --config /etc/dl2/dl2.toml`` in its container loads them."""
    (mount,) = [v for v in SERVICES[name]["volumes"] if v.split(":")[1] == "/etc/dl2/dl2.toml"]
    path = (DEPLOY / mount.split(":")[0]).resolve()
    argv = SERVICES[name]["command"]
    api = argv[argv.index("--api") + 1] if "--api" in argv else None
    return load_config(path, env=replica_env(name), overrides={"api": api})


def reachable_from(service: str, host: str) -> bool:
    """``host`` resolves inside ``service``'s container under its network mode."""
    if SERVICES[service].get("network_mode") == "host":
        return host in LOOPBACK  # the host's resolver: only loopback is certain to be this host
    return host in SERVICES  # a service name on the compose network (loopback is the container itself)


def _zk_hosts(url: str) -> list[tuple[str, int]]:
    assert url.startswith("zk://"), url
    return [(h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1])) for h in url[5:].split("/", 1)[0].split(",")]


def zookeeper_port() -> int:
    return int(SERVICES["zookeeper"].get("environment", {}).get("ZOO_CLIENT_PORT", 2181))


def test_compose_requires_the_secrets():
    with pytest.raises(KeyError, match="DL2_API_TOKEN"):
        replica_env(REPLICAS[0], shell_env={"DL2_ZK_DIGEST": "a:b"})


@pytest.mark.parametrize("replica", REPLICAS)
def test_replica_config_loads_and_names_hosts_that_resolve(replica):
    cfg = replica_config(replica)
    check_api_exposure(cfg)  # the start-up checks of the framework: a token, a ZooKeeper digest
    check_zk_exposure(cfg)
    assert cfg.api_token == COMPOSE_SHELL_ENV["DL2_API_TOKEN"] and cfg.zk_digest == COMPOSE_SHELL_ENV["DL2_ZK_DIGEST"]
    assert cfg.task_user == "nobody"
    # ZooKeeper (state, leader election) and the Mesos master's ZooKeeper address
    for host, port in _zk_hosts(cfg.zk) + _zk_hosts(cfg.master):
        assert reachable_from(replica, host), f"{replica}: {host} does not resolve under its network mode"
        assert port == zookeeper_port()
    assert cfg.master == SERVICES["mesos-master"]["environment"]["MESOS_ZK"]
    assert SERVICES["mesos-agent-gpu"]["environment"]["MESOS_MASTER"] == cfg.master
    # checkpoints: the NameNode's RPC address (the executors on the agent write there)
    ck = urlsplit(cfg.checkpoint_root)
    fs = urlsplit(SERVICES["namenode"]["environment"]["CORE_CONF_fs_defaultFS"])
    assert ck.scheme == "hdfs" and (ck.hostname, ck.port) == (fs.hostname, fs.port)
    assert reachable_from(replica, ck.hostname) and reachable_from("mesos-agent-gpu", ck.hostname)


def test_the_check_catches_the_example_configs_multi_host_names():
    # without the compose file's overrides the example config names zk1-zk3 and namenode, which
    # nothing resolves under host networking: the check above would fail on them
    cfg = load_config(EXAMPLE, env={})
    assert not all(reachable_from(REPLICAS[0], h) for h, _ in _zk_hosts(cfg.zk))
    assert not reachable_from(REPLICAS[0], urlsplit(cfg.checkpoint_root).hostname)


def test_host_network_ports_do_not_clash():
    ports: dict[int, str] = {}

    def take(port: int, who: str) -> None:
        assert port not in ports, f"port {port}: {who} and {ports[port]} (both on the host network)"
        ports[port] = who

    for name, svc in SERVICES.items():
        assert svc.get("network_mode") == "host", name  # the port plan below assumes it
    zk_env = SERVICES["zookeeper"].get("environment", {})
    take(zookeeper_port(), "zookeeper")
    if str(zk_env.get("ZOO_ADMINSERVER_ENABLED", "true")).lower() != "false":
        take(int(zk_env.get("ZOO_CFG_EXTRA", "admin.serverPort=8080").rsplit("=", 1)[1]), "zookeeper admin server")
    take(int(SERVICES["mesos-master"]["environment"]["MESOS_PORT"]), "mesos-master")
    take(int(SERVICES["mesos-agent-gpu"]["environment"]["MESOS_PORT"]), "mesos-agent-gpu")
    take(urlsplit(SERVICES["namenode"]["environment"]["CORE_CONF_fs_defaultFS"]).port, "namenode rpc")
    take(50070, "namenode web (Hadoop 2)")
    for p in (50010, 50020, 50075):
        take(p, "datanode (Hadoop 2)")
    for replica in REPLICAS:
        take(replica_config(replica).api_port, replica)
    lo, hi = re.fullmatch(r"ports:\[(\d+)-(\d+)\]", SERVICES["mesos-agent-gpu"]["environment"]["MESOS_RESOURCES"]
                          ).groups()
    assert not [p for p in ports if int(lo) <= p <= int(hi)], "a service port lies in the agent's task port range"


def test_dockerfiles_fail_when_an_install_fails():
    for image in (AGENT, FRAMEWORK):
        assert image.runs
        for run in image.runs:
            assert "|| true" not in run
            if "apt-get install" in run:
                assert "-y" in run.split() and "apt-get update &&" in run
    with pytest.raises(AssertionError, match="chain steps with &&"):
        _run_steps("apt-get update && apt-get install -y python3.11 && rm -rf /var/lib/apt/lists/* || true")
    with pytest.raises(AssertionError, match="chain steps with &&"):
        _run_steps("apt-get update; apt-get install -y python3.11")


def test_agent_image_has_the_executor_and_job_environment_deploy_names():
    for replica in REPLICAS:
        argv = shlex.split(replica_config(replica).executor_command)
        assert argv[1:] == ["-m", "dl2_mesos.executor"]
        assert AGENT.has_package(argv[0]), f"{argv[0]}: no dl2 package there in the agent image"
    agent_env = SERVICES["mesos-agent-gpu"]["environment"]
    exec_env = json.loads(agent_env["MESOS_EXECUTOR_ENVIRONMENT_VARIABLES"])
    example_task_env = re.search(r'^#?\s*DL2_JOB_PYTHON\s*=\s*"([^"]+)"', EXAMPLE.read_text(), re.M).group(1)
    for job_python in (exec_env["DL2_JOB_PYTHON"], AGENT.env["DL2_JOB_PYTHON"], example_task_env):
        assert AGENT.has_package(job_python), job_python  # dl2_mesos.job_runtime for the training programs
    for d in exec_env["PATH"].split(":"):
        assert AGENT.exists(d), f"PATH entry {d} does not exist in the agent image"
    # the Marathon app's replicas run on Mesos agents
    app = json.loads((DEPLOY / "marathon" / "dl2-framework.json").read_text())
    assert AGENT.exists(shlex.split(app["cmd"])[0])
    # the build context leaves out local virtual environments (else `ln -s /opt/dl2/venv .venv` fails)
    ignored = (ROOT / ".dockerignore").read_text().split()
    for name in (".venv", ".venv-jobs", ".venv-pollux"):
        assert name in ignored


def test_the_layout_check_can_fail():
    assert not AGENT.has_package("/opt/dl2/.venv/bin/python")  # the path the example config named before
    assert not AGENT.exists("/opt/dl2/models/dl2.pt")
    assert AGENT.exists("/opt/dl2/src/.venv/bin/python")  # through the symlink


def test_framework_image_runs_the_replica_command_and_can_write_its_state():
    assert FRAMEWORK.user != "root" and FRAMEWORK.user in FRAMEWORK.users
    for replica in REPLICAS:
        argv = SERVICES[replica]["command"]
        exe = FRAMEWORK.which(argv[0])
        assert exe is not None and FRAMEWORK.exists(exe), f"{argv[0]} is not on the framework image's PATH"
        state = replica_config(replica).state_dir
        assert FRAMEWORK.exists(state), f"state_dir {state} does not exist in the framework image"
        assert any(state == p or state.startswith(p + "/") for p, owner in FRAMEWORK.owned.items()
                   if owner == FRAMEWORK.user), f"state_dir {state} is not writable by {FRAMEWORK.user}"
    unit = _unit()
    assert FRAMEWORK.exists(shlex.split(unit["ExecStart"])[0])  # a host installed as the image is


def _unit() -> configparser.SectionProxy:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "systemd" / "dl2-framework@.service")
    return unit["Service"]


def test_systemd_unit_has_a_writable_tmp_and_state_dir_and_open_files():
    svc = _unit()
    assert svc["PrivateTmp"].lower() in ("true", "yes")
    state_root = "/var/lib/" + svc["StateDirectory"]
    cfg = load_config(EXAMPLE, env={})
    assert cfg.state_dir == state_root or cfg.state_dir.startswith(state_root + "/")
    if svc.get("ProtectSystem") == "strict":  # only StateDirectory=, ReadWritePaths= and /tmp stay writable
        writable = [state_root] + svc.get("ReadWritePaths", "").split()
        assert any(cfg.state_dir.startswith(w) for w in writable)
    assert int(svc["LimitNOFILE"]) >= 4 * cfg.api_max_connections  # room beyond the API connection cap


def _named_variables() -> dict[str, str]:
    names: dict[str, str] = {}
    for name, svc in SERVICES.items():
        for k in svc.get("environment", {}):
            names.setdefault(k, f"compose {name}")
    for k in json.loads(SERVICES["mesos-agent-gpu"]["environment"]["MESOS_EXECUTOR_ENVIRONMENT_VARIABLES"]):
        names.setdefault(k, "agent executor environment")
    app = json.loads((DEPLOY / "marathon" / "dl2-framework.json").read_text())
    for k in app["env"]:
        names.setdefault(k, "marathon")
    for f in (DEPLOY / "systemd" / "dl2-framework@.service", EXAMPLE, DEPLOY / "agent-setup.md",
              DEPLOY / "docker" / "Dockerfile.agent", DEPLOY / "docker" / "Dockerfile.framework"):
        for k in re.findall(r"\b(DL2_[A-Z0-9_]+)", f.read_text()):
            names.setdefault(k, f.name)
    return {k: v for k, v in names.items() if k.startswith("DL2_")}


def test_every_dl2_variable_deploy_names_is_read():
    fields = {f.upper() for f in Config.__dataclass_fields__}
    executor_src = "\n".join(p.read_text() for p in (ROOT / "executor").glob("*.py"))
    named = _named_variables()
    assert {"DL2_API_TOKEN", "DL2_ZK_DIGEST", "DL2_MASTER", "DL2_JOB_PYTHON"} <= set(named)
    for var, where in named.items():
        read_by_framework = var[4:] in fields or var in _ENV_ALIASES or var == "DL2_CONFIG"
        read_by_executor = f'"{var}"' in executor_src
        assert read_by_framework or read_by_executor, f"{var} (in {where}) is read by nothing"
    # and the framework really takes them from the environment
    cfg = load_config(EXAMPLE, env=replica_env(REPLICAS[0]))
    assert cfg.master == replica_env(REPLICAS[0])["DL2_MASTER"]


def test_a_bad_deploy_environment_is_refused_clearly():
    env = {**replica_env(REPLICAS[0]), "DL2_ZK_TIMEOUT": "soon"}
    with pytest.raises(ConfigError, match="zk_timeout.*DL2_ZK_TIMEOUT"):
        load_config(EXAMPLE, env=env)


def test_secrets_and_task_user_variables_agree_across_deploy_files():
    """Issue #14: the shipped deployments once set the CLI's DL2_TOKEN while the framework read
    DL2_API_TOKEN, and served the job API without a token. Every deployment names the variables
    the framework reads, and the loader takes them."""
    app = json.loads((DEPLOY / "marathon" / "dl2-framework.json").read_text())
    unit_text = (DEPLOY / "systemd" / "dl2-framework@.service").read_text()
    for replica in REPLICAS:
        env = SERVICES[replica]["environment"]
        assert {"DL2_API_TOKEN", "DL2_ZK_DIGEST"} <= set(env) and "DL2_TOKEN" not in env
        assert env["DL2_TASK_USER"].endswith("nobody}") or env["DL2_TASK_USER"] == "nobody"
    assert {"DL2_API_TOKEN", "DL2_ZK_DIGEST"} <= set(app["env"]) and "DL2_TOKEN" not in app["env"]
    assert app["env"]["DL2_TASK_USER"] == "nobody"
    assert "DL2_API_TOKEN=" in unit_text and "DL2_ZK_DIGEST=" in unit_text and "DL2_TOKEN" not in unit_text
    cfg = load_config(EXAMPLE, env={"DL2_API_TOKEN": "t0k", "DL2_ZK_DIGEST": "u:p", "DL2_TASK_USER": "nobody"})
    assert (cfg.api_token, cfg.zk_digest, cfg.task_user) == ("t0k", "u:p", "nobody")
    assert load_config(EXAMPLE, env={}).task_user not in ("", "root")  # the file alone: never root
    # the agents switch to that user (Mesos --switch_user)
    assert SERVICES["mesos-agent-gpu"]["environment"]["MESOS_SWITCH_USER"] == "true"
