"""SimCLR on ImageNet: ResNet-50, batch 4096, LARS, 100 epochs (Chen et al. 2020).

The default setting of Chen, Kornblith, Norouzi & Hinton (2020), "A Simple Framework for
Contrastive Learning of Visual Representations", arXiv:2002.05709, Sec. 2.3 ("Default
setting"), field by field:

=================================  ==========================================================
setting                            source
=================================  ==========================================================
ResNet-50, ImageNet stem, width 1  Sec. 2.3 ("We use ResNet-50 as the base encoder"); the
                                   last BN gamma of each block zero-initialised, as in the
                                   authors' v1 code (``resnet.py``, ``init_zero=True``)
2-layer MLP head 2048 -> 2048      Sec. 2.3 ("a 2-layer MLP projection head to project the
-> 128                             representation to a 128-dimensional latent space"); the hidden
                                   layer has BN and no bias, the 128-d output a BN without
                                   offset, as in the authors' v1 code (``model_util.py``): the
                                   ``simclr_v1`` head
NT-Xent, tau = 0.1                 loss: Sec. 2.3; tau: Table 5 (l2-normalised, tau = 0.1 is the
                                   best of 0.05 / 0.1 / 0.5 / 1 at batch 4096, 100 epochs); the
                                   two views' means summed, as the v1 code's ``loss_a +
                                   loss_b`` (``objective.py``): ``loss.view_reduction="sum"``
global batch 4096, 100 epochs      Sec. 2.3 ("We train at batch size 4096 for 100 epochs")
LARS, lr 0.3 x B / 256 = 4.8       Sec. 2.3 ("LARS with learning rate of 4.8 (= 0.3 x
                                   BatchSize/256)"), momentum 0.9 and trust coefficient 1e-3
                                   (the authors' code)
weight decay 1e-6                  Sec. 2.3 ("weight decay of 10^-6"); biases and BN
                                   parameters excluded from decay and trust ratio, as in the
                                   authors' LARS
10 warm-up epochs, cosine to 0     Sec. 2.3 ("linear warmup for the first 10 epochs, and decay
                                   the learning rate with the cosine decay schedule without
                                   restarts")
global batch norm                  Sec. 2.2 ("Global BN": mean and variance aggregated over all
                                   devices): ``encoder.bn_axis_name = head.bn_axis_name =
                                   "data"``
augmentation                       App. A: random resized crop (area 0.08-1, aspect 3/4-4/3),
                                   flip, colour distortion strength 1.0 (jitter 0.8, 0.8, 0.8,
                                   0.2 with p = 0.8, grayscale p = 0.2), Gaussian blur with
                                   p = 0.5, sigma U(0.1, 2.0) and a kernel 10 % of the side; the
                                   v1 code's crop (``distorted_bounding_box_crop``, bicubic
                                   resize), additive brightness
                                   (``tf.image.random_brightness``) and blur sigma drawn once
                                   per per-core batch of 32 and view
                                   (``batch_random_blur``): the ``simclr_v1_imagenet``
                                   preset
224 x 224 views, two per image     App. A; Sec. 2.1 (two views)
online linear probe                a linear classifier on stop-gradient features during
                                   pretraining, as the authors' later TF2 code trains it
                                   (``tf2/run.py``, ``lineareval_while_pretraining``); the
                                   v1 code this recipe follows trains none (``model.py``:
                                   ``logits_sup = tf.zeros``). The stop-gradient keeps the
                                   encoder's training what it is without it
=================================  ==========================================================

Different here (``docs/recipes.md`` has every setting beside the source's, with the line of
the authors' code):

* the image ops' arithmetic: contrast blends with the mean luma and saturation with each
  pixel's luma (torchvision's), where the v1 code's ``tf.image.random_contrast`` uses each
  channel's mean and ``random_saturation`` scales the HSV saturation; the blur pads by
  reflection (v1: zeros); the bicubic resize is Pillow's, antialiased when it shrinks
  (v1's ``tf.image.resize_bicubic`` is not);
* precision: the paper does not state it; this recipe computes in float32
  (``--config.model.encoder.dtype=bfloat16 --config.model.head.dtype=bfloat16`` for mixed
  precision, float32 parameters and loss).

Expected: 64.4 % top-1 linear evaluation on ImageNet after these 100 epochs (Table 5,
tau = 0.1 with l2 normalisation); 69.3 % after 1,000 epochs (``--config.train.epochs=1000``,
Sec. 6, Table 6). The paper trained on 128 TPU v3 cores, 1.5 hours for 100 epochs (Sec. 2.2).
Not run here: ``docs/training.md`` has the dry-run memory and FLOP figures of this recipe.

    contrastive-jax-pretrain --workdir runs/simclr_imagenet \\
        --config "$(python -m contrastive_jax.configs simclr_imagenet)" \\
        --config.data.data_dir=DIR        # after `tfds build imagenet2012 --data_dir=DIR`
    contrastive-jax-pretrain --config "$(python -m contrastive_jax.configs simclr_imagenet)" \\
        --dry_run --target tpu-v4-32      # memory and FLOPs per chip, no data, no TPU needed
"""

from contrastive_jax.configs import _sources
from contrastive_jax.configs._sources import Row
from contrastive_jax.train.config import default_config


def get_config():
    config = default_config()
    config.data.dataset = "imagenet2012"
    config.data.image_size = 224
    config.data.num_views = 2
    config.data.augmentation = "simclr_v1_imagenet"
    config.data.global_batch_size = 4096
    config.data.mean = (0.0, 0.0, 0.0)  # the v1 code feeds [0, 1], unnormalised
    config.data.std = (1.0, 1.0, 1.0)
    # evaluation (the kNN monitor, the linear evaluation): data_util.py's center_crop
    config.data.eval_transform = "crop_resize"
    config.data.eval_crop_fraction = 0.875
    config.model.encoder.name = "resnet50"
    config.model.encoder.stem = "imagenet"
    config.model.encoder.width = 1.0
    config.model.encoder.bn_axis_name = "data"
    config.model.encoder.zero_init_residual = True
    config.model.encoder.conv_init = "tf_fan_in"
    config.model.encoder.pool_padding = "same"
    config.model.head.name = "simclr_v1"
    config.model.head.num_hidden_layers = 1
    config.model.head.hidden_features = 2048
    config.model.head.out_features = 128
    config.model.head.bn_axis_name = "data"
    config.model.head.kernel_init = "normal_0.01"
    config.loss.name = "nt_xent"
    config.loss.temperature = 0.1
    config.loss.view_reduction = "sum"
    config.optimizer.name = "lars"
    config.optimizer.base_learning_rate = 0.3
    config.optimizer.lr_scaling = "linear"
    config.optimizer.weight_decay = 1e-6
    config.optimizer.momentum = 0.9
    config.optimizer.trust_coefficient = 1e-3
    config.optimizer.warmup_epochs = 10.0
    config.optimizer.warmup_init = 0.0
    config.optimizer.final_lr_factor = 0.0
    config.optimizer.decay_norm_and_bias = False
    config.train.epochs = 100
    config.train.online_probe = True
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    return config


_V1 = _sources.SIMCLR_V1
#: Every setting beside the source's (``docs/recipes.md``; :mod:`contrastive_jax.configs._sources`).
SOURCE = (
    Row("encoder", ("model.encoder.name", "model.encoder.stem", "model.encoder.width"),
        "ResNet-50 (v1), 7x7 stride-2 stem and max pool, width 1", "paper Sec. 2.3",
        ("resnet50", "imagenet", 1.0)),
    Row("convolution initialisation", ("model.encoder.conv_init",),
        "tf.variance_scaling_initializer(): scale 1, fan-in, truncated normal",
        f"{_V1} resnet.py (conv2d_fixed_padding)", ("tf_fan_in",)),
    Row("stem max-pool padding", ("model.encoder.pool_padding",),
        "TF's SAME (an even side padded after only)",
        f"{_V1} resnet.py (max_pooling2d, padding='SAME')", ("same",)),
    Row("last BN gamma of each block", ("model.encoder.zero_init_residual",),
        "zero-initialised (init_zero=True)", f"{_V1} resnet.py:324, 389", (True,)),
    Row("projection head", ("model.head.name", "model.head.num_hidden_layers",
                            "model.head.hidden_features", "model.head.out_features"),
        "Linear 2048 (no bias) -> BN -> ReLU -> Linear 128 (no bias) -> BN without offset",
        f"{_V1} model_util.py:98, 103-120 (linear_layer: center=use_bias)",
        ("simclr_v1", 1, 2048, 128)),
    Row("head initialisation", ("model.head.kernel_init",),
        "every Linear kernel N(0, 0.01^2)",
        f"{_V1} model_util.py (linear_layer: tf.random_normal_initializer(stddev=.01))",
        ("normal_0.01",)),
    Row("loss, temperature", ("loss.name", "loss.temperature"), "NT-Xent, tau = 0.1",
        f"paper Sec. 2.3, Table 5; {_V1} run.py:186", ("nt_xent", 0.1)),
    Row("loss scale", ("loss.base_temperature", "loss.view_reduction"),
        "loss_a + loss_b: each view's mean over its anchors, summed (2x the mean over the 2N "
        "anchors); no temperature factor",
        f"{_V1} objective.py:38-92 (add_contrastive_loss)", (None, "sum")),
    Row("batch, epochs", ("data.global_batch_size", "train.epochs"), "4096, 100",
        "paper Sec. 2.3", (4096, 100)),
    Row("optimiser", ("optimizer.name", "optimizer.momentum", "optimizer.trust_coefficient"),
        "LARS, momentum 0.9, eta 1e-3", f"{_V1} lars_optimizer.py:26 (EETA_DEFAULT)",
        ("lars", 0.9, 1e-3)),
    Row("learning rate", ("optimizer.base_learning_rate", "optimizer.lr_scaling"),
        "0.3 x B / 256", f"paper Sec. 2.3; {_V1} model_util.py:55", (0.3, "linear")),
    Row("weight decay", ("optimizer.weight_decay", "optimizer.decay_norm_and_bias",
                         "optimizer.decay_biases"),
        "1e-6; batch norm and biases excluded (from the trust ratio too)",
        f"paper Sec. 2.3; {_V1} model.py:179 (exclude_from_weight_decay)", (1e-6, False, False)),
    Row("schedule", ("optimizer.warmup_epochs", "optimizer.warmup_init",
                     "optimizer.final_lr_factor"),
        "10 warm-up epochs from 0, cosine to 0", f"paper Sec. 2.3; {_V1} model_util.py:50-68",
        (10.0, 0.0, 0.0)),
    Row("batch norm", ("model.encoder.bn_axis_name", "model.head.bn_axis_name",
                       "model.encoder.bn_momentum"),
        "global (all cores), decay 0.9",
        f"paper Sec. 2.2 (Global BN); {_V1} run.py:54 (batch_norm_decay)",
        ("data", "data", 0.9)),
    Row("input scaling", ("data.mean", "data.std"), "[0, 1], no normalisation",
        f"{_V1} data_util.py (preprocess_image: 'A preprocessed image Tensor of range [0, 1]')",
        ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))),
    Row("image side, views", ("data.image_size", "data.num_views"), "224, 2",
        "paper App. A, Sec. 2.1", (224, 2)),
    Row("evaluation transform", ("data.eval_transform", "data.eval_crop_fraction"),
        "a centred square of 0.875 of the shorter side (CROP_PROPORTION), resize_bicubic to "
        "224, clipped to [0, 1]", f"{_V1} data_util.py (center_crop, preprocess_for_eval)",
        ("crop_resize", 0.875)),
    Row("augmentation", ("data.augmentation",),
        "distorted_bounding_box_crop (area 0.08-1) + bicubic resize, flip, colour distortion "
        "s = 1 with additive brightness, blur p = 0.5",
        f"paper App. A; {_V1} data_util.py:121-125 (brightness), 222-295 (crop), "
        "366-383 (blur), 416-438 (order)", ("simclr_v1_imagenet",)),
    Row("blur sigma", ("data.augmentation",),
        "U(0.1, 2.0) drawn once per per-core batch and view (4096 / 128 cores = 32 images), "
        "the blur applied to each image with p = 0.5",
        f"{_V1} data_util.py (batch_random_blur, random_blur), model.py (model_fn: "
        "batch_random_blur on each view's per-core features); paper Sec. 2.2 (128 TPU v3 "
        "cores)", ("simclr_v1_imagenet",)),
    Row("image ops' arithmetic", ("data.augmentation",),
        "tf.image.random_contrast (per-channel mean), random_saturation (HSV), blur with zero "
        "padding, tf.image.resize_bicubic (not antialiased)",
        f"{_V1} data_util.py:126-136, 298-336, 295",
        why="torchvision's contrast (mean luma) and saturation (luma blend), the blur pads by "
            "reflection, Pillow's bicubic filter (antialiased when it shrinks)"),
    Row("precision", ("model.encoder.dtype", "model.head.dtype"), "not stated",
        "paper (no statement)", why="float32 chosen here"),
    Row("online linear probe", ("train.online_probe",),
        "tf2/: a linear classifier on stop-gradient features during pretraining "
        "(lineareval_while_pretraining, default True); be133b3: none",
        f"paper App. B.6; {_sources.SIMCLR_TF2}run.py (lineareval_while_pretraining); "
        f"{_V1} model.py (train_mode 'pretrain': logits_sup = tf.zeros)",
        why="on, as tf2/'s code; the v1 code the recipe follows has no probe. The probe "
            "reads stop-gradient features, so the encoder trains as without it"),
)
