#!/usr/bin/env bash
# Spark 4 needs Java 17 or newer. Install OpenJDK 17 with apt when missing and we are root.
set -euo pipefail
java_major() {
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1") ? v[2] : v[1]; exit}'
}
if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ] 2>/dev/null; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Java 17+ not found: installing openjdk-17-jre-headless with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  exit 0
fi
echo "error: Spark 4 needs Java 17 or newer on PATH (found: $(java -version 2>&1 | head -1 || echo none))." >&2
echo "Install it (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless) and run make again." >&2
exit 1
