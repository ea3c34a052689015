"""SimCLR's semi-supervised fine-tuning on ImageNet: 1 % (or 10 %) of the labels.

Chen et al. 2020 (arXiv:2002.05709), App. B.5: the whole network fine-tuned with Nesterov
momentum 0.9, batch 4096, a learning rate of 0.05 x B / 256 (0.8) without warm-up, random
crop + flip alone (the v1 code's pretraining crop, ``simclr_v1_linear``), no regularisation
(weight decay included: the authors' README command passes ``--weight_decay=0``), 60 epochs
for 1 % of the labels and 30 for 10 %; the new classifier starts at zero, as that command's
``--zero_init_logits_layer=True``. As SimCLR v1 (the paper's code,
``--fine_tune_after_block=-1``), the whole network fine-tunes from the encoder's output through
a new Linear with bias to the 1000 classes (the ``classifier`` head); SimCLR v2
(Chen et al. 2020b, arXiv:2006.10029, Sec. 2; ``--ft_proj_selector=1``) starts from the
projection head's first layer instead (``--config.model.head.name=simclr_v2
--config.model.head.num_hidden_layers=1 --config.model.head.hidden_features=2048
--config.model.head.out_features=1000 --config.model.init_head_layers=1``), with its own
optimiser and batch.

The labelled examples are SimCLR's subsets, prepared by TFDS as ``imagenet2012_subset/1pct``
(``/10pct``: ``--config.data.dataset=imagenet2012_subset/10pct --config.train.epochs=30``); the
validation split is ImageNet's. For data held in memory or a folder of images,
``--config.data.label_fraction=0.01`` keeps a seeded 1 % of each class and
``--config.data.label_ids=1percent.txt`` the examples of a list (ids or file names:
``imagenet_subsets/1percent.txt`` of google-research/simclr), see
:mod:`contrastive_jax.data.label_subset`.

    contrastive-jax-pretrain --workdir runs/simclr_imagenet_finetune \\
        --config "$(python -m contrastive_jax.configs simclr_imagenet_finetune)" \\
        --config.model.init_from=runs/simclr_imagenet --config.data.data_dir=DIR

Expected: 48.3 % top-1 with 1 % of the labels, 65.6 % with 10 % (paper Table 7, ResNet-50,
1,000 pretraining epochs; fine-tuned from the encoder). Not run here.
"""

from contrastive_jax.configs import _sources, simclr_imagenet
from contrastive_jax.configs._evaluation import from_pretraining, simclr_sgd
from contrastive_jax.configs._sources import Row


def get_config():
    config = from_pretraining(simclr_imagenet.get_config(), trainable="all", num_classes=1000,
                              augmentation="simclr_v1_linear", batch_size=4096, epochs=60)
    config.data.dataset = "imagenet2012_subset/1pct"
    config.model.head.kernel_init = "zeros"  # README's command: --zero_init_logits_layer=True
    simclr_sgd(config, base_learning_rate=0.05)
    config.train.validate_every_epochs = 10
    return config


_V1 = _sources.SIMCLR_V1
#: Every setting beside the source's (``docs/recipes.md``; :mod:`contrastive_jax.configs._sources`).
SOURCE = (
    Row("labelled examples", ("data.dataset",), "SimCLR's 1 % subset of ImageNet's labels",
        f"paper App. B.5; {_V1} imagenet_subsets/1percent.txt",
        ("imagenet2012_subset/1pct",)),
    Row("start", ("model.trainable", "model.init_head_layers", "model.head.name"),
        "the whole network trains, from the encoder's output through a new Linear with bias "
        "(fine_tune_after_block=-1, head_supervised)",
        f"paper App. B.5; {_V1} model.py:62-68, model_util.py (supervised_head: "
        "linear_layer, use_bias=True)", ("all", 0, "classifier")),
    Row("classifier initialisation", ("model.head.kernel_init",),
        "zeros, kernel and bias: the authors' whole-network fine-tuning command passes "
        "--zero_init_logits_layer=True (the flag's default, False, leaves linear_layer's "
        "N(0, 0.01^2))",
        f"{_sources.SIMCLR_README} ('fine-tune the whole network' command); {_V1} model.py "
        "(scaffold_fn: head_supervised assigned zeros), model_util.py (linear_layer)",
        ("zeros",)),
    Row("input scaling", ("data.mean", "data.std"), "[0, 1], no normalisation (pretraining's)",
        f"{_V1} data_util.py (preprocess_image)", ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))),
    Row("batch, epochs", ("data.global_batch_size", "train.epochs"), "4096, 60 (1 %)",
        "paper App. B.5", (4096, 60)),
    Row("optimiser", ("optimizer.name", "optimizer.momentum", "optimizer.nesterov"),
        "momentum 0.9, Nesterov", f"paper App. B.5; {_V1} model.py:168-170",
        ("sgd", 0.9, True)),
    Row("learning rate", ("optimizer.base_learning_rate", "optimizer.lr_scaling"),
        "0.05 x B / 256 (0.8)", "paper App. B.5", (0.05, "linear")),
    Row("weight decay", ("optimizer.weight_decay",),
        "none: the paper's 'no regularisation', and the README's command passes "
        "--weight_decay=0; without that flag be133b3 adds 1e-6 x the L2 of every non-BN "
        "variable (the flag's default, model_util.add_weight_decay for momentum)",
        f"paper App. B.5; {_sources.SIMCLR_README} ('fine-tune the whole network' command); "
        f"{_V1} model_util.py (add_weight_decay), run.py (weight_decay)", (0.0,)),
    Row("schedule", ("optimizer.decay", "optimizer.warmup_epochs", "optimizer.final_lr_factor"),
        "no warm-up, cosine to 0", f"paper App. B.5; {_V1} model_util.py:50-68",
        ("cosine", 0.0, 0.0)),
    Row("augmentation, views", ("data.augmentation", "data.num_views", "data.image_size"),
        "the pretraining crop (distorted_bounding_box_crop, area 0.08-1, bicubic resize to "
        "224) + flip, no colour distortion; one view",
        f"paper App. B.5; {_V1} data_util.py (preprocess_for_train, color_distort=False)",
        ("simclr_v1_linear", 1, 224)),
    Row("batch norm", ("model.encoder.bn_axis_name",),
        "global (all cores), updated", f"{_V1} model.py:62-68 (model_train_mode)",
        ("data",)),
    Row("evaluation transform", ("data.eval_transform", "data.eval_crop_fraction"),
        "a centred square of 0.875 of the shorter side (CROP_PROPORTION), resize_bicubic to "
        "224, clipped to [0, 1]", f"{_V1} data_util.py (center_crop, preprocess_for_eval)",
        ("crop_resize", 0.875)),
    Row("evaluation", ("train.validate_every_epochs",),
        "top-1/top-5 on the validation split after training", f"{_V1} run.py (train_then_eval)",
        why="evaluated every 10 epochs too; the final epoch is the paper's number"),
)
