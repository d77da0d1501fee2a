#!/usr/bin/env bash
# Spark 4 runs on Java 17 or newer, and the JVM companion (jvm/) is compiled with javac: check
# that a JDK 17+ (java, javac, jar) is on PATH.
#   scripts/ensure-java.sh            check only; say what is missing and exit 1 (make jar, make test)
#   scripts/ensure-java.sh --install  when missing, install OpenJDK 17 with apt-get (make java, as
#                                     root), then check again
set -euo pipefail

major() {  # the major version `$1 -version` reports (17 for "17.0.15", 8 for "1.8.0_392")
  "$1" -version 2>&1 | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^"?[0-9]+(\.[0-9]+)*"?$/) {gsub(/"/, "", $i); split($i, v, "."); print (v[1] == "1") ? v[2] : v[1]; exit}}'
}

problem() {  # prints what is missing; nothing when a JDK 17+ is on PATH
  local tool version
  for tool in java javac jar; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "no $tool on PATH"
      return
    fi
  done
  for tool in java javac; do
    version=$(major "$tool" || true)
    if ! [ "${version:-0}" -ge 17 ] 2>/dev/null; then
      echo "$(command -v "$tool") is version ${version:-unknown}, 17 or newer is needed"
      return
    fi
  done
}

MANUAL="sudo apt-get install openjdk-17-jdk-headless (Debian/Ubuntu), or brew install openjdk@17 (macOS) with its bin/ first on PATH"

missing=$(problem)
if [ -z "$missing" ]; then
  if [ "${1:-}" = "--install" ]; then
    echo "a JDK 17+ is on PATH: $(javac -version 2>&1)"
  fi
  exit 0
fi
if [ "${1:-}" != "--install" ]; then
  echo "error: $missing. Spark 4 needs Java 17+, and building the JVM companion a JDK (javac, jar)." >&2
  echo "Install a JDK 17 or newer: make java (apt-get, as root), or" >&2
  echo "$MANUAL; then run make again." >&2
  exit 1
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "error: $missing, and make java installs a JDK only with apt-get as root." >&2
  echo "Install a JDK 17 or newer yourself:" >&2
  echo "$MANUAL; then run make again." >&2
  exit 1
fi
echo "$missing: installing openjdk-17-jdk-headless with apt-get"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless
missing=$(problem)
if [ -n "$missing" ]; then
  echo "error: openjdk-17-jdk-headless is installed but $missing (another Java first on PATH?" >&2
  echo "see update-alternatives --config java, and javac)." >&2
  exit 1
fi
echo "JDK ready: $(javac -version 2>&1)"
