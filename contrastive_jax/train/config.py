"""The default pretraining config; experiment configs start from it.

An experiment config is a Python file with ``get_config()`` (the packaged ones are in
:mod:`contrastive_jax.configs`)::

    from contrastive_jax.train.config import default_config

    def get_config():
        config = default_config()
        config.loss.name = "supcon"
        config.batch_size = 256          # sets config.data.global_batch_size too
        config.num_steps = 1_000         # sets config.train.total_steps too
        return config

Five top-level keys are the stable command-line interface of every pretraining
config, each linked (an ``ml_collections`` field reference) to the nested field
the code reads, so setting either sets both:

==================  ============================  ==========================================
top-level key       nested field                  meaning
==================  ============================  ==========================================
``seed``            (itself)                      run seed: initialisation, augmentation order
``dataset``         ``data.dataset``              ``digits``, a TFDS name such as ``cifar10``,
                                                  or ``folder:PATH`` for a folder of images
``batch_size``      ``data.global_batch_size``    global batch over all devices and processes
``num_steps``       ``train.total_steps``         total steps; > 0 overrides ``train.epochs``
``checkpoint_every``  ``train.checkpoint_every``  steps between checkpoints
==================  ============================  ==========================================

    python -m contrastive_jax.pretrain --workdir runs/q \
        --config "$(python -m contrastive_jax.configs quickstart)" \
        --config.batch_size=256 --config.num_steps=100 --config.dataset=folder:PATH

Every field the code reads is declared once, with its default and a one-line comment:
``config.train`` and the top-level keys here, ``config.loss`` in
:data:`contrastive_jax.train.objective.LOSS_DEFAULTS`, ``config.optimizer`` in
:data:`contrastive_jax.train.optim.OPTIMIZER_DEFAULTS`, ``config.model`` in
:mod:`contrastive_jax.models.factory` and ``config.data`` in
:func:`contrastive_jax.data.default_data_config`. A field that none of them declares, in
a config file or a command-line override, is an error that names the nearest field
(:func:`check_config`).

``config.dataset = "synthetic"`` trains on random in-memory images (no TensorFlow; see
:mod:`contrastive_jax.train.synthetic`).

``config.loss.temperature`` is None by default: each loss then trains at its own default
temperature (MIO 0.5, the ProjNCE family 0.07, SINCERE, SupCon and NT-Xent 0.1); a number
sets every term's (see :mod:`contrastive_jax.train.objective`).
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from contrastive_jax import data, models
from contrastive_jax.errors import check_fields
from contrastive_jax.train import objective, optim

#: Sub-configs whose keys are names rather than fields (checked where they are read:
#: the encoder's fields depend on its name).
OPEN_FIELDS = ("loss.kwargs", "loss.targets", "data.source_kwargs", "model.encoder")


def default_config() -> ml_collections.ConfigDict:
    """Every field the trainer reads, with defaults (CIFAR-stem ResNet-18, SINCERE, LARS)."""
    config = ml_collections.ConfigDict()
    config.seed = 0  # run seed: initialisation, augmentation order, dropout
    config.data = data.default_data_config()
    config.model = ml_collections.ConfigDict()
    config.model.encoder = models.default_encoder_config()
    config.model.head = models.default_head_config()
    loss = dict(objective.LOSS_DEFAULTS)
    loss["temperature"] = config_dict.placeholder(float)
    loss["warmup_temperature"] = config_dict.placeholder(float)
    loss["mixing"] = {**loss["mixing"], "num_classes": config_dict.placeholder(int)}
    config.loss = ml_collections.ConfigDict(loss)
    config.optimizer = optim.default_optimizer_config()
    config.dataset = config.data.get_ref("dataset")
    config.batch_size = config.data.get_ref("global_batch_size")
    config.train = ml_collections.ConfigDict(
        {
            "epochs": 100,  # run length in epochs of the training split
            "total_steps": 0,  # > 0 overrides epochs
            "log_every": 10,  # steps between metric logs
            "checkpoint_every": 500,  # steps between checkpoints (and one at the end)
            "keep_checkpoints": 3,  # verified checkpoints kept, the newest ones
            "online_probe": False,  # SimCLR's linear probe on stop-gradient features
            "skip_nonfinite": False,  # skip NaN/inf steps instead of stopping
            "prefetch": 2,  # global batches put on the devices ahead of the running step
            # Gradient caching: examples/device per micro-batch (0: off); BN becomes ghost BN.
            "micro_batch_size": 0,
            # Its loop: "scan" (one encoder copy) or "unrolled" (fast convs on XLA:CPU; compile
            # time grows with the micro-batches).
            "micro_batch_loop": "scan",
            "eval_every": 0,  # steps between online kNN evaluations (a multiple of log_every); 0: off
            "knn_k": 20,  # neighbours of the online kNN monitor (Wu et al. 2018)
            "knn_temperature": 0.07,  # tau of the kNN monitor's neighbour weights exp(s / tau)
            "knn_bank_size": 10_000,  # class-balanced training examples in the kNN bank; 0: all
            "knn_query_size": 2_000,  # held-out queries of the kNN monitor; 0: the whole split
            # JAX's persistent compilation cache: "auto" (JAX's own if set, else
            # ~/.cache/contrastive_jax/jax_compilation_cache), a directory, or "" (leave off).
            "compilation_cache_dir": "auto",
            "profile_steps": (),  # (first, last) 1-based steps to trace with jax.profiler
            "collapse_threshold": -0.2,  # uniformity above which embeddings count as collapsed
            "collapse_patience": 3,  # consecutive collapsed log steps after warm-up: warn once
        }
    )
    config.num_steps = config.train.get_ref("total_steps")
    config.checkpoint_every = config.train.get_ref("checkpoint_every")
    return config


def check_config(config, defaults: ml_collections.ConfigDict | None = None,
                 where: str = "config") -> None:
    """Raises ConfigError for a field of ``config`` that :func:`default_config` does not declare.

    The message names the field and the nearest declared one (``config.train.prefech is
    not a config field; did you mean config.train.prefetch?``). The sub-configs of
    :data:`OPEN_FIELDS` are keyed by names and checked where they are read.
    """
    defaults = default_config() if defaults is None else defaults
    fields = dict(config.items())
    check_fields(where, fields, defaults.keys())
    for name, value in fields.items():
        path = f"{where}.{name}"
        default = defaults[name]
        if (isinstance(default, ml_collections.ConfigDict) and hasattr(value, "items")
                and path.removeprefix("config.") not in OPEN_FIELDS):
            check_config(value, default, path)
