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

Importing this package imports the pipeline, which needs the ``train`` extra (ml_collections,
grain, Pillow, scikit-learn, ...); a missing library is named with the extra that installs it.
The training step's label smoothing / MixUp / CutMix, which must import where those libraries
are not installed (JAX's accelerator images), is :mod:`contrastive_jax.train.mixing`.
"""

from contrastive_jax._extras import require

require(
    "contrastive_jax.data",
    ("grain", "PIL", "ml_collections", "sklearn", "scipy", "etils", "google_crc32c"),
)

from contrastive_jax.data._resolve import resolve_image_size
from contrastive_jax.data.arrays import (
    array_source,
    register_source,
    registered_source,
    unregister_source,
)
from contrastive_jax.data.augment_config import (
    PRESET_NAMES,
    AugmentConfig,
    augmentation_preset,
    simclr_jitter,
)
from contrastive_jax.data.base import Source, Split, symmetric_label_noise
from contrastive_jax.data.batching import make_global_batch
from contrastive_jax.data.config import (
    KNOWN_DATASETS,
    DataSpec,
    data_spec,
    default_data_config,
)
from contrastive_jax.data.eval_iterator import EvalIterator, make_eval_iterator
from contrastive_jax.data.host_pipeline import (
    HostPretrainIterator,
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
    "resolve_image_size",
    "simclr_jitter",
    "symmetric_label_noise",
    "unregister_source",
]
