"""Options the recipes' sources need, against the sources' definitions: SimCLR v1's loss
scale (``config.loss.view_reduction="sum"``: ``loss_a + loss_b``) and the SupCon TF code's
stage 2: its batch norm (``config.model.frozen_encoder_bn="batch"``) over both views, the
cross-entropy on the first (``config.loss.view_reduction="first"``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from contrastive_jax import data
from contrastive_jax.errors import ConfigError
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import objective, transfer
from contrastive_jax.train.build import DataFacts, build
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import init_state, make_train_step
from tests.train import runs
from tests.train.tiny import tiny_config


def _simclr_v1_loss(hidden: np.ndarray, temperature: float) -> float:
    """google-research/simclr v1 ``objective.py`` ``add_contrastive_loss`` on one replica,
    written out in numpy: ``hidden`` [2N, d], the first views' rows then the second views'."""
    hidden = hidden / np.linalg.norm(hidden, axis=-1, keepdims=True)
    h1, h2 = np.split(hidden, 2)
    n = h1.shape[0]
    mask = np.eye(n) * 1e9
    logits_aa, logits_bb = h1 @ h1.T / temperature - mask, h2 @ h2.T / temperature - mask
    logits_ab, logits_ba = h1 @ h2.T / temperature, h2 @ h1.T / temperature

    def cross_entropy(logits):  # labels one_hot(range(n), 2n): the positive is column i
        logits = logits - logits.max(1, keepdims=True)
        log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        return float(-np.mean(log_p[np.arange(n), np.arange(n)]))

    loss_a = cross_entropy(np.concatenate([logits_ab, logits_aa], 1))
    loss_b = cross_entropy(np.concatenate([logits_ba, logits_bb], 1))
    return loss_a + loss_b


def test_view_sum_is_simclr_v1s_loss_a_plus_loss_b():
    rng = np.random.default_rng(0)
    n, d, tau = 8, 16, 0.1
    hidden = rng.normal(size=(2 * n, d)).astype(np.float32)
    # the step's layout: the two views of an example on consecutive rows
    z = jnp.asarray(np.stack([hidden[:n], hidden[n:]], 1).reshape(2 * n, d))
    targets = objective.Targets(instance=jnp.repeat(jnp.arange(n), 2),
                                label=jnp.zeros(2 * n, jnp.int32), metadata=None)
    summed = objective.parse_terms({"name": "nt_xent", "temperature": tau,
                                    "view_reduction": "sum"})
    mean = objective.parse_terms({"name": "nt_xent", "temperature": tau})
    total, values = objective.evaluate(summed, z, targets, axis_name=None, num_views=2)
    plain, _ = objective.evaluate(mean, z, targets, axis_name=None)
    expected = _simclr_v1_loss(hidden, tau)
    assert float(total) == pytest.approx(expected, rel=1e-5)
    assert float(values["nt_xent"]) == float(total) == pytest.approx(2 * float(plain), rel=1e-6)
    with pytest.raises(ValueError, match="num_views"):
        objective.evaluate(summed, z, targets, axis_name=None)


def test_a_bad_view_reduction_is_refused():
    with pytest.raises(ConfigError, match="view_reduction must be one of"):
        objective.parse_terms({"name": "nt_xent", "view_reduction": "total"})


def _smoothed_cross_entropy(logits: np.ndarray, labels: np.ndarray, eps: float) -> float:
    """``tf.losses.softmax_cross_entropy(onehot, logits, label_smoothing=eps)`` averaged:
    targets ``(1 - eps) onehot + eps / K``."""
    k = logits.shape[1]
    targets = (1 - eps) * np.eye(k)[labels] + eps / k
    z = logits - logits.max(1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
    return float(-(targets * log_p).sum(1).mean())


def test_first_view_is_the_supcon_stage_2_cross_entropy():
    """launcher.py ``_call_model``: the views stacked into the batch, ``logits =
    tf.split(logits, 2, axis=1)[0]`` (each example's first view) into the cross-entropy with
    the run's label smoothing 0.05: on the step's layout (views of an example on consecutive
    rows) the term is that, not the mean over both views."""
    rng = np.random.default_rng(2)
    n, k = 12, 5
    logits = rng.normal(size=(n, 2, k)).astype(np.float32)
    labels = rng.integers(0, k, n)
    targets = objective.Targets(instance=jnp.repeat(jnp.arange(n), 2),
                                label=jnp.asarray(np.repeat(labels, 2)), metadata=None)
    loss = {"name": "label_cross_entropy",
            "kwargs": {"label_cross_entropy": {"label_smoothing": 0.05}}}
    first = objective.parse_terms({**loss, "view_reduction": "first"})
    total, values = objective.evaluate(first, jnp.asarray(logits.reshape(2 * n, k)), targets,
                                       axis_name=None, num_views=2)
    expected = _smoothed_cross_entropy(logits[:, 0], labels, 0.05)
    assert float(total) == float(values["label_cross_entropy"]) == pytest.approx(expected,
                                                                                rel=1e-5)
    both = _smoothed_cross_entropy(logits.reshape(2 * n, k), np.repeat(labels, 2), 0.05)
    assert abs(expected - both) > 1e-2  # the two differ here
    with pytest.raises(ValueError, match="num_views"):
        objective.evaluate(first, jnp.asarray(logits.reshape(2 * n, k)), targets, axis_name=None)
    with pytest.raises(ConfigError, match="pairs the two views"):
        objective.parse_terms({"name": "clip", "view_reduction": "first"})


def _linear_eval(bn: str, num_views: int = 1):
    config = tiny_config(name="label_cross_entropy")
    config.data.num_views = num_views
    config.model.head.name = "classifier"
    config.model.head.num_classes = 10
    config.model.trainable = "head"
    config.model.frozen_encoder_bn = bn
    config.model.init_from = "unread"  # parse asks for one with trainable="head"; nothing reads it
    config.train.online_probe = False
    config.optimizer.name = "sgd"
    config.optimizer.base_learning_rate = 0.1
    return config


@pytest.mark.parametrize("bn", ["running", "batch"])
@pytest.mark.slow
def test_frozen_encoder_bn_normalises_with_the_chosen_statistics_and_keeps_them(bn):
    """One linear-evaluation step on one device: the loss is the classifier's cross-entropy
    on the encoder's features in the chosen mode ("batch": training-mode batch norm, the SupCon
    TF code's stage 2), and the running statistics are the initial ones bit for bit."""
    config = _linear_eval(bn)
    mesh = make_mesh(1)
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=10 if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=10, global_batch_size=64, total_steps=2)
    initial = jax.device_get(state)
    batch = runs.first_batch(config.data)
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule,
                           mesh, frozen_encoder=True)
    new, logged = step(jax.device_put(state, replicated(mesh)),
                       data.make_global_batch(batch, mesh))
    for a, b in zip(jax.tree.leaves(initial.batch_stats),
                    jax.tree.leaves(jax.device_get(new.batch_stats)), strict=True):
        np.testing.assert_array_equal(a, b)

    params, stats = jax.tree.map(jnp.asarray, (initial.params, initial.batch_stats))
    model = nnx.merge(graphdef, params, stats, rest)
    rows = jnp.asarray(batch["views"]).reshape(-1, *batch["views"].shape[2:])
    losses = {}
    for mode in ("running", "batch"):
        model.network.encoder.eval() if mode == "running" else model.network.encoder.train()
        logits = model.network.head(model.network.encoder(rows))
        losses[mode] = float(optax.softmax_cross_entropy_with_integer_labels(
            logits, jnp.asarray(batch["label"])).mean())
    assert abs(losses["running"] - losses["batch"]) > 1e-3  # the modes differ here
    assert float(logged["loss/label_cross_entropy"]) == pytest.approx(losses[bn], rel=1e-4)


@pytest.mark.parametrize("bn", ["running", "batch"])
def test_the_built_run_keeps_the_frozen_encoder_bn_asked_for(bn):
    """``build`` (the trainer's, the dry run's and ``load_pretrained``'s path) hands
    ``config.model.frozen_encoder_bn`` to the model: "batch" leaves the frozen encoder's batch
    norm in training mode (each batch's statistics), "running" puts it in inference mode."""
    config = _linear_eval(bn)
    run = build(parse(config), make_mesh(1), DataFacts(640, 10, 16))
    model = nnx.merge(run.graphdef, run.state.params, run.state.batch_stats, run.rest)
    norms = [m for _, m in nnx.iter_modules(model.network.encoder) if isinstance(m, nnx.BatchNorm)]
    assert norms and {m.use_running_average for m in norms} == {bn == "running"}


def test_frozen_encoder_bn_needs_a_frozen_encoder():
    with pytest.raises(ConfigError, match="frozen_encoder_bn must be one of"):
        transfer.TransferSpec(init_from="x", trainable="head", frozen_encoder_bn="ema")
    with pytest.raises(ConfigError, match="is for a frozen encoder"):
        transfer.TransferSpec(trainable="all", frozen_encoder_bn="batch")


@pytest.mark.slow
def test_stage_2_batch_norm_sees_both_views_and_the_loss_the_first():
    """One step of the SupCon TF code's stage 2: two views of each example through the frozen
    encoder in training mode (launcher.py: one batch of 2N images, so the batch norm's
    statistics are over both views), the cross-entropy on the first views' logits; the
    running statistics kept."""
    config = _linear_eval("batch", num_views=2)
    config.loss.view_reduction = "first"
    mesh = make_mesh(1)
    spec = parse(config)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed, probe_classes=None, transfer=spec.transfer,
        steps_per_epoch=10, global_batch_size=64, total_steps=2)
    initial = jax.device_get(state)
    batch = runs.first_batch(config.data)
    assert batch["views"].shape[1] == 2
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule,
                           mesh, frozen_encoder=True)
    new, logged = step(jax.device_put(state, replicated(mesh)),
                       data.make_global_batch(batch, mesh))
    for a, b in zip(jax.tree.leaves(initial.batch_stats),
                    jax.tree.leaves(jax.device_get(new.batch_stats)), strict=True):
        np.testing.assert_array_equal(a, b)
    params, stats = jax.tree.map(jnp.asarray, (initial.params, initial.batch_stats))
    model = nnx.merge(graphdef, params, stats, rest)
    model.network.encoder.train()
    views, labels = jnp.asarray(batch["views"]), jnp.asarray(batch["label"])
    # the source: both views stacked into one batch, the first view's logits kept
    stacked = jnp.concatenate([views[:, 0], views[:, 1]])
    source = model.network.head(model.network.encoder(stacked))[: views.shape[0]]
    expected = float(optax.softmax_cross_entropy_with_integer_labels(source, labels).mean())
    one_view = model.network.head(model.network.encoder(views[:, 0]))  # statistics of one view
    alone = float(optax.softmax_cross_entropy_with_integer_labels(one_view, labels).mean())
    assert abs(expected - alone) > 1e-4  # the statistics of both views differ from one's
    assert float(logged["loss/label_cross_entropy"]) == pytest.approx(expected, rel=1e-4)
