#!/usr/bin/env bash
# Compile the companion with javac against the jars of the installed pyspark wheel (no Maven,
# no Scala compiler, nothing downloaded) and package it where lance_spark finds it.
#   jvm/build.sh PYTHON OUT_JAR
# Used by `make jar` (with LANCE_SPARK_JAVAC_STRICT=1: javac's warnings are errors) and by the
# build backend for every wheel (build_backend/lance_spark_build.py: a newer JDK's new lint
# warnings do not fail a user's build).
set -euo pipefail
python=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
# -Xlint:-path: the wheel's jars name Class-Path entries that it does not ship; -classfile:
# Arrow's classes carry annotations of a checker library the wheel does not ship.
werror=""
if [ "${LANCE_SPARK_JAVAC_STRICT:-0}" = "1" ]; then
  werror=-Werror
fi
javac --release 17 -Xlint:all,-path,-serial,-classfile $werror -encoding UTF-8 \
  -cp "$jars/*" -d "$classes" $(find "$here/src" -name '*.java' | sort)
mkdir -p "$(dirname "$out")"
# jvm/resources: files the classes read, generated from the Python package and checked
# against it by the tests (options.properties: lance_spark/source/options.py's registry).
cp -R "$here/resources/." "$classes/"
jar --create --file "$out.tmp" -C "$classes" .
mv "$out.tmp" "$out"
echo "built $out"
