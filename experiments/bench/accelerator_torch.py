"""The PyTorch side of :mod:`experiments.bench.accelerator`, each run in a child process
of its own before JAX starts: one N of a reference loss (``--child reference-loss``) and the
reference pretraining step (``--child reference-step``).

The reference code is loaded from its checkouts at run time (``experiments.parity.reference``):
HobbitLong/SupContrast (``SupConLoss``, ``SupConResNet``, ``util.set_optimizer``) and
tufts-ml/SupContrast (``SINCERELoss``).
"""

from __future__ import annotations

import time
import types
from pathlib import Path
from typing import Any

import numpy as np

from experiments.bench._accelerator_rows import (
    TEMPERATURE,
    Rows,
    describe_error,
    emit,
    host_max_rss,
    is_oom,
    row,
    unit_rows,
)


def _torch_sync(torch, dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _torch_peak(torch, dev) -> dict:
    """The measured peak: ``max_memory_allocated`` on a GPU, host ``ru_maxrss`` on the CPU."""
    if dev.type == "cuda":
        return {"peak_bytes": int(torch.cuda.max_memory_allocated()),
                "peak_source": "torch.cuda.max_memory_allocated"}
    return {"peak_bytes": host_max_rss(), "peak_source": "host ru_maxrss (CPU)"}


def _torch_device(torch):
    cuda = torch.cuda.is_available()
    return torch.device("cuda" if cuda else "cpu"), (torch.cuda.get_device_name() if cuda
                                                     else "cpu")


def child_reference_loss(args, sizes: dict, rows: Rows) -> dict:
    """One N of a reference loss (``--loss supcon|sincere``) in this fresh process:
    value + gradient time, the value and the measured peak, or the out-of-memory error."""
    from experiments.parity import reference

    torch = reference.require_torch()
    dev, device_name = _torch_device(torch)
    n = args.n
    record: dict[str, Any] = {"who": f"reference_{args.loss}", "n": n, "device": device_name}
    try:
        if args.loss == "supcon":
            _, losses_mod = reference.load_supcon(args.supcon_dir)
            fn = losses_mod.SupConLoss(temperature=TEMPERATURE, base_temperature=TEMPERATURE)

            def loss_of(z, labels):
                features = torch.stack([z[: n // 2], z[n // 2:]], dim=1)  # [N/2, 2, D]
                return fn(features, labels[: n // 2])
        else:
            fn = reference.load_sincere(args.sincere_dir).SINCERELoss(temperature=TEMPERATURE)

            def loss_of(z, labels):
                return fn(z, labels)

        def call(z, labels):
            loss = loss_of(z, labels)
            (grad,) = torch.autograd.grad(loss, z)
            return loss, grad

        z_np, labels_np = unit_rows(n)
        z = torch.from_numpy(z_np).to(dev).requires_grad_(True)
        labels = torch.from_numpy(labels_np.astype(np.int64)).to(dev)
        loss, grad = call(z, labels)  # warm-up
        _torch_sync(torch, dev)
        times = []
        for _ in range(sizes["repeats"]):
            start = time.perf_counter()
            loss, grad = call(z, labels)
            _torch_sync(torch, dev)
            times.append(time.perf_counter() - start)
            if times[-1] > 2.0:
                break
        record.update(seconds=float(np.median(times)), value=float(loss),
                      **_torch_peak(torch, dev))
    except (RuntimeError, MemoryError) as err:
        if not is_oom(err):
            raise
        record["status"] = describe_error(err)
    return rows("largest", record)


def child_reference_step(args, sizes: dict, rows: Rows) -> dict:
    """The reference pretraining step at each SupCon batch of the step configurations."""
    from experiments.parity import reference

    torch = reference.require_torch()
    dev, device_name = _torch_device(torch)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as main_supcon.py
    resnet_big, supcon_losses = reference.load_supcon(args.supcon_dir)
    util = reference.load_module(Path(args.supcon_dir) / "util.py", "_bench_ref_util")
    deadline = time.monotonic() + args.budget
    batches = sorted({b for loss, b, variant in args.step_configs
                      if loss == "supcon" and not variant})
    emit(f"\n# reference PyTorch step: SupConResNet('{sizes['reference_encoder']}') with the "
         f"ImageNet stem, SupConLoss, SGD, bf16 autocast, channels-last, "
         f"{sizes['image_size']} px ({device_name})")
    emit("| batch (images) | step s | images/s | FLOPs/step (PyTorch's counter) | "
         "peak bytes |\n|---|---|---|---|---|")
    out = []
    for batch in batches:
        record: dict[str, Any] = {"who": "reference", "batch_per_device": batch,
                                  "device": device_name}
        if time.monotonic() > deadline:
            record["status"] = "skipped (budget)"
        else:
            try:
                record.update(_torch_step(torch, dev, resnet_big, supcon_losses, util, sizes,
                                          batch))
            except (RuntimeError, MemoryError) as err:
                if not is_oom(err):
                    raise
                record["status"] = describe_error(err)
            finally:
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
        out.append(rows("reference_step", record))
        emit(row([batch, record.get("step_s", record.get("status")),
                  record.get("images_per_s"), record.get("flop_counter_flops"),
                  record.get("peak_bytes")]))
    return {"rows": out}


def reference_model(torch, resnet_big, name: str):
    """``SupConResNet(name)`` with the ImageNet stem: the CIFAR stem's 3x3 stride-1
    convolution replaced by a 7x7 stride-2 one, and a 3x3 stride-2 max-pool after its
    BatchNorm (``relu(maxpool(bn(x))) == maxpool(relu(bn(x)))``); the files unchanged."""
    nn = torch.nn
    model = resnet_big.SupConResNet(name=name, head="mlp", feat_dim=128)
    encoder = model.encoder
    encoder.conv1 = nn.Conv2d(3, encoder.conv1.out_channels, 7, 2, 3, bias=False)
    encoder.bn1 = nn.Sequential(encoder.bn1, nn.MaxPool2d(3, 2, 1))
    return model


def _torch_step(torch, dev, resnet_big, supcon_losses, util, sizes, batch: int) -> dict:
    """One configuration of the reference step, timed over ``step_repeats`` steps."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = reference_model(torch, resnet_big, sizes["reference_encoder"])
    model = model.to(dev, memory_format=torch.channels_last)
    criterion = supcon_losses.SupConLoss(temperature=TEMPERATURE, base_temperature=TEMPERATURE)
    optimizer = util.set_optimizer(
        types.SimpleNamespace(learning_rate=0.5, momentum=0.9, weight_decay=1e-4), model)
    size = sizes["image_size"]
    images = torch.randn(2 * batch, 3, size, size, device=dev).contiguous(
        memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=dev)

    # bf16 autocast on the GPU; float32 on the CPU (--smoke), where PyTorch's bf16
    # convolution backward took 13 s for 4 rows of 32 px.
    autocast = torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                              enabled=dev.type == "cuda")

    def step():
        # main_supcon.py's train(): both views in one forward, [B, 2, 128] to the loss.
        with autocast:
            features = model(images)
            f1, f2 = torch.split(features, [batch, batch], dim=0)
            loss = criterion(torch.cat([f1.unsqueeze(1), f2.unsqueeze(1)], dim=1), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    with FlopCounterMode(display=False) as counter:
        step()
    flops = float(counter.get_total_flops())
    for _ in range(sizes["step_warmup"]):
        step()
    _torch_sync(torch, dev)
    start = time.perf_counter()
    for _ in range(sizes["step_repeats"]):
        loss = step()
    _torch_sync(torch, dev)
    seconds = (time.perf_counter() - start) / sizes["step_repeats"]
    return {"step_s": seconds, "images_per_s": batch / seconds,
            "flop_counter_flops": flops, **_torch_peak(torch, dev), "loss": float(loss),
            "autocast": "bfloat16" if dev.type == "cuda" else None}
