"""A Spark Connect client that never imports lance_spark: the ``connect`` kind of
:mod:`_sql_clients` runs it as a long-lived subprocess (``python _sql_connect_worker.py URL``).

It imports only pyspark, connects to the Spark Connect server at URL and answers one JSON line
on stdout for each JSON line ``{"sql": "..."}`` read from stdin:
``{"rows": [[...], ...], "modules": [...]}`` or ``{"error": "...", "modules": [...]}``.
``modules`` lists the modules of this project in ``sys.modules`` after the statement: the
harness asserts it stays empty (Spark's discovery imports ``pyspark_lance`` only in the
server's Python workers, never in the client). The first line it writes is ``{"ready": ...}``.
Values are JSON values (int, float, str, bool, null, lists); others are written as ``str``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

# Remote mode, as in every Connect-only client (see tests/conftest.py).
os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"

_OURS = ("lance_spark", "pyspark_lance", "lance_spark_daemon")


def _modules() -> list[str]:
    return sorted(m for m in sys.modules if m.split(".")[0] in _OURS)


def _value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _value(v) for k, v in value.items()}
    if hasattr(value, "asDict"):  # a nested Row (struct)
        return {k: _value(v) for k, v in value.asDict().items()}
    return str(value)


def main(url: str) -> None:
    # The protocol owns the real stdout; anything pyspark prints goes to stderr (the log).
    out = sys.stdout
    sys.stdout = sys.stderr

    def answer(message: dict[str, Any]) -> None:
        out.write(json.dumps({**message, "modules": _modules()}) + "\n")
        out.flush()

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    answer({"ready": spark.version})
    for line in sys.stdin:
        if not line.strip():
            continue
        statement = json.loads(line)["sql"]
        try:
            rows = spark.sql(statement).collect()
        except Exception as exc:  # noqa: BLE001  (every failure goes back to the harness)
            traceback.print_exc()
            answer({"error": f"{type(exc).__name__}: {exc}"})
            continue
        answer({"rows": [[_value(v) for v in row] for row in rows]})
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
