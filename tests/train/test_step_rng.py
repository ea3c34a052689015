"""Dropout keys of the train step: a pure function of (run seed, step, device)."""

from __future__ import annotations

import jax
import numpy as np

from contrastive_jax import data as data_lib
from contrastive_jax.parallel import make_mesh, replicated
from contrastive_jax.train import loop, objective
from contrastive_jax.train.step import make_train_step
from tests.train import runs


def test_dropout_masks_follow_seed_and_step_not_call_history():
    mesh = make_mesh()
    config = runs.tiny_config()
    with runs.tiny_encoder():
        graphdef, rest, tx, schedule, state = loop.init_state(
            config, 10, steps_per_epoch=10, global_batch_size=32, total_steps=10
        )
    step = make_train_step(graphdef, rest, tx, objective.parse_terms(config.loss), schedule, mesh)
    rng = np.random.default_rng(0)
    batch = data_lib.make_global_batch(
        {
            "views": rng.normal(size=(32, 2, 16, 16, 3)).astype(np.float32),
            "label": rng.integers(0, 10, 32).astype(np.int32),
            "index": np.arange(32, dtype=np.int32),
        },
        mesh,
    )

    state = jax.device_get(state)  # host copies: the step donates its input

    def loss_at(step_number: int, seed_state=state) -> float:
        s = jax.device_put(seed_state._replace(step=np.int32(step_number)), replicated(mesh))
        return float(step(s, batch)[1]["loss"])

    first = loss_at(5)
    assert loss_at(5) == first  # same (seed, step): same masks, whatever ran before
    assert loss_at(6) != first  # next step: new masks
    other_seed = state._replace(rng=np.asarray(jax.random.key_data(jax.random.key(1))))
    assert loss_at(5, other_seed) != first
