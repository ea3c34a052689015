"""The pretraining objective: terms, their second arguments and their temperatures."""

from __future__ import annotations

import inspect

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from contrastive_jax import losses
from contrastive_jax.errors import ConfigError
from contrastive_jax.train import objective
from contrastive_jax.train.config import default_config


def _loss_config(**fields) -> ml_collections.ConfigDict:
    config = default_config().loss
    config.update(fields)
    return config


def _default_temperature(name: str) -> float:
    return inspect.signature(losses.get(name)).parameters["temperature"].default


@pytest.mark.parametrize("name", ["mio", "projnce", "sincere", "nt_xent"])
def test_a_loss_trains_at_its_own_default_temperature_unless_the_config_sets_one(name):
    (term,) = objective.parse_terms(_loss_config(name=name))
    assert term.temperature == _default_temperature(name)
    projections = jnp.asarray(np.random.default_rng(0).normal(size=(8, 4)), jnp.float32)
    labels = jnp.array([0, 0, 1, 1, 2, 2, 3, 3])
    targets = objective.Targets(instance=labels, label=labels, metadata=None)
    total, _ = objective.evaluate([term], projections, targets, axis_name=None)
    own = losses.get(name)(projections, labels, temperature=_default_temperature(name))
    np.testing.assert_allclose(total, own, rtol=1e-6)


def test_the_total_is_the_weighted_sum_of_the_terms():
    terms = objective.parse_terms(_loss_config(name="sincere+nt_xent", weights=(1.0, 0.25)))
    projections = jnp.asarray(np.random.default_rng(1).normal(size=(8, 4)), jnp.float32)
    labels = jnp.array([0, 0, 1, 1, 2, 2, 3, 3])
    ids = jnp.array([0, 0, 1, 1, 2, 2, 3, 3])
    targets = objective.Targets(instance=ids, label=labels, metadata=None)
    total, values = objective.evaluate(terms, projections, targets, axis_name=None)
    assert set(values) == {"sincere", "nt_xent"}
    np.testing.assert_allclose(total, values["sincere"] + 0.25 * values["nt_xent"], rtol=1e-6)
    assert abs(float(values["nt_xent"])) > 1e-3  # the weight changes the total


def test_mio_default_temperature_is_the_papers():
    assert _default_temperature("mio") == 0.5
    assert objective.parse_terms(_loss_config(name="mio"))[0].temperature == 0.5


def test_config_temperature_applies_to_every_term_and_term_kwargs_win():
    kwargs = ml_collections.ConfigDict({"mio": {"temperature": 0.3}})
    terms = objective.parse_terms(
        _loss_config(name="sincere+mio", temperature=0.2, kwargs=kwargs)
    )
    assert [t.temperature for t in terms] == [0.2, 0.3]


def test_second_argument_comes_from_the_registry():
    terms = objective.parse_terms(
        _loss_config(name="nt_xent+supcon+y_aware_infonce+global_uniformity")
    )
    assert [t.target for t in terms] == ["instance", "label", "metadata", None]
    for term in terms:
        assert term.target == losses.second_argument(term.name)
        assert term.target is None or term.target in objective.Targets._fields


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"name": ""}, "empty"),
        ({"name": "soft_target_infonce"}, "not a loss the objective can train on"),
        ({"name": "simclr"}, "not a loss the objective can train on"),
        ({"name": "sincere+supcon", "weights": (1.0,)}, "1 entries for 2 terms"),
    ],
)
def test_bad_loss_configs_are_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        objective.parse_terms(_loss_config(**fields))


def test_metadata_loss_without_metadata_is_refused():
    (term,) = objective.parse_terms(_loss_config(name="y_aware_infonce"))
    z = jnp.ones((4, 3))
    targets = objective.Targets(instance=jnp.arange(4), label=jnp.arange(4), metadata=None)
    with pytest.raises(ValueError, match="metadata"):
        objective.evaluate([term], z, targets, axis_name=None)


def test_config_temperature_reaches_only_the_terms_that_take_one():
    sincere, align_uniform = objective.parse_terms(
        _loss_config(name="sincere+align_uniform", temperature=0.2)
    )
    assert sincere.temperature == 0.2 and align_uniform.temperature is None


def test_the_objective_names_come_from_the_one_loss_registry():
    soft_targets = {n for n in losses.names() if losses.second_argument(n) == "soft_targets"}
    assert set(objective.objective_terms()) == set(losses.names()) - soft_targets
    assert {"clip", "siglip"} <= set(objective.objective_terms())
    assert {"align_uniform", "label_cross_entropy"} <= set(objective.objective_terms())
    assert objective.SOFT_LABEL_TERMS == ("label_cross_entropy", "label_soft_target_infonce")


@pytest.mark.parametrize("name", ["clip", "siglip"])
@pytest.mark.parametrize("pairing", [None, "paired_embeddings", "shuffled_pairs"])
def test_two_tower_losses_pair_the_two_views_of_each_example(name, pairing):
    fields = {"name": name, "temperature": 0.2}
    if pairing is not None:
        fields["targets"] = ml_collections.ConfigDict({name: pairing})
    (term,) = objective.parse_terms(_loss_config(**fields))
    assert term.target == (pairing or "paired_embeddings")
    projections = jnp.asarray(np.random.default_rng(1).normal(size=(8, 4)), jnp.float32)
    ids = jnp.array([0, 0, 1, 1, 2, 2, 3, 3])
    targets = objective.Targets(instance=ids, label=ids, metadata=None)
    valid = jnp.array([True] * 6 + [True, False])
    total, values = objective.evaluate([term], projections, targets, axis_name=None, valid=valid)
    texts = projections[1::2]
    if pairing == "shuffled_pairs":
        texts = jnp.roll(texts, 1, axis=0)
    own = losses.get(name)(projections[0::2], texts, temperature=0.2,
                           valid=jnp.array([True, True, True, False]))
    np.testing.assert_allclose(total, own, rtol=1e-6)
    np.testing.assert_allclose(values[name], own, rtol=1e-6)


@pytest.mark.parametrize(
    ("name", "target"),
    [("clip", "instance"), ("siglip", "label"), ("sincere", "paired_embeddings"),
     ("nt_xent", "shuffled_pairs")],
)
def test_pairings_and_row_targets_do_not_mix(name, target):
    config = _loss_config(name=name, targets=ml_collections.ConfigDict({name: target}))
    with pytest.raises(ValueError, match=f"config.loss.targets.{name}"):
        objective.parse_terms(config)


def test_two_tower_loss_on_an_odd_number_of_rows_is_refused():
    (term,) = objective.parse_terms(_loss_config(name="clip"))
    ids = jnp.arange(5)
    targets = objective.Targets(instance=ids, label=ids, metadata=None)
    with pytest.raises(ValueError, match="two views"):
        objective.evaluate([term], jnp.ones((5, 3)), targets, axis_name=None)


def test_temperature_warmup_anneals_geometrically_to_each_terms_own_temperature():
    config = _loss_config(name="sincere+nt_xent", warmup_temperature=1.0,
                          temperature_warmup_steps=100, kwargs={"nt_xent": {"temperature": 0.5}})
    sincere, nt_xent = objective.parse_terms(config)
    assert (sincere.warmup_temperature, sincere.temperature, sincere.temperature_warmup_steps) == (
        1.0, _default_temperature("sincere"), 100)
    assert (nt_xent.warmup_temperature, nt_xent.temperature, nt_xent.temperature_warmup_steps) == (
        1.0, 0.5, 100)
    np.testing.assert_allclose(
        [sincere.temperature_at(s) for s in (0, 50, 100, 1000)],
        [1.0, 0.1 ** 0.5, 0.1, 0.1], rtol=1e-6)


def test_a_term_with_a_warmup_trains_at_the_scheduled_temperature():
    (term,) = objective.parse_terms(_loss_config(name="sincere", warmup_temperature=1.0,
                                                 temperature_warmup_steps=10))
    projections = jnp.asarray(np.random.default_rng(0).normal(size=(8, 4)), jnp.float32)
    labels = jnp.array([0, 0, 1, 1, 2, 2, 3, 3])
    targets = objective.Targets(instance=labels, label=labels, metadata=None)
    for step, temperature in ((0, 1.0), (5, 0.1 ** 0.5), (10, 0.1), (30, 0.1)):
        total, _ = objective.evaluate([term], projections, targets, axis_name=None,
                                      step=jnp.asarray(step))
        np.testing.assert_allclose(
            total, losses.sincere(projections, labels, temperature=temperature), rtol=1e-5)
    with pytest.raises(ValueError, match="pass `step`"):
        objective.evaluate([term], projections, targets, axis_name=None)


@pytest.mark.parametrize("fields, match", [
    ({"temperature_warmup_steps": 10}, "needs config.loss.warmup_temperature"),
    ({"warmup_temperature": -1.0, "temperature_warmup_steps": 10}, "must be > 0"),
    ({"warmup_temperature": 1.0, "temperature_warmup_steps": -3}, "int >= 0"),
    ({"name": "align_uniform", "warmup_temperature": 1.0, "temperature_warmup_steps": 5},
     "no term"),
])
def test_bad_temperature_warmups_are_refused(fields, match):
    with pytest.raises(ConfigError, match=match):
        objective.parse_terms(_loss_config(**fields))


def test_zero_warmup_steps_turn_the_warmup_off_with_a_warning(caplog):
    # The command line cannot set a float field to None: steps=0 turns a config's warm-up off.
    with caplog.at_level("WARNING"):
        (term,) = objective.parse_terms(
            _loss_config(name="sincere", warmup_temperature=1.0, temperature_warmup_steps=0))
    assert term.warmup_temperature is None
    assert "no temperature warm-up" in caplog.text


def test_a_misspelt_loss_name_is_reported_before_a_weight_count_that_no_longer_fits():
    with pytest.raises(ConfigError, match="'supcn' is not a loss the objective can train on"):
        objective.parse_terms(_loss_config(name="supcn", weights=(1.0, 0.5)))
