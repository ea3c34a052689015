"""SupContrast's linear evaluation on CIFAR-10: a linear classifier on the frozen encoder.

The linear stage of Khosla et al.'s PyTorch code (github.com/HobbitLong/SupContrast,
``main_linear.py``; the README's command ``python main_linear.py --batch_size 512
--learning_rate 5 --ckpt ...``), on the encoder of ``supcon_cifar10`` (or of
``simclr_cifar10``, whose encoder is the same; the README's SimCLR command uses lr 1):
SGD with momentum 0.9 and no weight decay, lr 5 at batch 512, 100 epochs, the learning rate
x 0.2 from the epochs 60, 75 and 90 (no ``--cosine``, no ``--warm``), augmented images (random
resized crop 0.2-1 and a flip), the test accuracy after every epoch and the best reported
(``<workdir>/validation.json``: ``best`` and ``final``). The encoder runs in inference mode,
as the reference's ``model.eval()``.

    contrastive-jax-pretrain --workdir runs/supcon_cifar10_linear \\
        --config "$(python -m contrastive_jax.configs supcon_cifar10_linear)" \\
        --config.model.init_from=runs/supcon_cifar10 --config.data.data_dir=DIR

Expected: 96.0 % top-1 (README, "Comparison", SupCon with ResNet-50). Not run here.
"""

from contrastive_jax.configs import supcon_cifar10
from contrastive_jax.configs._evaluation import from_pretraining
from contrastive_jax.configs._sources import SUPCONTRAST, Row


def get_config():
    config = from_pretraining(supcon_cifar10.get_config(), trainable="head", num_classes=10,
                              augmentation="supcon_linear", batch_size=512, epochs=100)
    config.model.head.kernel_init = "torch_linear"  # LinearClassifier's nn.Linear
    config.optimizer.name = "sgd"
    config.optimizer.momentum = 0.9
    config.optimizer.base_learning_rate = 5.0
    config.optimizer.lr_scaling = "none"
    config.optimizer.decay = "step"
    config.optimizer.decay_epochs = (60, 75, 90)
    config.optimizer.decay_rate = 0.2
    return config


_REF = SUPCONTRAST
#: Every setting beside the source's (``docs/recipes.md``; :mod:`contrastive_jax.configs._sources`).
SOURCE = (
    Row("encoder", ("model.encoder.name", "model.encoder.stem", "model.trainable"),
        "the pretrained ResNet-50, frozen, in inference mode",
        f"{_REF} main_linear.py:135, 155 (model.eval(), no_grad)", ("resnet50", "cifar", "head")),
    Row("classifier", ("model.head.name", "model.head.num_classes"),
        "Linear 2048 -> 10 (bias)", f"{_REF} networks/resnet_big.py:201-209 (LinearClassifier)",
        ("classifier", 10)),
    Row("classifier initialisation", ("model.head.kernel_init",),
        "PyTorch's nn.Linear default: weight and bias U(-1/sqrt(2048), 1/sqrt(2048))",
        f"{_REF} networks/resnet_big.py:201-206 (LinearClassifier: nn.Linear)",
        ("torch_linear",)),
    Row("loss", ("loss.name",), "cross-entropy", f"{_REF} main_linear.py:105",
        ("label_cross_entropy",)),
    Row("batch, epochs", ("data.global_batch_size", "train.epochs"), "512, 100",
        f"{_REF} README.md:85-86; main_linear.py:35", (512, 100)),
    Row("optimiser", ("optimizer.name", "optimizer.momentum", "optimizer.nesterov"),
        "SGD, momentum 0.9", f"{_REF} main_linear.py:47; util.py:78-83", ("sgd", 0.9, False)),
    Row("learning rate", ("optimizer.base_learning_rate", "optimizer.lr_scaling"), "5",
        f"{_REF} README.md:86", (5.0, "none")),
    Row("weight decay", ("optimizer.weight_decay",), "0", f"{_REF} main_linear.py:45", (0.0,)),
    Row("schedule", ("optimizer.decay", "optimizer.decay_epochs", "optimizer.decay_rate",
                     "optimizer.warmup_epochs"),
        "x 0.2 from the epochs 60, 75, 90; no warm-up",
        f"{_REF} main_linear.py:41-43; util.py:53-65", ("step", (60, 75, 90), 0.2, 0.0)),
    Row("input normalisation", ("data.mean", "data.std"),
        "mean (0.4914, 0.4822, 0.4465), std (0.2023, 0.1994, 0.2010)",
        f"{_REF} main_ce.py:121-122 (main_linear.py's loader)",
        ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))),
    Row("augmentation, views", ("data.augmentation", "data.num_views"),
        "random resized crop 0.2-1, flip; one view", f"{_REF} main_ce.py:130-132",
        ("supcon_linear", 1)),
    Row("evaluation", ("train.validate_every_epochs",),
        "test accuracy after every epoch, the best reported", f"{_REF} main_linear.py:230, 255-259",
        (1,)),
)
