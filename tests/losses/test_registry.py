"""The public loss registry."""

import inspect

import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import losses


def test_every_registered_name_resolves_to_the_exported_function():
    assert len(losses.names()) == 20
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
        first, kind = losses.first_argument(name), losses.second_argument(name)
        assert first in losses.FIRST_ARGUMENTS and kind in losses.SECOND_ARGUMENTS
        params = list(inspect.signature(losses.get(name)).parameters.values())
        positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert positional[0] == first or kind == "paired_embeddings"
        if kind is None:
            assert positional == ["embeddings"]
        elif kind == "soft_targets":
            assert positional == ["logits", "targets"]
        elif kind == "paired_embeddings":
            assert positional == ["image_embeddings", "text_embeddings"]
        else:
            assert len(positional) == 2
    assert losses.second_argument("nt_xent") == "instance"
    assert losses.second_argument("mio") == "label"
    assert losses.second_argument("align_uniform") == "instance"
    assert (losses.first_argument("label_cross_entropy"), losses.second_argument(
        "label_cross_entropy")) == ("logits", "label")
    on_scores = {"soft_target_infonce", "soft_target_cross_entropy", "label_cross_entropy",
                 "label_soft_target_infonce"}
    assert set(losses.embedding_losses()) == set(losses.names()) - on_scores


def test_every_loss_docstring_has_its_shared_text_formatted():
    for name in losses.names():
        doc = losses.get(name).__doc__
        assert "{" + "axis_name}" not in doc and "{" + "valid}" not in doc, name
        assert "axis_name:" in doc and "valid:" in doc, name
    assert "None chooses the dense form" in losses.supcon.__doc__
    assert "compiled class-slot counts" in losses.med_nce.__doc__


def test_second_argument_of_an_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="sincere"):
        losses.second_argument("simclr")
