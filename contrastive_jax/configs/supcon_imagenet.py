"""SupCon on ImageNet: ResNet-50, LARS, 350 epochs, at the authors' TF code (Khosla et al. 2020).

Khosla et al. (2020), "Supervised Contrastive Learning", arXiv:2004.11362 (NeurIPS 2020), as
their TF code runs it (github.com/google-research/google-research, ``supcon/``:
``scripts/supcon_imagenet_resnet50.sh``, ``scripts/configs.sh``, ``hparams_flags.py``), on top
of :mod:`contrastive_jax.configs.simclr_imagenet` (encoder with zero-initialised last gamma
of each block, LARS, cosine schedule, global batch norm, augmentation). What changes, and the
source of each value:

=================================  ==========================================================
setting                            source
=================================  ==========================================================
SupCon loss, L^sup_out, tau = 0.1  ``configs.sh`` ``--summation_location=OUTSIDE``;
                                   ``supcon_imagenet_resnet50.sh`` ``--temperature=0.1``
loss x tau                         ``configs.sh`` ``--scale_by_temperature=True``:
                                   ``loss.base_temperature = 1.0``
head: L2-normalised encoder        ``configs.sh`` ``--normalize_embedding=True
output -> Linear 128, no bias,     --projection_head_layers=128
no batch norm                      --use_projection_batch_norm=False``: the
                                   ``normalized_linear`` head
LARS, lr 0.4 x B / 256             ``supcon_imagenet_resnet50.sh`` ``--stage_1_optimizer=LARS
                                   --stage_1_base_learning_rate=0.4`` (``launcher.py``:
                                   scaled by B / 256)
weight decay 1e-3, batch norm      ``--stage_1_weight_decay=1e-3``; ``configs.sh``
alone excluded                     ``--use_bias_weight_decay=True``: ``decay_biases=True``
12 warm-up epochs                  ``hparams_flags.py`` ``stage_1_warmup_epochs`` default 12,
                                   not overridden by the script
350 epochs                         ``--stage_1_epochs=350``
mixed precision (bfloat16)         ``configs.sh`` ``TPU_FLAGS``
                                   ``--allow_mixed_precision=True``: encoder and head in
                                   bfloat16, float32 parameters and loss
AutoAugment (ImageNet policy v0)   ``supcon_imagenet_resnet50.sh``
after TF's distorted crop          ``--augmentation_type=AUTOAUGMENT``; ``preprocessing.py``
(bilinear) and a flip; no colour   (``_distorted_crop_window``, ``_augment_image``:
jitter, grayscale or blur          ``augment.AutoAugment()``, the Model Garden's ``v0``): the
                                   ``supcon_autoaugment`` preset
=================================  ==========================================================

Different here, said rather than approximated silently:

* batch: the script trains at batch 6144; this recipe keeps SimCLR's 4096 so that it runs
  where ``simclr_imagenet`` runs (``--config.data.global_batch_size=6144`` for the source's; the learning
  rate follows by its linear scaling);
* the crop's resize: Pillow's bilinear filter, antialiased when it shrinks; the source's
  ``tf.image.resize`` is not.

``docs/recipes.md`` has every setting beside the source's.

Expected: the paper reports 78.7 % top-1 for ResNet-50 with AutoAugment at batch 6144 (its
ImageNet tables); this recipe keeps batch 4096 (above).
Not run here.

    contrastive-jax-pretrain --workdir runs/supcon_imagenet \\
        --config "$(python -m contrastive_jax.configs supcon_imagenet)" \\
        --config.data.data_dir=DIR        # after `tfds build imagenet2012 --data_dir=DIR`
"""

from contrastive_jax.configs import _sources, simclr_imagenet
from contrastive_jax.configs._sources import Row


def get_config():
    config = simclr_imagenet.get_config()
    config.loss.name = "supcon"
    config.loss.temperature = 0.1
    config.loss.base_temperature = 1.0
    config.model.encoder.dtype = "bfloat16"
    config.model.head.name = "normalized_linear"  # hidden_features, num_hidden_layers unused
    config.model.head.dtype = "bfloat16"
    config.optimizer.base_learning_rate = 0.4
    config.optimizer.weight_decay = 1e-3
    config.optimizer.decay_biases = True
    config.optimizer.warmup_epochs = 12.0
    config.train.epochs = 350
    config.data.augmentation = "supcon_autoaugment"
    # the evaluation path (the kNN monitor; the linear recipe inherits it): the shorter side
    # to 224 + crop_padding 32 = 256 by TF1's bilinear resize, then the centre 224
    config.data.eval_transform = "tf_resize_crop"
    config.data.eval_crop_fraction = 224 / 256
    config.data.mean = (0.5, 0.5, 0.5)  # x / 127.5 - 1: [-1, 1]
    config.data.std = (0.5, 0.5, 0.5)
    return config


_TF = _sources.SUPCON_TF
_SCRIPT = f"{_TF}scripts/supcon_imagenet_resnet50.sh"
_FLAGS = f"{_TF}scripts/configs.sh"
_AUGMENT = _sources.TF_MODELS_AUGMENT
_ROWS = {row.setting: row for row in simclr_imagenet.SOURCE}
#: Every setting beside the source's (``docs/recipes.md``; :mod:`contrastive_jax.configs._sources`).
SOURCE = (
    _ROWS["encoder"]._replace(source="ResNet-50 (v1), 7x7 stride-2 stem and max pool, width 1",
                              where=f"{_FLAGS}:31-33, 57-59"),
    _ROWS["convolution initialisation"]._replace(
        where=f"{_TF}blocks.py (Conv2DFixedPadding: tf.variance_scaling_initializer())"),
    _ROWS["stem max-pool padding"]._replace(
        where=f"{_TF}resnet.py (MaxPooling2D, padding='SAME')"),
    Row("last BN gamma of each block", ("model.encoder.zero_init_residual",),
        "zero-initialised", f"{_TF}blocks.py (BottleneckResidualBlock: third_bn init_zero=True)",
        (True,)),
    Row("projection head", ("model.head.name", "model.head.out_features"),
        "L2-normalised encoder output -> Linear 128 without bias, no batch norm",
        f"{_FLAGS}:82, 84, 85; {_TF}projection_head.py (the last Dense has no bias)",
        ("normalized_linear", 128)),
    Row("head initialisation", ("model.head.kernel_init",), "the Dense kernel N(0, 0.01^2)",
        f"{_TF}projection_head.py", ("normal_0.01",)),
    Row("loss, temperature", ("loss.name", "loss.temperature"),
        "SupCon, sum over positives outside the log, tau = 0.1",
        f"{_FLAGS}:66; {_SCRIPT}:33", ("supcon", 0.1)),
    Row("loss scale", ("loss.base_temperature",), "loss x tau (--scale_by_temperature=True)",
        f"{_FLAGS}:87", (1.0,)),
    Row("batch", ("data.global_batch_size",), "6144", f"{_SCRIPT}:31",
        why="4096, so that the recipe runs where simclr_imagenet runs; "
            "--config.data.global_batch_size=6144 gives the source's (the learning rate follows)"),
    Row("epochs", ("train.epochs",), "350", f"{_SCRIPT}:35", (350,)),
    Row("optimiser", ("optimizer.name",), "LARS", f"{_SCRIPT}:39", ("lars",)),
    Row("learning rate", ("optimizer.base_learning_rate", "optimizer.lr_scaling"),
        "0.4 x B / 256", f"{_SCRIPT}:36; {_TF}launcher.py (BASE_BATCH_SIZE = 256)",
        (0.4, "linear")),
    Row("weight decay", ("optimizer.weight_decay", "optimizer.decay_norm_and_bias",
                         "optimizer.decay_biases"),
        "1e-3; only batch norm excluded (--use_bias_weight_decay=True)",
        f"{_SCRIPT}:34; {_FLAGS}:83", (1e-3, False, True)),
    Row("warm-up", ("optimizer.warmup_epochs",), "12 epochs (the flag's default)",
        f"{_TF}hparams_flags.py (stage_1_warmup_epochs)", (12.0,)),
    Row("decay", ("optimizer.final_lr_factor",), "cosine (the flag's default)",
        f"paper Sec. 4; {_TF}hparams_flags.py (stage_1_learning_rate_decay)", (0.0,)),
    Row("batch norm", ("model.encoder.bn_axis_name", "model.head.bn_axis_name"),
        "global (use_global_batch_norm)", f"{_TF}hparams_flags.py (use_global_batch_norm)",
        ("data", "data")),
    Row("image side", ("data.image_size",), "224", f"{_FLAGS}:60", (224,)),
    Row("input scaling", ("data.mean", "data.std"), "[-1, 1] (x / 127.5 - 1), no whitening",
        f"{_TF}preprocessing.py (_convert_image_dtype; apply_whitening needs the dataset's "
        "image_mean_std)", ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))),
    Row("evaluation transform", ("data.eval_transform", "data.eval_crop_fraction"),
        "the shorter side to 224 + 32 = 256 (tf.compat.v1 bilinear resize: legacy pixel "
        "centres, not antialiased; truncating casts to int32 sides and uint8 pixels), then "
        "the centre 224 (eval_crop_method=RESIZE_THEN_CROP, crop_padding=32)",
        f"{_TF}preprocessing.py (_crop_to_square, _resize_to_min_dim, _resize_image, "
        f"_center_crop_window); {_TF}hparams_flags.py (eval_crop_method, crop_padding)",
        ("tf_resize_crop", 224 / 256)),
    Row("augmentation", ("data.augmentation",),
        "TF's distorted crop (area 0.08-1, aspect 0.75-1.33, 100 attempts, else the central "
        "square), flip, AutoAugment (ImageNet policy v0, cutout 100, translate 250); no colour "
        "jitter or blur",
        f"{_SCRIPT}:32; {_TF}preprocessing.py (_distorted_crop_window, _augment_image); "
        f"{_AUGMENT}:739-742, 847-873", ("supcon_autoaugment",)),
    Row("crop resize", ("data.augmentation",), "bilinear tf.image.resize, not antialiased",
        f"{_TF}preprocessing.py (_resize_image)",
        why="Pillow's bilinear filter, antialiased when it shrinks (the default input path "
            "resizes on the host with Pillow)"),
    Row("precision", ("model.encoder.dtype", "model.head.dtype"),
        "bfloat16 model under tf.tpu.bfloat16_scope (--allow_mixed_precision=True)",
        f"{_FLAGS}:27; {_TF}launcher.py (_call_model)", ("bfloat16", "bfloat16")),
    Row("online linear probe", ("train.online_probe",),
        "a classification head on stop-gradient features, weight 0 in stage 1",
        f"{_FLAGS}:64, 68-69",
        why="the probe here is trained as a monitor; it cannot change the encoder "
            "(stop-gradient), as there"),
)
