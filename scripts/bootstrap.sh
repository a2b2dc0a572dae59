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
"$VPY" -m pip install -q --upgrade pip
"$VPY" -m pip install -q -c constraints.txt "setuptools>=77" wheel build

# pymesos needs http-parser, whose only release does not build on Python >= 3.11: use its
# pure-Python build from the wheelhouse (see scripts/wheelhouse.sh, README "Installing").
bash "$ROOT/scripts/wheelhouse.sh" --http-parser-only dist

EXTRAS=""
[ "$WITH_TEST" = 1 ] && EXTRAS="[test,browser,plot]"
log "installing dl2-mesos$EXTRAS (editable; versions from constraints.txt)"
"$VPY" -m pip install -q -c constraints.txt --find-links dist --only-binary http-parser -e ".$EXTRAS"

bash "$ROOT/scripts/install_job_env.sh"
bash "$ROOT/scripts/install_pollux_env.sh"
if [ "$WITH_TEST" = 1 ]; then
  bash "$ROOT/scripts/install_services.sh"
fi
log "done"
