"""The online kNN monitor: its top-1 is the weighted kNN of the encoder's features, logged."""

from __future__ import annotations

import dataclasses
import socket
import subprocess

import jax
import numpy as np
import pytest
from flax import nnx

from contrastive_jax import data
from contrastive_jax.errors import ConfigError
from contrastive_jax.eval import embed
from contrastive_jax.eval.evaluator import Setup
from contrastive_jax.eval.knn import knn_scores
from contrastive_jax.eval.knn_monitor import KnnMonitor
from contrastive_jax.parallel import make_mesh
from contrastive_jax.train import loop
from contrastive_jax.train.spec import parse
from contrastive_jax.train.step import init_state
from tests.train import cli_config, runs
from tests.train.tiny import SMALL_CNN, tiny_config


def _config(**train):
    """The tiny config with a small CNN encoder (the monitor reads any encoder's features the
    same way)."""
    config = tiny_config()
    config.model.encoder = dict(SMALL_CNN)
    config.train.eval_every = 2
    config.train.update(train)
    return config


def _monitor(config, source):
    return KnnMonitor(Setup(parse(config), source, make_mesh(), total_steps=6,
                            steps_per_epoch=22))


def _network(graphdef, rest, state):
    """The network of ``state`` in evaluation mode, as the loop hands it to an evaluator."""
    model = nnx.merge(graphdef, state.params, state.batch_stats, rest)
    model.eval()
    return model.network


def _state(config):
    spec = parse(config)
    graphdef, rest, _, _, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=10 if spec.train.online_probe else None, transfer=spec.transfer,
        steps_per_epoch=22, global_batch_size=64, total_steps=6)
    return graphdef, rest, state


@pytest.mark.slow
def test_top1_is_the_weighted_knn_of_the_eval_mode_features():
    config = _config(knn_bank_size=0, knn_query_size=0)  # the whole train and test splits
    source = data.load_source(config.data)
    monitor = _monitor(config, source)
    assert monitor.sizes == {"bank": 1437, "query": 360} and monitor.queries_from == "test"
    graphdef, rest, state = _state(config)
    got = monitor.run(_network(graphdef, rest, state), 0)
    model = nnx.merge(graphdef, state.params, state.batch_stats, rest)
    model.eval()
    bank = embed.embed_split(model.network, config.data, "train", source=source)
    test = embed.embed_split(model.network, config.data, "test", source=source)
    scores = knn_scores(bank.features, bank.labels, test.features, num_classes=10, k=20,
                        temperature=0.07)
    want = np.mean(np.argmax(scores, 1) == test.labels)
    assert abs(got["knn_top1"] - want) <= 1 / 360 + 1e-9  # one tie broken another way at most
    assert got["knn_top1"] > 0.3  # random conv features of digits: far above chance (0.1)
    assert got["knn_seconds"] > 0


@pytest.mark.slow
def test_evaluations_reuse_one_compiled_forward_pass_shared_with_embed_split():
    config = _config(knn_bank_size=200, knn_query_size=120)  # batches of 64 examples
    source = data.load_source(config.data)
    monitor = _monitor(config, source)
    graphdef, rest, state = _state(config)
    monitor.run(_network(graphdef, rest, state), 0)
    compiled = embed._forward._cache_size()
    moved = state._replace(params=jax.tree.map(lambda p: p * 1.5, state.params))
    got = monitor.run(_network(graphdef, rest, moved), 0)["knn_top1"]
    assert embed._forward._cache_size() == compiled  # no retrace at the next evaluation
    model = nnx.merge(graphdef, moved.params, moved.batch_stats, rest)
    model.eval()
    bank, query = (embed.embed_split(model.network, config.data, split, batch_size=64,
                                     source=monitor._source) for split in ("bank", "query"))
    first = embed.embed_split(model.network, config.data, "query", batch_size=64,
                              source=monitor._source, max_examples=100)
    assert embed._forward._cache_size() == compiled  # evaluation shares the cached jit
    assert (bank.features.shape[0], query.features.shape[0]) == (200, 120)
    np.testing.assert_array_equal(first.features, query.features[:100])
    scores = knn_scores(bank.features, bank.labels, query.features, num_classes=10, k=20,
                        temperature=0.07)
    assert got == np.mean(np.argmax(scores, 1) == query.labels)


def test_without_a_test_split_queries_are_training_examples_outside_the_bank():
    config = _config(knn_bank_size=500, knn_query_size=200)
    source = data.load_source(config.data)
    source = dataclasses.replace(source, splits={"train": source.split("train")})
    monitor = _monitor(config, source)
    bank, query = monitor.bank_split, monitor.query_split
    assert monitor.queries_from == "train"
    assert (bank.num_examples, query.num_examples) == (500, 200)
    assert not set(bank.example_ids()) & set(query.example_ids())
    assert np.bincount(bank.labels, minlength=10).min() == 50  # class-balanced
    graphdef, rest, state = _state(config)
    assert 0.3 < monitor.run(_network(graphdef, rest, state), 0)["knn_top1"] <= 1.0


@pytest.mark.parametrize("train, message", [
    ({"eval_every": 3}, "multiple of config.train.log_every"),
    ({"eval_every": -2}, "eval_every"),
    ({"knn_k": 600, "knn_bank_size": 500}, "knn_k=600"),
    ({"knn_temperature": 0.0}, "knn_temperature"),
    ({"knn_query_size": -1}, "knn_query_size"),
])
def test_bad_monitor_config_is_named(train, message):
    config = _config(**train)
    with pytest.raises(ConfigError, match=message):
        _monitor(config, data.load_source(config.data))


@pytest.mark.slow
def test_the_loop_logs_knn_top1_and_its_cost_at_eval_steps(tmp_path):
    config = cli_config.tiny_config(total_steps=4, checkpoint_every=4)
    config.train.log_every = 1
    config.train.eval_every = 2
    config.train.online_probe = True
    config.train.knn_bank_size = 300
    config.train.knn_query_size = 100
    with runs.tiny_encoder():
        loop.train(config, str(tmp_path))
    records = runs.metrics(str(tmp_path))
    evaluated = [r["step"] for r in records if "knn_top1" in r]
    assert evaluated == [2, 4]
    for r in records:
        if "knn_top1" in r:
            assert 0.0 <= r["knn_top1"] <= 1.0 and r["knn_seconds"] > 0
            assert "probe_accuracy" in r


KNN_FLAGS = ("--config.train.total_steps=2", "--config.train.checkpoint_every=2",
             "--config.train.eval_every=2", "--config.train.knn_bank_size=300",
             "--config.train.knn_query_size=100")


def _knn_records(workdir: str) -> list[dict]:
    return [r for r in runs.metrics(workdir) if "knn_top1" in r]


@pytest.mark.slow
def test_two_processes_log_the_knn_top1_of_one_process(tmp_path):
    """2 processes x 4 devices log (process 0 only) the 8-device single process's kNN top-1."""
    cache = str(tmp_path / "jax_cache")
    single = str(tmp_path / "single")
    assert runs.run_pretrain(single, *KNN_FLAGS, env=runs.cli_env(8, cache)) == 0, \
        runs.log_text(single)
    pair = str(tmp_path / "pair")
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    procs = []
    for pid in (0, 1):
        log = open(f"{pair}.p{pid}.log", "w", encoding="utf-8")  # noqa: SIM115
        command = runs.pretrain_command(
            pair, *KNN_FLAGS, f"--coordinator_address=localhost:{port}", "--num_processes=2",
            f"--process_id={pid}", "--heartbeat_timeout_seconds=10",
        )
        procs.append(subprocess.Popen(command, cwd=runs.ROOT, env=runs.cli_env(4, cache),
                                      stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    try:
        codes = [p.wait(timeout=1800) for p in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    logs = "".join(open(f"{pair}.p{pid}.log", encoding="utf-8").read() for pid in (0, 1))
    assert codes == [0, 0], logs
    one, two = _knn_records(single), _knn_records(pair)
    assert [r["step"] for r in one] == [r["step"] for r in two] == [2]  # logged once
    # The parameters agree to float32 summation order (test_multiprocess); a query whose two
    # nearest classes nearly tie may flip: 100 queries, at most 2 flips.
    assert abs(two[0]["knn_top1"] - one[0]["knn_top1"]) <= 0.02 + 1e-9, (one, two)
    assert one[0]["knn_top1"] > 0.3
