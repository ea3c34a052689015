"""The data config: every field of ``config.data`` and its default, declared once in
:class:`DataSpec` and checked there; :func:`default_data_config` is the command line's
``ml_collections.ConfigDict`` of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from contrastive_jax._sections import check_domains, section_fields
from contrastive_jax.data.augment_config import PRESET_NAMES
from contrastive_jax.data.label_subset import check_fraction
from contrastive_jax.errors import ConfigError, check_fields

#: Values of ``config.data.metadata``.
METADATA_CHOICES = ("source", "label_onehot")
#: ``config.data.eval_transform``'s choices (:func:`.host_views.eval_view`).
EVAL_TRANSFORMS = ("resize_crop", "crop_resize", "tf_resize_crop")

#: Datasets whose class count and native image side are known without reading them.
KNOWN_DATASETS = {
    "imagenet2012": (1000, 224),
    "cifar10": (10, 32),
    "cifar100": (100, 32),
    "stl10": (10, 96),
    "digits": (10, 16),
    "digits_cluttered": (10, 16),
}


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """``config.data``, read by the whole input pipeline (plain built-in digits by default;
    the quickstart config picks ``digits_cluttered``). Frozen; every value is checked here.

    The pipeline's entry points (:func:`~.sources.load_source`, the iterators) take it or
    the command line's ``ConfigDict``, which they read into a ``DataSpec`` first
    (:func:`as_data_spec`): the values are checked here, once, and nowhere downstream.

    Fields:
      dataset: ``"digits"`` (default) | ``"digits_cluttered"`` | ``"phantoms"``
        | ``"image_folder"`` | ``"folder:PATH"`` | a TFDS name (``"cifar10"``, ``"cifar100"``,
        ``"stl10"``, ``"imagenet2012"``, ...). See :mod:`.sources`.
      data_dir: image-folder root (``<root>/<split>/<class>/<image>``) or TFDS
        data directory; None: TFDS's default data directory.
      download: let TFDS download an unprepared dataset (False: fail fast).
      in_memory: TFDS datasets: True decodes the splits into memory, False
        reads their TFRecord or ArrayRecord files by row; None (default) loads small fixed-size
        datasets (at most ``sources.MAX_IN_MEMORY_BYTES`` decoded) and
        streams the others. Image folders: True decodes the images of every
        split (after ``train_subset`` / ``source_kwargs.test_subset``) into
        memory once; None or False reads them from their files at every epoch.
      image_size: output side S of every image; None: the source's native side
        (224 for datasets of variable-size images).
      num_views: V augmented views per example in pretraining batches.
      augmentation: preset name (:data:`.augment_config.PRESET_NAMES`) or ``"auto"``:
        ``digits`` / ``digits_cluttered`` for those sources (each its own preset),
        ``phantoms`` for phantoms,
        ``simclr_cifar`` for other images of side <= 32, else
        ``simclr_imagenet``.
      randaugment_layers, randaugment_magnitude: RandAugment's N and M for a preset with
        ``policy="randaugment"``; None: the preset's (the source's 2 and 10).
      global_batch_size: examples per pretraining step over all processes;
        divisible by the process count. Steps per epoch:
        ``n_train // global_batch_size`` (the remainder of each epoch is
        dropped, so every step has the same global batch).
      train_subset: None, or the size of a deterministic class-balanced subset
        of the training split (fast CPU proxies); used by every consumer.
      label_fraction: None, or the fraction in (0, 1] of each class's training examples
        kept (seed ``data_seed``): semi-supervised fine-tuning (:mod:`.label_subset`).
      label_ids: None, or a text file of the training examples kept, one a line: example
        ids or image file names (SimCLR's ``imagenet_subsets/1percent.txt``).
      label_noise: probability p of symmetric label noise on pretraining
        labels (ProjNCE Table 3 proxy); evaluation always sees clean labels.
      data_seed: seed of ``train_subset``, an image folder's
        ``source_kwargs.test_subset`` and ``label_noise`` (fixed data
        properties, independent of the run seed that drives augmentation).
      source_kwargs: arguments of a synthetic source's generator (phantoms:
        ``num_train``, ``delta_d``, ...; see :mod:`.sources`), or of an image
        folder (``test_subset``: the size of a class-balanced subset of the test
        split, seed ``data_seed``); empty: the defaults.
      metadata: ``"source"`` (the source's own metadata) or ``"label_onehot"``
        (the one-hot class label, float [N, K]: a class-delta kernel for the
        y-Aware losses); see :func:`.arrays.transform_metadata`.
      metadata_scale: None, or one factor per metadata column.
      mean, std: per-channel normalisation statistics on the [0, 1] scale;
        None: the source's training-split statistics.
      eval_crop_fraction: evaluation transform: resize the shorter side to
        ``image_size / eval_crop_fraction`` and centre-crop; None: 0.875
        (ImageNet's 224 of 256) for datasets of variable-size images, 1.0
        (the whole image) for the others.
      eval_transform: ``"resize_crop"`` (resize the shorter side, then centre-crop;
        torchvision's ``Resize`` + ``CenterCrop``) or ``"crop_resize"`` (SimCLR v1's
        ``center_crop``: a centred square of ``eval_crop_fraction`` of the shorter side,
        resized bicubically) or ``"tf_resize_crop"`` (the SupCon TF code's: the shorter side
        resized to ``image_size / eval_crop_fraction`` by TF1's bilinear ``resize``, not
        antialiased, truncated to uint8, then the centre crop); see
        :func:`.host_views.eval_view`.
      prefetch: batches prepared ahead of the consumer.
      loader_threads: host threads decoding and cropping (grain's, in pretraining and
        evaluation); None: the usable cores, at most 16.
    """

    dataset: str = "digits"
    data_dir: str | None = None
    download: bool = False
    in_memory: bool | None = None
    image_size: int | None = None
    num_views: int = 2
    augmentation: str = "auto"
    randaugment_layers: int | None = None
    randaugment_magnitude: float | None = None
    global_batch_size: int = 128
    train_subset: int | None = None
    label_noise: float = 0.0
    label_fraction: float | None = None
    label_ids: str | None = None
    data_seed: int = 0
    source_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    metadata: str = "source"
    metadata_scale: tuple[float, ...] | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    eval_crop_fraction: float | None = None
    eval_transform: str = "resize_crop"
    prefetch: int = 2
    loader_threads: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError(f"config.data.dataset must be a dataset name, got {self.dataset!r}")
        for name in ("num_views", "global_batch_size"):
            _check_int(name, getattr(self, name), minimum=1)
        for name in ("image_size", "train_subset", "loader_threads"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), minimum=1)
        _check_int("prefetch", self.prefetch, minimum=0)
        _check_int("data_seed", self.data_seed, minimum=0)
        if not 0.0 <= float(self.label_noise) <= 1.0:
            raise ConfigError(f"config.data.label_noise must be in [0, 1], got {self.label_noise!r}")
        if (self.eval_crop_fraction is not None
                and not 0.0 < float(self.eval_crop_fraction) <= 1.0):
            raise ConfigError(f"config.data.eval_crop_fraction must be in (0, 1], got "
                              f"{self.eval_crop_fraction!r}")
        for name, choices in (("metadata", METADATA_CHOICES),
                              ("eval_transform", EVAL_TRANSFORMS),
                              ("augmentation", ("auto", *PRESET_NAMES))):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"config.data.{name} must be one of {choices}, got {getattr(self, name)!r}")
        check_fraction(self.label_fraction)
        if self.label_fraction is not None and self.label_ids:
            raise ConfigError("set config.data.label_fraction or config.data.label_ids, not both")
        if (self.mean is None) != (self.std is None):
            raise ConfigError("set both config.data.mean and config.data.std, or neither")
        check_domains(self, DATA_DOMAINS, "config.data")

    @property
    def known_image_size(self) -> int | None:
        """The side of the images when known before reading them: ``image_size``, else
        :data:`KNOWN_DATASETS`'; None otherwise."""
        return self.image_size or KNOWN_DATASETS.get(self.dataset, (None, None))[1]


#: The domain of each numeric field of :class:`DataSpec` (None: unset, where allowed).
DATA_DOMAINS = {
    **dict.fromkeys(("image_size", "num_views", "global_batch_size", "train_subset",
                     "loader_threads"), "int >= 1"),
    **dict.fromkeys(("randaugment_layers", "data_seed", "prefetch"), "int >= 0"),
    "randaugment_magnitude": ">= 0", "label_noise": "[0, 1]", "label_fraction": "(0, 1]",
    "metadata_scale": "any", "mean": "any", "std": "> 0", "eval_crop_fraction": "(0, 1]",
}


def _check_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"config.data.{name} must be an int >= {minimum}, got {value!r}")


def check_source_kwargs(kwargs: Mapping[str, Any], taker: str, known: Sequence[str],
                        counts: Sequence[str] = ()) -> None:
    """The one check of ``config.data.source_kwargs`` against the arguments a source takes.

    Args:
      kwargs: the config's ``source_kwargs``.
      taker: the source, as the message names it (e.g. ``"an image folder"``).
      known: the arguments it takes.
      counts: those of them that must be positive ints.

    Raises:
      ConfigError: an argument it does not take, or a count that is not a positive int.
    """
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise ConfigError(
            f"config.data.source_kwargs {unknown}: {taker} takes {', '.join(known)}")
    for name in (n for n in counts if n in kwargs):
        value = kwargs[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"config.data.source_kwargs.{name} must be a positive int, got {value!r}")


def data_spec(fields: Any) -> DataSpec:
    """The :class:`DataSpec` of ``config.data`` (a ``ConfigDict`` or a mapping of some
    fields); raises ConfigError for a field it does not declare (naming the nearest) or a
    bad value."""
    fields = {k: dict(v.items()) if hasattr(v, "items") else v for k, v in fields.items()}
    check_fields("config.data", fields, [f.name for f in dataclasses.fields(DataSpec)])
    return DataSpec(**fields)


def as_data_spec(config: Any) -> DataSpec:
    """``config`` (a :class:`DataSpec`, or ``config.data`` as a ``ConfigDict`` or mapping) as a
    checked :class:`DataSpec`."""
    return config if isinstance(config, DataSpec) else data_spec(config)


def default_data_config():
    """:class:`DataSpec`'s fields and defaults as an ``ml_collections.ConfigDict`` (the
    command line's; needs ml_collections)."""
    import ml_collections

    return ml_collections.ConfigDict(section_fields(DataSpec))
