"""Helpers of the data tests: small configs and tiny image folders written on the fly."""

from __future__ import annotations

import os

import ml_collections
import numpy as np
from PIL import Image

from contrastive_jax import data

#: CIFAR-10 as an image folder beside the repository (CI and this project's machines have it);
#: tests that read it pass it explicitly and skip when it is absent.
SHARED_CIFAR10 = os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "cifar10")
)


def digits_config(**overrides) -> ml_collections.ConfigDict:
    """The default data config (digits) with a global batch of 16 and ``overrides``."""
    config = data.default_data_config()
    config.global_batch_size = 16
    config.update(overrides)
    return config


def write_image_folder(root: str, shape=(12, 10, 3), per_class=(6, 2), seed=0) -> str:
    """``root/{train,test}/{cat,dog}/NN.{png,jpg}``: random images, PNG and JPEG alternating."""
    rng = np.random.default_rng(seed)
    for split, count in zip(("train", "test"), per_class, strict=True):
        for name in ("cat", "dog"):
            folder = os.path.join(root, split, name)
            os.makedirs(folder, exist_ok=True)
            for i in range(count):
                image = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8))
                if i % 2:
                    image.save(os.path.join(folder, f"{i:02d}.jpg"), quality=95)
                else:
                    image.save(os.path.join(folder, f"{i:02d}.png"))
    return root


def variable_size_examples(count: int, seed: int, num_classes: int = 3) -> list[dict]:
    """``count`` examples of random uint8 images of sides 20-47 (label ``i % num_classes``)."""
    rng = np.random.default_rng(seed)
    examples = []
    for i in range(count):
        h, w = rng.integers(20, 48, 2)
        examples.append({"image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
                         "label": i % num_classes})
    return examples


def write_tfds_dataset(
    data_dir: str,
    name: str,
    file_format: str,
    *,
    train: int = 48,
    test: int = 20,
    seed: int = 0,
    num_classes: int = 3,
    shards: int = 1,
) -> str:
    """A TFDS dataset ``name`` of variable-size JPEG images prepared in ``data_dir`` (TFDS
    writes it with TensorFlow: the ``prepare`` extra, which the test environment has).

    Splits ``train`` and ``test``, ``file_format`` ``"tfrecord"`` or
    ``"array_record"``, records in example order (no shuffling), ``shards``
    files per split (TFDS picks the number when ``shards`` is 1). Returns
    ``data_dir``.
    """
    import tensorflow_datasets as tfds

    features = tfds.features.FeaturesDict({
        "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
        "label": tfds.features.ClassLabel(num_classes=num_classes),
    })
    splits = {
        "train": variable_size_examples(train, seed, num_classes),
        "test": variable_size_examples(test, seed + 1, num_classes),
    }
    download_config = tfds.download.DownloadConfig(num_shards=shards) if shards > 1 else None
    tfds.dataset_builders.store_as_tfds_dataset(
        name=name,
        version="1.0.0",
        features=features,
        split_datasets={k: [(i, ex) for i, ex in enumerate(v)] for k, v in splits.items()},
        data_dir=data_dir,
        file_format=file_format,
        disable_shuffling=True,
        download_config=download_config,
    )
    return data_dir
