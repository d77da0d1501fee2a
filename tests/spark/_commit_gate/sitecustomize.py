"""Blocks Lance commits for tests/spark/_orphan_driver.py (this folder is put on PYTHONPATH).

Python imports ``sitecustomize`` in every process it starts: the scenario's driver and the
Python workers Spark starts, where a Python data source's write commits (``replaceWhere``).
With ``LANCE_SPARK_TEST_COMMIT_GATE=<folder>`` set, once ``<folder>/armed`` exists, a Lance
commit writes ``<folder>/commit-reached.json`` and blocks (the test kills the process). Lance
is patched when something imports it, never here: Spark's daemon must not start threads
before it forks.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

_GATE = os.environ.get("LANCE_SPARK_TEST_COMMIT_GATE")
_WAIT = 600.0


def _gate(lance: ModuleType, gate: Path) -> None:
    commit = lance.LanceDataset.commit

    def gated(*args: Any, **kwargs: Any) -> Any:
        if (gate / "armed").exists():
            reached = gate / "commit-reached.json"
            partial = gate / f"commit-reached.{os.getpid()}.part"
            partial.write_text(json.dumps({"pid": os.getpid()}))
            os.replace(partial, reached)
            time.sleep(_WAIT)
            raise RuntimeError("the test did not kill this process")
        return commit(*args, **kwargs)

    lance.LanceDataset.commit = staticmethod(gated)


class _PatchLance(importlib.abc.MetaPathFinder):
    def __init__(self, gate: Path) -> None:
        self._gate = gate

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "lance":
            return None
        sys.meta_path.remove(self)  # the real finders find it; this one is done
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module
        gate = self._gate

        def exec_module(module: ModuleType) -> None:
            execute(module)
            _gate(module, gate)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _GATE:
    sys.meta_path.insert(0, _PatchLance(Path(_GATE)))
