"""The packaged configs: found by name inside the package, the CPU ones the same under
experiments/configs, and every paper recipe trains two steps at a tiny size."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from contrastive_jax import configs
from contrastive_jax.configs.__main__ import main as configs_main
from tests.pairwise import only_in_make_test

ROOT = Path(__file__).resolve().parents[1]
#: The configs the reproductions read through experiments/configs/.
EXPERIMENT_CONFIGS = ("quickstart", "sincere_digits", "sincere_cifar10_proxy")
#: The papers' recipes: loss, temperature, global batch, encoder.
RECIPES = {
    "simclr_imagenet": ("nt_xent", 0.1, 4096, "resnet50"),
    "supcon_imagenet": ("supcon", 0.1, 4096, "resnet50"),
    "sincere_imagenet": ("sincere", 0.1, 4096, "resnet50"),
    "simclr_cifar10": ("nt_xent", 0.5, 1024, "resnet50"),
    "supcon_cifar10": ("supcon", 0.1, 1024, "resnet50"),
    "sincere_cifar10": ("sincere", 0.1, 512, "resnet50"),
}

#: The evaluation protocols and the pretraining recipe each starts from
#: (tests/train/test_transfer.py trains each).
EVALUATION_RECIPES = {
    "simclr_imagenet_linear": "simclr_imagenet",
    "supcon_imagenet_linear": "supcon_imagenet",
    "supcon_cifar10_linear": "supcon_cifar10",
    "simclr_imagenet_finetune": "simclr_imagenet",
}


def test_every_config_is_listed():
    assert set(EXPERIMENT_CONFIGS) | set(RECIPES) | set(EVALUATION_RECIPES) == set(configs.NAMES)


@pytest.mark.parametrize("name", configs.NAMES)
def test_packaged_config_lives_in_the_package_and_loads(name):
    path = Path(configs.path(name))
    assert path.is_file() and path.parent == Path(configs.__file__).resolve().parent
    config = configs.get(name)
    assert config.data.global_batch_size > 0
    if name in EXPERIMENT_CONFIGS:  # SINCERE, alone or beside the quickstart's uniformity term
        assert config.loss.name.split("+")[0] == "sincere"


@pytest.mark.parametrize("name", EXPERIMENT_CONFIGS)
def test_experiments_path_re_exports_the_packaged_config(name):
    spec = importlib.util.spec_from_file_location(
        f"_cfg_{name}", ROOT / "experiments" / "configs" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.get_config().to_dict() == configs.get(name).to_dict()


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_settings(name):
    loss, temperature, batch, encoder = RECIPES[name]
    config = configs.get(name)
    assert (config.loss.name, config.loss.temperature) == (loss, temperature)
    assert config.data.global_batch_size == batch and config.model.encoder.name == encoder
    assert config.model.head.out_features == 128
    if name.endswith("_imagenet"):
        # LARS with linear scaling and global BN; SimCLR Sec. 2.3: 0.3 x B/256 = 4.8, wd 1e-6;
        # the SupCon TF code (supcon_imagenet_resnet50.sh): 0.4 x B/256, wd 1e-3.
        assert config.optimizer.name == "lars" and config.optimizer.lr_scaling == "linear"
        lr, wd = (0.3, 1e-6) if name == "simclr_imagenet" else (0.4, 1e-3)
        assert config.optimizer.base_learning_rate == lr and config.optimizer.weight_decay == wd
        assert config.model.encoder.bn_axis_name == config.model.head.bn_axis_name == "data"
        # SimCLR v1's code's crop and brightness; SupCon's --augmentation_type=AUTOAUGMENT.
        preset = "simclr_v1_imagenet" if name == "simclr_imagenet" else "supcon_autoaugment"
        assert (config.data.image_size, config.data.augmentation) == (224, preset)
    else:
        assert config.optimizer.name == "sgd" and config.optimizer.lr_scaling == "none"
        assert config.optimizer.base_learning_rate == 0.5 and config.train.epochs == 1000
        assert (config.data.image_size, config.data.augmentation) == (32, "supcon_cifar")


def test_the_two_imagenet_supervised_recipes_differ_in_the_loss_alone():
    supcon, sincere = configs.get("supcon_imagenet"), configs.get("sincere_imagenet")
    supcon.loss.name = "sincere"
    assert supcon.to_dict() == sincere.to_dict()


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match="quickstart"):
        configs.path("imagenet")


def test_main_prints_one_path_or_all(capsys):
    assert configs_main(["quickstart"]) == 0
    assert capsys.readouterr().out.strip() == configs.path("quickstart")
    assert configs_main([]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(configs.NAMES)
    assert configs_main(["nope"]) == 2
    assert "unknown packaged config" in capsys.readouterr().err


def test_no_packaged_config_reads_outside_the_package():
    for name in configs.NAMES:
        config = configs.get(name)
        assert config.data.get("data_dir") is None, name
        assert not os.path.isabs(str(config.data.dataset))


def smoke_overrides(config):
    """The recipe at a tiny size: built-in digits at 16 px, batch 16, a width-1/16 encoder, 2 steps.

    Only fields of the recipe are overridden (data source, size, batch, width, head width,
    length); its loss, temperature, optimiser, schedule, head type, batch-norm axis and
    augmentation are the recipe's own.
    """
    config.data.dataset = "digits"
    config.data.image_size = 16
    config.data.global_batch_size = 16
    config.model.encoder.width = 0.0625
    config.model.head.hidden_features = 16
    config.model.head.out_features = 8
    config.train.total_steps = 2
    config.train.log_every = 1
    config.train.checkpoint_every = 2
    config.train.compilation_cache_dir = ""
    return config


#: The recipes `make test` trains: none; each is a ResNet-50 differing in loss, temperature,
#: batch and optimiser, which the unit tests cover, and all train in `make test-all` (the
#: small end-to-end training of `make test` is tests/data/test_tf_free_pretrain.py's).
FAST_RECIPE: tuple[str, ...] = ()


@pytest.mark.parametrize("name", only_in_make_test(sorted(RECIPES), FAST_RECIPE))
def test_recipe_trains_two_steps(name, tmp_path):
    from contrastive_jax.train import loop

    config = smoke_overrides(configs.get(name))
    summary = loop.train(config, str(tmp_path / name))
    assert summary["final_step"] == 2
    assert summary["metrics"]["loss"] == pytest.approx(summary["final_loss"])
    assert float(summary["final_loss"]) > 0 and summary["skipped_steps"] == 0


def test_simclr_v1_linear_is_the_pretraining_crop_and_flip_alone():
    """SimCLR v1's evaluation views (data_util.py preprocess_for_train, color_distort=False):
    the pretraining preset's crop (its sampler's statistics: tests/data) and flip, nothing
    else."""
    import dataclasses

    from contrastive_jax.data.augment_config import AugmentConfig, augmentation_preset

    linear = augmentation_preset("simclr_v1_linear", 224)
    pretraining = augmentation_preset("simclr_v1_imagenet", 224)
    crop = ("crop_scale", "crop_ratio", "crop_sampler", "crop_fallback", "crop_interpolation",
            "flip_prob")
    assert {f: getattr(linear, f) for f in crop} == {f: getattr(pretraining, f) for f in crop}
    default = AugmentConfig()
    assert all(getattr(linear, f.name) == getattr(default, f.name)
               for f in dataclasses.fields(AugmentConfig) if f.name not in crop)
    for name in ("simclr_imagenet_linear", "simclr_imagenet_finetune"):
        assert configs.get(name).data.augmentation == "simclr_v1_linear"
