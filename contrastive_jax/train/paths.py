"""The one path layer of the trainer, the checkpoints and the evaluation: local or ``gs://``.

Every file the trainer, :mod:`.checkpoint`, :mod:`.pretrained`,
:mod:`contrastive_jax.eval.checkpoint` and :mod:`contrastive_jax.linear_eval` write or read in a
work directory goes through ``etils.epath.Path`` (the path library Orbax uses), so
``--workdir gs://bucket/run`` (and ``s3://``, ``az://``) works as a local directory does.
epath reaches a bucket through TensorFlow's ``tf.io.gfile`` when TensorFlow is installed,
else through fsspec (``pip install gcsfs`` for ``gs://``). Orbax writes the arrays of a
checkpoint through TensorStore, which opens ``gs://`` by itself.

Examples:
  >>> str(as_path("gs://bucket/run") / "config.json")
  'gs://bucket/run/config.json'
  >>> as_path("runs/q").is_absolute()
  True
"""

from __future__ import annotations

import os

from etils import epath

#: Prefixes of the paths that name a bucket rather than a local file.
CLOUD_PREFIXES = ("gs://", "s3://", "az://", "hf://")


def is_cloud(path: str | os.PathLike) -> bool:
    """Whether ``path`` names an object store (``gs://``, ``s3://``, ...) rather than a file."""
    return os.fspath(path).startswith(CLOUD_PREFIXES)


def as_path(path: str | os.PathLike) -> epath.Path:
    """``path`` as an ``epath.Path``: a local path made absolute (``~`` expanded), a cloud
    URI as it is."""
    if is_cloud(path):
        return epath.Path(path)
    return epath.Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
