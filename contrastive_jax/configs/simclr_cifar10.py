"""SimCLR on CIFAR-10 at the SupContrast reference code's settings: ResNet-50, batch 1024.

The README of Khosla et al.'s PyTorch code (github.com/HobbitLong/SupContrast), "SimCLR"
pretraining command::

    python main_supcon.py --batch_size 1024 --learning_rate 0.5 --temp 0.5 --cosine \\
        --syncBN --method SimCLR

=================================  ==========================================================
setting                            source
=================================  ==========================================================
NT-Xent, tau = 0.5                 README (``--method SimCLR``: ``SupConLoss`` without
                                   labels, which is NT-Xent; ``--temp 0.5``)
global batch 1024                  README (``--batch_size 1024``)
SGD, lr 0.5, cosine to 0.0005      README (``--learning_rate 0.5 --cosine``); ``main_supcon.py``
                                   (cosine floor lr x 0.1^3)
10 warm-up epochs from 0.01        ``main_supcon.py`` (on for batch > 256)
momentum 0.9, weight decay 1e-4    ``main_supcon.py`` defaults (decay on every parameter)
1,000 epochs                       ``main_supcon.py`` default ``--epochs``
ResNet-50, CIFAR stem, 32 x 32     ``main_supcon.py`` defaults; ``networks/resnet_big.py``
head 2048 -> 2048 -> 128           ``networks/resnet_big.py`` (``head='mlp'``, ``feat_dim=128``)
augmentation ``supcon_cifar``      ``main_supcon.py``'s ``train_transform`` (the SimCLR paper's
                                   own CIFAR recipe, App. B.9, is the ``simclr_cifar`` preset:
                                   crop 0.08-1, colour strength 0.5)
per-device batch norm              README: ``--syncBN`` has no effect (``DataParallel``)
=================================  ==========================================================

The reference's loss scale tau / 0.07 (``losses.py``; x 7.14 at tau = 0.5) is
``loss.base_temperature = 0.07``. What differs (head without batch norm, the reference's
per-epoch schedule) is listed in ``contrastive_jax/configs/_supcontrast.py`` and
``docs/recipes.md``.

Expected: 93.6 % top-1 linear evaluation on CIFAR-10 (README, "Comparison"), with the
reference's linear stage at lr 1 (``python -m contrastive_jax.linear_eval --pretrained DIR
--workdir OUT --config supcon_cifar10_linear --config.optimizer.base_learning_rate=1``).
Not run here.

    contrastive-jax-pretrain --workdir runs/simclr_cifar10 \\
        --config "$(python -m contrastive_jax.configs simclr_cifar10)" \\
        --config.data.data_dir=DIR        # a TFDS data directory, or a folder of images
"""

from contrastive_jax.configs._sources import SUPCONTRAST, Row
from contrastive_jax.configs._supcontrast import supcontrast_cifar10, supcontrast_source


def get_config():
    return supcontrast_cifar10(
        loss="nt_xent", temperature=0.5, batch_size=1024, learning_rate=0.5,
        warmup_init=0.01, final_lr_factor=0.001, base_temperature=0.07,
    )


#: Every setting beside the source's (``docs/recipes.md``; :mod:`contrastive_jax.configs._sources`).
SOURCE = (
    Row("loss, temperature", ("loss.name", "loss.temperature"),
        "SimCLR (SupConLoss without labels), tau = 0.5",
        f"{SUPCONTRAST} README.md:92-95; main_supcon.py:181", ("nt_xent", 0.5)),
    *supcontrast_source(readme="92-95", linear_lr=1),
)
