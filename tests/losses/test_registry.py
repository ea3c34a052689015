"""The public loss registry."""

import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import losses


def test_every_registered_name_resolves_to_the_exported_function():
    assert len(losses.names()) == 15
    for name in losses.names():
        assert losses.get(name) is getattr(losses, name)
        assert losses.get(name).__doc__


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="sincere"):
        losses.get("simclr")


def test_readme_example_runs():
    z = jnp.asarray(np.random.default_rng(0).normal(size=(8, 4)), jnp.float32)
    labels = jnp.array([0, 0, 1, 1, 2, 2, 3, 3])
    assert np.isfinite(losses.get("sincere")(z, labels, temperature=0.1))
