"""Run a notebook headless (``make demo``): execute it, save the executed copy and an HTML page.

Usage: ``python notebooks/run_notebook.py [NOTEBOOK] [--data-dir DIR] [--timeout SECONDS]``.

- The kernel is this interpreter (ipykernel's own ``python3`` kernel for ``sys.executable``),
  whatever kernel specs are installed: no ``ipykernel install`` needed in a fresh venv.
- The notebook reads its data directory from ``LANCE_DEMO_DIR`` (default
  ``<repo>/data/time_machine``); the kernel runs in that directory, and the executed copy
  ``<name>.ipynb`` and ``<name>.html`` (pictures embedded) are written there.
- What the kernel process itself prints outside of cells (the JVM's and Spark's Python
  daemon's messages when the kernel shuts down) goes to ``<name>.kernel.log`` there, not to
  the console.
- Any cell error (or a cell running longer than ``--timeout``, or a dead kernel) stops the
  run: the copies are still written (the failing cell shows its traceback) and the exit
  status is 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
import zmq
from ipykernel.kernelspec import RESOURCES, get_kernel_dict
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from nbconvert import HTMLExporter

REPO = Path(__file__).resolve().parent.parent
DEFAULT_NOTEBOOK = REPO / "notebooks" / "time_machine.ipynb"
DEFAULT_DATA_DIR = REPO / "data" / "time_machine"


class ThisPythonKernelSpecs(KernelSpecManager):
    """Every kernel name resolves to ipykernel running on this interpreter."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        # -Xfrozen_modules=off: the kernel's debugger warns about frozen modules otherwise.
        spec = get_kernel_dict(python_arguments=["-Xfrozen_modules=off"])
        return KernelSpec(resource_dir=RESOURCES, **spec)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("notebook", nargs="?", type=Path, default=DEFAULT_NOTEBOOK)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"LANCE_DEMO_DIR for the notebook (default: $LANCE_DEMO_DIR or {DEFAULT_DATA_DIR})",
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    return parser.parse_args(argv)


def run(notebook: Path, data_dir: Path, timeout: int) -> tuple[Path, Path, Path, bool]:
    """Execute ``notebook`` with its kernel in ``data_dir``; returns (ipynb, html, log, ok)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    os.environ["LANCE_DEMO_DIR"] = str(data_dir)  # the kernel inherits this environment
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_CONF_DIR", str(REPO / "conf"))

    nb = nbformat.read(notebook, as_version=4)
    km = AsyncKernelManager(
        kernel_name="python3",
        kernel_spec_manager=ThisPythonKernelSpecs(),
        # CurveZMQ keys for the kernel's local sockets (else ipykernel warns about plain TCP)
        transport_encryption="auto" if zmq.has("curve") else "disabled",
    )
    client = NotebookClient(
        nb,
        km=km,
        timeout=timeout,
        resources={"metadata": {"path": str(data_dir)}},  # the kernel's working directory
    )
    ok = True
    kernel_log = data_dir / f"{notebook.stem}.kernel.log"
    with kernel_log.open("w", encoding="utf-8") as log:
        try:
            # cleanup_kc: shut the kernel down at the end (and with it Spark's JVM)
            client.execute(cleanup_kc=True, stdout=log, stderr=log)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as error:
            ok = False
            print(error, file=sys.stderr)

    executed = data_dir / notebook.name
    nbformat.write(nb, executed)
    html = executed.with_suffix(".html")
    # Outputs' pictures are embedded in the page (data:image/png;base64,...).
    body, _ = HTMLExporter().from_notebook_node(nb, resources={"metadata": {"name": notebook.stem}})
    html.write_text(body, encoding="utf-8")
    return executed, html, kernel_log, ok


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env_dir = os.environ.get("LANCE_DEMO_DIR")
    data_dir = (args.data_dir or (Path(env_dir) if env_dir else DEFAULT_DATA_DIR)).resolve()
    started = time.perf_counter()
    executed, html, kernel_log, ok = run(args.notebook.resolve(), data_dir, args.timeout)
    seconds = time.perf_counter() - started
    print(f"{'Ran' if ok else 'FAILED:'} {args.notebook.name} in {seconds:.0f} s")
    if not ok:
        print(f"kernel log: {kernel_log}")
    print(f"executed notebook: {executed}")
    print(f"HTML: {html}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
