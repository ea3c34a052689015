"""The arithmetic of the similarity products: float32 (the default), TF32 or bfloat16.

Every product of the NCE losses (``S = A Cᵀ`` and, under differentiation, ``G C`` and
``Gᵀ A``) goes through :func:`dot_t` or :func:`matmul` with one of :data:`PRECISIONS`:

* ``"float32"`` (default): float32 operands at ``jax.lax.Precision.HIGHEST``, float32
  arithmetic whatever ``jax.default_matmul_precision`` says. Unchanged from the losses'
  original products, bit for bit.
* ``"tf32"``: float32 operands through the ``TF32_TF32_F32`` dot algorithm (tensor cores
  on NVIDIA GPUs from Ampere on: operands rounded to 10 mantissa bits, float32
  accumulation). GPU only: XLA's CPU backend rejects the algorithm at compile time.
* ``"bf16"``: operands cast to bfloat16, product accumulated and returned in float32
  (``preferred_element_type=float32``); under autodiff the two gradient products are also
  bfloat16 x bfloat16 -> float32 (a custom VJP), the cotangent cast to bfloat16. On the CPU
  XLA emulates the bfloat16 product (same rounding of the operands, no speed-up).

The rows are L2-normalised in float32 before any of these (``_core.l2_normalize``), so
bfloat16 embeddings are not rounded twice. The errors of each choice against float64 are
measured by ``experiments/bench/accelerator.py``'s numerics part and recorded in
``experiments/bench/README.md`` ("Similarity precision"); ``tests/losses/test_precision.py``
bounds them on the CPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

#: The values of the losses' ``precision`` argument.
PRECISIONS = ("float32", "tf32", "bf16")


def check_precision(precision: str) -> str:
    """Returns ``precision`` if it is one of :data:`PRECISIONS`.

    Raises:
      ValueError: any other value (the message names the argument and the choices).
    """
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS}, got {precision!r}")
    return precision


@jax.custom_vjp
def _bf16_matmul(x: Array, y: Array) -> Array:
    """``x @ y`` of float32 arrays with bfloat16 operands and a float32 result:
    [p, k] x [k, q] -> [p, q]."""
    return jnp.matmul(
        x.astype(jnp.bfloat16), y.astype(jnp.bfloat16), preferred_element_type=jnp.float32
    )


def _bf16_matmul_fwd(x, y):
    xb, yb = x.astype(jnp.bfloat16), y.astype(jnp.bfloat16)
    return jnp.matmul(xb, yb, preferred_element_type=jnp.float32), (xb, yb)


def _bf16_matmul_bwd(residuals, g):
    xb, yb = residuals
    gb = g.astype(jnp.bfloat16)
    return (
        jnp.matmul(gb, yb.T, preferred_element_type=jnp.float32),
        jnp.matmul(xb.T, gb, preferred_element_type=jnp.float32),
    )


_bf16_matmul.defvjp(_bf16_matmul_fwd, _bf16_matmul_bwd)


def matmul(x: Array, y: Array, precision: str = "float32") -> Array:
    """``x @ y`` at ``precision``, float32 result: [p, k] x [k, q] -> [p, q]."""
    if precision == "float32":
        return jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST)
    if precision == "tf32":
        return jnp.matmul(
            x.astype(jnp.float32),
            y.astype(jnp.float32),
            precision=jax.lax.DotAlgorithmPreset.TF32_TF32_F32,
        )
    if precision == "bf16":
        return _bf16_matmul(x.astype(jnp.float32), y.astype(jnp.float32))
    raise ValueError(f"`precision` must be one of {PRECISIONS}, got {precision!r}")


def dot_t(x: Array, y: Array, precision: str = "float32") -> Array:
    """``x @ y.T`` at ``precision``, float32 result: [p, D] x [q, D] -> [p, q]."""
    return matmul(x, y.T, precision)
