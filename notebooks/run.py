"""Execute notebooks top to bottom and store their outputs in the .ipynb files.

    .venv/bin/python notebooks/run.py                      # every notebook here
    .venv/bin/python notebooks/run.py notebooks/01_loss_tour.ipynb

Each notebook runs in a fresh ``python3`` kernel of this interpreter (ipykernel
of the ``notebooks`` extra), with ``notebooks/`` as the working directory, and
is written back with its outputs so it reads well on a code host.
``tests/test_notebooks.py`` uses :func:`execute` without writing anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parent
#: Per-cell limit in seconds; the slowest cell (05's quickstart run) takes minutes.
CELL_TIMEOUT = 1200


def kernel_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The kernel's environment: this one, one CPU device for JAX, quiet TensorFlow."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(
        f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f
    )
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.update(extra or {})
    return env


def execute(
    path: str | Path, *, timeout: int = CELL_TIMEOUT, env: dict[str, str] | None = None
) -> nbformat.NotebookNode:
    """Runs the notebook at ``path`` in memory and returns it with outputs.

    Raises ``nbclient.exceptions.CellExecutionError`` on the first failing cell.
    """
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute(env=kernel_env(env))
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))
    for path in paths:
        start = time.perf_counter()
        nb = execute(path)
        nbformat.write(nb, path)
        print(f"{path.name}: {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
