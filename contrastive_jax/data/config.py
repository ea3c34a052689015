"""The data config: one ``ml_collections.ConfigDict`` read by the whole input pipeline."""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict


def default_data_config() -> ml_collections.ConfigDict:
    """Defaults of every data field (plain built-in digits; the quickstart config picks
    ``digits_cluttered``).

    Fields:
      dataset: ``"digits"`` (default) | ``"digits_cluttered"`` | ``"phantoms"``
        | ``"image_folder"`` | ``"folder:PATH"`` | a TFDS name (``"cifar10"``, ``"cifar100"``,
        ``"stl10"``, ``"imagenet2012"``, ...). See :mod:`.sources`.
      data_dir: image-folder root (``<root>/<split>/<class>/<image>``) or TFDS
        data directory; None: TFDS's default data directory.
      download: let TFDS download an unprepared dataset (False: fail fast).
      in_memory: TFDS datasets: True loads the splits into memory, False
        streams their prepared files; None (default) loads small fixed-size
        datasets (at most ``sources.MAX_IN_MEMORY_BYTES`` decoded) and
        streams the others. Image folders: True decodes the images of every
        split (after ``train_subset`` / ``source_kwargs.test_subset``) into
        memory once; None or False reads them from their files at every epoch.
      stream_lanes: TFRecord streams only: lanes L read side by side (see
        :mod:`.pipeline`); divides ``global_batch_size`` and is a multiple of
        the process count; None: ``gcd(global_batch_size, 64)``.
      shuffle_buffer: TFRecord streams only: records in the shuffle buffers
        of all lanes together (each lane holds ``shuffle_buffer // L``).
      image_size: output side S of every image; None: the source's native side
        (224 for datasets of variable-size images).
      num_views: V augmented views per example in pretraining batches.
      augmentation: preset name (:data:`.augment.PRESET_NAMES`) or ``"auto"``:
        ``digits`` / ``digits_cluttered`` for those sources (each its own preset),
        ``phantoms`` for phantoms,
        ``simclr_cifar`` for other images of side <= 32, else
        ``simclr_imagenet``.
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
      prefetch: batches prepared ahead of the consumer.
      loader: pretraining input path. ``"grain"`` (default, no TensorFlow): the host
        decodes, crops, resizes and flips (grain threads), the accelerator does the
        appearance stages (:mod:`.host_pipeline`); TFRecord datasets fall back to
        ``"tf"``: every stage in tf.data on the host (:mod:`.pipeline`). Evaluation
        iterators are tf.data's either way.
      loader_threads: host threads of the ``"grain"`` path; None: the usable cores, at
        most 16.
    """
    c = ml_collections.ConfigDict()
    c.dataset = "digits"
    c.data_dir = config_dict.placeholder(str)
    c.download = False
    c.in_memory = config_dict.placeholder(bool)
    c.stream_lanes = config_dict.placeholder(int)
    c.shuffle_buffer = 10_000
    c.image_size = config_dict.placeholder(int)
    c.num_views = 2
    c.augmentation = "auto"
    c.global_batch_size = 128
    c.train_subset = config_dict.placeholder(int)
    c.label_noise = 0.0
    c.label_fraction = config_dict.placeholder(float)
    c.label_ids = config_dict.placeholder(str)
    c.data_seed = 0
    c.source_kwargs = ml_collections.ConfigDict()
    c.metadata = "source"
    c.metadata_scale = config_dict.placeholder(tuple)
    c.mean = config_dict.placeholder(tuple)
    c.std = config_dict.placeholder(tuple)
    c.eval_crop_fraction = config_dict.placeholder(float)
    c.prefetch = 2
    c.loader = "grain"
    c.loader_threads = config_dict.placeholder(int)
    return c
