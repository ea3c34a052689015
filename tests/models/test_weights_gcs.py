"""Weights files in a bucket (``gs://``, the local GCS emulator of tests/train/test_gcs.py):
``weights.save`` writes and ``load_encoder`` reads them through ``etils.epath``, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from contrastive_jax import models
from contrastive_jax.models import weights
from tests.models.test_weights import SMALL_RESNET, _assert_same, _trained_looking
from tests.train.test_gcs import bucket  # noqa: F401 - the emulator's fixture

pytestmark = pytest.mark.slow


def test_a_flax_export_round_trips_through_a_bucket(bucket):  # noqa: F811
    spec = models.encoder_spec(SMALL_RESNET)
    encoder = _trained_looking(models.create_encoder(spec, rngs=nnx.Rngs(0)), 8)
    path = f"{bucket}/weights/encoder.safetensors"
    weights.save(path, *weights.export_weights(encoder, spec, format="flax"))
    loaded = models.load_encoder(path)
    _assert_same(encoder, loaded)
    x = np.random.default_rng(0).normal(size=(2, 16, 16, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x), encoder(x))
    with pytest.raises(FileNotFoundError, match="no weights file"):
        models.load_encoder(f"{bucket}/weights/absent.safetensors")
