"""SimCLR's linear evaluation on ImageNet: a linear classifier on the frozen ResNet-50.

Chen et al. 2020 (arXiv:2002.05709), App. B.6: the fine-tuning procedure of App. B.5
(Nesterov momentum 0.9, batch 4096, no warm-up, random crop + flip alone: the v1 code's
pretraining crop, ``distorted_bounding_box_crop`` with a bicubic resize, the
``simclr_v1_linear`` preset; no regularisation, weight decay included) with a learning rate of 0.1 x B / 256 (1.6) for 90 epochs; the v1
code (``google-research/simclr`` at be133b3) runs it as ``--train_mode=finetune
--fine_tune_after_block=4`` (the encoder's batch norm in inference mode, ``model.py``) with
``--optimizer=momentum`` (Nesterov) and a cosine decay. On the encoder of ``simclr_imagenet``.

    contrastive-jax-pretrain --workdir runs/simclr_imagenet_linear \\
        --config "$(python -m contrastive_jax.configs simclr_imagenet_linear)" \\
        --config.model.init_from=runs/simclr_imagenet --config.data.data_dir=DIR

Expected: 69.3 % top-1 for 1,000 pretraining epochs (paper Table 6; 64.5 % for the code's
100 epochs, its README), on the validation split after the last epoch. Not run here.
"""

from contrastive_jax.configs import _sources, simclr_imagenet
from contrastive_jax.configs._evaluation import from_pretraining, simclr_sgd
from contrastive_jax.configs._sources import Row


def get_config():
    config = from_pretraining(simclr_imagenet.get_config(), trainable="head", num_classes=1000,
                              augmentation="simclr_v1_linear", batch_size=4096, epochs=90)
    config.model.head.kernel_init = "zeros"  # README: --zero_init_logits_layer=True
    simclr_sgd(config, base_learning_rate=0.1)
    return config


_V1 = _sources.SIMCLR_V1
#: Every setting beside the source's (``docs/recipes.md``; :mod:`contrastive_jax.configs._sources`).
SOURCE = (
    Row("encoder", ("model.encoder.name", "model.encoder.stem", "model.trainable"),
        "the pretrained ResNet-50, frozen, batch norm in inference mode",
        f"paper App. B.6; {_V1} model.py:62-64 (fine_tune_after_block=4)",
        ("resnet50", "imagenet", "head")),
    Row("classifier", ("model.head.name", "model.head.num_classes", "model.head.kernel_init"),
        "Linear 2048 -> 1000 (bias), zero-initialised (--zero_init_logits_layer=True)",
        f"{_V1} model_util.py:71-100 (linear_layer); README.md:54",
        ("classifier", 1000, "zeros")),
    Row("input scaling", ("data.mean", "data.std"), "[0, 1], no normalisation (pretraining's)",
        f"{_V1} data_util.py (preprocess_image)", ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))),
    Row("loss", ("loss.name",), "softmax cross-entropy, no label smoothing",
        f"{_V1} objective.py (add_supervised_loss)", ("label_cross_entropy",)),
    Row("batch, epochs", ("data.global_batch_size", "train.epochs"), "4096, 90",
        "paper App. B.5, B.6", (4096, 90)),
    Row("optimiser", ("optimizer.name", "optimizer.momentum", "optimizer.nesterov"),
        "momentum 0.9, Nesterov", f"paper App. B.5; {_V1} model.py:168-170",
        ("sgd", 0.9, True)),
    Row("learning rate", ("optimizer.base_learning_rate", "optimizer.lr_scaling"),
        "0.1 x B / 256 (1.6)", f"paper App. B.6; {_V1} model_util.py:55", (0.1, "linear")),
    Row("weight decay", ("optimizer.weight_decay",),
        "none (no regularisation; the paper's protocol, and be133b3's README command); the "
        "later README's ImageNet command sets 1e-6",
        f"paper App. B.5, B.6; {_V1} README.md (--weight_decay=0.0)", (0.0,)),
    Row("schedule", ("optimizer.decay", "optimizer.warmup_epochs", "optimizer.final_lr_factor"),
        "no warm-up, cosine to 0", f"paper App. B.5; {_V1} model_util.py:50-68",
        ("cosine", 0.0, 0.0)),
    Row("augmentation, views", ("data.augmentation", "data.num_views", "data.image_size"),
        "the pretraining crop (distorted_bounding_box_crop, area 0.08-1, bicubic resize to "
        "224) + flip, no colour distortion; one view",
        f"paper App. B.5; {_V1} data_util.py (preprocess_for_train, color_distort=False), "
        "data.py:164", ("simclr_v1_linear", 1, 224)),
    Row("evaluation transform", ("data.eval_transform", "data.eval_crop_fraction"),
        "a centred square of 0.875 of the shorter side (CROP_PROPORTION), resize_bicubic to "
        "224, clipped to [0, 1]", f"{_V1} data_util.py (center_crop, preprocess_for_eval)",
        ("crop_resize", 0.875)),
    Row("evaluation", ("train.validate_every_epochs",),
        "top-1/top-5 on the validation split after training", f"{_V1} run.py (train_then_eval)",
        why="evaluated after every epoch too; the final epoch is the paper's number"),
)
