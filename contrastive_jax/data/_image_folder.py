"""Folders of image files ``<root>/<split>/<class>/<image>.{jpg,jpeg,png}`` as a source.

:func:`image_folder_source` lists a folder (splits, sorted class names, as
``tfds.ImageFolder`` names them) without decoding it, and without TensorFlow; :func:`is_image_folder` tells such a
folder from a TFDS data directory; :func:`decode_image_file` decodes one file and names
it when it cannot. :mod:`contrastive_jax.data.sources` reads a data config's folder
through these and re-exports them.

A folder may be a URL (``gs://bucket/folder``): it is listed and its files are read through
``etils.epath`` (``gs://`` through ``tf.io.gfile`` where TensorFlow is installed and
``EPATH_USE_TF`` is not false, else ``gcsfs``); local folders through ``os``.
"""

from __future__ import annotations

import os

import numpy as np

from contrastive_jax.data.base import KNOWN_STATS, STATS_SAMPLE, Source, Split, channel_stats
from contrastive_jax.data.host_views import decode
from contrastive_jax.errors import InputError

_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")  # those tfds.ImageFolder lists


def _is_url(path: str) -> bool:
    return "://" in path


def read_file(path: str) -> bytes:
    """The bytes of a local file or of a URL's object (``gs://...``, through ``etils.epath``)."""
    if _is_url(path):
        from etils import epath

        return epath.Path(path).read_bytes()
    with open(path, "rb") as f:
        return f.read()


def _listdir(folder: str) -> list[str]:
    """The names in ``folder`` (local or URL), sorted."""
    if _is_url(folder):
        from etils import epath

        return sorted(p.name for p in epath.Path(folder).iterdir())
    return sorted(os.listdir(folder))


def _isdir(path: str) -> bool:
    if _is_url(path):
        from etils import epath

        return epath.Path(path).is_dir()
    return os.path.isdir(path)


def decode_image_file(path: str) -> np.ndarray:
    """Decodes one image file (Pillow) to uint8 [H, W, 3]; :class:`~contrastive_jax.errors.CorruptImageError` names a
    bad file."""
    return np.asarray(decode(read_file(path), f"file {path}"))


def is_image_folder(path: str) -> bool:
    """Whether ``path`` has the ImageFolder layout: some ``<split>/<class>/`` holds image files.

    (A TFDS data directory, ``<name>/<version>/*.tfrecord...``, does not.)
    """
    for split_dir in _subdirs(path):
        for class_dir in _subdirs(split_dir)[:1]:
            if any(f.lower().endswith(_IMAGE_EXTENSIONS) for f in _listdir(class_dir)):
                return True
    return False


def _subdirs(folder: str) -> list[str]:
    """The sub-folders of ``folder``, sorted by name; none if it is not a folder."""
    if not _isdir(folder):
        return []
    children = (os.path.join(folder, c) for c in _listdir(folder))
    return [c for c in children if _isdir(c)]


def image_folder_source(
    root: str,
    *,
    name: str = "image_folder",
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> Source:
    """A folder of images ``<root>/<split>/<class>/<file>``.

    The class names are the sorted names of the class folders of all splits (label ids,
    as ``tfds.ImageFolder`` numbers them); the files are listed in sorted (class, file
    name) order, which fixes every example's id, and decoded later by the pipeline.

    Args:
      root: the folder.
      name: dataset name; selects :data:`KNOWN_STATS` when present.
      stats: (mean, std) to use; by default the known statistics of ``name``
        or estimates from :data:`STATS_SAMPLE` evenly spaced training images.

    Returns:
      A source with file-backed splits. ``image_shape`` is the common shape of
      the first 8 training images, or (None, None, 3) if they differ.

    Raises:
      InputError: ``root`` is missing, has no ``train`` split, or a class folder of a split
        holds no image file (it would count as a class without examples). A folder of one
        class is read; the trainer refuses it for a loss that uses the labels
        (:func:`contrastive_jax.train.loop.check_classes`).
    """
    if not _isdir(root):
        raise InputError(f"image folder {root!r} does not exist or is not a directory")
    split_dirs = _subdirs(root)
    class_names = sorted({os.path.basename(c) for s in split_dirs for c in _subdirs(s)})
    label_of = {c: k for k, c in enumerate(class_names)}
    splits = {}
    for split_dir in split_dirs:
        paths, labels = [], []
        for class_dir in _subdirs(split_dir):
            files = [f for f in _listdir(class_dir) if f.lower().endswith(_IMAGE_EXTENSIONS)]
            if not files:  # it would count as a class (a label id, an output) with no example
                raise InputError(
                    f"image folder {root}: the class folder {class_dir} has no image files "
                    f"({', '.join(_IMAGE_EXTENSIONS)}); remove it or add its images")
            paths += [os.path.join(class_dir, f) for f in files]
            labels += [label_of[os.path.basename(class_dir)]] * len(files)
        if paths:
            splits[os.path.basename(split_dir)] = Split(
                labels=np.array(labels), paths=np.array(paths)
            )
    if "train" not in splits:
        raise InputError(f"image folder {root} has no 'train' split; found {sorted(splits)}")
    train_paths = splits["train"].paths
    shapes = {decode_image_file(p).shape for p in train_paths[:8]}
    image_shape = shapes.pop() if len(shapes) == 1 else (None, None, 3)
    if stats is None:
        stats = KNOWN_STATS.get(name)
    if stats is None:
        rows = np.linspace(0, len(train_paths) - 1, min(STATS_SAMPLE, len(train_paths))).astype(int)
        sample = [decode_image_file(train_paths[i]).reshape(-1, 3) for i in rows]
        stats = channel_stats(np.concatenate(sample)[None])
    return Source(
        name=name,
        splits=splits,
        num_classes=len(class_names),
        class_names=tuple(class_names),
        image_shape=image_shape,
        mean=tuple(stats[0]),
        std=tuple(stats[1]),
    )
