"""SupCon's linear evaluation on ImageNet, as the authors' TF code runs its second stage.

google-research/google-research ``supcon/scripts/supcon_imagenet_resnet50.sh`` (stage 2 of
the run that pretrains ``supcon_imagenet``) with the flags of ``scripts/configs.sh`` and the
defaults of ``hparams_flags.py``: a classifier on the L2-normalised output of the frozen
encoder (``--stop_gradient_before_classification_head``, ``--normalize_embedding``), whose
batch norm normalises with each batch's statistics and keeps its moving averages
(``--stage_2_update_encoder_batch_norm=False`` in the training-mode graph of both stages:
``model.frozen_encoder_bn="batch"``) over both augmented views of each image, the
cross-entropy on the first view's logits (``launcher.py``: ``data.num_views = 2``,
``loss.view_reduction = "first"``), RMSProp (decay 0.9, momentum 0.9, epsilon
1e-3; ``utils.py`` ``build_optimizer``) at 0.05 x B / 256 with batch 6144, 12 warm-up epochs
(the flag's default), then x 0.97 every half epoch (staircase, ``utils.py``
``exponential_decay``), 90 epochs, label smoothing 0.05, weight decay 1e-6 on the classifier
(biases included), bfloat16.

    contrastive-jax-pretrain --workdir runs/supcon_imagenet_linear \\
        --config "$(python -m contrastive_jax.configs supcon_imagenet_linear)" \\
        --config.model.init_from=runs/supcon_imagenet --config.data.data_dir=DIR

Expected: 78.7 % top-1 (arXiv:2004.11362, Table 2, ResNet-50 with AutoAugment). Not run here.
"""

from contrastive_jax.configs import _sources, supcon_imagenet
from contrastive_jax.configs._evaluation import from_pretraining
from contrastive_jax.configs._sources import Row


def get_config():
    config = from_pretraining(supcon_imagenet.get_config(), trainable="head", num_classes=1000,
                              augmentation="supcon_autoaugment", batch_size=6144, epochs=90)
    config.model.frozen_encoder_bn = "batch"
    # launcher.py: both views through the encoder in training mode (its batch norm over
    # 2 x 6144 images), the cross-entropy on the first view's logits
    config.data.num_views = 2
    config.loss.view_reduction = "first"
    config.model.head.name = "normalized_linear"
    config.model.head.out_features = 1000
    config.model.head.kernel_init = "glorot_uniform"  # Keras Dense's default
    config.model.head.dtype = config.model.encoder.dtype
    config.loss.kwargs = {"label_cross_entropy": {"label_smoothing": 0.05}}
    config.optimizer.name = "rmsprop"
    config.optimizer.momentum = 0.9
    config.optimizer.rmsprop_decay = 0.9
    config.optimizer.rmsprop_epsilon = 1e-3
    config.optimizer.base_learning_rate = 0.05
    config.optimizer.lr_scaling = "linear"
    config.optimizer.weight_decay = 1e-6
    config.optimizer.decay_biases = True
    config.optimizer.warmup_epochs = 12.0
    config.optimizer.decay = "exponential"
    config.optimizer.decay_rate = 0.97
    config.optimizer.decay_every_epochs = 0.5
    return config


_TF = _sources.SUPCON_TF
_SCRIPT = f"{_TF}scripts/supcon_imagenet_resnet50.sh"
_FLAGS = f"{_TF}scripts/configs.sh"
_DEFAULTS = f"{_TF}hparams_flags.py"
#: Every setting beside the source's (``docs/recipes.md``; :mod:`contrastive_jax.configs._sources`).
SOURCE = (
    Row("encoder", ("model.encoder.name", "model.encoder.stem", "model.trainable",
                    "model.frozen_encoder_bn"),
        "the pretrained ResNet-50, frozen (stop gradient); its batch norm in training mode "
        "(each batch's statistics), the moving averages not updated",
        f"{_FLAGS} (CONTRASTIVE_FLAGS: --stop_gradient_before_classification_head, "
        f"--stage_2_update_encoder_batch_norm=False); {_TF}launcher.py (stage_2_train_op: "
        "update_ops=[] in the one training-mode graph)", ("resnet50", "imagenet", "head", "batch")),
    Row("classifier", ("model.head.name", "model.head.out_features"),
        "Dense 2048 -> 1000 with bias on the L2-normalised encoder output, glorot init",
        f"{_FLAGS} (SUPCON_FLAGS: --normalize_embedding=True, --zero_initialize_classifier="
        f"False); {_TF}classification_head.py",
        why="normalized_linear has no bias (the nearest head built)"),
    Row("classifier initialisation", ("model.head.kernel_init",),
        "glorot uniform (tf.keras.layers.Dense's default; --zero_initialize_classifier=False)",
        f"{_TF}classification_head.py; {_FLAGS} (SUPCON_FLAGS)", ("glorot_uniform",)),
    Row("input scaling", ("data.mean", "data.std"), "[-1, 1], as in pretraining",
        f"{_TF}preprocessing.py (_convert_image_dtype)", ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))),
    Row("loss", ("loss.name", "loss.kwargs.label_cross_entropy.label_smoothing"),
        "cross-entropy, label smoothing 0.05", f"{_FLAGS} (IMAGENET_FLAGS: --label_smoothing=0.05)",
        ("label_cross_entropy", 0.05)),
    Row("batch, epochs", ("data.global_batch_size", "train.epochs"), "6144, 90",
        f"{_SCRIPT} (--batch_size=6144, --stage_2_epochs=90)", (6144, 90)),
    Row("optimiser", ("optimizer.name", "optimizer.rmsprop_decay", "optimizer.momentum",
                      "optimizer.rmsprop_epsilon"),
        "TF1 RMSProp, decay 0.9, momentum 0.9, epsilon 1e-3",
        f"{_SCRIPT} (--stage_2_optimizer=RMSPROP); {_TF}utils.py (build_optimizer); "
        f"{_DEFAULTS} (stage_2_rmsprop_epsilon)", ("rmsprop", 0.9, 0.9, 1e-3)),
    Row("learning rate", ("optimizer.base_learning_rate", "optimizer.lr_scaling"),
        "0.05 x B / 256", f"{_SCRIPT} (--stage_2_base_learning_rate=0.05); {_DEFAULTS}",
        (0.05, "linear")),
    Row("weight decay", ("optimizer.weight_decay", "optimizer.decay_biases"),
        "1e-6 on the classifier, biases included",
        f"{_SCRIPT} (--stage_2_weight_decay=1e-6); {_FLAGS} (--use_bias_weight_decay=True)",
        (1e-6, True)),
    Row("schedule", ("optimizer.warmup_epochs", "optimizer.decay", "optimizer.decay_rate",
                     "optimizer.decay_every_epochs"),
        "12 warm-up epochs (the default), then x 0.97 every 0.5 epoch, staircase",
        f"{_SCRIPT} (--stage_2_learning_rate_decay=EXPONENTIAL, --stage_2_decay_rate=0.97, "
        f"--stage_2_epochs_per_decay=0.5); {_DEFAULTS} (stage_2_warmup_epochs); "
        f"{_TF}utils.py (exponential_decay)", (12.0, "exponential", 0.97, 0.5)),
    Row("augmentation, views", ("data.augmentation", "data.num_views", "loss.view_reduction"),
        "AutoAugment (the run's --augmentation_type); two training-mode views of each image "
        "stacked into one batch through the encoder (its batch norm over 2 x 6,144 images), "
        "the cross-entropy on the first view's logits",
        f"{_SCRIPT} (--augmentation_type=AUTOAUGMENT); {_TF}launcher.py (ContrastiveTrainer: "
        "'Both train and eval modes must have 2 views'; _call_model: "
        "stacked_multiview_image_channels_to_batch, logits = tf.split(logits, 2, axis=1)[0]); "
        f"{_TF}preprocessing.py (ImageToMultiViewedImagePreprocessor)",
        ("supcon_autoaugment", 2, "first")),
    Row("evaluation transform", ("data.eval_transform", "data.eval_crop_fraction"),
        "the shorter side to 224 + 32 = 256 (tf.compat.v1 bilinear resize: legacy pixel "
        "centres, not antialiased; truncating casts to int32 sides and uint8 pixels), then "
        "the centre 224 (eval_crop_method=RESIZE_THEN_CROP, crop_padding=32)",
        f"{_TF}preprocessing.py (_preprocess_image_for_eval, _crop_to_square, "
        f"_resize_to_min_dim, _resize_image, _center_crop_window); {_DEFAULTS} "
        "(eval_crop_method, crop_padding)", ("tf_resize_crop", 224 / 256)),
    Row("precision", ("model.encoder.dtype", "model.head.dtype"), "bfloat16",
        f"{_FLAGS} (TPU_FLAGS: --allow_mixed_precision=True)", ("bfloat16", "bfloat16")),
)
