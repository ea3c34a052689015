"""Input pipeline: data sources, SimCLR-style augmentation, soft targets.

Quick use::

    from contrastive_jax import data

    config = data.default_data_config()          # digits, two views, batch 128
    source = data.load_source(config)
    train = data.make_pretrain_iterator(config, seed=0, start_step=0, source=source)
    batch = next(train)                          # {"views": [128, 2, 16, 16, 3], ...}
    arrays = data.make_global_batch(batch, mesh)  # jax.Arrays sharded over "data"
    for batch in data.make_eval_iterator(config, "test", 256, source=source):
        ...                                      # {"image", "label", "index", "valid"}

Modules: :mod:`.config` (the data config, :class:`DataSpec`), :mod:`.base` (the source
interface), :mod:`.sources` (loading digits, phantoms, image folders, TFDS),
:mod:`.arrays` (in-memory arrays as a source, registered dataset names),
:mod:`.records` (the ArrayRecord / TFRecord files of a prepared TFDS dataset,
streamed), :mod:`.prepare` (``python -m contrastive_jax.data.prepare``: an
image folder or a TFRecord dataset to ArrayRecord), :mod:`.digits`,
:mod:`.synthetic`, :mod:`.augment_config` (the augmentation recipes and presets),
:mod:`.augment` (their TF stages), :mod:`.host_pipeline` (the default pretraining path,
no TensorFlow: grain, :mod:`.host_views` on the host, :mod:`.device_augment` on the
accelerator; :func:`pretrain_batches` picks the path), :mod:`.pipeline` (tf.data
iterators, global arrays) and :mod:`.mixing` (JAX label smoothing / MixUp / CutMix).

Importing this package imports no module of it: each name above loads its module on
first use. The TensorFlow pipeline (:mod:`.sources`, :mod:`.augment`, :mod:`.pipeline`,
:mod:`.records`, ...) imports TensorFlow and hides every GPU and TPU from it, so decoding
and augmentation stay on the host CPU; :mod:`.config`, :mod:`.base` and :mod:`.mixing`
need no TensorFlow (the training step imports :mod:`.mixing`), nor do
:mod:`.sources` (for in-memory data, image folders and ArrayRecord datasets),
:mod:`.host_pipeline` and its modules.
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
    **dict.fromkeys(("KNOWN_DATASETS", "DataSpec", "data_spec", "default_data_config"), "config"),
    **dict.fromkeys(
        ("MixSample", "apply_mix", "mix_batch", "sample_mix", "smooth_labels"), "mixing"
    ),
    **dict.fromkeys(
        ("EvalIterator", "PretrainIterator", "make_eval_iterator", "make_global_batch",
         "make_pretrain_iterator"),
        "pipeline",
    ),
    **dict.fromkeys(("CorruptRecordError", "RecordSet"), "records"),
    **dict.fromkeys(("HostPretrainIterator", "pretrain_batches"), "host_pipeline"),
    **dict.fromkeys(
        ("DatasetNotPreparedError", "class_balanced_subset", "load_source"),
        "sources",
    ),
}
#: What a module needs beyond JAX; every module not named here is the TensorFlow pipeline's.
_NEEDS = {
    "base": (), "mixing": (), "config": (), "augment_config": (),
    "device_augment": (), "host_views": ("PIL",),
    "host_pipeline": ("grain", "PIL", "ml_collections", "sklearn"),
    "sources": ("ml_collections", "sklearn"),
}
_PIPELINE = ("ml_collections", "tensorflow", "tensorflow_datasets", "sklearn")


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        if importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        # A submodule (``data.digits``), loaded on first use like the names.
        require("contrastive_jax.data", _NEEDS.get(name, _PIPELINE))
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
    "MixSample",
    "PretrainIterator",
    "RecordSet",
    "Source",
    "Split",
    "apply_mix",
    "array_source",
    "augmentation_preset",
    "class_balanced_subset",
    "data_spec",
    "default_data_config",
    "load_source",
    "make_eval_iterator",
    "make_global_batch",
    "make_pretrain_iterator",
    "mix_batch",
    "pretrain_batches",
    "register_source",
    "registered_source",
    "sample_mix",
    "simclr_jitter",
    "smooth_labels",
    "symmetric_label_noise",
    "unregister_source",
]
