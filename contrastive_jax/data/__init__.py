"""Input pipeline: data sources, SimCLR-style augmentation, batches. No TensorFlow.

Quick use::

    from contrastive_jax import data

    config = data.default_data_config()          # digits, two views, batch 128
    source = data.load_source(config)
    train = data.make_pretrain_iterator(config, seed=0, start_step=0, source=source)
    batch = next(train)                          # {"views": uint8 [128, 2, 16, 16, 3], ...}
    arrays = train.on_device(data.make_global_batch(batch, mesh))  # normalised float32 views
    for batch in data.make_eval_iterator(config, "test", 256, source=source):
        ...                                      # {"image", "label", "index", "valid"}

Modules: :mod:`.config` (the data config, :class:`DataSpec`), :mod:`.base` (the source
interface), :mod:`.sources` (loading digits, phantoms, image folders, TFDS
datasets), :mod:`.arrays` (in-memory arrays as a source, registered dataset names),
:mod:`.records` (the TFRecord or ArrayRecord files of a prepared TFDS dataset, read by
row; :mod:`.tfrecord` indexes a TFRecord file and reads its frames),
:mod:`.digits`, :mod:`.synthetic`, :mod:`.augment_config` (the augmentation recipes and
presets), :mod:`.host_pipeline` (pretraining batches: grain on the host,
:mod:`.host_views` for the geometry, :mod:`.device_augment` for the appearance on the
accelerator), :mod:`.eval_iterator` (evaluation batches of a split), :mod:`.batching`
(processes' shares, global arrays) and :mod:`.vectors` (sources of feature vectors).

:mod:`.prepare` (``python -m contrastive_jax.data.prepare``: an optional one-off conversion
of an image folder or a TFRecord dataset to ArrayRecord) is the one module that needs
TensorFlow (the ``prepare`` extra).

Importing this package imports no module of it: each name above loads its module on
first use. The training step's label smoothing / MixUp / CutMix, which must import where the
pipeline's libraries (ml_collections, grain, ...) are not installed, as on JAX's accelerator
images, is :mod:`contrastive_jax.train.mixing`.
"""

import importlib
import importlib.util

from contrastive_jax._extras import require
from contrastive_jax.errors import CorruptImageError

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    **dict.fromkeys(
        ("array_source", "register_source", "registered_source", "unregister_source"), "arrays"
    ),
    **dict.fromkeys(
        ("PRESET_NAMES", "AugmentConfig", "augmentation_preset", "simclr_jitter"), "augment_config"
    ),
    **dict.fromkeys(("Source", "Split", "symmetric_label_noise"), "base"),
    **dict.fromkeys(("make_global_batch",), "batching"),
    **dict.fromkeys(("KNOWN_DATASETS", "DataSpec", "data_spec", "default_data_config"), "config"),
    **dict.fromkeys(("EvalIterator", "make_eval_iterator"), "eval_iterator"),
    **dict.fromkeys(("CorruptRecordError", "RecordSet"), "records"),
    **dict.fromkeys(("HostPretrainIterator", "make_pretrain_iterator"), "host_pipeline"),
    **dict.fromkeys(
        ("DatasetNotPreparedError", "class_balanced_subset", "load_source"),
        "sources",
    ),
}
#: What a module needs beyond JAX and NumPy (every other module: :data:`_PIPELINE`).
_NEEDS = {
    "base": (), "config": (), "augment_config": (), "batching": (),
    "device_augment": (), "label_subset": (), "host_views": ("PIL",),
    "tfrecord": ("google_crc32c", "etils"),
    "prepare": ("tensorflow", "tensorflow_datasets"),
}
#: What the modules that read datasets need.
_PIPELINE = ("grain", "PIL", "ml_collections", "sklearn", "scipy", "etils")


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        if importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        # A submodule (``data.digits``), loaded on first use like the names.
        require(f"contrastive_jax.data.{name}", _NEEDS.get(name, _PIPELINE),
                extra="prepare" if name == "prepare" else "train")
        return importlib.import_module(f"{__name__}.{name}")
    require("contrastive_jax.data", _NEEDS.get(module, _PIPELINE))
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "PRESET_NAMES",
    "AugmentConfig",
    "CorruptImageError",
    "CorruptRecordError",
    "DataSpec",
    "DatasetNotPreparedError",
    "EvalIterator",
    "HostPretrainIterator",
    "KNOWN_DATASETS",
    "RecordSet",
    "Source",
    "Split",
    "array_source",
    "augmentation_preset",
    "class_balanced_subset",
    "data_spec",
    "default_data_config",
    "load_source",
    "make_eval_iterator",
    "make_global_batch",
    "make_pretrain_iterator",
    "register_source",
    "registered_source",
    "simclr_jitter",
    "symmetric_label_noise",
    "unregister_source",
]
