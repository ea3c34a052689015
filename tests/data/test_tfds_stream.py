"""Prepared TFDS datasets read by row (TFRecord and ArrayRecord), the optional converter from
TFRecord and image folders, and their errors.

Small datasets of variable-size JPEG images are prepared in a temporary data directory in
both formats (3 shards per split, records in example order, so row ``r`` of a split has
label ``r % 3``); the TFRecord one is also converted to ArrayRecord by
:mod:`contrastive_jax.data.prepare` (its ArrayRecord copy), which must give the same batches.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.data import prepare, records, sources
from contrastive_jax.data._resolve import IMAGENET_CROP_FRACTION
from tests.data.helpers import digits_config, write_image_folder, write_tfds_dataset

FORMATS = (records.ARRAY_RECORD, records.TFRECORD)
NAME = "varimg"
AR = records.ARRAY_RECORD


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory) -> dict[str, str]:
    """``file_format -> data_dir`` holding ``varimg`` (48 train / 20 test) in that format."""
    return {
        fmt: write_tfds_dataset(str(tmp_path_factory.mktemp(fmt)), NAME, fmt, shards=3)
        for fmt in FORMATS
    }


def _config(data_dir: str, **overrides):
    settings = dict(dataset=NAME, data_dir=data_dir, image_size=16, global_batch_size=8)
    return digits_config(**{**settings, **overrides})


@pytest.fixture(scope="module")
def loaded(data_dirs) -> dict[str, data.Source]:
    return {fmt: data.load_source(_config(data_dirs[fmt])) for fmt in FORMATS}


@pytest.fixture(scope="module")
def array_record_copy(data_dirs, tmp_path_factory) -> str:
    """The TFRecord dataset converted to ArrayRecord by ``prepare`` (the same records in the
    same order)."""
    out = str(tmp_path_factory.mktemp("copy"))
    prepare.from_tfds(NAME, data_dirs[records.TFRECORD], out)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_variable_size_dataset_is_streamed(loaded, fmt):
    source = loaded[fmt]
    train = source.split("train")
    assert train.streamed and train.records.file_format == fmt
    assert train.num_examples == 48 and source.split("test").num_examples == 20
    assert source.image_shape == (None, None, 3) and source.num_classes == 3
    assert len(train.records.spans) == 3
    assert train.records.locate(17) == (train.records.spans[1].filename, 1)
    assert all(0.3 < m < 0.7 for m in source.mean)  # uniform random pixels


@pytest.mark.parametrize("fmt", FORMATS)
def test_eval_reads_every_row_once_with_its_label(loaded, data_dirs, fmt):
    config = _config(data_dirs[fmt])
    batches = list(data.make_eval_iterator(config, "test", 8, source=loaded[fmt]))
    index = np.concatenate([b["index"] for b in batches])
    valid = np.concatenate([b["valid"] for b in batches])
    label = np.concatenate([b["label"] for b in batches])
    np.testing.assert_array_equal(index[valid], np.arange(20))
    np.testing.assert_array_equal(label[valid], np.arange(20) % 3)
    assert (index[~valid] == -1).all() and batches[0]["image"].shape == (8, 16, 16, 3)
    # Two processes: each reads its slots; together they are the one-process batches.
    halves = [list(data.make_eval_iterator(config, "test", 8, source=loaded[fmt],
                                           process_index=i, process_count=2)) for i in (0, 1)]
    for b, batch in enumerate(batches):
        for key in ("index", "image", "valid"):
            np.testing.assert_array_equal(
                np.concatenate([halves[0][b][key], halves[1][b][key]]), batch[key]
            )


def test_eval_default_crop_fraction_for_variable_size(loaded, data_dirs):
    config = _config(data_dirs[records.ARRAY_RECORD])
    it = data.make_eval_iterator(config, "test", 8, source=loaded[records.ARRAY_RECORD])
    assert it._crop_fraction == IMAGENET_CROP_FRACTION
    config.eval_crop_fraction = 1.0
    it = data.make_eval_iterator(config, "test", 8, source=loaded[records.ARRAY_RECORD])
    assert it._crop_fraction == 1.0


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.slow
def test_pretrain_batches_resume_exactly_and_split_over_processes(loaded, data_dirs, fmt):
    config = _config(data_dirs[fmt])
    source = loaded[fmt]
    it = data.make_pretrain_iterator(config, seed=3, start_step=0, source=source)
    batches = [next(it) for _ in range(9)]  # past the end of the first epoch (6 steps)
    assert batches[0]["views"].shape == (8, 2, 16, 16, 3)
    for b in batches:
        np.testing.assert_array_equal(b["label"], b["index"] % 3)
        assert len(set(b["index"].tolist())) == 8
    epoch = np.concatenate([b["index"] for b in batches[: it.steps_per_epoch]])
    assert len(set(epoch.tolist())) == len(epoch)  # no example twice in an epoch
    resumed = data.make_pretrain_iterator(config, seed=3, start_step=7, source=source)
    for step in (7, 8):
        again = next(resumed)
        for key in ("views", "index", "label"):
            np.testing.assert_array_equal(again[key], batches[step][key])
    parts = [
        next(data.make_pretrain_iterator(config, seed=3, start_step=4, source=source,
                                         process_index=i, process_count=2))
        for i in (0, 1)
    ]
    for key in ("views", "index"):
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), batches[4][key])
    assert not set(parts[0]["index"].tolist()) & set(parts[1]["index"].tolist())
    other = next(data.make_pretrain_iterator(config, seed=4, start_step=0, source=source))
    assert not np.array_equal(other["views"], batches[0]["views"])


def test_tfrecord_and_its_array_record_copy_give_the_same_batches(loaded, data_dirs,
                                                                 array_record_copy):
    tf_records = loaded[records.TFRECORD]
    copy = data.load_source(_config(array_record_copy))
    assert copy.split("train").records.file_format == AR
    assert tf_records.split("train").records.file_format == records.TFRECORD
    assert copy.mean == tf_records.mean and copy.std == tf_records.std
    config = _config(data_dirs[records.TFRECORD])
    for start, process in ((0, None), (5, 0), (5, 1)):  # across the epoch's end (6 steps)
        split = {} if process is None else {"process_index": process, "process_count": 2}
        a, b = (data.make_pretrain_iterator(config, seed=7, start_step=start, source=source,
                                            **split) for source in (tf_records, copy))
        for _ in range(2):
            x, y = next(a), next(b)
            assert x.keys() == y.keys()
            for key in x:
                np.testing.assert_array_equal(x[key], y[key])
    for x, y in zip(data.make_eval_iterator(config, "test", 8, source=tf_records),
                    data.make_eval_iterator(config, "test", 8, source=copy), strict=True):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])


def test_reading_a_tfrecord_dataset_writes_nothing_in_its_data_directory(data_dirs, tmp_path,
                                                                           monkeypatch):
    import shutil

    root = str(tmp_path / "data")
    shutil.copytree(data_dirs[records.TFRECORD], root)
    cache = str(tmp_path / "cache")
    monkeypatch.setenv("CONTRASTIVE_JAX_INDEX_DIR", cache)

    def tree() -> list[tuple[str, int, int]]:
        paths = [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]
        return sorted((p, os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths)

    before = tree()
    source = data.load_source(_config(root))
    assert len(source.split("train").records.read(range(48))) == 48
    assert tree() == before  # the data directory may be read-only
    shards = sorted(os.path.basename(span.filename)
                    for span in source.split("train").records.spans)
    assert sorted(name.split(".npy")[0].rsplit(".", 1)[0]
                  for name in os.listdir(cache)) == shards  # one index a train shard


# --------------------------------------------------------------------------- memory or stream


@pytest.mark.slow
def test_small_fixed_size_dataset_is_loaded_into_memory_unless_told(tmp_path):
    import tensorflow_datasets as tfds

    images = np.random.default_rng(0).integers(0, 256, (12, 8, 8, 3), dtype=np.uint8)
    tfds.dataset_builders.store_as_tfds_dataset(
        name="fixed8",
        version="1.0.0",
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(8, 8, 3)),
            "label": tfds.features.ClassLabel(num_classes=2),
        }),
        split_datasets={"train": [(i, {"image": images[i], "label": i % 2}) for i in range(12)]},
        data_dir=str(tmp_path),
        file_format=AR,
        disable_shuffling=True,
    )
    config = digits_config(dataset="fixed8", data_dir=str(tmp_path), global_batch_size=4)
    memory = data.load_source(config)
    assert memory.split("train").images is not None and memory.image_shape == (8, 8, 3)
    config.in_memory = False
    streamed = data.load_source(config)
    assert streamed.split("train").streamed and streamed.image_shape == (8, 8, 3)
    assert streamed.mean == pytest.approx(memory.mean, abs=1e-6)
    # Same pixels either way: evaluation batches agree.
    a = next(iter(data.make_eval_iterator(config, "train", 4, source=memory)))
    b = next(iter(data.make_eval_iterator(config, "train", 4, source=streamed)))
    np.testing.assert_allclose(a["image"], b["image"], atol=1e-6)


def test_variable_size_dataset_cannot_be_forced_into_memory(data_dirs):
    with pytest.raises(ValueError, match="variable-size images"):
        data.load_source(_config(data_dirs[AR], in_memory=True))


# --------------------------------------------------------------------------- errors


def test_unprepared_dataset_lists_what_data_dir_holds(data_dirs, tmp_path):
    with pytest.raises(data.DatasetNotPreparedError) as info:
        data.load_source(_config(data_dirs[records.TFRECORD], dataset="imagenet2012"))
    message = str(info.value)
    assert "'imagenet2012'" in message and "it holds: varimg/1.0.0" in message
    assert "tfds build imagenet2012 --data_dir=DIR" in message
    with pytest.raises(data.DatasetNotPreparedError, match="it does not exist"):
        data.load_source(_config(str(tmp_path / "nowhere")))
    with pytest.raises(data.DatasetNotPreparedError, match="holds no prepared TFDS dataset"):
        data.load_source(_config(str(tmp_path)))


def test_unknown_split_names_the_available_ones(loaded):
    with pytest.raises(ValueError, match=r"no split 'validation'; available: \['test', 'train'\]"):
        loaded[records.ARRAY_RECORD].split("validation")


def test_missing_label_feature_lists_the_features(tmp_path):
    import tensorflow_datasets as tfds

    tfds.dataset_builders.store_as_tfds_dataset(
        name="nolabel",
        version="1.0.0",
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3)),
            "class_id": tfds.features.ClassLabel(num_classes=2),
        }),
        split_datasets={"train": [(0, {"image": np.zeros((5, 4, 3), np.uint8), "class_id": 1})]},
        data_dir=str(tmp_path),
    )
    with pytest.raises(ValueError, match=r"no 'label' feature; its features: \['class_id', 'image'\]"):
        data.load_source(digits_config(dataset="nolabel", data_dir=str(tmp_path)))


def test_label_noise_and_subsets_need_labels_in_memory(loaded, data_dirs):
    config = _config(data_dirs[records.ARRAY_RECORD], label_noise=0.2)
    with pytest.raises(ValueError, match="label_noise needs a dataset held in memory"):
        data.make_pretrain_iterator(config, seed=0, source=loaded[records.ARRAY_RECORD])
    with pytest.raises(ValueError, match="train_subset"):
        data.load_source(_config(data_dirs[records.ARRAY_RECORD], train_subset=12))


@pytest.fixture(scope="module")
def corrupt_dirs(tmp_path_factory) -> dict[str, str]:
    """``format -> data_dir`` of ``broken``, one shard per split, whose train row 5 is not an
    image."""
    import tensorflow_datasets as tfds

    from tests.data.helpers import variable_size_examples

    examples = variable_size_examples(16, 0)
    examples[5]["image"] = b"\xff\xd8 not a jpeg"  # stored as given
    out = {}
    for fmt in FORMATS:
        root = str(tmp_path_factory.mktemp(f"corrupt_{fmt}"))
        tfds.dataset_builders.store_as_tfds_dataset(
            name="broken",
            version="1.0.0",
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
                "label": tfds.features.ClassLabel(num_classes=3),
            }),
            split_datasets={"train": list(enumerate(examples)), "test": list(enumerate(examples))},
            data_dir=root,
            file_format=fmt,
            disable_shuffling=True,
        )
        out[fmt] = root
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_corrupt_record_names_file_and_index(corrupt_dirs, fmt):
    config = digits_config(dataset="broken", data_dir=corrupt_dirs[fmt], image_size=16,
                           global_batch_size=16, mean=(0.5,) * 3, std=(0.25,) * 3)
    source = data.load_source(config)
    pattern = rf"broken/train: record 5 of broken-train\.{fmt}-00000-of-00001 \(.*\) cannot be"
    with pytest.raises(records.CorruptRecordError, match=pattern):
        next(data.make_pretrain_iterator(config, seed=0, source=source))
    with pytest.raises(records.CorruptRecordError, match=pattern):
        list(data.make_eval_iterator(config, "train", 8, source=source))


# --------------------------------------------------------------------------- converter


def test_prepare_image_folder_as_array_record(tmp_path):
    folder = write_image_folder(str(tmp_path / "folder"), shape=(30, 20, 3))
    out = str(tmp_path / "tfds")
    path = prepare.from_image_folder(folder, "pets", out)
    assert path == os.path.join(out, "pets", "1.0.0")
    assert os.listdir(out) == ["pets"]  # no temporary folder left
    source = data.load_source(digits_config(dataset="pets", data_dir=out, global_batch_size=4))
    train = source.split("train")
    assert train.records.file_format == AR and train.num_examples == 12
    assert source.class_names == ("cat", "dog") and source.image_shape == (None, None, 3)
    # Stored bytes are the files' bytes: labels and pixels match the folder's.
    folder_source = data.load_source(digits_config(dataset="image_folder", data_dir=folder))
    by_bytes = {open(p, "rb").read(): k for p, k in zip(folder_source.split("train").paths,
                                                         folder_source.split("train").labels,
                                                         strict=True)}
    for record in train.records.read(range(12)):
        image, label = train.records.parse_bytes(record)
        assert by_bytes[image] == label
    with pytest.raises(prepare.PrepareError, match="already exists"):
        prepare.from_image_folder(folder, "pets", out)
    with pytest.raises(prepare.PrepareError, match="not a folder of images"):
        prepare.from_image_folder(str(tmp_path), "other", out)


def _tfrecords(data_dir: str, split: str) -> list[bytes]:
    """The serialized records of a TFRecord split, shard after shard (read by TensorFlow)."""
    tf = pytest.importorskip("tensorflow")
    files = sorted(glob.glob(os.path.join(data_dir, NAME, "1.0.0", f"*{split}.tfrecord*")))
    return [r for f in files for r in tf.data.TFRecordDataset(f).as_numpy_iterator()]


def test_prepare_tfrecord_dataset_as_array_record(data_dirs, tmp_path):
    out = str(tmp_path / "converted")
    path = prepare.from_tfds(NAME, data_dirs[records.TFRECORD], out)
    assert path == os.path.join(out, NAME, "1.0.0") and os.listdir(out) == [NAME]
    converted = data.load_source(_config(out)).split("train").records
    assert converted.file_format == AR and converted.num_examples == 48
    by_tensorflow = _tfrecords(data_dirs[records.TFRECORD], "train")
    assert converted.read(range(48)) == by_tensorflow
    direct = data.load_source(_config(data_dirs[records.TFRECORD])).split("train").records
    assert direct.read(range(48)) == by_tensorflow  # our reader, TensorFlow's writer
    with pytest.raises(prepare.PrepareError, match="not TFRecord"):
        prepare.from_tfds(NAME, out, str(tmp_path / "again"))


def test_prepare_failure_leaves_nothing_behind(data_dirs, tmp_path):
    import shutil

    root = str(tmp_path / "damaged")
    shutil.copytree(data_dirs[records.TFRECORD], root)
    first = sorted(glob.glob(os.path.join(root, NAME, "1.0.0", "*train.tfrecord*")))[0]
    with open(first, "r+b") as f:
        f.seek(40)
        f.write(b"\x00" * 8)
    out = str(tmp_path / "out")
    with pytest.raises(prepare.PrepareError, match=r"record \d+ of varimg-train\.tfrecord-00000"):
        prepare.from_tfds(NAME, root, out)
    assert os.listdir(out) == []


def test_prepare_cli_errors(capsys):
    from absl import flags

    flags.FLAGS(["prepare", "--output_dir=/tmp/x", "--image_folder=/a", "--dataset=b"])
    try:
        assert prepare.main([]) == 2
        assert "exactly one of --image_folder and --dataset" in capsys.readouterr().err
    finally:
        flags.FLAGS.unparse_flags()
    assert sources.is_image_folder("/nonexistent") is False


def test_a_dataset_with_a_builder_config_is_read_and_converted_by_its_name(tmp_path):
    """Written with a builder config (``name/default/1.0.0``, as every ``TfDataBuilder``
    dataset is), it is found by its name in TFRecord files and in the converter's copy."""
    import tensorflow_datasets as tfds

    from tests.data.helpers import variable_size_examples

    source_dir, out = str(tmp_path / "tfds"), str(tmp_path / "copy")
    examples = list(enumerate(variable_size_examples(16, 0)))
    tfds.dataset_builders.store_as_tfds_dataset(
        name="shapes_var", version="1.0.0", config="default",
        features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
            "label": tfds.features.ClassLabel(num_classes=3),
        }),
        split_datasets={"train": examples, "test": examples[:4]},
        data_dir=source_dir, file_format=records.TFRECORD, disable_shuffling=True,
    )
    config = digits_config(dataset="shapes_var", data_dir=source_dir, image_size=16,
                           global_batch_size=8)
    direct = data.load_source(config).split("train").records
    path = prepare.from_tfds("shapes_var", source_dir, out)
    assert path == os.path.join(out, "shapes_var", "default", "1.0.0")
    assert os.path.isfile(os.path.join(out, "shapes_var", ".config", "metadata.json"))
    config.data_dir = out
    copy = data.load_source(config).split("train").records
    assert copy.file_format == AR and copy.read(range(16)) == direct.read(range(16))
