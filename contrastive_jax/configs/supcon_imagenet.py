"""SupCon on ImageNet: ResNet-50, LARS, 350 epochs, at the authors' TF code (Khosla et al. 2020).

Khosla et al. (2020), "Supervised Contrastive Learning", arXiv:2004.11362 (NeurIPS 2020), as
their TF code runs it (github.com/google-research/google-research, ``supcon/``:
``scripts/supcon_imagenet_resnet50.sh``, ``scripts/configs.sh``, ``hparams_flags.py``), on top
of :mod:`contrastive_jax.configs.simclr_imagenet` (encoder, LARS, cosine schedule, global batch
norm, augmentation). What changes, and the source of each value:

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
=================================  ==========================================================

Different here, said rather than approximated silently:

* batch: the script trains at batch 6144; this recipe keeps SimCLR's 4096 so that it runs
  where ``simclr_imagenet`` runs (``--config.batch_size=6144`` for the source's; the learning
  rate follows by its linear scaling);
* augmentation: the script uses AutoAugment (``--augmentation_type=AUTOAUGMENT``), which the
  input pipeline does not implement; this recipe uses SimCLR's augmentation (the paper's
  "SimAugment" ablation is close to it).

``docs/recipes.md`` has every setting beside the source's.

Expected: the paper reports 78.7 % top-1 for ResNet-50 with AutoAugment at batch 6144 (its
ImageNet tables), to be taken as an upper reference for this recipe, not as its target.
Not run here.

    contrastive-jax-pretrain --workdir runs/supcon_imagenet \\
        --config "$(python -m contrastive_jax.configs supcon_imagenet)" \\
        --config.data.data_dir=DIR        # a TFDS data directory with imagenet2012 prepared
"""

from contrastive_jax.configs import simclr_imagenet


def get_config():
    config = simclr_imagenet.get_config()
    config.loss.name = "supcon"
    config.loss.temperature = 0.1
    config.loss.base_temperature = 1.0
    config.model.encoder.zero_init_residual = False
    config.model.encoder.dtype = "bfloat16"
    config.model.head.name = "normalized_linear"  # hidden_features, num_hidden_layers unused
    config.model.head.dtype = "bfloat16"
    config.optimizer.base_learning_rate = 0.4
    config.optimizer.weight_decay = 1e-3
    config.optimizer.decay_biases = True
    config.optimizer.warmup_epochs = 12.0
    config.train.epochs = 350
    return config
