"""Mid-run npz checkpoints of the scripts that do not train with the library yet.

``projnce_synthetic``, ``soft_target_toy`` and the CIFAR proxies keep a mid-run checkpoint
(``seed<k>.ckpt.npz``: the flattened parameter/optimiser pytree plus a JSON blob of progress)
that is removed once the run's result JSON exists. Run bookkeeping and reporting
(``run_path``, ``save_json``, ``mean_std``, ``markdown_table``, ``Progress``, ...) are
:mod:`_common`'s, re-exported here for those scripts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
from _common import (  # noqa: F401 - re-exported for the scripts that import this module
    Progress,
    fmt_mean_std,
    load_finished,
    load_json,
    markdown_table,
    mean_std,
    run_path,
    save_json,
    stat,
)


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
