"""Parity of contrastive_jax with the reference PyTorch SupCon/SINCERE code.

The reference is the public code most SupCon and SINCERE users start from: the
``SupConResNet``/``SupConLoss``/``main_supcon.py`` of Khosla et al. (2020, "Supervised
Contrastive Learning", arXiv:2004.11362; github.com/HobbitLong/SupContrast) and the
``SINCERELoss`` of Feeney & Hughes ("SINCERE: Supervised Information Noise-Contrastive Estimation
REvisited", arXiv:2309.14277; github.com/tufts-ml/SupContrast). It is imported at run time from a
path given on the command line and never copied here.

Modules:

* :mod:`.reference`: load the reference modules from their directories.
* :mod:`.model`: the reference's SupCon MLP head in Flax NNX, the parity model, and the converter
  from a ``SupConResNet`` state dict to our parameters and batch statistics.
* :mod:`.step`: one-batch step parity (features, projections, losses, gradients, SGD step).
* :mod:`.run`: training and linear-evaluation parity on a CIFAR-10 subset.

PyTorch is only needed here (``pip install -e '.[parity]'``).
"""
