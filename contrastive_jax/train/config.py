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

``config.loss.temperature`` is None by default: each loss then trains at its own default
temperature (MIO 0.5, the ProjNCE family 0.07, SINCERE, SupCon and NT-Xent 0.1); a number
sets every term's (see :mod:`contrastive_jax.train.objective`).
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from contrastive_jax import data, models
from contrastive_jax.train import optim


def default_config() -> ml_collections.ConfigDict:
    """Every field the trainer reads, with defaults (CIFAR-stem ResNet-18, SINCERE, LARS)."""
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.data = data.default_data_config()
    config.model = ml_collections.ConfigDict()
    config.model.encoder = models.default_encoder_config()
    config.model.head = models.default_head_config()
    config.loss = ml_collections.ConfigDict(
        {
            "name": "sincere",  # a loss of contrastive_jax.losses, or "a+b" for a weighted sum
            "weights": (),  # one weight per term; empty means 1.0 each
            # None: each loss's own default; a number: every term's temperature.
            "temperature": config_dict.placeholder(float),
            "kwargs": ml_collections.ConfigDict(),  # per-term hyperparameters by loss name
        }
    )
    config.optimizer = optim.default_optimizer_config()
    config.dataset = config.data.get_ref("dataset")
    config.batch_size = config.data.get_ref("global_batch_size")
    config.train = ml_collections.ConfigDict(
        {
            "epochs": 100,
            "total_steps": 0,  # > 0 overrides epochs
            "log_every": 10,
            "checkpoint_every": 500,
            "keep_checkpoints": 3,
            "online_probe": False,  # SimCLR's linear probe on stop-gradient features
            "skip_nonfinite": False,  # skip NaN/inf steps instead of stopping
            "prefetch": 2,  # global batches put on the devices ahead of the running step
            # Gradient caching: examples/device per micro-batch (0: off); BN becomes ghost BN.
            "micro_batch_size": 0,
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
