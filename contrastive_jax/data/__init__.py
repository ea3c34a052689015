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

Modules: :mod:`.config` (the data config), :mod:`.base` (the source
interface), :mod:`.sources` (loading digits, phantoms, image folders, TFDS),
:mod:`.arrays` (in-memory arrays as a source, registered dataset names),
:mod:`.records` (the ArrayRecord / TFRecord files of a prepared TFDS dataset,
streamed), :mod:`.prepare` (``python -m contrastive_jax.data.prepare``: an
image folder or a TFRecord dataset to ArrayRecord), :mod:`.digits`,
:mod:`.synthetic`, :mod:`.augment` (TF augmentations and presets),
:mod:`.pipeline` (tf.data iterators, global arrays) and :mod:`.mixing` (JAX
label smoothing / MixUp / CutMix).

Importing this package imports TensorFlow and hides every GPU and TPU from
it, so decoding and augmentation stay on the host CPU.
"""

from contrastive_jax._extras import require

require("contrastive_jax.data", ("ml_collections", "tensorflow", "tensorflow_datasets", "sklearn"))

from contrastive_jax.data.arrays import (
    array_source,
    register_source,
    registered_source,
    unregister_source,
)
from contrastive_jax.data.augment import (
    PRESET_NAMES,
    AugmentConfig,
    augmentation_preset,
    simclr_jitter,
)
from contrastive_jax.data.base import Source, Split, symmetric_label_noise
from contrastive_jax.data.config import default_data_config
from contrastive_jax.data.mixing import MixSample, apply_mix, mix_batch, sample_mix, smooth_labels
from contrastive_jax.data.pipeline import (
    EvalIterator,
    PretrainIterator,
    make_eval_iterator,
    make_global_batch,
    make_pretrain_iterator,
)
from contrastive_jax.data.records import CorruptRecordError, RecordSet
from contrastive_jax.data.sources import (
    DatasetNotPreparedError,
    class_balanced_subset,
    load_source,
)
from contrastive_jax.errors import CorruptImageError

__all__ = [
    "PRESET_NAMES",
    "AugmentConfig",
    "CorruptImageError",
    "CorruptRecordError",
    "DatasetNotPreparedError",
    "EvalIterator",
    "MixSample",
    "PretrainIterator",
    "RecordSet",
    "Source",
    "Split",
    "apply_mix",
    "array_source",
    "augmentation_preset",
    "class_balanced_subset",
    "default_data_config",
    "load_source",
    "make_eval_iterator",
    "make_global_batch",
    "make_pretrain_iterator",
    "mix_batch",
    "register_source",
    "registered_source",
    "sample_mix",
    "simclr_jitter",
    "smooth_labels",
    "symmetric_label_noise",
    "unregister_source",
]
