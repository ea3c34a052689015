"""SupCon on CIFAR-10 at the SupContrast reference code's settings: ResNet-50, batch 1024.

The README of Khosla et al.'s PyTorch code (github.com/HobbitLong/SupContrast), "Supervised
Contrastive Learning" pretraining command::

    python main_supcon.py --batch_size 1024 --learning_rate 0.5 --temp 0.1 --cosine

=================================  ==========================================================
setting                            source
=================================  ==========================================================
SupCon loss, tau = 0.1             README (``--temp 0.1``; ``SupConLoss`` with labels)
global batch 1024                  README (``--batch_size 1024``)
SGD, lr 0.5, cosine to 0.0005      README (``--learning_rate 0.5 --cosine``); ``main_supcon.py``
                                   (cosine floor lr x 0.1^3)
10 warm-up epochs from 0.01        ``main_supcon.py`` (on for batch > 256)
momentum 0.9, weight decay 1e-4    ``main_supcon.py`` defaults (decay on every parameter)
1,000 epochs                       ``main_supcon.py`` default ``--epochs``
ResNet-50, CIFAR stem, 32 x 32     ``main_supcon.py`` defaults (``--model resnet50``,
                                   ``--size 32``; ``networks/resnet_big.py``)
head 2048 -> 2048 -> 128           ``networks/resnet_big.py`` (``head='mlp'``, ``feat_dim=128``)
augmentation ``supcon_cifar``      ``main_supcon.py``'s ``train_transform``
=================================  ==========================================================

The reference's loss scale tau / 0.07 (``losses.py``) is ``loss.base_temperature = 0.07``.
What differs (head without batch norm, the reference's per-epoch schedule) is listed in
``contrastive_jax/configs/_supcontrast.py`` and ``docs/recipes.md``.

Expected: 96.0 % top-1 linear evaluation on CIFAR-10 (README, "Comparison"), after the
reference's linear stage (``main_linear.py``: batch 512, lr 5, 100 epochs, step decay x 0.2
at epochs 60, 75 and 90 and no warm-up (the README's command has no ``--cosine``), on
augmented images (random resized crop 0.2-1 and a flip), reporting the best test accuracy
over the epochs): the recipe ``supcon_cifar10_linear`` (``python -m
contrastive_jax.linear_eval --pretrained DIR --workdir OUT --config supcon_cifar10_linear``).
The fast probe, ``python -m contrastive_jax.linear_eval --pretrained DIR``, is not that
protocol: it trains on precomputed, standardised features of unaugmented images with a
warm-up and a cosine schedule and reports the last epoch. Not run here.

    contrastive-jax-pretrain --workdir runs/supcon_cifar10 \\
        --config "$(python -m contrastive_jax.configs supcon_cifar10)" \\
        --config.data.data_dir=DIR        # a TFDS data directory, or a folder of images
"""

from contrastive_jax.configs._sources import SUPCONTRAST, Row
from contrastive_jax.configs._supcontrast import supcontrast_cifar10, supcontrast_source


def get_config():
    return supcontrast_cifar10(
        loss="supcon", temperature=0.1, batch_size=1024, learning_rate=0.5,
        warmup_init=0.01, final_lr_factor=0.001, base_temperature=0.07,
    )


#: Every setting beside the source's (``docs/recipes.md``; :mod:`contrastive_jax.configs._sources`).
SOURCE = (
    Row("loss, temperature", ("loss.name", "loss.temperature"), "SupCon, tau = 0.1",
        f"{SUPCONTRAST} README.md:73-76; main_supcon.py:181", ("supcon", 0.1)),
    *supcontrast_source(readme="73-76", linear_lr=5),
)
