"""The labelled examples of semi-supervised fine-tuning: a fraction of the training split's
labels (SimCLR's 1 % and 10 % of ImageNet), picked once on the host.

Two ways, fields of ``config.data`` (:func:`contrastive_jax.data.default_data_config`):

* ``label_fraction`` in (0, 1]: a seeded per-class fraction, :func:`fraction_rows`: each class
  keeps ``max(1, round(fraction * n_k))`` of its ``n_k`` examples, drawn with
  ``numpy.random.default_rng([data_seed, 2])``;
* ``label_ids``: a text file of the examples to keep, one a line (``#`` starts a comment):
  example ids (the rows of the full training split, the batches' ``index``) or image file
  names (an image folder's files, by base name: google-research/simclr's
  ``imagenet_subsets/1percent.txt`` lists ImageNet's ``n04235860_14959.JPEG`` ...),
  :func:`id_rows`.

The rows are picked from the labels alone, before the split is shared among processes, so
every process count trains on the same examples. For TFDS ImageNet, whose records are
streamed and have no labels in memory, the prepared TFDS datasets
``imagenet2012_subset/1pct`` and ``imagenet2012_subset/10pct`` hold SimCLR's subsets.
"""

from __future__ import annotations

import os

import numpy as np

from contrastive_jax.errors import ConfigError


def check_fraction(fraction: float | None) -> None:
    """Raises ConfigError unless ``fraction`` is None or in (0, 1]."""
    if fraction is None:
        return
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
            0 < fraction <= 1):
        raise ConfigError(f"config.data.label_fraction must be in (0, 1], got {fraction!r}")


def fraction_rows(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Sorted rows int64 [M] of a seeded per-class ``fraction`` of ``labels`` int [N].

    Each class keeps ``max(1, round(fraction * n_k))`` of its ``n_k`` examples, drawn
    without replacement by one ``numpy.random.default_rng([seed, 2])``, class after class
    in increasing class order.
    """
    check_fraction(fraction)
    rng = np.random.default_rng([seed, 2])
    rows = []
    for k in np.unique(labels):
        members = np.flatnonzero(labels == k)
        count = max(1, round(fraction * len(members)))
        rows.append(rng.choice(members, size=count, replace=False))
    return np.sort(np.concatenate(rows)).astype(np.int64)


def read_ids(path: str) -> list[str]:
    """The entries of a ``label_ids`` file, one a line, comments and blank lines dropped."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = [line.split("#", 1)[0].strip() for line in file]
    except OSError as err:
        raise ConfigError(f"config.data.label_ids={path!r} cannot be read: {err}") from err
    entries = [line for line in lines if line]
    if not entries:
        raise ConfigError(f"config.data.label_ids={path!r} lists no example")
    return entries


def id_rows(entries: list[str], ids: np.ndarray, paths: np.ndarray | None) -> np.ndarray:
    """Sorted rows int64 [M] of the examples ``entries`` name: example ids (``ids`` int [N])
    or, for a split of image files, file base names (of ``paths`` str [N])."""
    if all(entry.lstrip("-").isdigit() for entry in entries):
        lookup = {int(i): row for row, i in enumerate(ids)}
        wanted: list = [int(entry) for entry in entries]
    elif paths is not None:
        lookup = {os.path.basename(str(p)): row for row, p in enumerate(paths)}
        wanted = list(entries)
    else:
        raise ConfigError(
            "config.data.label_ids names files, but the training split holds no image files: "
            "list example ids (integers)")
    missing = [w for w in wanted if w not in lookup]
    if missing:
        raise ConfigError(
            f"config.data.label_ids: {len(missing)} of {len(wanted)} entries are not in the "
            f"training split, e.g. {missing[0]!r}")
    return np.unique([lookup[w] for w in wanted]).astype(np.int64)
