"""Folders of image files ``<root>/<split>/<class>/<image>.{jpg,jpeg,png}`` as a source.

:func:`image_folder_source` lists a folder through ``tfds.ImageFolder`` (splits, sorted
class names, example counts) without decoding it; :func:`is_image_folder` tells such a
folder from a TFDS data directory; :func:`decode_image_file` decodes one file and names
it when it cannot. :mod:`contrastive_jax.data.sources` reads a data config's folder
through these and re-exports them.
"""

from __future__ import annotations

import os

import numpy as np

from contrastive_jax.data.base import KNOWN_STATS, STATS_SAMPLE, Source, Split, channel_stats
from contrastive_jax.errors import CorruptImageError, InputError

_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")  # those tfds.ImageFolder lists


def decode_image_file(path: str) -> np.ndarray:
    """Decodes one image file to uint8 [H, W, 3]; :class:`CorruptImageError` names a bad file."""
    from contrastive_jax.data._tf import tf

    try:
        data = tf.io.read_file(path)
        return tf.io.decode_image(data, channels=3, expand_animations=False).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as e:
        raise CorruptImageError(f"cannot decode image file {path}: {e.message}") from e


def is_image_folder(path: str) -> bool:
    """Whether ``path`` has the ImageFolder layout: some ``<split>/<class>/`` holds image files.

    (A TFDS data directory, ``<name>/<version>/*.tfrecord...``, does not.)
    """
    from contrastive_jax.data._tf import tf

    def subdirs(folder: str) -> list[str]:
        if not tf.io.gfile.isdir(folder):
            return []
        children = (
            os.path.join(folder, c.rstrip("/")) for c in sorted(tf.io.gfile.listdir(folder))
        )
        return [c for c in children if tf.io.gfile.isdir(c)]

    for split_dir in subdirs(path):
        for class_dir in subdirs(split_dir)[:1]:
            if any(f.lower().endswith(_IMAGE_EXTENSIONS) for f in tf.io.gfile.listdir(class_dir)):
                return True
    return False


def image_folder_source(
    root: str,
    *,
    name: str = "image_folder",
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None,
) -> Source:
    """A folder of images ``<root>/<split>/<class>/<file>`` via ``tfds.ImageFolder``.

    ``tfds.ImageFolder`` gives the splits, the sorted class names (label ids)
    and the example counts; the files are listed in sorted (class, file name)
    order, which fixes every example's id, and decoded later by the pipeline.

    Args:
      root: the folder.
      name: dataset name; selects :data:`KNOWN_STATS` when present.
      stats: (mean, std) to use; by default the known statistics of ``name``
        or estimates from :data:`STATS_SAMPLE` evenly spaced training images.

    Returns:
      A source with file-backed splits. ``image_shape`` is the common shape of
      the first 8 training images, or (None, None, 3) if they differ.
    """
    import tensorflow_datasets as tfds

    from contrastive_jax.data._tf import tf

    if not os.path.isdir(root):
        raise InputError(f"image folder {root!r} does not exist or is not a directory")
    builder = tfds.ImageFolder(root)
    label_feature = builder.info.features["label"]
    splits = {}
    for split, split_info in builder.info.splits.items():
        paths, labels = [], []
        split_dir = os.path.join(root, split)
        for class_name in sorted(d.rstrip("/") for d in tf.io.gfile.listdir(split_dir)):
            class_dir = os.path.join(split_dir, class_name)
            if not tf.io.gfile.isdir(class_dir):
                continue
            files = sorted(
                f for f in tf.io.gfile.listdir(class_dir) if f.lower().endswith(_IMAGE_EXTENSIONS)
            )
            paths += [os.path.join(class_dir, f) for f in files]
            labels += [label_feature.str2int(class_name)] * len(files)
        if len(paths) != split_info.num_examples:
            raise RuntimeError(
                f"listed {len(paths)} images in {split_dir}, tfds.ImageFolder counts "
                f"{split_info.num_examples}"
            )
        splits[split] = Split(labels=np.array(labels), paths=np.array(paths))
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
        num_classes=label_feature.num_classes,
        class_names=tuple(label_feature.names),
        image_shape=image_shape,
        mean=tuple(stats[0]),
        std=tuple(stats[1]),
    )
