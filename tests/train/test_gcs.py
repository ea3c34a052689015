"""``--workdir gs://bucket/run`` against a storage server: a local GCS emulator
(:mod:`tests.train.gcs_emulator`), which Orbax's TensorStore, ``etils.epath`` and through it
the config, the metric log and the TensorBoard events all write to over HTTP.

A run killed with SIGKILL and started again with the same command resumes from its last
checkpoint in the bucket and ends bit-identical to an uninterrupted run; the evaluation
restores the network from the bucket. With TensorFlow blocked, the default input path
pretrains from an image folder and from an ArrayRecord and a TFRecord TFDS dataset in the
bucket (the TFRecord shards indexed and read by ranged requests), with the losses of the same
run on a local copy.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from etils.epath import gpath
from flax import nnx
from fsspec.registry import _registry as fsspec_registry
from orbax.checkpoint._src.path import gcs_utils

from contrastive_jax.train import pretrained
from contrastive_jax.train.checkpoint import CHECKPOINT_DIR
from contrastive_jax.train.metrics_log import METRICS_FILE, MetricLogger
from tests.data import test_tf_free_pretrain as tf_free
from tests.train import gcs_emulator, runs

pytestmark = pytest.mark.slow

TOTAL = 6
FLAGS = (f"--config.train.total_steps={TOTAL}", "--config.train.checkpoint_every=2")


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """``gs://bucket`` on a fresh emulator; this process and the environment of
    :func:`cli_env`'s subprocesses reach it through the endpoint settings of
    :func:`gcs_emulator.environment`."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    log = open(tmp_path_factory.mktemp("gcs") / "emulator.log", "w+", encoding="utf-8")  # noqa: SIM115
    server = subprocess.Popen([sys.executable, "-m", "tests.train.gcs_emulator", str(port)],
                              cwd=runs.ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://localhost:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()  # the emulator's health check
            break
        except OSError:
            log.seek(0)
            assert server.poll() is None and time.monotonic() < deadline, log.read()
            time.sleep(0.1)
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, value in gcs_emulator.environment(url).items():
            monkeypatch.setenv(name, value)
        # This process's own reads go through gcsfs whatever the environment says later (a
        # test before this module, in the same worker, left epath choosing tf.io.gfile).
        monkeypatch.setattr(gpath, "_is_tf_installed", lambda: False)
        for protocol in ("gs", "gcs"):  # gcsfs, whatever another test registered
            monkeypatch.delitem(fsspec_registry, protocol, raising=False)
        gpath.backend_lib.fsspec_backend._get_filesystem.cache_clear()
        yield f"gs://{gcs_emulator.BUCKET}"
        gpath.backend_lib.fsspec_backend._get_filesystem.cache_clear()
    server.terminate()
    server.wait(timeout=30)
    log.close()


@pytest.fixture(scope="module")
def cli_env(bucket, tmp_path_factory) -> dict[str, str]:
    return runs.cli_env(cache_dir=str(tmp_path_factory.mktemp("jax_cache")))


def _run(workdir: str, log: str, env: dict[str, str]) -> int:
    return runs.start_pretrain(workdir, *FLAGS, env=env, log=log).wait(timeout=1200)


def _forget_listings() -> None:
    """Drops gcsfs's cached listings of this process: the runs write the bucket elsewhere."""
    gpath.backend_lib.fsspec_backend.fs("gs://").invalidate_cache()


def _finalised_steps(workdir: str) -> list[int]:
    """Checkpoints Orbax has committed in the bucket (it marks each with commit_success.txt)."""
    _forget_listings()
    folder = gpath.PosixGPath(f"{workdir}/{CHECKPOINT_DIR}")
    if not folder.exists():
        return []
    return sorted(int(p.name) for p in folder.iterdir()
                  if p.name.isdigit() and (p / "commit_success.txt").exists())


def _losses(workdir: str) -> dict[int, float]:
    _forget_listings()
    lines = gpath.PosixGPath(f"{workdir}/{METRICS_FILE}").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines)}


@pytest.fixture(scope="module")
def reference(bucket, cli_env, tmp_path_factory) -> str:
    workdir = f"{bucket}/reference"
    log = str(tmp_path_factory.mktemp("logs") / "reference.log")
    assert _run(workdir, log, cli_env) == 0, open(log).read()
    assert _finalised_steps(workdir) == [2, 4, 6]
    assert sorted(_losses(workdir)) == list(range(1, TOTAL + 1))
    return workdir


def test_sigkill_then_resume_in_the_bucket_is_exact(bucket, reference, cli_env, tmp_path):
    workdir, log = f"{bucket}/killed", str(tmp_path / "killed.log")
    proc = runs.start_pretrain(workdir, *FLAGS, env=cli_env, log=log)
    deadline = time.monotonic() + 900
    while not _finalised_steps(workdir):
        assert proc.poll() is None and time.monotonic() < deadline, open(log).read()
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = _finalised_steps(workdir)
    assert kept[-1] < TOTAL, f"the run had finished before the kill: {kept}"

    assert _run(workdir, log, cli_env) == 0, open(log).read()
    assert f"resumed from the checkpoint at step {kept[-1]} in gs://" in open(log).read()
    assert _finalised_steps(workdir)[-1] == TOTAL
    runs.assert_same_state(runs.read_state(workdir, TOTAL), runs.read_state(reference, TOTAL))
    # The metric lines reach the bucket before each checkpoint is saved: the killed run's are
    # kept up to its last checkpoint at least (and up to a later checkpoint it had begun to
    # save), the resumed run's, from that checkpoint on, follow them.
    assert _losses(workdir) == _losses(reference)
    _forget_listings()
    lines = gpath.PosixGPath(f"{workdir}/{METRICS_FILE}").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines]
    resumed_from = len(steps) - (TOTAL - kept[-1])
    assert steps[:kept[-1]] == list(range(1, kept[-1] + 1)), steps
    assert steps[resumed_from:] == list(range(kept[-1] + 1, TOTAL + 1)), steps


def test_evaluation_restores_the_network_from_the_bucket(reference):
    # Orbax asks the bucket whether it has a hierarchical namespace (google-cloud-storage);
    # the emulator answers as a flat bucket does.
    assert not gcs_utils.is_hierarchical_namespace_enabled(reference)
    model = pretrained.load_pretrained(reference)
    assert model.step == TOTAL and model.workdir == reference
    path = f"{reference}/{CHECKPOINT_DIR}/{TOTAL}/state"
    with ocp.PyTreeCheckpointer() as checkpointer:
        stored = checkpointer.metadata(path).item_metadata.tree
        as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), stored)
        state = checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=as_numpy))
    restored = nnx.state(model.network, nnx.Param).to_pure_dict()
    runs.assert_same_state(jax.tree.leaves(restored), jax.tree.leaves(state["params"]["network"]))
    features = model.network.encoder(np.zeros((2, 16, 16, 3), np.float32))
    assert features.shape[0] == 2 and np.all(np.isfinite(features))


def test_a_resumed_logger_keeps_the_earlier_lines_in_the_bucket(bucket):
    workdir = f"{bucket}/appended"
    for start, losses in ((0, (1.5, 1.25)), (2, (1.0,))):
        logger = MetricLogger(workdir, total_steps=3, start_step=start, images_per_step=8,
                              num_devices=1, enabled=True)
        for step, loss in enumerate(losses, start + 1):
            logger.write(step, {"loss": loss})
        logger.flush()  # at a checkpoint: in the bucket before the logger closes
        assert _losses(workdir)[start + len(losses)] == losses[-1]
        logger.close()
    assert _losses(workdir) == {1: 1.5, 2: 1.25, 3: 1.0}


@pytest.fixture(scope="module")
def datasets_here_and_in_the_bucket(bucket, tmp_path_factory):
    """kind -> ((dataset, local data_dir), (dataset, gs:// data_dir)): the same files."""
    root = str(tmp_path_factory.mktemp("datasets"))
    local = tf_free.write_datasets(root)
    gpath.backend_lib.fsspec_backend.fs("gs://").put(f"{root}/", f"{bucket}/data/",
                                                      recursive=True)
    _forget_listings()
    return {kind: ((name, data_dir), (name, f"{bucket}/data/{os.path.relpath(data_dir, root)}"))
            for kind, (name, data_dir) in local.items()}


@pytest.mark.parametrize("kind", tf_free.KINDS)
def test_pretrain_from_the_bucket_without_tensorflow(datasets_here_and_in_the_bucket, tmp_path,
                                                     kind):
    here, there = datasets_here_and_in_the_bucket[kind]
    assert there[1].startswith("gs://")
    env = tf_free.cli_env_without_tensorflow(tmp_path, 8, str(tmp_path / "jax_cache"))
    losses = []
    for name, data in (("local", here), ("bucket", there)):
        workdir = str(tmp_path / name)
        assert runs.run_pretrain(workdir, *tf_free.data_flags(data, 2), env=env) == 0, \
            runs.log_text(workdir)
        losses.append(runs.losses_by_step(workdir))
    assert sorted(losses[1]) == [1, 2] and losses[1] == losses[0]
