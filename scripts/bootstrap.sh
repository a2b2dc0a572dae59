#!/usr/bin/env bash
# Set up dl2-mesos on a fresh Debian machine.
#
#   bash scripts/bootstrap.sh            # .venv with the package (framework, executor, policy, local cluster)
#                                        # + .venv-jobs, the job runtime (MXNet 1.9.1 / numpy 1.23.5, torch)
#   bash scripts/bootstrap.sh --test     # + test tools, ZooKeeper, Java/HDFS jars, Chromium
#
# Idempotent: re-running skips what is already there. Everything lands inside the repo
# (.venv, .venv-jobs, .cache/) except Debian packages.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WITH_TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST=1 ;;
    *) echo "bootstrap: unknown option $arg" >&2; exit 2 ;;
  esac
done
PY="${PYTHON:-python3}"
log() { echo "[bootstrap] $*" >&2; }

# --- main virtual environment -------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
VPY="$ROOT/.venv/bin/python"
"$VPY" -m pip install -q --upgrade pip "setuptools>=64" wheel

# pymesos 0.3.15 depends on http-parser 0.9.0, whose shipped C does not compile on Python >= 3.11.
# Regenerate the C with Cython < 3 and build it without isolation (see README "pymesos").
if ! "$VPY" -c "import http_parser" 2>/dev/null; then
  log "building http-parser 0.9.0 with regenerated C"
  "$VPY" -m pip install -q "cython<3"
  TMP="$(mktemp -d)"
  "$VPY" -m pip download -q --no-deps --no-binary :all: -d "$TMP" http-parser==0.9.0
  tar -xzf "$TMP"/http-parser-0.9.0.tar.gz -C "$TMP"
  (cd "$TMP/http-parser-0.9.0" && "$ROOT/.venv/bin/cython" -X language_level=2 http_parser/parser.pyx \
     && "$VPY" -m pip install -q --no-build-isolation .)
  rm -rf "$TMP"
fi

EXTRAS=""
[ "$WITH_TEST" = 1 ] && EXTRAS="[test]"
log "installing dl2-mesos$EXTRAS (editable)"
"$VPY" -m pip install -q -e ".$EXTRAS"

bash "$ROOT/scripts/install_job_env.sh"
bash "$ROOT/scripts/install_pollux_env.sh"
if [ "$WITH_TEST" = 1 ]; then
  bash "$ROOT/scripts/install_services.sh"
fi
log "done"
