"""Bad configs are refused before the work directory exists, with the documented exit code
(:class:`contrastive_jax.errors.ExitCode`, docs/cli.md) and a message naming the field.

Each case runs the trainer in-process under the command-line tools' error policy
(:func:`contrastive_jax._cli.run_tool`, what ``pretrain``, ``linear_eval`` and
``quickstart`` run their work under); one runs the real command line. The first three
(``LATE_CAUGHT``) are configs whose fault shows only in the shapes the step computes, when
step 0 would compile, after the work directory would be written: the abstract evaluation of
the step (:func:`contrastive_jax.train.build.check_step`) or
:func:`contrastive_jax.train.spec.parse` catches them before the work directory is created.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import pytest

from contrastive_jax import configs
from contrastive_jax._cli import run_tool
from contrastive_jax.errors import ExitCode
from contrastive_jax.train import loop
from contrastive_jax.train.build import DataFacts, build, check_step
from contrastive_jax.train.spec import parse
from tests.train.cli_config import tiny_config

#: (overrides of the tiny config, the field the message must name).
LATE_CAUGHT = [
    # A y-Aware loss on data without metadata (objective.evaluate at step 0).
    ({"loss.name": "y_aware_infonce", "data.dataset": "synthetic"}, "config.data.dataset"),
    # A two-tower loss on three views per example: an odd row count (objective._paired).
    ({"loss.name": "clip", "data.num_views": 3}, "config.data.num_views"),
    # A mixing width that is not the head's (step.py at step 0).
    ({"loss.name": "label_cross_entropy", "loss.mixing.num_classes": 7,
      "model.head.name": "classifier", "model.head.num_classes": 10},
     "config.loss.mixing.num_classes"),
]
OTHERS = [
    ({"train.log_every": 0}, "config.train.log_every"),
    ({"train.device_prefetch": -1}, "config.train.device_prefetch"),
    ({"train.micro_batch_size": 3}, "config.train.micro_batch_size"),
    ({"train.micro_batch_loop": "loop"}, "config.train.micro_batch_loop"),
    ({"train.profile_steps": (3, 2)}, "config.train.profile_steps"),
    ({"train.profile_steps": (1, 99)}, "config.train.profile_steps"),
    ({"train.eval_every": 3, "train.log_every": 2}, "config.train.eval_every"),
    ({"train.knn_temperature": 0.0}, "config.train.knn_temperature"),
    ({"optimizer.name": "adagrad"}, "optimizer.name"),
    ({"optimizer.lr_scaling": "log"}, "optimizer.lr_scaling"),
    ({"optimizer.base_learning_rate": 0.0}, "optimizer.base_learning_rate"),
    ({"optimizer.grad_clip_norm": -1.0}, "optimizer.grad_clip_norm"),
    ({"loss.name": "sincer"}, "config.loss.name"),
    ({"loss.weights": (1.0, 2.0)}, "config.loss.weights"),
    ({"loss.temperature_warmup_steps": 5}, "config.loss.temperature_warmup_steps"),
    ({"loss.mixing.num_classes": 1}, "config.loss.mixing.num_classes"),
    ({"data.global_batch_size": 36}, "config.data.global_batch_size"),
    ({"data.global_batch_size": 4096}, "config.data.global_batch_size"),
    ({"data.num_views": 0}, "config.data.num_views"),
    # The tf.data input path and its TFRecord streams are gone; their fields say so.
    ({"data.loader": "tf"}, "config.data.loader was removed"),
    ({"data.shuffle_buffer": 100}, "config.data.shuffle_buffer was removed"),
    # The data's and the model's values, checked by DataSpec / EncoderSpec / HeadSpec at parse.
    ({"data.metadata": "labels"}, "config.data.metadata"),
    ({"data.label_noise": 1.5}, "config.data.label_noise"),
    ({"data.augmentation": "strong"}, "config.data.augmentation"),
    ({"model.encoder.dtype": "float16"}, "encoder config.dtype"),
    ({"model.encoder.in_features": 8}, "config.model.encoder.in_features"),
    ({"model.head.name": "classifier"}, "head config.num_classes"),
]


def _config(overrides: dict):
    config = tiny_config(total_steps=2)
    config.model.encoder.name = "small_cnn"  # builds in a moment
    for path, value in overrides.items():
        *parents, name = path.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[name] = value
    return config


@pytest.mark.parametrize("overrides, field", LATE_CAUGHT + OTHERS,
                         ids=[",".join(o) for o, _ in LATE_CAUGHT + OTHERS])
@pytest.mark.slow
def test_a_bad_config_exits_with_usage_naming_the_field_and_writes_nothing(
        overrides, field, tmp_path, capsys):
    workdir = tmp_path / "run"
    code = run_tool(lambda: loop.train(_config(overrides), str(workdir)))
    message = capsys.readouterr().err
    assert code == ExitCode.USAGE == 2, message
    assert message.strip().startswith("error: ") and field in message, message
    assert not workdir.exists()


@pytest.mark.slow
def test_a_renamed_or_misspelt_field_on_the_command_line_exits_with_usage(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    for override, message in [
        ("--config.train.prefetch=3", "config.train.prefetch was renamed to "
                                      "config.train.device_prefetch"),
        ("--config.train.device_prefech=3", "did you mean config.train.device_prefetch"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "contrastive_jax.pretrain", "--workdir", str(tmp_path / "run"),
             "--config", configs.path("quickstart"), override],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )
        assert done.returncode == ExitCode.USAGE, done.stderr
        assert message in done.stderr
        assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_vit_takes_its_input_side_from_the_data():
    """``vit_ti4`` (32 px by default) on the 16-px quickstart: the side is derived, and the
    step traces on the data's images."""
    config = configs.get("quickstart")
    config.model.encoder.name = "vit_ti4"
    spec = parse(config)
    assert spec.model.encoder.image_size == 16
    assert config.model.encoder.image_size is None  # the config as given is kept
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("data",))
    check_step(build(spec, mesh, DataFacts(1437, 10, 16)))


@pytest.mark.slow
def test_vit_ti4_trains_on_the_quickstart(tmp_path):
    config = configs.get("quickstart")
    config.model.encoder.name = "vit_ti4"
    config.data.global_batch_size = 32
    config.train.total_steps = 2
    config.train.log_every = 1
    summary = loop.train(config, str(tmp_path / "run"))
    assert summary["final_step"] == 2 and summary["metrics"]["finite"] == 1.0
