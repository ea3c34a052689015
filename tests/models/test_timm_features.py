"""timm computes our ViT's features from a ``--format timm`` export (``make test-all``; needs
torch and timm, else skipped).

Every parameter of a ViT-Ti/16 at 224x224 (timm's ``vit_tiny_patch16_224``) and of a ViT-Ti/4
at 32x32 (timm's ``VisionTransformer(img_size=32, patch_size=4, ...)``) is redrawn, so that a
mix-up of two tensors shows; the file written by :func:`contrastive_jax.models.export_weights`
loads into the network of its metadata's ``timm`` line with ``strict=True`` and gives our
features (``pool="cls"``, evaluation mode) on the same images to a relative error of at most
1e-4. The measured errors are printed (``-s``; docs/using-elsewhere.md has them).
"""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from contrastive_jax import models
from contrastive_jax.models import weights
from tests.models.test_weights import _trained_looking

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
safetensors_torch = pytest.importorskip("safetensors.torch")

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name, side", [("vit_ti16", 224), ("vit_ti4", 32)])
def test_timm_gives_our_vit_features_from_the_export(name, side, tmp_path):
    spec = models.encoder_spec({"name": name, "image_size": side})
    encoder = _trained_looking(models.create_encoder(spec, rngs=nnx.Rngs(0)), 5)
    tensors, metadata = weights.export_weights(encoder, spec, format="timm")
    path = str(tmp_path / f"{name}.safetensors")
    weights.save(path, tensors, metadata)
    scope = {"timm": timm}
    exec(metadata["timm"], scope)  # the line users are given: net = timm....
    net = scope["net"]
    net.load_state_dict(safetensors_torch.load_file(path), strict=True)
    net.eval()
    x = np.random.default_rng(0).normal(size=(2, side, side, 3)).astype(np.float32)
    with torch.no_grad():
        theirs = net(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))).numpy()
    ours = np.asarray(encoder(x))
    error = float(np.linalg.norm(ours - theirs) / np.linalg.norm(theirs))
    print(f"{name} at {side}x{side} in timm: feature relative error {error:.2e}")
    assert ours.shape == theirs.shape and error <= 1e-4
