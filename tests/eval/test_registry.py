"""The evaluator protocol: a new evaluator is one class and one registry line, and then the
loop runs it at its interval and ``evaluate_checkpoint`` (``linear_eval --evaluators``) on a
checkpoint. The example below is the one docs/architecture.md describes."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from flax import nnx

from contrastive_jax import data
from contrastive_jax.errors import ConfigError
from contrastive_jax.eval import registry
from contrastive_jax.eval.checkpoint import evaluate_checkpoint, format_results
from contrastive_jax.eval.embed import embed_split
from contrastive_jax.eval.evaluator import Setup, due
from contrastive_jax.eval.probes import frozen_splits
from contrastive_jax.parallel import make_mesh
from contrastive_jax.train import loop
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import build_model
from tests.train import cli_config
from tests.train.runs import fast_runs  # noqa: F401  (autouse: this module's runs)


class FeatureNorm:
    """The mean L2 norm of the encoder's features of the first test examples: an evaluator
    in a dozen lines (its own module in contrastive_jax/eval/ in the package)."""

    metrics = ("feature_norm",)

    def __init__(self, setup: Setup) -> None:
        self.data, self.source = setup.spec.data, setup.source

    @classmethod
    def interval(cls, setup: Setup) -> int:
        return setup.spec.train.eval_every  # the kNN monitor's interval, for this example

    def run(self, network: nnx.Module, step: int) -> dict[str, float]:
        test = embed_split(network, self.data, "test", source=self.source, max_examples=64)
        return {"feature_norm": float(np.linalg.norm(test.features, axis=1).mean())}


@pytest.fixture
def with_feature_norm(monkeypatch):
    """``feature_norm`` in the registry (the registry line)."""
    monkeypatch.setitem(registry.EVALUATORS, "feature_norm", FeatureNorm)


def test_an_evaluator_runs_in_the_loop_at_its_interval_and_on_the_checkpoint(
        tmp_path, with_feature_norm):
    config = cli_config.tiny_config(total_steps=3, checkpoint_every=3)
    config.train.eval_every = 2
    config.train.knn_bank_size, config.train.knn_query_size = 200, 100
    loop.train(config, str(tmp_path))
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "feature_norm" in r] == [2, 3]  # every 2 and the last
    assert [r["step"] for r in logged if "knn_top1" in r] == [2, 3]  # beside the kNN monitor
    final = next(r["feature_norm"] for r in logged if r["step"] == 3)

    results = evaluate_checkpoint(str(tmp_path), evaluators=("feature_norm", "knn_monitor"))
    assert results["feature_norm"] == {"feature_norm": pytest.approx(final, rel=1e-5)}
    assert 0 <= results["knn_monitor"]["knn_top1"] <= 1
    assert re.search(r"\n  feature_norm +feature_norm \d", format_results(results))


def test_an_evaluation_due_at_a_step_that_is_no_log_or_checkpoint_step_runs(tmp_path):
    config = cli_config.tiny_config(total_steps=10, checkpoint_every=10)
    config.data.global_batch_size = 256  # 1437 digits: 5 steps an epoch
    config.train.log_every = 3
    config.train.validate_every_epochs = 1
    summary = loop.train(config, str(tmp_path))
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "val_top1" in r] == [5, 10]  # 5: neither log nor save
    assert summary["validation"]["final"]["step"] == 10
    assert json.loads((tmp_path / "validation.json").read_text()) == summary["validation"]


def test_an_unknown_evaluator_is_refused_naming_the_registered_ones(tmp_path):
    config = cli_config.tiny_config(total_steps=1, checkpoint_every=1)
    loop.train(config, str(tmp_path))
    with pytest.raises(ConfigError, match="no evaluator named 'nope'; the evaluators are "
                                          "knn_monitor, validation, linear, knn, ridge"):
        evaluate_checkpoint(str(tmp_path), evaluators=("nope",))


def test_the_probes_embed_once_per_network_and_step_and_each_network_they_are_given():
    spec = parse(cli_config.tiny_config())
    setup = Setup(spec, data.load_source(spec.data), make_mesh(), total_steps=1,
                  steps_per_epoch=1)
    first, second = (build_model(spec.model, seed=seed).network for seed in (0, 1))
    first.eval()
    second.eval()
    once = frozen_splits(setup, first, 0)
    assert frozen_splits(setup, first, 0) is once  # the three probes share one embedding
    other = frozen_splits(setup, second, 0)[1].features  # another network at the same step
    assert not np.allclose(other, once[1].features)


def test_every_registered_evaluator_follows_the_protocol():
    for name, cls in registry.EVALUATORS.items():
        assert callable(cls.interval) and callable(cls.run), name
        assert cls.metrics and all(isinstance(m, str) for m in cls.metrics), name


@pytest.mark.parametrize("interval, step, total, want", [
    (0, 4, 4, False), (2, 2, 5, True), (2, 3, 5, False), (2, 5, 5, True), (3, 6, 10, True),
])
def test_due_every_interval_and_at_the_last_step(interval, step, total, want):
    assert due(interval, step, total) is want
