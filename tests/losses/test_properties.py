"""Property-based tests (hypothesis) of every registered loss.

For any finite input of a valid shape — rows of any scale, zero rows,
duplicated rows, anchors without positives, temperatures from 1e-4 to 1e4 —
the value and the gradient are finite. Inputs of a wrong rank, length or
dtype, and non-positive temperatures, raise ``ValueError``.

Shapes are fixed (N = 8 rows, D = 4) and the temperature is a traced
argument, so each loss compiles once.

Exception, found by these tests: the ProjNCE-type losses add
``R_i = exp(log R_i)`` itself, not its log, and ``log R_i`` reaches about
``2 / tau`` (e.g. rows [0, 1, 1, 1] and [1, 1, 1, 1] of one class at
``tau = 1e-4`` give ``log R = 168``), so the exact loss overflows float32
(``exp`` > 3.4e38 past 88) for ``tau`` below about 0.023. Their property test
starts at ``tau = 0.05``; see :func:`test_projnce_overflows_only_below_its_range`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from contrastive_jax import losses

N, D, K = 8, 4, 4
LABEL_LOSSES = ("nt_xent", "supcon", "sincere", "projnce", "soft_supcon", "soft_nce",
                "med_supcon", "med_nce", "mio")
METADATA_LOSSES = ("y_aware_infonce", "conditional_alignment", "conditional_uniformity")
NO_TARGET_LOSSES = ("global_uniformity",)
LOGIT_LOSSES = ("soft_target_infonce", "soft_target_cross_entropy")
#: Class scores [N, K] with int class labels [N].
LABEL_LOGIT_LOSSES = ("label_cross_entropy", "label_soft_target_infonce")
#: Instance ids, no temperature (Wang & Isola's scale t in its place).
INSTANCE_LOSSES = ("align_uniform",)
PAIRED_LOSSES = ("clip", "siglip")
SETTINGS = settings(max_examples=10, deadline=None, derandomize=True)


def test_every_registered_loss_is_covered():
    covered = (LABEL_LOSSES + METADATA_LOSSES + NO_TARGET_LOSSES + LOGIT_LOSSES
               + LABEL_LOGIT_LOSSES + INSTANCE_LOSSES
               + PAIRED_LOSSES)
    assert sorted(covered) == losses.names()


finite = st.floats(-1e3, 1e3, width=32, allow_subnormal=False)
temperatures = st.sampled_from([1e-4, 1e-2, 0.07, 0.5, 1.0, 1e2, 1e4])
#: Losses with the additive exp term R of ProjNCE (Eq. 10): finite for tau >= 2/85.
R_TERM_LOSSES = ("projnce", "soft_supcon", "med_supcon")
r_term_temperatures = st.sampled_from([0.05, 0.07, 0.5, 1.0, 1e2, 1e4])


@st.composite
def embeddings(draw) -> np.ndarray:
    """[N, D] finite rows, drawn from a pool of at most N so rows repeat (and may be 0)."""
    pool = draw(hnp.arrays(np.float32, (draw(st.integers(1, N)), D), elements=finite))
    rows = draw(hnp.arrays(np.int64, (N,), elements=st.integers(0, len(pool) - 1)))
    return pool[rows]


labels = hnp.arrays(np.int32, (N,), elements=st.integers(0, 3))
metadata = hnp.arrays(np.float32, (N, 1), elements=st.floats(-50, 50, width=32))


@st.composite
def soft_targets(draw) -> np.ndarray:
    """[N, K] rows on the simplex (one-hot, smoothed or mixed)."""
    weights = draw(hnp.arrays(np.float32, (N, K), elements=st.floats(0, 1, width=32)))
    weights[:, 0] += 1e-3  # no all-zero row
    return weights / weights.sum(axis=1, keepdims=True)


@functools.cache
def _value_and_grad(name: str):
    fn = losses.get(name)
    if name in NO_TARGET_LOSSES:
        return jax.jit(jax.value_and_grad(lambda x, _, t: fn(x, temperature=t)))
    if name in INSTANCE_LOSSES:
        return jax.jit(jax.value_and_grad(lambda x, second, t: fn(x, second, t=t)))
    return jax.jit(jax.value_and_grad(lambda x, second, t: fn(x, second, temperature=t)))


def _assert_finite(name: str, x, second, temperature: float) -> None:
    value, grad = _value_and_grad(name)(jnp.asarray(x), second, jnp.float32(temperature))
    assert value.shape == () and value.dtype == jnp.float32
    assert np.isfinite(value), (name, temperature, x, second)
    assert np.all(np.isfinite(grad)), (name, temperature, x, second)


@pytest.mark.parametrize("name", [n for n in LABEL_LOSSES if n not in R_TERM_LOSSES])
@SETTINGS
@given(x=embeddings(), y=labels, temperature=temperatures)
@pytest.mark.slow
def test_label_losses_finite(name, x, y, temperature):
    _assert_finite(name, x, jnp.asarray(y), temperature)


@pytest.mark.parametrize("name", R_TERM_LOSSES)
@SETTINGS
@given(x=embeddings(), y=labels, temperature=r_term_temperatures)
@pytest.mark.matrix
def test_r_term_losses_finite(name, x, y, temperature):
    _assert_finite(name, x, jnp.asarray(y), temperature)


def test_projnce_overflows_only_below_its_range():
    x = jnp.asarray([[0, 1, 1, 1]] + [[1, 1, 1, 1]] * (N - 1), jnp.float32)
    y = jnp.zeros((N,), jnp.int32)
    fn = _value_and_grad("projnce")
    assert not np.isfinite(fn(x, y, jnp.float32(1e-4))[0])
    value, grad = fn(x, y, jnp.float32(0.05))
    assert np.isfinite(value) and np.all(np.isfinite(grad))


@pytest.mark.parametrize("name", METADATA_LOSSES)
@SETTINGS
@given(x=embeddings(), m=metadata, temperature=temperatures)
def test_metadata_losses_finite(name, x, m, temperature):
    _assert_finite(name, x, jnp.asarray(m), temperature)


@pytest.mark.parametrize("name", NO_TARGET_LOSSES)
@SETTINGS
@given(x=embeddings(), temperature=temperatures)
def test_uniformity_finite(name, x, temperature):
    _assert_finite(name, x, None, temperature)


@pytest.mark.parametrize("name", LOGIT_LOSSES)
@SETTINGS
@given(logits=hnp.arrays(np.float32, (N, K), elements=finite), targets=soft_targets(),
       temperature=temperatures)
def test_soft_target_losses_finite(name, logits, targets, temperature):
    _assert_finite(name, logits, jnp.asarray(targets), temperature)


@pytest.mark.parametrize("name", LABEL_LOGIT_LOSSES)
@SETTINGS
@given(logits=hnp.arrays(np.float32, (N, K), elements=finite), y=labels,
       temperature=temperatures)
def test_label_logit_losses_finite(name, logits, y, temperature):
    _assert_finite(name, logits, jnp.asarray(y), temperature)


@SETTINGS
@given(x=embeddings(), t=st.sampled_from([1e-4, 1e-2, 0.5, 2.0, 1e2, 1e4]))
def test_align_uniform_finite(x, t):
    _assert_finite("align_uniform", x, jnp.asarray(np.repeat(np.arange(N // 2), 2)), t)


@pytest.mark.parametrize("name", ["alpha", "t"])
def test_align_uniform_bad_scale_raises(name):
    with pytest.raises(ValueError, match=name):
        losses.align_uniform(jnp.ones((N, D)), jnp.zeros((N,), jnp.int32), **{name: 0.0})


@pytest.mark.parametrize("name", PAIRED_LOSSES)
@SETTINGS
@given(x=embeddings(), y=embeddings(), temperature=temperatures)
def test_paired_losses_finite(name, x, y, temperature):
    _assert_finite(name, x, jnp.asarray(y), temperature)


def _second(name: str, n: int):
    if name in PAIRED_LOSSES:
        return jnp.ones((n, D), jnp.float32)
    if name in METADATA_LOSSES:
        return jnp.zeros((n, 1), jnp.float32)
    if name in LOGIT_LOSSES:
        return jnp.full((n, K), 1.0 / K, jnp.float32)
    return jnp.zeros((n,), jnp.int32)


def _call(name: str, x, second, **kwargs):
    fn = losses.get(name)
    if name in NO_TARGET_LOSSES:
        return fn(x, **kwargs)
    return fn(x, second, **kwargs)


ALL = (LABEL_LOSSES + METADATA_LOSSES + NO_TARGET_LOSSES + LOGIT_LOSSES + LABEL_LOGIT_LOSSES
       + INSTANCE_LOSSES + PAIRED_LOSSES)
#: The losses on class scores [N, K].
SCORE_LOSSES = LOGIT_LOSSES + LABEL_LOGIT_LOSSES


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=5, deadline=None, derandomize=True)
@given(shape=st.sampled_from([(N,), (2, N, D), (N, D, 1), (0, D)]))
def test_wrong_rank_or_empty_input_raises(name, shape):
    with pytest.raises(ValueError, match="embeddings|logits"):
        _call(name, jnp.zeros(shape, jnp.float32), _second(name, max(shape[0], 1)))


@pytest.mark.parametrize("name", [n for n in ALL if n not in NO_TARGET_LOSSES])
@settings(max_examples=4, deadline=None, derandomize=True)
@given(n_second=st.sampled_from([N - 1, N + 1, 1, 2 * N]))
def test_mismatched_second_argument_raises(name, n_second):
    with pytest.raises(ValueError, match="labels|metadata|targets|N|rows|shape"):
        _call(name, jnp.ones((N, D if name not in SCORE_LOSSES else K)), _second(name, n_second))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.bool_])
def test_non_float_input_raises(name, dtype):
    width = K if name in SCORE_LOSSES else D
    with pytest.raises(ValueError, match="embeddings|logits|float|dtype"):
        _call(name, jnp.ones((N, width), dtype), _second(name, N))


@pytest.mark.parametrize("name", [n for n in ALL if n not in INSTANCE_LOSSES])
@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_temperature_raises(name, temperature):
    width = K if name in SCORE_LOSSES else D
    with pytest.raises(ValueError, match="temperature"):
        _call(name, jnp.ones((N, width), jnp.float32), _second(name, N), temperature=temperature)
