"""The training core runs without TensorFlow, TFDS (and, for the step, ml_collections).

Each test runs a subprocess in which the blocked packages are absent as where they are not
installed (:mod:`tests.no_tensorflow`: ``importlib.util.find_spec`` returns None and an
import raises ModuleNotFoundError), as on an accelerator image that has JAX, Flax, optax and
Orbax only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.no_tensorflow import ROOT, absent_env

_PRELUDE = """
import importlib.util

from tests.no_tensorflow import loaded as _loaded

assert all(importlib.util.find_spec(name) is None for name in BLOCKED)


def loaded():
    return _loaded(BLOCKED)
"""


def _run(blocked: tuple[str, ...], body: str) -> str:
    script = f"BLOCKED = {blocked!r}\n" + _PRELUDE + textwrap.dedent(body)
    env = absent_env({**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
                     blocked)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=600, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_a_jitted_train_step_without_tensorflow_or_ml_collections():
    out = _run(("tensorflow", "tensorflow_datasets", "ml_collections"), """
        import jax, numpy as np
        from contrastive_jax import losses, models
        from contrastive_jax.parallel import make_mesh, replicated
        from contrastive_jax.train import checkpoint, optim
        from contrastive_jax.train.objective import parse_terms
        from contrastive_jax.train.step import init_state, make_train_step, nonfinite_record

        model = models.model_spec({
            "encoder": {"name": "small_cnn", "channels": (8,), "strides": (2,)},
            "head": {"out_features": 8}})
        optimizer = optim.resolve({"name": "sgd", "base_learning_rate": 0.1, "warmup_steps": 0})
        graphdef, rest, tx, schedule, state = init_state(
            model, optimizer, seed=0, probe_classes=4, steps_per_epoch=10, global_batch_size=8,
            total_steps=10)
        mesh = make_mesh()
        terms = parse_terms({"name": "supcon"})
        step = make_train_step(graphdef, rest, tx, terms, schedule, mesh)
        rng = np.random.default_rng(0)
        host = {"views": rng.standard_normal((8, 2, 8, 8, 3), np.float32),
                "label": np.arange(8, dtype=np.int32) % 4, "index": np.arange(8, dtype=np.int32)}
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        batch = {k: jax.device_put(v, sharding) for k, v in host.items()}
        state = jax.device_put(state, replicated(mesh))
        before = checkpoint.state_checksum(state.params)
        state, logged, record = step(state, batch,
                                     jax.device_put(nonfinite_record(terms), replicated(mesh)))
        assert int(state.step) == 1 and float(logged["finite"]) == 1.0
        assert checkpoint.state_checksum(state.params) != before
        assert callable(losses.get("sincere")) and models.ENCODER_NAMES
        assert isinstance(optim.OPTIMIZER_DEFAULTS, dict)
        print("loaded:", loaded(), "loss:", float(logged["loss"]))
        """)
    assert "loaded: []" in out, out


@pytest.mark.slow
def test_the_trainer_on_synthetic_data_without_tensorflow(tmp_path):
    out = _run(("tensorflow", "tensorflow_datasets"), f"""
        from contrastive_jax.train import loop
        from contrastive_jax.train.config import default_config
        from contrastive_jax.train.pretrained import load_pretrained

        config = default_config()
        config.data.dataset = "synthetic"
        config.data.image_size = 8
        config.data.source_kwargs = {{"num_examples": 64, "num_classes": 4}}
        config.data.global_batch_size = 8
        config.train.total_steps = 3
        config.train.checkpoint_every = 2
        config.train.log_every = 1
        config.train.compilation_cache_dir = ""
        config.model.encoder = {{"name": "small_cnn", "channels": (8,), "strides": (2,)}}
        config.model.head.out_features = 8
        config.optimizer.warmup_steps = 0
        summary = loop.train(config, {str(tmp_path)!r})
        assert summary["final_step"] == 3, summary
        restored = load_pretrained({str(tmp_path)!r})
        assert restored.step == 3
        print("loaded:", loaded(), "loss:", summary["final_loss"])
        """)
    assert "loaded: []" in out, out
