"""Writes the names, shapes and dtypes of the PyTorch networks the exports load into, which
tests/models/test_weights.py compares the export with, without torch:

    python -m tests.models.make_torchvision_keys > tests/models/torchvision_resnet_keys.json
    python -m tests.models.make_torchvision_keys timm > tests/models/timm_vit_keys.json

The first: torchvision's ResNet-18/34/50 ``state_dict`` (``fc`` replaced by
``torch.nn.Identity()``); the second: timm's ``vit_tiny_patch16_224`` and
``vit_small_patch16_224`` with ``num_classes=0``. Run once with torch, torchvision and timm
installed (the committed files: torch 2.14.1, torchvision 0.29.1, timm 1.0.29, the versions
they record).
"""

from __future__ import annotations

import json
import re
import sys


def _entries(net) -> dict:
    return {name: [list(value.shape), str(value.dtype).removeprefix("torch.")]
            for name, value in net.state_dict().items()}


def main(argv: list[str]) -> None:
    import torch

    command = "python -m tests.models.make_torchvision_keys " + " ".join(argv)
    if argv == ["timm"]:
        import timm

        out: dict = {"generated_by": f"torch {torch.__version__}, timm {timm.__version__}: "
                                     f"{command.strip()}"}
        for name in ("vit_tiny_patch16_224", "vit_small_patch16_224"):
            out[name] = _entries(timm.create_model(name, pretrained=False, num_classes=0))
    else:
        import torchvision

        out = {"generated_by": f"torch {torch.__version__}, torchvision "
                               f"{torchvision.__version__}: {command.strip()}"}
        for depth in (18, 34, 50):
            net = getattr(torchvision.models, f"resnet{depth}")()
            net.fc = torch.nn.Identity()
            out[f"resnet{depth}"] = _entries(net)
    text = json.dumps(out, indent=1)
    # One entry a line: "name": [[shape], "dtype"].
    text = re.sub(r'\[\s*\[([^\]]*)\],\s*("\w+")\s*\]',
                  lambda m: "[[" + ", ".join(x.strip() for x in m.group(1).split(",") if x.strip())
                  + "], " + m.group(2) + "]", text)
    assert json.loads(text) == out
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
