"""Linear evaluation and fine-tuning from a pretraining checkpoint (train/transfer.py,
eval/validation.py): the encoder restored and, when frozen, bit for bit unchanged; the
held-out top-1/top-5 reported as final and best; bad settings refused before the work
directory exists; every evaluation recipe trains two steps at a tiny size."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest
from flax import nnx

from contrastive_jax import configs
from contrastive_jax.errors import ConfigError, ExitCode, exit_code
from contrastive_jax.parallel import make_mesh
from contrastive_jax.train import loop, spec
from contrastive_jax.train.build import DataFacts, build
from contrastive_jax.train.pretrained import CONFIG_FILE, initialise, load_pretrained
from tests.test_configs import EVALUATION_RECIPES, smoke_overrides
from tests.train.cli_config import tiny_config
from tests.train.transfer_config import transfer_config


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> str:
    """A 2-step pretraining of the tiny CLI config."""
    workdir = str(tmp_path_factory.mktemp("transfer") / "pretrain")
    config = tiny_config(total_steps=2, checkpoint_every=2)
    config.train.compilation_cache_dir = ""
    loop.train(config, workdir)
    return workdir


def _leaves(module: nnx.Module, kind) -> list[np.ndarray]:
    return [np.asarray(a) for a in jax.tree.leaves(nnx.state(module, kind))]


@pytest.mark.slow
def test_linear_evaluation_keeps_the_encoder_and_reports_final_and_best(pretrained, tmp_path):
    config = transfer_config(total_steps=4, checkpoint_every=4)
    config.model.init_from = pretrained
    config.train.compilation_cache_dir = ""
    summary = loop.train(config, str(tmp_path / "linear"))
    before = load_pretrained(pretrained).network
    after = load_pretrained(str(tmp_path / "linear")).network
    for kind in (nnx.Param, nnx.BatchStat):  # restored, then left bit for bit as it was
        for a, b in zip(_leaves(before.encoder, kind), _leaves(after.encoder, kind), strict=True):
            np.testing.assert_array_equal(a, b)
    report = summary["validation"]
    assert [report["final"]["step"], report["final"]["epoch"]] == [4, 2.0]
    assert 0 <= report["final"]["top1"] <= report["final"]["top5"] <= 1
    with open(os.path.join(tmp_path, "linear", loop.VALIDATION_FILE), encoding="utf-8") as f:
        assert json.load(f) == report
    logged = [r for r in _metrics(tmp_path / "linear") if "val_top1" in r]
    assert [r["step"] for r in logged] == [2, 4]  # after each epoch of two steps
    assert report["final"]["top1"] == logged[-1]["val_top1"]
    top = max(logged, key=lambda r: r["val_top1"])  # the first of equals
    assert (report["best"]["step"], report["best"]["top1"]) == (top["step"], top["val_top1"])


def _metrics(workdir) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.slow  # beside the linear evaluation, the fixture's pretraining once
def test_fine_tuning_starts_from_the_encoder_and_the_heads_first_layer(pretrained):
    config = transfer_config()
    config.model.update(init_from=pretrained, trainable="all", init_head_layers=1)
    config.model.head.update(name="simclr_v2", num_hidden_layers=1, out_features=10)
    run_spec = spec.parse(config)
    run = build(run_spec, make_mesh(), DataFacts(64, 10, 16))
    state = initialise(run.state, run_spec)
    model = nnx.merge(run.graphdef, state.params, state.batch_stats, run.rest)
    source = load_pretrained(pretrained).network
    for kind in (nnx.Param, nnx.BatchStat):
        for ours, theirs in ((model.network.encoder, source.encoder),
                             (model.network.head.hidden_linears[0], source.head.hidden_linears[0]),
                             (model.network.head.hidden_bns[0], source.head.hidden_bns[0])):
            for a, b in zip(_leaves(ours, kind), _leaves(theirs, kind), strict=True):
                np.testing.assert_array_equal(a, b)
    assert model.network.head.out.kernel.shape == (32, 10)  # the new classifier
    config.model.init_head_layers = 2
    with pytest.raises(ConfigError, match="has 1 hidden layers"):
        initialise(run.state, spec.parse(config))


@pytest.mark.parametrize("change, message", [
    ({"trainable": "head"}, "init_from is empty"),
    ({"init_head_layers": 1}, "init_from is empty"),
    ({"trainable": "encoder"}, "config.model.trainable='encoder'"),
    ({"init_head_layers": -1}, "init_head_layers must be an int >= 0"),
])
def test_bad_transfer_settings_are_refused_at_parse(change, message):
    config = tiny_config()
    config.model.update(change)
    with pytest.raises(ConfigError, match=message):
        spec.parse(config)


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5])
def test_a_label_fraction_outside_0_1_is_refused_at_parse(fraction):
    config = tiny_config()
    config.data.label_fraction = fraction
    with pytest.raises(ConfigError, match=r"label_fraction must be in \(0, 1\]"):
        spec.parse(config)


@pytest.mark.slow  # beside the linear evaluation, the fixture's pretraining once
def test_a_missing_or_unreadable_init_from_is_refused_before_the_workdir(tmp_path, pretrained):
    empty = tmp_path / "no_checkpoints"
    empty.mkdir()
    (empty / CONFIG_FILE).write_text(open(os.path.join(pretrained, CONFIG_FILE)).read())
    for path, message in ((str(tmp_path / "absent"), "neither a pretraining work directory"),
                          (str(empty), "no checkpoint")):
        config = transfer_config()
        config.model.init_from = path
        workdir = tmp_path / "linear"
        with pytest.raises(ConfigError, match=message) as raised:
            loop.train(config, str(workdir))
        assert "config.model.init_from" in str(raised.value)
        assert exit_code(raised.value) == ExitCode.USAGE
        assert not workdir.exists()


@pytest.mark.slow  # beside the linear evaluation, the fixture's pretraining once
def test_an_encoder_other_than_the_pretrained_one_is_refused(tmp_path, pretrained):
    config = transfer_config()
    config.model.init_from = pretrained
    config.model.encoder.width = 0.25
    with pytest.raises(ConfigError, match="config.model.encoder.width=0.25"):
        loop.train(config, str(tmp_path / "linear"))
    assert not (tmp_path / "linear").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EVALUATION_RECIPES))
def test_evaluation_recipe_trains_two_steps_from_a_tiny_checkpoint(name, tmp_path):
    pretraining = smoke_overrides(configs.get(EVALUATION_RECIPES[name]))
    # Two steps at supcon_cifar10's peak lr 0.5 (its warm-up clamped to one step) leave batch-norm
    # scales near 100 whose 2-step running statistics overflow in inference mode; the
    # checkpoint is only the protocol's starting point, so it is pretrained gently.
    pretraining.optimizer.base_learning_rate = 1e-3
    loop.train(pretraining, str(tmp_path / "pretrain"))
    config = smoke_overrides(configs.get(name))
    config.model.init_from = str(tmp_path / "pretrain")
    if config.model.head.name != "classifier":  # the class scores: the digits' 10 classes
        config.model.head.out_features = 10
    if name.endswith("finetune"):
        config.data.label_fraction = 0.5
    summary = loop.train(config, str(tmp_path / name))
    assert summary["final_step"] == 2 and np.isfinite(summary["final_loss"])
    assert summary["validation"]["final"]["step"] == 2
    before = load_pretrained(str(tmp_path / "pretrain")).network
    after = load_pretrained(str(tmp_path / name)).network
    same = [np.array_equal(a, b) for a, b in zip(_leaves(before.encoder, nnx.Param),
                                                  _leaves(after.encoder, nnx.Param), strict=True)]
    assert all(same) if config.model.trainable == "head" else not all(same)


def test_the_best_evaluation_is_the_first_of_highest_top1():
    from contrastive_jax.eval.validation import Record, best

    records = [Record(2, 1.0, 0.5, 0.9), Record(4, 2.0, 0.7, 0.9), Record(6, 3.0, 0.7, 1.0)]
    assert best(records) == records[1] and best([]) is None
