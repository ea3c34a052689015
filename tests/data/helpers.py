"""Helpers of the data tests: small configs and tiny image folders written on the fly."""

from __future__ import annotations

import os

import ml_collections
import numpy as np

from contrastive_jax import data
from contrastive_jax.data._tf import tf


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
                image = rng.integers(0, 256, shape, dtype=np.uint8)
                if i % 2:
                    encoded, ext = tf.io.encode_jpeg(image, quality=95), "jpg"
                else:
                    encoded, ext = tf.io.encode_png(image), "png"
                tf.io.write_file(os.path.join(folder, f"{i:02d}.{ext}"), encoded)
    return root
