"""Writes tests/models/torchvision_resnet_keys.json, the names, shapes and dtypes of
torchvision's ResNet-18/34/50 ``state_dict`` (``fc`` replaced by ``torch.nn.Identity()``), which
tests/models/test_torchvision_export.py compares the export with, without torch:

    python -m tests.models.make_torchvision_keys > tests/models/torchvision_resnet_keys.json

Run once with torch and torchvision installed (the committed file: torch 2.14.1, torchvision
0.29.1, the versions it records); the names have been the same since torchvision 0.2.
"""

from __future__ import annotations

import json
import re


def main() -> None:
    import torch
    import torchvision

    out: dict = {"generated_by": f"torch {torch.__version__}, torchvision {torchvision.__version__}: "
                                 "python -m tests.models.make_torchvision_keys"}
    for depth in (18, 34, 50):
        net = getattr(torchvision.models, f"resnet{depth}")()
        net.fc = torch.nn.Identity()
        out[f"resnet{depth}"] = {
            name: [list(value.shape), str(value.dtype).removeprefix("torch.")]
            for name, value in net.state_dict().items()}
    text = json.dumps(out, indent=1)
    # One entry a line: "name": [[shape], "dtype"].
    text = re.sub(r'\[\s*\[([^\]]*)\],\s*("\w+")\s*\]',
                  lambda m: "[[" + ", ".join(x.strip() for x in m.group(1).split(",") if x.strip())
                  + "], " + m.group(2) + "]", text)
    assert json.loads(text) == out
    print(text)


if __name__ == "__main__":
    main()
