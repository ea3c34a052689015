"""Convert a dataset to TFDS ArrayRecord files, once; optional.

    # a folder of images <root>/<split>/<class>/<image>.{jpg,jpeg,png}
    python -m contrastive_jax.data.prepare --image_folder /data/ILSVRC --name imagenet_folder \
        --output_dir /data/tfds
    # a prepared TFDS dataset in TFRecord files (e.g. `tfds build imagenet2012`)
    python -m contrastive_jax.data.prepare --dataset imagenet2012 --data_dir /data/tfds \
        --output_dir /data/tfds_array_record

then pretrain with ``--config.data.dataset=NAME --config.data.data_dir=OUTPUT_DIR``.

Pretraining and evaluation read a TFDS dataset's TFRecord files directly, by row (each
shard indexed once, :mod:`contrastive_jax.data.tfrecord`), and an image folder as it is:
neither needs this converter. It serves where an ArrayRecord copy is wanted (a folder of
many small files made into a few large ones, or a team's ArrayRecord bucket); the copy holds
the same records in the same order, so it gives the same batches as the original.

This is the one module of the package that imports TensorFlow (TFDS writes a dataset from
an image folder through it; TFRecord shards are read by :mod:`contrastive_jax.data.tfrecord`):
install the ``prepare`` extra (``pip install 'contrastive_jax[prepare]'``). TensorFlow is
kept off every accelerator.

* From an image folder: one example per image, its file's bytes stored as they
  are (no re-encoding: JPEGs stay JPEGs), ``label`` the index of its class folder in sorted order (as
  ``tfds.ImageFolder``); one split per split folder; records shuffled by TFDS.
* From a TFDS dataset: its TFRecord shards are rewritten one for one as
  ArrayRecord shards (as ``tfds convert_format`` does), with its ``dataset_info.json`` and,
  for a dataset with builder configs, TFDS's record of the default one
  (``<name>/.config/metadata.json``), so the copy is found by the dataset's name.

The result is written in a hidden temporary folder of ``--output_dir`` and
moved into place (``<output_dir>/<name>/[<config>/]<version>``) only when
complete: a failed or interrupted run leaves nothing half-written. An
existing prepared version is never overwritten.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from absl import app, flags

from contrastive_jax._cli import parse_flags
from contrastive_jax._extras import require
from contrastive_jax.data import records as records_lib
from contrastive_jax.data import sources, tfrecord
from contrastive_jax.data._tfds_source import tfds_builder

require("contrastive_jax.data.prepare", ("tensorflow", "tensorflow_datasets"), extra="prepare")

#: Version given to datasets prepared from an image folder.
FOLDER_VERSION = "1.0.0"


def _tensorflow():
    """TensorFlow with every GPU and TPU hidden from it (it only reads files here)."""
    import tensorflow as tf

    for kind in ("GPU", "TPU"):
        try:
            tf.config.set_visible_devices([], kind)
        except RuntimeError:  # initialised before; it then keeps the devices it saw
            pass
    return tf


class PrepareError(ValueError):
    """Bad input to the converter; the message says what and where."""


def _move_into_place(built: str, target: str) -> str:
    if os.path.exists(target):
        raise PrepareError(f"{target} already exists; remove it or choose another --output_dir")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.rename(built, target)
    return target


def from_image_folder(root: str, name: str, output_dir: str, *, shards: int | None = None) -> str:
    """Writes the image folder ``root`` as the TFDS dataset ``name`` in ArrayRecord files.

    Args:
      root: ``<root>/<split>/<class>/<image>``; every split folder must hold
        the same class folders.
      name: dataset name (a valid TFDS name: lower case, digits, ``_``).
      output_dir: TFDS data directory to write into.
      shards: files per split (None: TFDS's choice, about 1 GiB each).

    Returns:
      The prepared version folder ``<output_dir>/<name>/1.0.0``.
    """
    import tensorflow_datasets as tfds

    _tensorflow()  # TFDS encodes the examples through it
    target = os.path.join(output_dir, name, FOLDER_VERSION)
    if os.path.exists(target):
        raise PrepareError(f"{target} already exists; remove it or choose another --output_dir")
    if not sources.is_image_folder(root):
        raise PrepareError(
            f"{root} is not a folder of images <root>/<split>/<class>/<image>.(jpg|jpeg|png)"
        )
    # Listing only: placeholder statistics, no image is decoded for them.
    listed = sources.image_folder_source(root, name=name, stats=((0.0,) * 3, (1.0,) * 3))
    features = tfds.features.FeaturesDict({
        "image": tfds.features.Image(shape=(None, None, 3)),
        "label": tfds.features.ClassLabel(names=list(listed.class_names)),
    })
    split_examples = {
        split_name: [
            (i, {"image": str(path), "label": int(label)})
            for i, (path, label) in enumerate(zip(split.paths, split.labels, strict=True))
        ]
        for split_name, split in listed.splits.items()
    }
    os.makedirs(output_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".prepare-", dir=output_dir) as work:
        download_config = tfds.download.DownloadConfig(num_shards=shards) if shards else None
        tfds.dataset_builders.store_as_tfds_dataset(
            name=name,
            version=FOLDER_VERSION,
            features=features,
            split_datasets=split_examples,
            data_dir=work,
            file_format=records_lib.ARRAY_RECORD,
            download_config=download_config,
            description=f"Images of the folder {os.path.abspath(root)}.",
        )
        return _move_into_place(os.path.join(work, name, FOLDER_VERSION), target)


def from_tfds(name: str, data_dir: str, output_dir: str) -> str:
    """Rewrites the prepared TFRecord TFDS dataset ``name`` of ``data_dir`` as ArrayRecord.

    Every TFRecord shard becomes one ArrayRecord shard holding the same
    records in the same order (so every example keeps its row; their CRC-32Cs are checked);
    the metadata files are copied, with ``dataset_info.json`` naming the new format, and so
    is the default-config marker of a dataset with builder configs.

    Args:
      name: TFDS name, optionally ``name/config`` or ``name/config:version``.
      data_dir: the TFDS data directory holding it.
      output_dir: another TFDS data directory to write the converted copy into.

    Returns:
      The prepared version folder ``<output_dir>/<name>/[<config>/]<version>``.

    Raises:
      PrepareError: bad arguments, an existing target, or a corrupt record
        (the message names the file and the record's index).
    """
    import json

    from array_record.python.array_record_module import ArrayRecordWriter

    if os.path.abspath(output_dir) == os.path.abspath(data_dir):
        raise PrepareError("--output_dir must differ from --data_dir (the copy is written beside)")
    builder = tfds_builder(name, data_dir, download=False)
    file_format = str(getattr(builder.info.file_format, "value", builder.info.file_format))
    if file_format != records_lib.TFRECORD:
        raise PrepareError(f"{name} in {data_dir} is in {file_format} files, not TFRecord")
    version_dir = str(builder.data_dir)
    target = os.path.join(output_dir, os.path.relpath(version_dir, data_dir))
    if os.path.exists(target):
        raise PrepareError(f"{target} already exists; remove it or choose another --output_dir")
    os.makedirs(output_dir, exist_ok=True)
    suffix = f".{records_lib.TFRECORD}-"
    with tempfile.TemporaryDirectory(prefix=".prepare-", dir=output_dir) as work:
        built = os.path.join(work, "version")
        os.makedirs(built)
        for entry in sorted(os.listdir(version_dir)):
            source_path = os.path.join(version_dir, entry)
            if suffix not in entry:
                if os.path.isfile(source_path):
                    shutil.copy2(source_path, os.path.join(built, entry))
                continue
            out = os.path.join(built, entry.replace(suffix, f".{records_lib.ARRAY_RECORD}-"))
            writer = ArrayRecordWriter(out, "group_size:1")
            try:
                shard = tfrecord.open_shard(source_path)
                for index in range(len(shard)):
                    writer.write(shard.record(index))
            except tfrecord.FrameError as e:
                raise PrepareError(
                    f"record {e.index} of {entry} ({source_path}) cannot be read: {e}"
                ) from e
            finally:
                writer.close()
        info_path = os.path.join(built, "dataset_info.json")
        with open(info_path, encoding="utf-8") as f:
            info = json.load(f)
        info["fileFormat"] = records_lib.ARRAY_RECORD
        info.pop("alternativeFileFormats", None)
        with open(info_path, "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
        marker = _default_config_marker(data_dir, version_dir)
        moved = _move_into_place(built, target)
    if marker is not None:
        _copy_marker(marker, os.path.join(output_dir, os.path.relpath(marker, data_dir)))
    return moved


def _default_config_marker(data_dir: str, version_dir: str) -> str | None:
    """TFDS's record of a dataset's default builder config, ``<name>/.config/metadata.json``,
    when ``version_dir`` is ``<data_dir>/<name>/<config>/<version>`` and it exists: without it
    the dataset is found only as ``name/config``, not by its name."""
    parts = os.path.relpath(version_dir, data_dir).split(os.sep)
    if len(parts) != 3:
        return None
    marker = os.path.join(data_dir, parts[0], ".config", "metadata.json")
    return marker if os.path.isfile(marker) else None


def _copy_marker(source: str, target: str) -> None:
    """Copies the default-config marker unless the output already has one (written by an
    earlier conversion of another config of the same dataset, which names the same default)."""
    if os.path.exists(target):
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    temporary = f"{target}.{os.getpid()}.incomplete"
    shutil.copyfile(source, temporary)
    os.replace(temporary, target)


_FOLDER = flags.DEFINE_string("image_folder", None, "Image folder <root>/<split>/<class>/<image>.")
_NAME = flags.DEFINE_string("name", None, "Name of the dataset made from --image_folder.")
_DATASET = flags.DEFINE_string("dataset", None, "Prepared TFRecord TFDS dataset to convert.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "TFDS data directory holding --dataset.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "TFDS data directory to write into.")
_SHARDS = flags.DEFINE_integer("shards", None, "Files per split (--image_folder only).")


def main(argv: list[str]) -> int:
    del argv
    try:
        if _OUTPUT_DIR.value is None:
            raise PrepareError("--output_dir is required")
        if (_FOLDER.value is None) == (_DATASET.value is None):
            raise PrepareError("give exactly one of --image_folder and --dataset")
        if _FOLDER.value is not None:
            if not _NAME.value:
                raise PrepareError("--image_folder needs --name")
            path = from_image_folder(_FOLDER.value, _NAME.value, _OUTPUT_DIR.value,
                                     shards=_SHARDS.value)
            name = _NAME.value
        else:
            if _DATA_DIR.value is None:
                raise PrepareError("--dataset needs --data_dir")
            path = from_tfds(_DATASET.value, _DATA_DIR.value, _OUTPUT_DIR.value)
            name = _DATASET.value.split(":")[0]
    except (PrepareError, sources.DatasetNotPreparedError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"prepared {path}\nuse it with --config.data.dataset={name} "
          f"--config.data.data_dir={os.path.abspath(_OUTPUT_DIR.value)}")
    return 0


def _run() -> None:
    app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
    _run()
