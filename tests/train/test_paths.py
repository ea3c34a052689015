"""The trainer's own files go through one path layer that handles ``gs://`` (etils.epath).

Offline, ``gs://`` is an in-memory fsspec filesystem standing in for Google Cloud Storage:
epath's fsspec back end (the one it uses for ``gs://`` when TensorFlow is absent) opens
it. This exercises the path layer and every file the trainer, the metric logger, the
checkpoint bookkeeping (directory, listing, moving a damaged checkpoint aside) and the
evaluation write or read. It does not exercise Orbax's array writes: TensorStore opens
``gs://`` with its own GCS driver, which no in-memory filesystem stands in for;
``test_gcs.py`` runs the trainer against a local GCS emulator for that. An image folder in
the bucket is listed and read by the default input path as its local copy is, and a TFRecord
shard there is indexed in 16 MiB pieces and read one ranged request a record.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from etils.epath import gpath
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.registry import _registry as fsspec_registry
from orbax.checkpoint._src.path import gcs_utils

from contrastive_jax import data
from contrastive_jax.train import checkpoint, loop, paths, pretrained
from contrastive_jax.train.metrics_log import METRICS_FILE, MetricLogger
from tests.data.helpers import digits_config, write_image_folder


class _FakeGCS(MemoryFileSystem):
    """An in-memory bucket store answering to ``gs://``."""

    protocol = ("gs", "gcs")
    store: dict = {}
    pseudo_dirs = [""]

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(str(path).removeprefix("gs://"))


@pytest.fixture
def bucket(monkeypatch):
    """``gs://bucket``, empty, in memory."""
    monkeypatch.setattr(gpath, "_is_tf_installed", lambda: False)  # epath's fsspec back end
    monkeypatch.setitem(fsspec_registry, "gcs", _FakeGCS)  # gcsfs again afterwards
    _FakeGCS.store.clear()
    _FakeGCS.pseudo_dirs[:] = [""]
    gpath.backend_lib.fsspec_backend._get_filesystem.cache_clear()
    yield "gs://bucket"
    gpath.backend_lib.fsspec_backend._get_filesystem.cache_clear()


def _stored() -> list[str]:
    return sorted(_FakeGCS.store)


def test_the_path_layer_keeps_cloud_paths_and_absolutises_local_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert str(paths.as_path("gs://bucket/run")) == "gs://bucket/run"
    assert str(paths.as_path("run")) == str(tmp_path / "run")
    assert paths.is_cloud("gs://bucket") and not paths.is_cloud(str(tmp_path))


def test_the_work_directory_config_and_metrics_go_to_the_bucket(bucket):
    workdir = loop._prepare_workdir(f"{bucket}/run")
    assert str(workdir) == "gs://bucket/run"
    (workdir / pretrained.CONFIG_FILE).write_text(json.dumps({"seed": 3}))
    logger = MetricLogger(str(workdir), total_steps=2, start_step=0, images_per_step=8,
                          num_devices=1, enabled=True)
    logger.write(1, {"loss": 1.5})
    logger.write(2, {"loss": 1.25})
    logger.close()
    lines = (workdir / METRICS_FILE).read_text().splitlines()
    assert [json.loads(line)["loss"] for line in lines] == [1.5, 1.25]
    events = list((workdir / "tensorboard").iterdir())
    assert len(events) == 1 and events[0].name.startswith("events.out.tfevents")
    assert events[0].stat().length > 0
    assert all(key.startswith("/bucket/run/") for key in _stored()), _stored()
    assert pretrained.locate_checkpoint(str(workdir)) == ("gs://bucket/run", None)
    assert pretrained.locate_checkpoint(f"{workdir}/checkpoints/40") == ("gs://bucket/run", 40)
    assert pretrained.load_config(str(workdir)).seed == 3


def test_checkpoint_bookkeeping_in_the_bucket(bucket, monkeypatch):
    # Orbax asks the bucket (google-cloud-storage) whether it has a hierarchical namespace.
    monkeypatch.setattr(gcs_utils, "is_hierarchical_namespace_enabled", lambda path: False)
    checkpointer = checkpoint.Checkpointer(f"{bucket}/run", asynchronous=False)
    try:
        assert str(checkpointer.directory) == "gs://bucket/run/checkpoints"
        assert checkpointer.steps() == []
        (checkpointer.directory / "7" / "state").mkdir(parents=True)
        (checkpointer.directory / "7" / "state" / "data").write_text("x")
        checkpointer._quarantine(7, OSError("cut"))
        moved = list(checkpointer.damaged_directory.iterdir())
        assert [p.name.split("-")[0] for p in moved] == ["7"]
        assert (moved[0] / "state" / "data").read_text() == "x"
        assert not (checkpointer.directory / "7").exists()
    finally:
        checkpointer.close()


def test_an_image_folder_in_the_bucket_reads_as_its_local_copy(bucket, tmp_path):
    local = write_image_folder(str(tmp_path / "folder"), shape=(20, 24, 3), per_class=(8, 2))
    for parent, _, files in os.walk(local):
        for name in files:
            path = os.path.join(parent, name)
            target = gpath.PosixGPath(f"{bucket}/folder/{os.path.relpath(path, local)}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(open(path, "rb").read())
    batches = []
    for root in (local, f"{bucket}/folder"):
        config = digits_config(dataset="image_folder", data_dir=root, image_size=8,
                               global_batch_size=4, augmentation="simclr_imagenet")
        source = data.load_source(config)
        assert source.class_names == ("cat", "dog") and source.split("train").num_examples == 16
        batches.append(next(data.make_pretrain_iterator(config, seed=0, source=source)))
    assert batches[1].keys() == batches[0].keys()
    for key in batches[0]:
        np.testing.assert_array_equal(batches[1][key], batches[0][key])


def test_tfrecord_shards_in_the_bucket_are_indexed_in_pieces_and_read_by_range(bucket, tmp_path,
                                                                              monkeypatch):
    from tensorboardX.record_writer import RecordWriter

    from contrastive_jax.data import records, tfrecord

    local = str(tmp_path / "toy-train.tfrecord-00000-of-00001")
    payloads = [bytes([i]) * (1000 * i + 1) for i in range(12)]
    writer = RecordWriter(local)
    for payload in payloads:
        writer.write(payload)
    writer.close()
    remote = f"{bucket}/data/toy-train.tfrecord-00000-of-00001"
    gpath.backend_lib.fsspec_backend.fs(remote).put(local, remote)
    requests = []
    fetch = _FakeGCS.cat_file
    monkeypatch.setattr(_FakeGCS, "cat_file",
                        lambda self, path, start=None, end=None, **kw:
                        requests.append((start, end)) or fetch(self, path, start, end, **kw))
    shard = tfrecord.open_shard(remote)
    assert requests == [(0, tfrecord.REMOTE_CHUNK)]  # the whole shard in one piece
    rows = records.RecordSet("toy/train", records.TFRECORD, [records.Span(remote, 0, 12, 12)])
    order = [7, 0, 11, 3]
    requests.clear()
    assert rows.read(order) == [payloads[i] for i in order]
    assert sorted(requests) == sorted((int(shard.offsets[i]), int(shard.offsets[i + 1]))
                                      for i in order)  # one ranged request a record
