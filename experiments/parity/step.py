"""Step parity: same weights, same two-view batch, same numbers as the reference PyTorch code.

    P="--supcon-dir ../shared/peers/HobbitLong-SupContrast --sincere-dir ../shared/peers/tufts-ml-SupContrast"
    python -m experiments.parity.step $P                    # B = 16 images (32 rows), 32 x 32
    python -m experiments.parity.step $P --batch-size 64 --data-dir ../shared/data/cifar10

Builds the reference ``SupConResNet('resnet18')`` (Khosla et al., 2020, arXiv:2004.11362;
github.com/HobbitLong/SupContrast), gives its BatchNorms non-trivial affine parameters and
running statistics, copies its state dict into our parity model
(:func:`experiments.parity.model.load_torch_state_dict`), and on one two-view batch compares, in
float32, in training mode (batch statistics) and in evaluation mode (running statistics):

* encoder features [2B, 512] and L2-normalised projections [2B, 128];
* the SupCon loss (reference ``SupConLoss(temperature=t, base_temperature=t)`` on
  ``[B, 2, 128]``; Khosla et al. Eq. 2, L_out) against :func:`contrastive_jax.losses.supcon`, and
  SINCERE (tufts-ml ``SINCERELoss``; Feeney & Hughes, arXiv:2309.14277, Eq. 12) against
  :func:`contrastive_jax.losses.sincere`;
* the gradient of every parameter, of both losses;
* the parameters after ``--steps`` optimiser steps on the SupCon loss: the reference's
  ``util.set_optimizer`` (``torch.optim.SGD``, momentum 0.9, weight decay 1e-4 on every
  parameter) against :func:`contrastive_jax.train.optim.make_optimizer` with ``name="sgd"``,
  ``decay_norm_and_bias=True`` (every parameter decayed) and a constant learning rate;
* in training mode, the running BN statistics after each forward pass.

Gradients are also compared with the reference run in float64 at the same weights
(``*_ref32_vs_ref64``: the reference's own float32 error; ``*_ours_vs_ref64``: ours), the
yardstick of float32 tolerance for the ill-conditioned gradients of a BatchNorm network, and
our optimiser is fed the reference's gradients (``optimizer_update``), which isolates the
optimiser's conventions from gradient round-off.

The relative difference of two arrays is ``max|ours - ref| / max|ref|`` (per tensor; the
maximum over tensors for gradients and parameters; ``*_global`` is ``||ours - ref||_2 /
||ref||_2`` over all tensors). The last line printed is a JSON object with the largest relative
difference over both modes at the first step of the losses, the gradients and the updated
parameters (``loss``, ``gradients``, ``updated_parameters``), ``optimizer_update`` over every
step, and the per-mode, per-step details.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from contrastive_jax import losses
from contrastive_jax.train import optim
from experiments.parity import model as parity_model
from experiments.parity import reference

#: CIFAR-10 channel statistics of the reference's main_supcon.py.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)


def relative_difference(ours: Any, ref: Any) -> float:
    """``max|ours - ref| / max|ref|`` as a float (0 when both are all-zero)."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ours.shape != ref.shape:
        raise ValueError(f"shapes differ: ours {ours.shape} vs reference {ref.shape}")
    scale = np.abs(ref).max() if ref.size else 0.0
    diff = np.abs(ours - ref).max() if ref.size else 0.0
    if scale == 0.0:
        return float(diff)
    return float(diff / scale)


def make_batch(
    batch_size: int, image_size: int, num_classes: int, seed: int, data_dir: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """A two-view batch: images float32 [2B, S, S, 3] (view 1 of every image, then view 2, as
    the reference's ``torch.cat([images[0], images[1]])``) and labels int [B].

    Without ``data_dir``: standard-normal images and labels ``i mod num_classes``. With an
    image folder ``data_dir`` (``train/<class>/*.png``): the first ``B / num_classes``
    images (sorted by name) of the first ``num_classes`` classes, normalised with the
    reference's CIFAR-10 mean and std; view 2 is a horizontal flip of view 1 shifted by
    one pixel, so the two views differ.
    """
    rng = np.random.default_rng(seed)
    if data_dir is None:
        images = rng.standard_normal((batch_size, image_size, image_size, 3)).astype(np.float32)
        labels = np.arange(batch_size) % num_classes
        view2 = rng.standard_normal(images.shape).astype(np.float32) * 0.5 + images * 0.5
        return np.concatenate([images, view2]).astype(np.float32), labels.astype(np.int64)
    from PIL import Image

    root = Path(data_dir) / "train"
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())[:num_classes]
    if len(classes) < num_classes:
        raise ValueError(f"--data-dir {data_dir}: {len(classes)} classes, need {num_classes}")
    per_class = -(-batch_size // num_classes)
    images, labels = [], []
    for k, name in enumerate(classes):
        files = sorted((root / name).iterdir())[:per_class]
        for f in files:
            img = Image.open(f).convert("RGB").resize((image_size, image_size), Image.BILINEAR)
            images.append(np.asarray(img, np.float32) / 255.0)
            labels.append(k)
    order = np.argsort(np.arange(len(labels)) % per_class, kind="stable")[:batch_size]
    images = np.stack(images)[order]
    labels = np.asarray(labels)[order]
    images = (images - np.asarray(CIFAR_MEAN, np.float32)) / np.asarray(CIFAR_STD, np.float32)
    view2 = np.roll(images[:, :, ::-1], 1, axis=2)
    return np.concatenate([images, view2]).astype(np.float32), labels.astype(np.int64)


def _reference_model(resnet_big, torch, calibration: np.ndarray, seed: int):
    """SupConResNet('resnet18') with non-trivial BN affine parameters and running statistics.

    BN scales ``1 + 0.1 N(0, 1)`` and offsets ``0.1 N(0, 1)``, so a swapped or dropped affine
    parameter shows up; running statistics are the exact (cumulative-average) statistics of one
    training-mode pass over ``calibration`` [N, 3, S, S], then momentum is restored to 0.1.
    """
    torch.manual_seed(seed)
    ref = resnet_big.SupConResNet(name="resnet18", head="mlp", feat_dim=128)
    bns = [m for m in ref.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for m in bns:
            m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
            m.bias.copy_(0.1 * torch.randn_like(m.bias))
            m.reset_running_stats()
            m.momentum = None
        ref.train()
        ref(torch.from_numpy(calibration))
        for m in bns:
            m.momentum = 0.1
    return ref


def _sgd_config(learning_rate: float, momentum: float, weight_decay: float, steps: int):
    """Our optimiser config mirroring the reference SGD at a constant learning rate (a plain
    namespace: the harness runs where ml_collections is not installed, e.g. a GPU image)."""
    config = types.SimpleNamespace(**optim.OPTIMIZER_DEFAULTS)
    config.name = "sgd"
    config.base_learning_rate = learning_rate
    config.lr_scaling = "none"
    config.momentum = momentum
    config.weight_decay = weight_decay
    config.nesterov = False
    config.warmup_steps = 0
    config.warmup_init = learning_rate
    config.final_lr_factor = 1.0  # cosine from the peak to the peak: a constant rate
    config.schedule_steps = steps + 1
    config.decay_norm_and_bias = True  # torch.optim.SGD(weight_decay=...) decays every parameter
    return config


def _value(leaf: Any) -> np.ndarray:
    return np.asarray(leaf[...] if isinstance(leaf, nnx.Variable) else leaf)


def _as_ours(template: Any, entries: list, arrays: list[np.ndarray]) -> Any:
    """A copy of the nnx.State ``template`` holding PyTorch-layout ``arrays`` (one per entry)."""
    state = jax.tree.map(lambda x: x, template)
    for (_, path, kind), array in zip(entries, arrays, strict=True):
        parity_model.get_path(state, path)[...] = jnp.asarray(
            parity_model.from_torch_layout(array, kind)
        )
    return state


def _global_relative(ours: list[np.ndarray], ref: list[np.ndarray]) -> float:
    """``||ours - ref||_2 / ||ref||_2`` over all tensors concatenated."""
    num = sum(float(np.sum((np.asarray(a, np.float64) - np.asarray(r, np.float64)) ** 2))
              for a, r in zip(ours, ref, strict=True))
    den = sum(float(np.sum(np.asarray(r, np.float64) ** 2)) for r in ref)
    return float(np.sqrt(num / den)) if den else float(np.sqrt(num))


def _reference_grads(net, x, y, y2, supcon_ref, sincere_ref, params, b) -> dict[str, Any]:
    """One reference forward: features and normalised projections (float64 numpy), both loss
    values, and the gradients of both losses with respect to ``params`` (tensors in the
    network's dtype), all from the same graph (one BN running-statistics update)."""
    import torch

    features = net.encoder(x)
    z = torch.nn.functional.normalize(net.head(features), dim=1)
    f1, f2 = torch.split(z, [b, b], dim=0)
    supcon_value = supcon_ref(torch.cat([f1.unsqueeze(1), f2.unsqueeze(1)], dim=1), y)
    sincere_value = sincere_ref(z, y2)
    sincere_grads = torch.autograd.grad(sincere_value, params, retain_graph=True)
    supcon_grads = torch.autograd.grad(supcon_value, params)
    return {
        "features": features.detach().double().numpy(),
        "projections": z.detach().double().numpy(),
        "supcon_loss": supcon_value.item(),
        "sincere_loss": sincere_value.item(),
        "supcon": [g.detach() for g in supcon_grads],
        "sincere": [g.detach() for g in sincere_grads],
    }


def run_mode(
    mode: str,
    ref_model,
    ours_model,
    refs: dict[str, Any],
    images: np.ndarray,
    labels: np.ndarray,
    *,
    temperature: float,
    learning_rate: float,
    momentum: float,
    weight_decay: float,
    steps: int,
) -> dict[str, Any]:
    """All comparisons of one mode (``"train"`` or ``"eval"``); both models are copied first."""
    torch = refs["torch"]
    ref_model = copy.deepcopy(ref_model)
    ours_model = nnx.clone(ours_model)
    if mode == "train":
        ref_model.train()
        ours_model.train()
    else:
        ref_model.eval()
        ours_model.eval()
    entries = parity_model.parameter_map(ours_model)
    named_params = dict(ref_model.named_parameters())
    param_entries = [e for e in entries if e[0] in named_params]
    stat_entries = [e for e in entries if e[0] not in named_params]
    opt_namespace = types.SimpleNamespace(
        learning_rate=learning_rate, momentum=momentum, weight_decay=weight_decay
    )
    ref_opt = refs["util"].set_optimizer(opt_namespace, ref_model)
    supcon_ref = refs["losses"].SupConLoss(
        temperature=temperature, contrast_mode="all", base_temperature=temperature
    )
    sincere_ref = refs["sincere"].SINCERELoss(temperature=temperature)

    # Elements per channel seen by each BN (for the unbiased-variance convention).
    bn_count: dict[str, int] = {}
    hooks = []
    for name, module in ref_model.named_modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            def hook(mod, inputs, _output, name=name):
                bn_count[name] = inputs[0].numel() // inputs[0].shape[1]

            hooks.append(module.register_forward_hook(hook))

    graphdef, params, batch_stats, rest = nnx.split(ours_model, nnx.Param, nnx.BatchStat, ...)
    tx, schedule = optim.make_optimizer(
        _sgd_config(learning_rate, momentum, weight_decay, steps),
        params,
        steps_per_epoch=1,
        global_batch_size=len(labels),
    )
    opt_state = tx.init(params)
    # Our optimiser fed the reference's own gradients and parameters: isolates the optimiser
    # conventions (weight-decay mask, momentum, learning rate) from gradient round-off.
    opt_state_refgrad = tx.init(params)
    labels2 = np.concatenate([labels, labels])
    x_ours = jnp.asarray(images)
    x_ref = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
    y_ref = torch.from_numpy(labels)
    y2_ref = torch.from_numpy(labels2)
    b = len(labels)

    def forward(p, s, loss_name):
        net = nnx.merge(graphdef, p, s, rest, copy=True)
        features, projections = net(x_ours)
        z = projections / jnp.linalg.norm(projections, axis=1, keepdims=True)
        fn = losses.supcon if loss_name == "supcon" else losses.sincere
        loss = fn(projections, jnp.asarray(labels2), temperature=temperature)
        return loss, (features, z, nnx.state(net, nnx.BatchStat))

    grad_fns = {
        name: jax.jit(jax.value_and_grad(lambda p, s, n=name: forward(p, s, n), has_aux=True))
        for name in ("supcon", "sincere")
    }

    @jax.jit
    def apply(grads, opt_state, p):
        updates, opt_state = tx.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state

    out: dict[str, Any] = {"steps": []}
    ref_state_prev = refs["initial_state"]
    for step in range(steps):
        record: dict[str, Any] = {"step": step}
        lr = float(schedule(step))
        for group in ref_opt.param_groups:
            group["lr"] = lr
        old_stats = {e[0]: _value(parity_model.get_path(batch_stats, e[1])) for e in stat_entries}
        # Float64 copy of the reference at the same state: the exact-arithmetic yardstick.
        ref64 = copy.deepcopy(ref_model).double()
        ref64_params = dict(ref64.named_parameters())
        ref64_params = [ref64_params[e[0]] for e in param_entries]
        grads64 = _reference_grads(
            ref64, x_ref.double(), y_ref, y2_ref, supcon_ref, sincere_ref, ref64_params, b
        )
        # Reference float32: one forward, both losses, gradients of both from the same graph.
        ref_params = [named_params[e[0]] for e in param_entries]
        ref_before = _as_ours(params, param_entries, [p.detach().numpy() for p in ref_params])
        ref_opt.zero_grad()
        grads32 = _reference_grads(
            ref_model, x_ref, y_ref, y2_ref, supcon_ref, sincere_ref, ref_params, b
        )
        for p, g in zip(ref_params, grads32["supcon"], strict=True):
            p.grad = g.clone()
        ref_opt.step()
        ref_state = {k: v.detach().numpy().copy() for k, v in ref_model.state_dict().items()}

        # Ours.
        (supcon_ours, (features, z, new_stats)), g_supcon = grad_fns["supcon"](params, batch_stats)
        (sincere_ours, _), g_sincere = grad_fns["sincere"](params, batch_stats)
        new_params, opt_state = apply(g_supcon, opt_state, params)
        ref_grads_ours = _as_ours(params, param_entries, [g.numpy() for g in grads32["supcon"]])
        refgrad_params, opt_state_refgrad = apply(ref_grads_ours, opt_state_refgrad, ref_before)

        record["features"] = relative_difference(features, grads32["features"])
        record["projections"] = relative_difference(z, grads32["projections"])
        record["features_ref32_vs_ref64"] = relative_difference(
            grads32["features"], grads64["features"]
        )
        for name, ours_value in (("supcon", supcon_ours), ("sincere", sincere_ours)):
            record[f"{name}_loss"] = relative_difference(ours_value, grads32[name + "_loss"])
            record[f"{name}_loss_values"] = [
                float(ours_value), grads32[name + "_loss"], grads64[name + "_loss"]
            ]
        for name, ours_grads in (("supcon", g_supcon), ("sincere", g_sincere)):
            ours_np = [
                parity_model.to_torch_layout(_value(parity_model.get_path(ours_grads, e[1])), e[2])
                for e in param_entries
            ]
            ref32 = [g.numpy() for g in grads32[name]]
            ref64_np = [g.numpy() for g in grads64[name]]
            for label, a, r in (("", ours_np, ref32), ("_ours_vs_ref64", ours_np, ref64_np),
                                ("_ref32_vs_ref64", ref32, ref64_np)):
                diffs = {e[0]: relative_difference(x, y)
                         for e, x, y in zip(param_entries, a, r, strict=True)}
                worst = max(diffs, key=diffs.get)
                record[f"{name}_gradients{label}"] = diffs[worst]
                record[f"{name}_gradients{label}_worst"] = worst
                record[f"{name}_gradients{label}_global"] = _global_relative(a, r)
        param_diffs, update_diffs = {}, {}
        for e in param_entries:
            new = parity_model.to_torch_layout(_value(parity_model.get_path(new_params, e[1])), e[2])
            old = parity_model.to_torch_layout(_value(parity_model.get_path(params, e[1])), e[2])
            ref_old = ref_state_prev[e[0]]
            param_diffs[e[0]] = relative_difference(new, ref_state[e[0]])
            update_diffs[e[0]] = relative_difference(new - old, ref_state[e[0]] - ref_old)
        worst = max(param_diffs, key=param_diffs.get)
        record["updated_parameters"] = param_diffs[worst]
        record["updated_parameters_worst"] = worst
        worst = max(update_diffs, key=update_diffs.get)
        record["parameter_updates"] = update_diffs[worst]
        record["parameter_updates_worst"] = worst
        optimizer_diffs = {}
        for e in param_entries:
            new = _value(parity_model.get_path(refgrad_params, e[1]))
            old = _value(parity_model.get_path(ref_before, e[1]))
            ref_update = parity_model.from_torch_layout(ref_state[e[0]], e[2]) - old
            optimizer_diffs[e[0]] = relative_difference(new - old, ref_update)
        worst = max(optimizer_diffs, key=optimizer_diffs.get)
        record["optimizer_update"] = optimizer_diffs[worst]
        record["optimizer_update_worst"] = worst
        if mode == "train":
            mean_diffs, var_diffs, var_unbiased = [], [], []
            for key, path, _ in stat_entries:
                ours_new = _value(parity_model.get_path(new_stats, path))
                if key.endswith("running_mean"):
                    mean_diffs.append(relative_difference(ours_new, ref_state[key]))
                    continue
                var_diffs.append(relative_difference(ours_new, ref_state[key]))
                # PyTorch blends the unbiased batch variance (n / (n - 1)) into running_var,
                # Flax the biased one: rescale our blended-in part to compare like with like.
                n = bn_count[key.rsplit(".", 1)[0]]
                old = old_stats[key]
                corrected = 0.9 * old + (ours_new - 0.9 * old) * n / (n - 1)
                var_unbiased.append(relative_difference(corrected, ref_state[key]))
            record["running_mean"] = max(mean_diffs)
            record["running_var"] = max(var_diffs)
            record["running_var_unbiased_corrected"] = max(var_unbiased)
        out["steps"].append(record)
        params = new_params
        batch_stats = new_stats if mode == "train" else batch_stats
        ref_state_prev = ref_state
    for h in hooks:
        h.remove()
    return out


def run(
    *,
    batch_size: int = 16,
    image_size: int = 32,
    num_classes: int = 4,
    temperature: float = 0.07,
    learning_rate: float = 0.05,
    momentum: float = 0.9,
    weight_decay: float = 1e-4,
    steps: int = 2,
    seed: int = 0,
    data_dir: str | None = None,
    supcon_dir: str | Path,
    sincere_dir: str | Path,
    precision: str = "highest",
    bn_variance: str = "two-pass",
) -> dict[str, Any]:
    """The step-parity comparisons in both modes; returns the summary dict printed by main().

    ``precision``: JAX's default matmul precision for our side (``"highest"``: float32
    products; ``"default"``: the backend's default, TF32-class on recent GPUs, float32 on the
    CPU). The losses pin their similarity products to ``HIGHEST`` either way.
    ``bn_variance``: our BatchNorms' batch variance, ``"two-pass"`` (``E[(x - E[x])^2]``,
    what the library's models use) or ``"one-pass"`` (Flax's default ``E[x^2] - E[x]^2``,
    ``use_fast_variance=True``).
    """
    if precision not in ("highest", "default"):
        raise ValueError(f"precision must be 'highest' or 'default', got {precision!r}")
    if bn_variance not in ("one-pass", "two-pass"):
        raise ValueError(f"bn_variance must be 'one-pass' or 'two-pass', got {bn_variance!r}")
    for name, value in (("batch_size", batch_size), ("image_size", image_size),
                        ("num_classes", num_classes), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if num_classes > batch_size:
        raise ValueError(f"num_classes={num_classes} exceeds batch_size={batch_size}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    torch = reference.require_torch()
    resnet_big, supcon_losses = reference.load_supcon(supcon_dir)
    util = reference.load_module(Path(supcon_dir) / "util.py", "_parity_ref_util")
    sincere_losses = reference.load_sincere(sincere_dir)
    images, labels = make_batch(batch_size, image_size, num_classes, seed, data_dir)
    calibration, _ = make_batch(batch_size, image_size, num_classes, seed + 1, None)
    ref = _reference_model(
        resnet_big, torch, np.ascontiguousarray(calibration.transpose(0, 3, 1, 2)), seed
    )
    ours = parity_model.build_parity_model("resnet18", 128, seed=seed)
    parity_model.load_torch_state_dict(ours, ref.state_dict())
    for _, module in nnx.iter_graph(ours):
        if isinstance(module, nnx.BatchNorm):
            module.use_fast_variance = bn_variance == "one-pass"
    refs = {
        "torch": torch,
        "losses": supcon_losses,
        "sincere": sincere_losses,
        "util": util,
        "initial_state": {k: v.detach().numpy().copy() for k, v in ref.state_dict().items()},
    }
    kwargs = dict(
        temperature=temperature,
        learning_rate=learning_rate,
        momentum=momentum,
        weight_decay=weight_decay,
        steps=steps,
    )
    with jax.default_matmul_precision(precision):
        modes = {m: run_mode(m, ref, ours, refs, images, labels, **kwargs) for m in ("train", "eval")}

    def worst(*keys, all_steps=False):
        """The largest value of ``keys`` over both modes, at step 0 (the one-step comparison;
        later steps start from parameters that already differ by step 0's round-off) or over
        every step."""
        return max(
            r[k] for m in modes.values() for r in (m["steps"] if all_steps else m["steps"][:1])
            for k in keys
        )

    return {
        "loss": worst("supcon_loss", "sincere_loss"),
        "gradients": worst("supcon_gradients", "sincere_gradients"),
        "gradients_global": worst("supcon_gradients_global", "sincere_gradients_global"),
        "gradients_ours_vs_float64": worst(
            "supcon_gradients_ours_vs_ref64", "sincere_gradients_ours_vs_ref64"
        ),
        "gradients_reference_float32_vs_float64": worst(
            "supcon_gradients_ref32_vs_ref64", "sincere_gradients_ref32_vs_ref64"
        ),
        "gradients_global_ours_vs_float64": worst(
            "supcon_gradients_ours_vs_ref64_global", "sincere_gradients_ours_vs_ref64_global"
        ),
        "gradients_global_reference_float32_vs_float64": worst(
            "supcon_gradients_ref32_vs_ref64_global", "sincere_gradients_ref32_vs_ref64_global"
        ),
        "updated_parameters": worst("updated_parameters"),
        "parameter_updates": worst("parameter_updates"),
        "optimizer_update": worst("optimizer_update", all_steps=True),
        "features": worst("features"),
        "projections": worst("projections"),
        "setup": {
            "batch_size": batch_size,
            "rows": 2 * batch_size,
            "image_size": image_size,
            "num_classes": num_classes,
            "temperature": temperature,
            "learning_rate": learning_rate,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "steps": steps,
            "seed": seed,
            "data": "random normal" if data_dir is None else "cifar10 folder",
            "precision": precision,
            "bn_variance": bn_variance,
            "backend": jax.default_backend(),
            "torch": torch.__version__,
            "jax": jax.__version__,
        },
        "modes": modes,
    }


def _table(summary: dict[str, Any]) -> str:
    keys = ["features", "features_ref32_vs_ref64", "projections", "supcon_loss", "sincere_loss"]
    for name in ("supcon", "sincere"):
        for suffix in ("", "_ours_vs_ref64", "_ref32_vs_ref64"):
            keys += [f"{name}_gradients{suffix}", f"{name}_gradients{suffix}_global"]
    keys += ["updated_parameters", "parameter_updates", "optimizer_update", "running_mean", "running_var",
             "running_var_unbiased_corrected"]
    lines = [f"{'quantity':42s}" + "".join(
        f"{m + ' step ' + str(r['step']):>16s}" for m in summary["modes"]
        for r in summary["modes"][m]["steps"])]
    for key in keys:
        cells = [r.get(key) for m in summary["modes"].values() for r in m["steps"]]
        lines.append(f"{key:42s}" + "".join(
            f"{'-':>16s}" if c is None else f"{c:16.2e}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=16, help="images B (2B rows)")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-classes", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.07)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps per mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None,
                        help="image folder with train/<class>/ (default: random images)")
    parser.add_argument("--supcon-dir", required=True,
                        help="HobbitLong/SupContrast checkout")
    parser.add_argument("--sincere-dir", required=True,
                        help="tufts-ml/SupContrast checkout")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--precision", choices=("highest", "default"), default="highest",
                        help="JAX default matmul precision of our side (default: highest)")
    parser.add_argument("--bn-variance", choices=("two-pass", "one-pass"), default="two-pass",
                        help="our BatchNorms' batch variance formula (default: two-pass, the "
                             "library's)")
    args = parser.parse_args(argv)
    torch = reference.require_torch()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        summary = run(
            batch_size=args.batch_size,
            image_size=args.image_size,
            num_classes=args.num_classes,
            temperature=args.temperature,
            learning_rate=args.learning_rate,
            momentum=args.momentum,
            weight_decay=args.weight_decay,
            steps=args.steps,
            seed=args.seed,
            data_dir=args.data_dir,
            supcon_dir=args.supcon_dir,
            sincere_dir=args.sincere_dir,
            precision=args.precision,
            bn_variance=args.bn_variance,
        )
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(_table(summary))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
