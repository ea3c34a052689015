"""The ``precision`` option of the similarity products (``losses/_precision.py``).

The option reaches every product of value + gradient (the lowered program's dots have
the asked operand types or dot algorithm, dense and streamed); the default is the
float32 ``HIGHEST`` program; each precision's error against float64 on the CPU stays
within its bound (bfloat16 is emulated there; TF32 is GPU-only and is checked in the
program lowered for CUDA, not run).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import losses
from contrastive_jax.losses import _precision

LOSSES = ("supcon", "sincere", "nt_xent")
N, D = 48, 16


def _batch(name: str, n: int = N, seed: int = 0):
    rng = np.random.default_rng(seed)
    z = jnp.asarray(3.0 * rng.standard_normal((n, D)), jnp.float32)
    if name == "nt_xent":
        labels = jnp.asarray(np.arange(n) // 2)
    else:
        labels = jnp.asarray(rng.integers(0, 5, n))
    return z, labels


def _value_and_grad(name: str, **kwargs):
    fn = losses.get(name)
    return jax.jit(jax.value_and_grad(lambda z, y: fn(z, y, temperature=0.1, **kwargs)))


def _dots(text: str) -> list[str]:
    return re.findall(r"stablehlo\.dot_general.*", text)


@pytest.mark.parametrize("block_size", [None, 16])
@pytest.mark.parametrize("name", LOSSES)
def test_default_is_the_float32_highest_program(name, block_size):
    """No ``precision`` and ``precision="float32"`` lower to the same program, whose three
    products (value, two of the gradient) are float32 at HIGHEST: the losses' original
    products (bit for bit against the previous commit: experiments/bench/README.md)."""
    z, labels = _batch(name)
    default = _value_and_grad(name, block_size=block_size).lower(z, labels).as_text()
    explicit = _value_and_grad(name, block_size=block_size, precision="float32").lower(
        z, labels).as_text()
    assert default == explicit
    dots = _dots(default)
    assert len(dots) == 3
    for dot in dots:
        assert "precision = [HIGHEST, HIGHEST]" in dot and "bf16" not in dot, dot


@pytest.mark.parametrize("block_size", [None, 16])
@pytest.mark.parametrize("name", LOSSES)
def test_bf16_products_have_bfloat16_operands_and_float32_results(name, block_size):
    z, labels = _batch(name)
    text = _value_and_grad(name, block_size=block_size, precision="bf16").lower(
        z, labels).as_text()
    dots = _dots(text)
    assert len(dots) == 3
    for dot in dots:
        operands, result = dot.rsplit("->", 1)
        assert operands.count("xbf16>") == 2 and "xf32>" not in operands, dot
        assert "xf32>" in result, dot


@pytest.mark.parametrize("block_size", [None, 16])
def test_tf32_products_use_the_tf32_algorithm_on_gpu(block_size):
    """Lowered for CUDA (no GPU needed): each of the three dots names the TF32 algorithm
    with float32 accumulation. The CPU backend has no TF32 dot and says so."""
    z, labels = _batch("supcon")
    fn = _value_and_grad("supcon", block_size=block_size, precision="tf32")
    dots = _dots(fn.trace(z, labels).lower(lowering_platforms=("cuda",)).as_text())
    assert len(dots) == 3
    for dot in dots:
        assert "lhs_precision_type = tf32, rhs_precision_type = tf32" in dot, dot
        assert "accumulation_type = f32" in dot, dot
    if jax.default_backend() == "cpu":
        with pytest.raises(ValueError, match="TF32"):
            fn(z, labels)


def test_bad_precision_is_named():
    z, labels = _batch("supcon")
    for bad in ("highest", "float16", None, jax.lax.Precision.HIGHEST):
        with pytest.raises(ValueError, match="`precision`"):
            losses.supcon(z, labels, precision=bad)


def _float64_loss(name: str, z, labels, temperature: float = 0.1):
    """SupCon (Khosla et al. Eq. 2, L_out) or SINCERE (Feeney & Hughes Eq. 12) written
    densely in float64 (NT-Xent is SupCon over instance ids)."""
    z = z / jnp.linalg.norm(z, axis=1, keepdims=True)
    s = jnp.matmul(z, z.T, precision=jax.lax.Precision.HIGHEST) / temperature
    eye = jnp.eye(z.shape[0], dtype=bool)
    pos = (labels[:, None] == labels[None, :]) & ~eye
    if name == "sincere":
        neg = labels[:, None] != labels[None, :]
        lse_neg = jax.nn.logsumexp(jnp.where(neg, s, -jnp.inf), axis=1)
        pair = jnp.logaddexp(s, lse_neg[:, None]) - s
    else:
        pair = jax.nn.logsumexp(jnp.where(eye, -jnp.inf, s), axis=1)[:, None] - s
    count = pos.sum(1)
    per_anchor = jnp.sum(jnp.where(pos, pair, 0.0), 1) / jnp.maximum(count, 1)
    ok = count > 0
    return jnp.sum(jnp.where(ok, per_anchor, 0.0)) / ok.sum()


def _rel(a, ref) -> float:
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


#: Relative L2 errors against float64 (value, gradient) allowed on the CPU, N = 1536,
#: D = 16, tau = 0.1: 5-20x the largest of the three losses measured (float32: 7e-8 /
#: 7e-7; bf16: 4e-5 / 9e-3, the operands' 8 mantissa bits over a 1/tau = 10 logit scale).
BOUNDS = {"float32": (1e-6, 5e-6), "bf16": (4e-4, 5e-2)}


@pytest.mark.parametrize("precision", sorted(BOUNDS))
@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.slow
def test_error_against_float64(name, precision):
    """Streamed (N = 1536 > BLOCKWISE_THRESHOLD) value and gradient at each CPU precision
    within its bound; bfloat16 is also measurably less accurate than float32 (the option
    is not a no-op)."""
    z, labels = _batch(name, n=1536, seed=1)
    with jax.enable_x64(True):
        value64, grad64 = jax.jit(jax.value_and_grad(
            lambda x, y: _float64_loss(name, x, y)))(jnp.asarray(z, jnp.float64), labels)
    value, grad = _value_and_grad(name, precision=precision)(z, labels)
    value_bound, grad_bound = BOUNDS[precision]
    assert _rel(value, value64) < value_bound
    assert _rel(grad, grad64) < grad_bound
    if precision == "bf16":
        assert _rel(grad, grad64) > BOUNDS["float32"][1]


def test_matmul_precisions_agree_with_float64_products():
    """The product helpers alone: float32 to float32 round-off, bf16 to bfloat16's."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 32))
    y = rng.standard_normal((48, 32))
    exact = x @ y.T
    f32 = _precision.dot_t(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32))
    bf16 = _precision.dot_t(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32), "bf16")
    assert f32.dtype == bf16.dtype == jnp.float32
    assert _rel(f32, exact) < 1e-6
    assert 1e-4 < _rel(bf16, exact) < 1e-2
