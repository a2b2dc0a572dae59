#!/usr/bin/env bash
# Build what `pip install` needs from this checkout into a wheelhouse folder (default dist/):
#
#   dl2_mesos-<version>-py3-none-any.whl     the package
#   dl2_mesos-<version>.tar.gz               its sdist
#   http_parser-0.9.0-py3-none-any.whl      pymesos's HTTP parser, pure-Python build (see below)
#
#   bash scripts/wheelhouse.sh [--http-parser-only] [DIR]
#   pip install DIR/*.whl                   # or: pip install --find-links DIR dl2_mesos-...(.whl|.tar.gz)
#
# Why the third wheel: pymesos 0.3.15 requires http-parser, and http-parser 0.9.0 (the last
# release) is an sdist only. Its setup.py always compiles a Cython-generated C extension whose C
# no longer compiles on Python >= 3.11, and on 3.12 the setup.py itself fails (it imports the
# removed `imp` module). The package also ships a pure-Python parser (http_parser.pyparser), which
# http_parser.http falls back to when the extension is missing and which pymesos supports
# explicitly (process.py checks `errno` for it). Upstream's own setup.py installs exactly that
# on PyPy. We build the same files from the unchanged upstream sdist, without the extension,
# into a py3-none-any wheel: one wheel for every Python version, nothing to compile.
#
# Needs: the .venv made by scripts/bootstrap.sh (pip, setuptools >= 77, build). Network: PyPI
# only for the http-parser sdist (pip's cache keeps it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ONLY_DEPS=0
if [ "${1:-}" = "--http-parser-only" ]; then ONLY_DEPS=1; shift; fi
OUT="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
VPY="${VPY:-$ROOT/.venv/bin/python}"
log() { echo "[wheelhouse] $*" >&2; }

HP_VERSION=0.9.0
if ! ls "$OUT"/http_parser-$HP_VERSION-py3-none-any.whl >/dev/null 2>&1; then
  log "building http-parser $HP_VERSION, pure-Python (no C extension)"
  TMP="$(mktemp -d)"
  trap 'rm -rf "$TMP"' EXIT
  "$VPY" -m pip download -q --no-deps --no-binary :all: -d "$TMP" "http-parser==$HP_VERSION"
  tar -xzf "$TMP/http-parser-$HP_VERSION.tar.gz" -C "$TMP"
  SRC="$TMP/http-parser-$HP_VERSION"
  rm -f "$SRC/setup.py"
  # Only the Python modules of the package, with upstream's licence files; same name and version.
  cat > "$SRC/pyproject.toml" <<EOF
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "http-parser"
version = "$HP_VERSION"
description = "http request/response parser (pure-Python build: the C extension is left out)"
readme = "README.rst"
license = "MIT"
license-files = ["LICENSE", "NOTICE"]

[tool.setuptools]
packages = ["http_parser"]
include-package-data = false
EOF
  "$VPY" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT" "$SRC"
fi

[ "$ONLY_DEPS" = 1 ] && exit 0

log "building the dl2-mesos sdist and wheel (from the sdist)"
rm -f "$OUT"/dl2_mesos-*
"$VPY" -m build -q --no-isolation --outdir "$OUT" "$ROOT" >/dev/null 2>&1 \
  || "$VPY" -m build --no-isolation --outdir "$OUT" "$ROOT"  # again, to show why
ls -1 "$OUT"
