#!/usr/bin/env bash
# Install what the integration tests, benchmarks and the full demo need besides .venv:
#   - Debian: ZooKeeper 3.8, OpenJDK (normally present), Jersey 1 jars for WebHDFS, Chromium.
#   - Hadoop 2.7.3 jars (HDFS NameNode/DataNode), taken from PyPI's pyspark 2.4.8 source archive,
#     unpacked to .cache/hadoop-jars.
# Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
log() { echo "[install_services] $*" >&2; }

APT_PKGS="zookeeper default-jre-headless libjersey1-server-java libjersey1-servlet-java libjersey1-core-java libjersey1-json-java chromium chromium-driver"
missing=""
for p in $APT_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  log "apt-get install$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

JARS="$ROOT/.cache/hadoop-jars"
if [ ! -f "$JARS/hadoop-hdfs-2.7.3.jar" ]; then
  log "fetching Hadoop 2.7.3 jars from pyspark 2.4.8 sdist"
  TMP="$(mktemp -d)"
  "$ROOT/.venv/bin/python" -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d "$TMP" pyspark==2.4.8
  mkdir -p "$JARS"
  tar -xzf "$TMP"/pyspark-2.4.8.tar.gz -C "$TMP" pyspark-2.4.8/deps/jars
  mv "$TMP"/pyspark-2.4.8/deps/jars/* "$JARS"/
  rm -rf "$TMP"
fi

log "done"
