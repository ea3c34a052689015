"""Run parity: our trainer and the reference ``main_supcon.py`` on the same CIFAR-10 subset.

    # 1. the class-balanced subset both trainers read (symbolic links into the image folder)
    python -m experiments.parity.run data --data-dir ../shared/data/cifar10 \\
        --out runs/parity/data --train-size 2560 --test-size 5000
    # 2. our trainer with the reference's recipe (see ``ours_config``)
    python -m experiments.parity.run ours --data runs/parity/data --workdir runs/parity/ours_s0 \\
        --seed 0 --epochs 10 --batch-size 128 --image-size 16
    # 3. the reference (in an environment with torch + torchvision), see run_reference.py
    # 4. the same linear evaluation of both frozen encoders
    python -m experiments.parity.run evaluate --data runs/parity/data --image-size 16 \\
        --ours runs/parity/ours_s0 --reference runs/parity/ref_s0 --out runs/parity/eval.json

Our run is ``contrastive_jax.train.loop.train`` with a config that mirrors the reference's
``main_supcon.py`` recipe (:func:`ours_config`). One thing our config cannot say: the reference
projection head (``Linear(512, 512) -> ReLU -> Linear(512, 128)`` with biases, no BatchNorm).
For the run, :func:`contrastive_jax.models.create_head` is wrapped at run time so that the head
name ``"supcon_mlp"`` builds :class:`experiments.parity.model.SupConMLPHead`; every other name
goes to the library's factory unchanged.

Evaluation (:func:`evaluate`): each encoder, frozen in evaluation mode (BN running statistics),
embeds the subset's train and test images with our evaluation transform (resize to the training
side, the reference's normalisation); the reference encoder is first copied into our ResNet-18
by the tested converter. Then :mod:`contrastive_jax.eval.probes` trains the same
linear probe (SupCon/SINCERE protocol: SGD, batch 512, warm-up + cosine) on both and reports
top-1 with 95 % percentile-bootstrap intervals (1,000 test-set resamples).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: The reference's CIFAR-10 normalisation (main_supcon.py), passed to it as --mean/--std.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
HEAD_NAME = "supcon_mlp"


def make_subset(data_dir: str, out: str, train_size: int, test_size: int, seed: int = 0) -> dict:
    """Symbolic links ``out/{train,test}/<class>/<file>`` to class-balanced subsets of an image
    folder ``data_dir/{train,test}/<class>/<file>`` (:func:`class_balanced_subset`, subset seed
    ``seed``). Returns the counts per split. Raises ValueError on a missing split."""
    from contrastive_jax.data.sources import class_balanced_subset

    counts = {}
    for split, size in (("train", train_size), ("test", test_size)):
        root = Path(data_dir) / split
        if not root.is_dir():
            raise ValueError(f"--data-dir {data_dir} has no {split}/ folder")
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        files, labels = [], []
        for k, name in enumerate(classes):
            members = sorted((root / name).iterdir())
            files += members
            labels += [k] * len(members)
        rows = class_balanced_subset(np.asarray(labels), size, seed)
        for r in rows:
            target = Path(out) / split / classes[labels[r]] / files[r].name
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(files[r].resolve())
        counts[split] = len(rows)
    return counts


def ours_config(
    data: str,
    *,
    seed: int,
    epochs: int,
    batch_size: int,
    image_size: int,
    learning_rate: float = 0.05,
    temperature: float = 0.07,
    weight_decay: float = 1e-4,
    momentum: float = 0.9,
):
    """Our pretraining config mirroring ``main_supcon.py --cosine`` (no warm-up, batch <= 256).

    Reference -> ours: ``SupConResNet('resnet18')`` -> CIFAR-stem ResNet-18 (BN decay 0.9 =
    PyTorch momentum 0.1) + ``supcon_mlp`` head; ``SupConLoss(temp)`` -> ``supcon`` at the same
    temperature (the reference's ``temperature / base_temperature`` factor is 1 at the default
    ``base_temperature = temp``); ``SGD(lr, momentum 0.9, weight_decay 1e-4)`` on every
    parameter -> ``sgd`` with ``decay_norm_and_bias=True``; cosine annealing to
    ``lr * 0.1**3`` -> ``final_lr_factor=0.001`` over the first ``epochs - 1`` epochs (see the
    comment in the code); the augmentation (RandomResizedCrop(size,
    scale 0.2-1), flip, ColorJitter(0.4, 0.4, 0.4, 0.1) p 0.8, grayscale p 0.2) -> preset
    ``supcon_cifar``; ``Normalize(mean, std)`` -> ``data.mean``/``data.std``.
    """
    from contrastive_jax.train.config import default_config
    from experiments.parity.model import parity_encoder_config

    config = default_config()
    config.seed = seed
    config.data.dataset = f"folder:{os.path.abspath(data)}"
    config.data.image_size = image_size
    config.data.augmentation = "supcon_cifar"
    config.data.global_batch_size = batch_size
    config.data.mean = CIFAR_MEAN
    config.data.std = CIFAR_STD
    config.model.encoder = parity_encoder_config("resnet18")
    config.model.head.name = HEAD_NAME
    config.model.head.out_features = 128
    config.loss.name = "supcon"
    config.loss.temperature = temperature
    opt = config.optimizer
    opt.name = "sgd"
    opt.base_learning_rate = learning_rate
    opt.lr_scaling = "none"
    opt.weight_decay = weight_decay
    opt.momentum = momentum
    opt.nesterov = False
    opt.warmup_steps = 0
    opt.warmup_init = learning_rate
    opt.final_lr_factor = 0.001
    # The reference sets lr(e) = cosine(e / E) once per epoch e = 1..E, so its last epoch runs at
    # eta_min and epoch 1 already at cosine(1 / E). Our schedule decays per step from the peak;
    # decaying over the first E - 1 epochs and holding eta_min in the last gives each epoch the
    # reference's mean rate exactly at E = 2 (0.5 * lr, then eta_min) and approximately above.
    opt.epochs = float(max(epochs - 1, 1))
    opt.decay_norm_and_bias = True
    config.train.epochs = epochs
    config.train.log_every = 5
    config.train.checkpoint_every = 10**6  # the end of the run only
    config.train.keep_checkpoints = 1
    return config


@contextlib.contextmanager
def supcon_head_factory():
    """Within the block, ``contrastive_jax.models.create_head`` builds :class:`SupConMLPHead`
    for ``config.name == "supcon_mlp"`` (and defers to the library for every other name)."""
    from contrastive_jax import models
    from experiments.parity.model import SupConMLPHead

    original = models.create_head

    def create_head(config, in_features, *, rngs):
        if config.name == HEAD_NAME:
            return SupConMLPHead(in_features, int(config.out_features), rngs=rngs)
        return original(config, in_features, rngs=rngs)

    models.create_head = create_head
    try:
        yield
    finally:
        models.create_head = original


def train_ours(config, workdir: str) -> dict:
    """``contrastive_jax.train.loop.train`` with the reference head available."""
    from contrastive_jax.train import loop

    with supcon_head_factory():
        summary = loop.train(config, workdir)
    with open(os.path.join(workdir, "throughput.json"), "w", encoding="utf-8") as f:
        json.dump({k: v for k, v in summary.items() if k != "metrics"}, f, indent=2)
    return summary


def _reference_checkpoint(path: str) -> str:
    """``last.pth`` under a reference work directory (or the file itself)."""
    if os.path.isfile(path):
        return path
    found = sorted(Path(path).rglob("last.pth"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one last.pth under {path}, found {len(found)}")
    return str(found[0])


def evaluate(
    data: str,
    image_size: int,
    ours: list[str],
    references: list[str],
    *,
    probe_epochs: int = 100,
    resamples: int = 1000,
) -> dict[str, Any]:
    """The same linear evaluation of every encoder (ours and converted reference ones)."""
    import torch

    from contrastive_jax import data as data_lib
    from contrastive_jax.eval import ProbeProtocol
    from contrastive_jax.eval.evaluator import Setup
    from contrastive_jax.eval.probes import KnnProbe, LinearProbe
    from contrastive_jax.parallel import make_mesh
    from contrastive_jax.train.pretrained import load_pretrained
    from contrastive_jax.train.spec import parse
    from experiments.parity.model import build_parity_model, load_torch_state_dict

    spec = parse(ours_config(data, seed=0, epochs=1, batch_size=128, image_size=image_size))
    source = data_lib.load_source(spec.data)
    protocol = ProbeProtocol(epochs=probe_epochs, resamples=resamples)
    results: dict[str, Any] = {"protocol": dataclasses.asdict(protocol), "runs": {}}
    setup = Setup(spec, source, make_mesh(), total_steps=0, steps_per_epoch=1, probe=protocol)

    def probe(name: str, network) -> None:
        top1 = LinearProbe(setup).run(network, 0)["top1"]
        results["runs"][name] = {
            "top1": top1["accuracy"],
            "top1_ci": [top1["low"], top1["high"]],
            "knn_top1": KnnProbe(setup).run(network, 0)["top1"]["accuracy"],
            "num_train": source.split("train").num_examples,
            "num_test": source.split("test").num_examples,
        }
        print(name, json.dumps(results["runs"][name]), flush=True)

    with supcon_head_factory():
        for path in ours:
            probe(f"ours:{path}", load_pretrained(path).network)
    for path in references:
        state = torch.load(_reference_checkpoint(path), map_location="cpu", weights_only=False)
        network = build_parity_model("resnet18", 128)
        load_torch_state_dict(network, state["model"])
        network.eval()
        probe(f"reference:{path}", network)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("data", help="make the class-balanced subset folder")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--train-size", type=int, default=2560)
    p.add_argument("--test-size", type=int, default=5000)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("ours", help="train with our trainer")
    p.add_argument("--data", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--image-size", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--temperature", type=float, default=0.07)
    p = sub.add_parser("evaluate", help="linear evaluation of frozen encoders")
    p.add_argument("--data", required=True)
    p.add_argument("--image-size", type=int, default=16)
    p.add_argument("--ours", nargs="*", default=[])
    p.add_argument("--reference", nargs="*", default=[])
    p.add_argument("--probe-epochs", type=int, default=100)
    p.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    try:
        if args.command == "data":
            print(json.dumps(make_subset(args.data_dir, args.out, args.train_size,
                                         args.test_size, args.seed)))
        elif args.command == "ours":
            config = ours_config(
                args.data, seed=args.seed, epochs=args.epochs, batch_size=args.batch_size,
                image_size=args.image_size, learning_rate=args.learning_rate,
                temperature=args.temperature,
            )
            summary = train_ours(config, args.workdir)
            print(json.dumps({k: v for k, v in summary.items() if k != "metrics"}))
        else:
            results = evaluate(args.data, args.image_size, args.ours, args.reference,
                               probe_epochs=args.probe_epochs)
            if args.out:
                with open(args.out, "w", encoding="utf-8") as f:
                    json.dump(results, f, indent=2)
            print(json.dumps(results))
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
