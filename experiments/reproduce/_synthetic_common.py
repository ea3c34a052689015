"""Run bookkeeping shared by the synthetic reproduction scripts (ProjNCE and soft-target InfoNCE).

A *run* is one (setting, method, seed) triple. Its result is one JSON file,
``<out>/runs/<setting>/<method>/seed<k>.json``, written atomically when the run
finishes; the scripts skip runs whose JSON exists, so re-running a script
resumes it. Runs long enough to need it also keep a mid-run checkpoint
(``seed<k>.ckpt.npz``: the flattened parameter/optimiser pytree plus a JSON
blob of progress) that is removed once the result JSON exists.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np


def run_path(out: Path, setting: str, method: str, seed: int) -> Path:
    """Where the result JSON of one (setting, method, seed) run lives."""
    return Path(out) / "runs" / setting / method / f"seed{seed}.json"


def save_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically (temporary file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_json(path: Path) -> Any | None:
    """The JSON content of ``path``, or None if it does not exist."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def save_checkpoint(path: Path, tree: Any, progress: dict) -> None:
    """Save a pytree of arrays and a JSON-able ``progress`` dict, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    leaves = {f"leaf{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(tree))}
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, progress=np.array(json.dumps(progress)), **leaves)
    os.replace(tmp, path)


def load_checkpoint(path: Path, like: Any) -> tuple[Any, dict] | None:
    """``(tree, progress)`` saved by ``save_checkpoint``, or None if absent.

    ``like`` is a pytree with the structure of the saved one (e.g. a freshly
    initialised state); its leaves are replaced by the stored arrays.
    """
    path = Path(path)
    if not path.exists():
        return None
    with np.load(path) as data:
        treedef = jax.tree.structure(like)
        leaves = [data[f"leaf{i}"] for i in range(treedef.num_leaves)]
        progress = json.loads(str(data["progress"]))
    return jax.tree.unflatten(treedef, leaves), progress


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1; 0 for a single value)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("`values` must not be empty")
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return float(arr.mean()), std


def fmt_mean_std(values: Sequence[float], digits: int = 3) -> str:
    """``"m ± s"`` with ``digits`` decimals."""
    m, s = mean_std(values)
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


class Progress:
    """Console progress lines with elapsed wall time and a simple ETA."""

    def __init__(self, total: int, name: str):
        self.total, self.name, self.done, self.start = total, name, 0, time.time()

    def log(self, message: str, finished: bool = True) -> None:
        """Print ``message``; count one more finished unit if ``finished``."""
        self.done += int(finished)
        elapsed = time.time() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else math.nan
        print(
            f"[{self.name} {self.done}/{self.total} {elapsed:6.0f}s eta {eta:5.0f}s] {message}",
            flush=True,
        )


def load_finished(path: Path, budget: dict[str, Any], progress: Progress,
                  label: str) -> dict | None:
    """The stored record of a finished run at ``path`` (logged as skipped), or None.

    Raises:
      ValueError: the stored run's ``budget`` fields (epochs, batch, ...) differ from
        ``budget``; runs of different budgets must not be mixed in one table.
    """
    done = load_json(path)
    if done is None:
        return None
    stored = {k: done.get(k) for k in budget}
    if stored != budget:
        raise ValueError(f"{path} holds a run with {stored}, not {budget}: runs of different "
                         "budgets must not be mixed")
    progress.log(f"{label}: done, skipped")
    return done
