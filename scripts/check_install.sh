#!/usr/bin/env bash
# What a user gets from `pip install`: build the wheelhouse (sdist, wheel built from the sdist,
# pure-Python http-parser), install the wheel into a new, empty virtual environment and run the
# installed commands from outside the checkout. Part of scripts/test.sh (so of CI); prints what it
# runs and what those commands print.
#
#   bash scripts/check_install.sh
#
# Versions come from constraints.txt (the lock, so torch is the CPU 2.13.0 build, not a newer
# multi-GB CUDA one) and pip's cache, so a second run downloads nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
WHEELHOUSE="$ROOT/dist"
CHECK="$ROOT/build/install-check"
say() { echo "[check_install] $*"; }
run() { echo "\$ $*"; "$@"; }

SECONDS=0
bash scripts/wheelhouse.sh "$WHEELHOUSE" >/dev/null
WHEEL="$(ls "$WHEELHOUSE"/dl2_mesos-*.whl)"
SDIST="$(ls "$WHEELHOUSE"/dl2_mesos-*.tar.gz)"
say "built $(basename "$SDIST") ($(du -k "$SDIST" | cut -f1) KiB) and, from it, $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB)"

# the wheel ships the package, its model and data, and none of the test rigs
"$ROOT/.venv/bin/python" - "$WHEEL" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = sorted({n.split("/")[0] for n in names})
assert all(t == "dl2_mesos" or t.startswith("dl2_mesos-") for t in tops), f"top-level entries: {tops}"
assert "dl2_mesos/policy/models/dl2.pt" in names, "the shipped model is missing"
rigs = [n for n in names if "/testing/" in n or "dl2_rigs" in n]
assert not rigs, f"test rigs in the wheel: {rigs}"
print(f"[check_install] wheel: {len(names)} files, top level {tops}, model included, no test rigs")
EOF

rm -rf "$CHECK"
run "$PY" -m venv "$CHECK/venv"
VPY="$CHECK/venv/bin/python"
run "$VPY" -m pip install -q --upgrade pip
# --find-links: the wheelhouse (for http-parser); --only-binary: never try its broken sdist
run "$VPY" -m pip install -q -c constraints.txt --find-links "$WHEELHOUSE" --only-binary http-parser "$WHEEL"
say "installed into a clean venv ($("$VPY" --version)): $("$VPY" -m pip list --format=freeze 2>/dev/null | wc -l) packages, $(du -sm "$CHECK/venv" | cut -f1) MiB"
"$VPY" -m pip check

# from outside the checkout, so nothing can come from the source tree
mkdir -p "$CHECK/run" && cd "$CHECK/run"
run "$CHECK/venv/bin/dl2" --version
run "$CHECK/venv/bin/dl2" simulate --preset tiny
run "$VPY" -m dl2_mesos.executor --help
# plotting is the `plot` extra, not installed here: refused up front, saying what to install
if out="$("$CHECK/venv/bin/dl2" simulate --preset tiny --plot plot.png 2>&1)"; then
  echo "[check_install] --plot without matplotlib did not fail" >&2; exit 1
fi
grep -q "dl2-mesos\[plot\]" <<<"$out" || { echo "$out" >&2; exit 1; }
say "without the plot extra, --plot says: $(grep -o "needs matplotlib.*" <<<"$out")"
"$VPY" -c "import dl2_mesos, http_parser.http as h; print('[check_install] imported from', dl2_mesos.__file__, '; HTTP parser:', h.HttpParser.__module__)"
# the benchmarks and their rigs are a checkout's, not the wheel's: `dl2 bench` says so
if out="$("$CHECK/venv/bin/dl2" bench faults 2>&1)"; then echo "[check_install] dl2 bench ran from a wheel" >&2; exit 1; fi
grep -q "source checkout" <<<"$out" || { echo "$out" >&2; exit 1; }
say "dl2 bench from the wheel: $(grep -o "Error: .*" <<<"$out")"
if "$VPY" -c "import dl2_rigs" 2>/dev/null || "$VPY" -c "import dl2_mesos.testing" 2>/dev/null; then
  echo "[check_install] test rigs are importable from the installed wheel" >&2; exit 1
fi
say "ok in ${SECONDS}s"
