"""The public loss registry."""

import inspect

import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import losses


def test_every_registered_name_resolves_to_the_exported_function():
    assert len(losses.names()) == 17
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


def test_every_loss_records_the_kind_of_its_second_argument():
    for name in losses.names():
        kind = losses.second_argument(name)
        assert kind in losses.SECOND_ARGUMENTS
        params = list(inspect.signature(losses.get(name)).parameters.values())
        positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        if kind is None:
            assert positional == ["embeddings"]
        elif kind == "soft_targets":
            assert positional == ["logits", "targets"]
        elif kind == "paired_embeddings":
            assert positional == ["image_embeddings", "text_embeddings"]
        else:
            assert positional[0] == "embeddings" and len(positional) == 2
    assert losses.second_argument("nt_xent") == "instance"
    assert losses.second_argument("mio") == "label"
    assert "soft_target_infonce" not in losses.embedding_losses()
    assert set(losses.embedding_losses()) | {"soft_target_infonce", "soft_target_cross_entropy"} == set(
        losses.names()
    )


def test_second_argument_of_an_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="sincere"):
        losses.second_argument("simclr")
