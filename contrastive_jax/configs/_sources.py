"""Each recipe's settings beside its source's: the data of ``docs/recipes.md``.

A recipe module keeps ``SOURCE``, a tuple of :class:`Row`: a setting, the config fields that
hold our value, the source's value, where the source says it (a file and line of the
authors' code, or a paper section) and, when ours differs, why. A row without a ``why``
is a match, and its ``expected`` (the source's value in the config's terms) must equal the
config's: ``tests/test_recipes_table.py`` checks both that and that ``docs/recipes.md`` is
the table ``python -m contrastive_jax.configs --table`` generates from the configs.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Row(NamedTuple):
    """One setting of a recipe against its source.

    Attributes:
      setting: what is set, in words.
      fields: the dotted config fields (under ``config.``) whose values are ours.
      source: the source's value, in words.
      where: where the source states it: ``file:line`` of the authors' code or a paper section.
      expected: a match's source value in the config's terms, one per field (None: no field).
      why: empty for a match; else why ours differs (or that it cannot be checked).
    """

    setting: str
    fields: tuple[str, ...]
    source: str
    where: str
    expected: tuple[Any, ...] | None = None
    why: str = ""


SIMCLR_V1 = "google-research/simclr@be133b3"
#: The SupCon paper's TF code, pinned: files of ``supcon/`` have several versions.
SUPCON_TF = "google-research/google-research@0c1bbe5 supcon/"
#: SimCLR's README at HEAD (the commands added after be133b3: linear evaluation and
#: whole-network fine-tuning on ImageNet).
SIMCLR_README = "google-research/simclr@dec99a8 README.md"
#: SimCLR's TF2 code (``tf2/``), which trains the online linear probe.
SIMCLR_TF2 = "google-research/simclr@b7c8fc9 tf2/"
#: The SINCERE authors' fork of SupContrast.
TUFTS_SUPCONTRAST = "tufts-ml/SupContrast"
#: The AutoAugment / RandAugment module SupCon's code imports (lines as in the
#: tf-models-official 2.4.0 wheel).
TF_MODELS_AUGMENT = "tensorflow/models official/vision/image_classification/augment.py"
SUPCONTRAST = "HobbitLong/SupContrast"
