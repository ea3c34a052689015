"""TensorFlow for the input pipeline, kept off every accelerator.

Importing this module hides all GPUs and TPUs from TensorFlow, so decoding and
augmentation run on the host CPU and never take memory or compute from JAX.
Every module of :mod:`contrastive_jax.data` that uses TensorFlow imports ``tf``
from here.
"""

from __future__ import annotations

import logging

import tensorflow as tf

for _kind in ("GPU", "TPU"):
    try:
        tf.config.set_visible_devices([], _kind)
    except RuntimeError:  # TensorFlow was initialised before this import.
        if tf.config.get_visible_devices(_kind):
            logging.getLogger(__name__).warning(
                "TensorFlow was initialised before contrastive_jax.data and sees %s devices; "
                "import contrastive_jax.data first so the input pipeline stays on the CPU.",
                _kind,
            )

__all__ = ["tf"]
