"""Execute notebooks top to bottom and store their outputs in the .ipynb files.

    .venv/bin/python notebooks/run.py                      # every notebook here
    .venv/bin/python notebooks/run.py notebooks/01_loss_tour.ipynb
    .venv/bin/python notebooks/run.py --output DIR NOTEBOOK  # write the run to DIR instead

Each notebook runs in a fresh ``python3`` kernel of this interpreter (ipykernel of the
``notebooks`` extra) whose working directory is a new temporary directory, as a notebook
opened anywhere would: what it needs it finds through the installed package or creates
there. It is written back with its outputs so it reads well on a code host. Every code cell
records the SHA-256 of the source it ran (``metadata.source_sha256``), so
``tests/test_notebooks.py`` can tell when a cell was edited after its outputs were made.
``tests/test_notebooks.py`` runs this script with the interpreter of a virtual environment
where the wheel is installed, with ``--output``, so the committed files stay as they are.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

NOTEBOOK_DIR = Path(__file__).resolve().parent
#: Per-cell limit in seconds; the slowest cell (05's short training run) takes minutes.
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


def execute(path: str | Path, *, cwd: str | Path, timeout: int = CELL_TIMEOUT,
            env: dict[str, str] | None = None):
    """Runs the notebook at ``path`` in memory, in a kernel whose working directory is
    ``cwd``, and returns it (an ``nbformat.NotebookNode``) with outputs and source digests.

    Raises ``nbclient.exceptions.CellExecutionError`` on the first failing cell.
    """
    import nbformat  # the `notebooks` extra; imported here so source_digest works without it
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute(env=kernel_env(env))
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata["source_sha256"] = source_digest(cell.source)
    return nb


def source_digest(source: str | list[str]) -> str:
    """The SHA-256 (hex) of a cell's source, stored with its outputs to detect edits."""
    text = source if isinstance(source, str) else "".join(source)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--output", type=Path, default=None,
                        help="directory for the executed notebooks (default: in place)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))
    import nbformat

    for path in paths:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="notebook-") as cwd:
            nb = execute(path, cwd=cwd)
        target = path if args.output is None else args.output / path.name
        nbformat.write(nb, target)
        print(f"{path.name}: {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
