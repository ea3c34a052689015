"""What both halves of experiments/bench/accelerator.py share: the loss inputs' sizes and
rows, the table and JSON-line writers, and the error and memory readings (no JAX, no torch)."""

from __future__ import annotations

import json
import os
import resource
from typing import Any

import numpy as np

D = 128
TEMPERATURE = 0.1
NUM_CLASSES = 100


def is_oom(err: BaseException) -> bool:
    """Whether an exception is an out-of-memory error of XLA or PyTorch."""
    text = f"{type(err).__name__}: {err}".lower()
    return any(s in text for s in ("resource_exhausted", "out of memory", "outofmemory",
                                   "can't allocate memory", "memoryerror"))


def describe_error(err: BaseException) -> str:
    kind = "oom" if is_oom(err) else "error"
    return f"{kind}: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"


class Rows:
    """Appends each row as one JSON line to a file and flushes it at once (None: no file)."""

    def __init__(self, path: str | None):
        self.path = path

    def __call__(self, part: str, row: dict) -> dict:
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps({"part": part, **row}, default=_jsonable) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return row


def _jsonable(x: Any) -> Any:
    if isinstance(x, (np.generic,)):
        return x.item()
    return str(x)


def unit_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit rows float32 [n, D] and class labels int32 [n]; rows i and i + n/2 are the two
    views of example i (one label), the layout of the reference ``SupConLoss``."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, D), dtype=np.float32)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    half = rng.integers(0, NUM_CLASSES, n // 2).astype(np.int32)
    return z, np.concatenate([half, half])


def row(cells: list[Any]) -> str:
    def fmt(c):
        if isinstance(c, float):
            return f"{c:.3g}"
        return "-" if c is None else str(c)
    return "| " + " | ".join(fmt(c) for c in cells) + " |"


def emit(line: str) -> None:
    print(line, flush=True)


def host_max_rss() -> int:
    """This process's peak resident host memory in bytes (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
