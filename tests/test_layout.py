"""The packaging rules of the README "Layout" section, enforced."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERIC = {"framework", "executor", "policy"}
SOURCE_DIRS = ["dl2_mesos", "framework", "executor", "policy", "tests", "bench"]  # tests/ includes the rigs


def _python_files():
    for d in SOURCE_DIRS:
        yield from (ROOT / d).rglob("*.py")


def test_no_generic_top_level_imports():
    offenders = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in GENERIC:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: import {n}")
    assert not offenders, "use dl2_mesos.<component>, never the bare folder name:\n" + "\n".join(offenders)


def test_components_import_under_the_namespace():
    for name in ("dl2_mesos.framework", "dl2_mesos.executor", "dl2_mesos.policy"):
        mod = importlib.import_module(name)
        folder = name.split(".")[1]
        assert Path(mod.__file__).resolve().parent == ROOT / folder


def test_every_package_folder_is_declared_in_pyproject():
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(cfg["packages"])
    mapping = {v: k for k, v in cfg["package-dir"].items()}
    missing = []
    for init in list((ROOT / "dl2_mesos").rglob("__init__.py")) + [
        p for d in ("framework", "executor", "policy") for p in (ROOT / d).rglob("__init__.py")
    ]:
        rel = init.parent.relative_to(ROOT).as_posix()
        if "__pycache__" in rel:
            continue
        name = mapping.get(rel) or rel.replace("/", ".")
        if name.split(".")[0] != "dl2_mesos":
            top = rel.split("/")[0]
            name = mapping.get(top, "") + rel[len(top):].replace("/", ".")
        if name not in declared:
            missing.append(f"{rel} (as {name})")
    assert not missing, f"package folders missing from pyproject [tool.setuptools] packages: {missing}"


def test_executor_module_runs_from_any_directory(tmp_path):
    # `python -m dl2_mesos.executor --help`-free check: the module spec resolves outside the repo
    out = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('dl2_mesos.executor').origin)"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip().endswith("executor/__init__.py")


def test_dl2_version_prints_the_package_version():
    from importlib.metadata import version

    out = subprocess.run([sys.executable, "-m", "dl2_mesos.cli", "--version"], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == f"dl2 {version('dl2-mesos')}"


def test_executor_help_needs_no_mesos_agent(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dl2_mesos.executor", "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "MESOS_AGENT_ENDPOINT" in out.stdout
    # started by hand, without a Mesos agent: a clear error instead of a KeyError traceback
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MESOS_")}
    out = subprocess.run([sys.executable, "-m", "dl2_mesos.executor"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "MESOS_AGENT_ENDPOINT is not set" in out.stderr
    assert "Traceback" not in out.stderr


def test_wheel_ships_the_package_and_nothing_else(tmp_path):
    """Build the sdist and the wheel from it (as scripts/wheelhouse.sh does) and look inside.

    From the sdist, not the tree: setuptools' build/ folder in a checkout keeps modules since
    moved or deleted, and a wheel built in place would ship them."""
    import zipfile

    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=300)
    (sdist,) = tmp_path.glob("dl2_mesos-*.tar.gz")
    import tarfile

    with tarfile.open(sdist) as tar:
        in_sdist = tar.getnames()
    assert not [n for n in in_sdist if "/dl2_mesos/testing/" in n or "dl2_rigs" in n], "test rigs in the sdist"
    (wheel,) = tmp_path.glob("dl2_mesos-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert all(t == "dl2_mesos" or t.startswith("dl2_mesos-") for t in tops), tops
    for shipped in ("dl2_mesos/policy/models/dl2.pt", "dl2_mesos/framework/api.py", "dl2_mesos/executor/__main__.py",
                    "dl2_mesos/localmesos/master.py", "dl2_mesos/programs/mxnet_mlp.py"):
        assert shipped in names, shipped
    assert not [n for n in names if n.startswith(("tests/", "bench/", "deploy/"))]
    # the test rigs stay in tests/support (dl2_rigs); the launchers the demo needs are shipped
    assert not [n for n in names if "/testing/" in n or "dl2_rigs" in n or "lightexec" in n or "fault" in n], names
    assert "dl2_mesos/services/localcluster.py" in names and "dl2_mesos/services/zookeeper.py" in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(meta).decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Classifier: License ::" not in metadata  # PEP 639: the expression only
    assert "Requires-Dist: torch==" not in metadata  # a range, so a site can bring its own build


def test_shipped_modules_do_not_import_the_test_rigs():
    offenders = []
    for d in ("dl2_mesos", "framework", "executor", "policy"):
        for path in (ROOT / d).rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno}: {m}" for m in mods
                              if m.split(".")[0] == "dl2_rigs" or m.startswith("dl2_mesos.testing")]
    assert not offenders, "the installed package must not need the test rigs:\n" + "\n".join(offenders)
