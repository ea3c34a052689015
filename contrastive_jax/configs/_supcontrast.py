"""The CIFAR-10 recipe of the SupContrast reference code, shared by three packaged configs.

Khosla et al.'s PyTorch code (github.com/HobbitLong/SupContrast, ``main_supcon.py`` and its
README) pretrains a CIFAR-stem ResNet-50 at 32 x 32 for 1,000 epochs (``--epochs`` default)
with SGD (momentum 0.9, weight decay 1e-4 on every parameter), a cosine schedule from the
README's learning rate down to ``lr x 0.1^3`` and, above batch 256, 10 warm-up epochs from
0.01; its augmentation is ``RandomResizedCrop(32, scale=(0.2, 1))``, a flip, colour jitter
(0.4, 0.4, 0.4, 0.1) with p = 0.8 and grayscale with p = 0.2 (the ``supcon_cifar`` preset);
its ``mlp`` head is Linear(2048, 2048) -> ReLU -> Linear(2048, 128), initialised as PyTorch's
``nn.Linear`` (``head.kernel_init = "torch_linear"``). Its ``SupConLoss``
(``losses.py``) multiplies the loss by ``temperature / base_temperature`` with
``base_temperature = 0.07``: x 1.43 at tau = 0.1, x 7.14 at tau = 0.5, which with SGD scales
the step as the learning rate would; ``loss.base_temperature = 0.07`` states it here (the
SINCERE recipe is unscaled, ``base_temperature=None``, as the SINCERE authors' loss is).

Not expressed by the trainer's config, and therefore different here:

* head: the reference's hidden Linear has a bias and no batch norm; the ``simclr_v2`` head
  used here has batch norm and no bias (the nearest head the model factory builds);
* schedule: the reference warms up to the cosine curve's value at epoch 10 and then follows
  a cosine over all 1,000 epochs, one value per epoch; here the warm-up ends at the peak and
  the cosine runs per step over the remaining epochs. Evaluated per step at batch 1024
  (48 steps per epoch), the two differ by at most 1.06 % of the peak, near epoch 373
  (``tests/test_recipes_table.py::test_supcontrast_schedule_difference``);
* last partial batch: the reference's ``DataLoader`` keeps it (49 steps an epoch at batch
  1,024), the trainer drops it (48: 2.0 % fewer updates over the run, the schedule's epochs
  the same);
* batch norm: ``--syncBN`` has no effect in the reference (``DataParallel``, its README), so
  each GPU normalises over its own share of the batch; here too each device does
  (``bn_axis_name`` unset), so the batch-norm statistics depend on the device count
  (``sincere_cifar10``, whose paper trained on one GPU, sets ``bn_axis_name = "data"``).
"""

from __future__ import annotations

import ml_collections

from contrastive_jax.configs._sources import SUPCONTRAST, Row
from contrastive_jax.train.config import default_config

#: The reference code's CIFAR-10 normalisation (main_supcon.py:134-135, main_ce.py:121-122).
SUPCONTRAST_MEAN = (0.4914, 0.4822, 0.4465)
SUPCONTRAST_STD = (0.2023, 0.1994, 0.2010)


def supcontrast_cifar10(
    *, loss: str, temperature: float, batch_size: int, learning_rate: float,
    warmup_init: float, final_lr_factor: float, base_temperature: float | None,
) -> ml_collections.ConfigDict:
    """The reference code's CIFAR-10 pretraining with the given loss and README settings."""
    config = default_config()
    config.data.dataset = "cifar10"
    config.data.image_size = 32
    config.data.num_views = 2
    config.data.augmentation = "supcon_cifar"
    config.data.global_batch_size = batch_size
    config.data.mean = SUPCONTRAST_MEAN
    config.data.std = SUPCONTRAST_STD
    config.model.encoder.name = "resnet50"
    config.model.encoder.stem = "cifar"
    config.model.encoder.width = 1.0
    config.model.head.name = "simclr_v2"
    config.model.head.num_hidden_layers = 1
    config.model.head.hidden_features = 2048
    config.model.head.out_features = 128
    config.model.head.kernel_init = "torch_linear"  # nn.Linear's default (resnet_big.py)
    config.loss.name = loss
    config.loss.temperature = temperature
    config.loss.base_temperature = base_temperature
    config.optimizer.name = "sgd"
    config.optimizer.base_learning_rate = learning_rate
    config.optimizer.lr_scaling = "none"
    config.optimizer.momentum = 0.9
    config.optimizer.weight_decay = 1e-4
    config.optimizer.decay_norm_and_bias = True
    config.optimizer.warmup_epochs = 10.0
    config.optimizer.warmup_init = warmup_init
    config.optimizer.final_lr_factor = final_lr_factor
    config.train.epochs = 1000
    config.train.log_every = 50
    config.train.checkpoint_every = 1000
    return config


def supcontrast_source(*, readme: str, linear_lr: int) -> tuple[Row, ...]:
    """The reference code's settings beside a recipe of :func:`supcontrast_cifar10`
    (``docs/recipes.md``); ``readme`` the README lines of its command, ``linear_lr`` the
    learning rate of its linear stage."""
    ref = SUPCONTRAST
    return (
        Row("encoder", ("model.encoder.name", "model.encoder.stem", "model.encoder.width"),
            "ResNet-50, 3x3 stride-1 stem, no max pool", f"{ref} networks/resnet_big.py:80",
            ("resnet50", "cifar", 1.0)),
        Row("projection head", ("model.head.name", "model.head.hidden_features",
                                "model.head.out_features"),
            "Linear 2048 (bias) -> ReLU -> Linear 128 (bias)",
            f"{ref} networks/resnet_big.py:174-178",
            why="the simclr_v2 head has batch norm and no biases (the nearest head built)"),
        Row("head initialisation", ("model.head.kernel_init",),
            "PyTorch's nn.Linear default: weights kaiming_uniform_(a=sqrt(5)), i.e. "
            "U(-1/sqrt(fan_in), 1/sqrt(fan_in)), biases U(-1/sqrt(fan_in), 1/sqrt(fan_in))",
            f"{ref} networks/resnet_big.py:172-178 (nn.Linear; the init loop at 89-94 "
            "covers the encoder's Conv2d and BatchNorm only)", ("torch_linear",)),
        Row("loss scale", ("loss.base_temperature",), "loss x tau / 0.07",
            f"{ref} losses.py:15, 103", (0.07,)),
        Row("batch", ("data.global_batch_size",), "1024", f"{ref} README.md:{readme}", (1024,)),
        Row("epochs", ("train.epochs",), "1000", f"{ref} main_supcon.py:38", (1000,)),
        Row("optimiser", ("optimizer.name", "optimizer.momentum"), "SGD, momentum 0.9",
            f"{ref} main_supcon.py:50; util.py:78-83", ("sgd", 0.9)),
        Row("learning rate", ("optimizer.base_learning_rate", "optimizer.lr_scaling"), "0.5",
            f"{ref} README.md:{readme}", (0.5, "none")),
        Row("weight decay", ("optimizer.weight_decay", "optimizer.decay_norm_and_bias"),
            "1e-4 on every parameter", f"{ref} main_supcon.py:48; util.py:78-83", (1e-4, True)),
        Row("warm-up", ("optimizer.warmup_epochs", "optimizer.warmup_init"),
            "10 epochs from 0.01 (batch > 256), per step", f"{ref} main_supcon.py:106-118",
            (10.0, 0.01)),
        Row("decay", ("optimizer.final_lr_factor",),
            "cosine to lr x 0.1^3 over all 1000 epochs, one value per epoch; the warm-up "
            "ends at its epoch-10 value", f"{ref} util.py:53-58; main_supcon.py:113-116",
            why="per step over the 990 epochs after a warm-up to the peak: at most 1.06 % of "
                "the peak apart, near epoch 373 (tests/test_recipes_table.py)"),
        Row("batch norm", ("model.encoder.bn_axis_name", "model.head.bn_axis_name"),
            "per GPU (--syncBN has no effect: DataParallel)", f"{ref} README.md:81",
            (None, None)),
        Row("last partial batch", ("data.global_batch_size",),
            "kept (DataLoader's drop_last=False): ceil(50,000 / 1,024) = 49 steps an epoch, "
            "the last of 848 images; the warm-up's fraction counts over 49 x 10 steps",
            f"{ref} main_supcon.py:172-174 (DataLoader); util.py:68-72 "
            "(warmup_learning_rate: len(train_loader))",
            why="dropped: 48 steps of 1,024 an epoch (49,152 images, a different 848 left out "
                "each epoch), 48,000 steps in all where the source takes 49,000 (2.0 % fewer "
                "updates, each of a full batch); the warm-up and the per-epoch cosine span "
                "the same epochs. A last batch of another shape would need a second "
                "compiled step and a batch that need not split over the devices (848 does "
                "not over 32); not built"),
        Row("image side, augmentation", ("data.image_size", "data.augmentation"),
            "32; crop 0.2-1, flip, jitter (0.4, 0.4, 0.4, 0.1) p 0.8, grayscale p 0.2",
            f"{ref} main_supcon.py:60, 146-155", (32, "supcon_cifar")),
        Row("input normalisation", ("data.mean", "data.std"),
            "mean (0.4914, 0.4822, 0.4465), std (0.2023, 0.1994, 0.2010)",
            f"{ref} main_supcon.py:134-135", (SUPCONTRAST_MEAN, SUPCONTRAST_STD)),
        Row("precision", ("model.encoder.dtype", "model.head.dtype"),
            "float32 (apex is imported for its sync-BN converter; amp is not used)",
            f"{ref} main_supcon.py:21-22, 185", ("float32", "float32")),
        Row("linear evaluation", (),
            f"lr {linear_lr}, batch 512, 100 epochs, x 0.2 at epochs 60, 75, 90, no warm-up, "
            "crop 0.2-1 + flip, best epoch reported", f"{ref} main_linear.py; README.md",
            why="a separate run: the recipe supcon_cifar10_linear is that protocol "
                "(linear_eval, on precomputed features of unaugmented images, is not)"),
    )
