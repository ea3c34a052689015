"""The default pretraining config; experiment configs start from it.

An experiment config is a Python file with ``get_config()`` (the packaged ones are in
:mod:`contrastive_jax.configs`)::

    from contrastive_jax.train.config import default_config

    def get_config():
        config = default_config()
        config.loss.name = "supcon"
        config.data.global_batch_size = 256
        config.train.total_steps = 1_000
        return config

Every setting has one name, its section's (``config.seed`` is the one top-level field)::

    python -m contrastive_jax.pretrain --workdir runs/q \
        --config "$(python -m contrastive_jax.configs quickstart)" \
        --config.data.global_batch_size=256 --config.train.total_steps=100 \
        --config.data.dataset=folder:PATH

Every field the code reads is declared once, with its default and a one-line comment, as
a field of a frozen dataclass that :func:`contrastive_jax.train.spec.parse` fills and
checks: ``config.train`` in :class:`TrainSpec` here, ``config.loss`` in
:class:`contrastive_jax.train.objective.LossSpec`, ``config.optimizer`` in
:class:`contrastive_jax.train.optim.OptimizerSpec`, ``config.data`` in
:class:`contrastive_jax.data.DataSpec`, ``config.model.encoder`` and ``config.model.head`` in
:class:`contrastive_jax.models.EncoderSpec` and :class:`~contrastive_jax.models.HeadSpec`.
:func:`default_config` is made from them. A field that none of them declares, in a
config file or a command-line override, is an error that names the nearest field, and a
renamed field (:data:`RENAMED`) is an error that names its new name (:func:`check_config`).

``config.data.dataset = "synthetic"`` trains on random in-memory images (no dataset on disk; see
:func:`contrastive_jax.train.inputs.synthetic_input`).

``config.loss.temperature`` is None by default: each loss then trains at its own default
temperature, the one its function declares; a number sets every term's (see
:mod:`contrastive_jax.train.objective`).
"""

from __future__ import annotations

import dataclasses
import importlib.util

import ml_collections
from ml_collections import config_dict

from contrastive_jax import data, models
from contrastive_jax._sections import check_domains, section_fields
from contrastive_jax.errors import ConfigError, check_fields
from contrastive_jax.train import grad_cache, objective, optim, transfer

#: Sub-configs whose keys are names rather than fields (checked where they are read:
#: the encoder's fields depend on its name).
OPEN_FIELDS = ("loss.kwargs", "loss.targets", "data.source_kwargs", "model.encoder")

#: Fields that were renamed, old name -> new name (both without the ``config.`` prefix).
#: A config or command line that sets an old name is refused with the new name; a saved
#: config that holds one reads as if it had the new one.
RENAMED = {
    # Top-level aliases of section fields, once linked to them; one name per setting now.
    "dataset": "data.dataset",
    "batch_size": "data.global_batch_size",
    "num_steps": "train.total_steps",
    "checkpoint_every": "train.checkpoint_every",
    "train.prefetch": "train.device_prefetch",  # beside data.prefetch, the input pipeline's
    "optimizer.epochs": "optimizer.schedule_epochs",  # beside train.epochs, the run's length
    "optimizer.total_steps": "optimizer.schedule_steps",  # beside train.total_steps
}
#: Removed field -> (the value a saved config may hold, which reads as before; why it went).
REMOVED = {
    "data.loader": ("grain", "the tf.data input path was removed: every dataset is read by "
                    "the grain path (no TensorFlow), TFRecord and ArrayRecord files by row"),
    "data.stream_lanes": (None, "TFRecord streams were removed with the tf.data input path: "
                          "TFRecord files are read by row (no shuffle buffer, no lanes)"),
    "data.shuffle_buffer": (10_000, "TFRecord streams were removed with the tf.data input "
                            "path: TFRecord files are read by row, each epoch a permutation "
                            "of the whole split"),
}


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """``config.train``: the run's length, logging, checkpoints and the step's options.

    Every field's default is declared here and only here; :func:`default_config` makes
    ``config.train`` of them and :func:`contrastive_jax.train.spec.parse` checks each value.
    """

    epochs: int = 100  # run length in epochs of the training split
    total_steps: int = 0  # > 0 overrides epochs
    log_every: int = 10  # steps between metric logs
    checkpoint_every: int = 500  # steps between checkpoints (and one at the end)
    keep_checkpoints: int = 3  # verified checkpoints kept, the newest ones
    online_probe: bool = False  # SimCLR's linear probe on stop-gradient features
    skip_nonfinite: bool = False  # skip NaN/inf steps instead of stopping
    device_prefetch: int = 2  # global batches put on the devices ahead of the running step
    # Gradient caching: examples/device per micro-batch (0: off); BN becomes ghost BN.
    micro_batch_size: int = 0
    # Its loop: "scan" (one encoder copy) or "unrolled" (fast convs on XLA:CPU; compile
    # time grows with the micro-batches).
    micro_batch_loop: str = "scan"
    eval_every: int = 0  # steps between online kNN evaluations (a multiple of log_every); 0: off
    knn_k: int = 20  # neighbours of the online kNN monitor (Wu et al. 2018)
    knn_temperature: float = 0.07  # tau of the kNN monitor's neighbour weights exp(s / tau)
    knn_bank_size: int = 10_000  # class-balanced training examples in the kNN bank; 0: all
    knn_query_size: int = 2_000  # held-out queries of the kNN monitor; 0: the whole split
    # Epochs between top-1/top-5 evaluations of the class scores (the head's outputs) on the
    # held-out split, and one at the end; 0: off (eval/validation.py).
    validate_every_epochs: int = 0
    # JAX's persistent compilation cache: "auto" (JAX's own if set, else
    # ~/.cache/contrastive_jax/jax_compilation_cache), a directory, or "" (leave off).
    compilation_cache_dir: str = "auto"
    profile_steps: tuple[int, ...] = ()  # (first, last) 1-based steps to trace with jax.profiler
    collapse_threshold: float = -0.2  # uniformity above which embeddings count as collapsed
    collapse_patience: int = 3  # consecutive collapsed log steps after warm-up: warn once
    # A Weights & Biases project that the logged scalars and the config go to as well (the
    # `wandb` extra; the run is named after the work directory); "": off.
    wandb_project: str = ""

    def __post_init__(self) -> None:
        check_domains(self, TRAIN_DOMAINS, "config.train")
        grad_cache.check_loop(self.micro_batch_loop)
        if self.eval_every % self.log_every:
            raise ConfigError(
                f"config.train.eval_every={self.eval_every} must be 0 (off) or a multiple of "
                f"config.train.log_every={self.log_every} (the kNN top-1 is logged at log steps)"
            )
        if not self.knn_temperature > 0:
            raise ConfigError(
                f"config.train.knn_temperature must be > 0, got {self.knn_temperature}")
        if not self.collapse_threshold <= 0:
            raise ConfigError(
                f"config.train.collapse_threshold must be <= 0 (uniformity never exceeds 0), "
                f"got {self.collapse_threshold}")
        if not isinstance(self.wandb_project, str):
            raise ConfigError(f"config.train.wandb_project must be a project name or '', got "
                              f"{self.wandb_project!r}")
        if self.wandb_project and importlib.util.find_spec("wandb") is None:
            raise ConfigError(
                f"config.train.wandb_project={self.wandb_project!r} needs wandb, which is not "
                "installed: pip install 'contrastive_jax[wandb]'"
            )
        steps = self.profile_steps
        if steps and (len(steps) != 2 or not all(isinstance(s, int) for s in steps)
                      or not 1 <= steps[0] <= steps[1]):
            raise ConfigError(
                f"config.train.profile_steps={steps!r} must be two steps (first, last) with "
                "1 <= first <= last, e.g. --config.train.profile_steps='(20, 25)'"
            )


#: The domain of each numeric field of :class:`TrainSpec` (:func:`contrastive_jax._sections.check_domains`).
TRAIN_DOMAINS = {
    **dict.fromkeys(("epochs", "log_every", "checkpoint_every", "keep_checkpoints", "knn_k",
                     "collapse_patience"), "int >= 1"),
    **dict.fromkeys(("total_steps", "device_prefetch", "micro_batch_size", "eval_every",
                     "knn_bank_size", "knn_query_size", "validate_every_epochs"), "int >= 0"),
    "knn_temperature": "> 0",
    "collapse_threshold": "any",  # <= 0, checked below
    "profile_steps": "int >= 1",  # (first, last), checked below
}


def default_config() -> ml_collections.ConfigDict:
    """Every field the trainer reads, with defaults (CIFAR-stem ResNet-18, SINCERE, LARS)."""
    config = ml_collections.ConfigDict()
    config.seed = 0  # run seed: initialisation, augmentation order, dropout
    config.data = data.default_data_config()
    config.model = ml_collections.ConfigDict()
    config.model.encoder = models.default_encoder_config()
    config.model.head = models.default_head_config()
    config.model.update(section_fields(transfer.TransferSpec))  # init_from, trainable, ...
    config.loss = ml_collections.ConfigDict(section_fields(objective.LossSpec))
    config.loss.mixing.num_classes = config_dict.placeholder(int)  # None: no mixing
    config.optimizer = ml_collections.ConfigDict(section_fields(optim.OptimizerSpec))
    config.train = ml_collections.ConfigDict(section_fields(TrainSpec))
    return config


def check_config(config, defaults: ml_collections.ConfigDict | None = None,
                 where: str = "config") -> None:
    """Raises ConfigError for a field of ``config`` that :func:`default_config` does not declare.

    The message names the field and the nearest declared one (``config.train.device_prefech
    is not a config field; did you mean config.train.device_prefetch?``), or, for a field of
    :data:`RENAMED`, its new name. The sub-configs of :data:`OPEN_FIELDS` are keyed by names
    and checked where they are read.
    """
    defaults = default_config() if defaults is None else defaults
    fields = dict(config.items())
    for name in fields:
        check_renamed(f"{where}.{name}")
    check_fields(where, fields, defaults.keys())
    for name, value in fields.items():
        path = f"{where}.{name}"
        default = defaults[name]
        if (isinstance(default, ml_collections.ConfigDict) and hasattr(value, "items")
                and path.removeprefix("config.") not in OPEN_FIELDS):
            check_config(value, default, path)


def check_renamed(path: str) -> None:
    """Raises ConfigError if ``path`` (``config.a.b``) is a field of :data:`RENAMED` or of
    :data:`REMOVED`."""
    name = path.removeprefix("config.")
    new = RENAMED.get(name)
    if new is not None:
        raise ConfigError(f"{path} was renamed to config.{new}; set that field instead")
    if name in REMOVED:
        raise ConfigError(f"{path} was removed: {REMOVED[name][1]}")


def rename_saved(saved: dict) -> dict:
    """A config saved (as a nested dict) before a field of :data:`RENAMED` was renamed, with
    that field under its new name, and without the fields of :data:`REMOVED` that hold the
    value that reads as before; a config saved since is returned as it is.

    Raises:
      ConfigError: the saved config sets a removed field to another value (a run on the
        tf.data input path, whose batches this version cannot reproduce).
    """
    saved = {k: dict(v) if isinstance(v, dict) else v for k, v in saved.items()}
    for old, new in RENAMED.items():
        *parents, name = old.split(".")
        holder = saved.get(parents[0]) if parents else saved
        if not isinstance(holder, dict) or name not in holder:
            continue
        value = holder.pop(name)
        new_section, new_name = new.split(".")
        target = saved.setdefault(new_section, {})
        if target.get(new_name, value) != value:  # an alias held its field's value
            raise ConfigError(f"the saved config sets config.{old}={value!r} but "
                              f"config.{new}={target[new_name]!r}")
        target[new_name] = value
    for path, (same, why) in REMOVED.items():
        section, name = path.split(".")
        fields = saved.get(section)
        if isinstance(fields, dict) and name in fields:
            value = fields.pop(name)
            if value != same:
                raise ConfigError(f"the saved config sets config.{path}={value!r}, which was "
                                  f"removed: {why}")
    return saved
