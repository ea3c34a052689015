"""Options the recipes' sources need, against the sources' definitions: SimCLR v1's loss
scale (``config.loss.view_reduction="sum"``: ``loss_a + loss_b``) and the SupCon TF code's
stage-2 batch norm (``config.model.frozen_encoder_bn="batch"``)."""

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


def _linear_eval(bn: str):
    config = tiny_config(name="label_cross_entropy")
    config.data.num_views = 1
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
