#!/usr/bin/env bash
# Spark 4 needs Java 17 or newer, and the JVM companion (jvm/) is compiled with javac: make
# sure a JDK 17+ is on PATH. Install OpenJDK 17 with apt when missing and we are root.
set -euo pipefail
major() {  # the major version a `java -version` / `javac -version` line reports
  "$1" -version 2>&1 | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^"?[0-9]+(\.[0-9]+)*"?$/) {gsub(/"/, "", $i); split($i, v, "."); print (v[1] == "1") ? v[2] : v[1]; exit}}'
}
ok() { command -v "$1" >/dev/null 2>&1 && [ "$(major "$1")" -ge 17 ] 2>/dev/null; }
if ok java && ok javac && command -v jar >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "a JDK 17+ (java, javac, jar) was not found: installing openjdk-17-jdk-headless with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
  exit 0
fi
echo "error: Spark 4 needs Java 17 or newer and the JVM companion a JDK (javac) 17 or newer on" >&2
echo "PATH (found: $(javac -version 2>&1 | head -1 || echo no javac))." >&2
echo "Install it (Debian/Ubuntu: sudo apt-get install openjdk-17-jdk-headless) and run make again." >&2
exit 1
