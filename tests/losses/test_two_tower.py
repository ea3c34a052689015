"""CLIP and SigLIP: float64 NumPy references for value and every gradient, dense and
streamed, on one device, under shard_map (one and two mesh axes), pmap and jit on
sharded arrays."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from contrastive_jax import losses
from contrastive_jax.losses import blockwise
from tests.pairwise import all_pairs

TAU, BIAS = 0.3, -2.0


# --------------------------------------------------------------------------- references


def _unit(x):
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / norm, norm


def _back_through_norm(g, unit, norm):
    """d/dx of f(x / ||x||) given g = d f / d unit."""
    return (g - unit * np.sum(g * unit, axis=1, keepdims=True)) / norm


def _reference(kind, a, b, tau, bias, valid):
    """float64 value and gradients (d a, d b, d tau, d bias) of CLIP or SigLIP."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    valid = np.ones(a.shape[0], bool) if valid is None else np.asarray(valid)
    ua, na = _unit(a)
    ub, nb = _unit(b)
    idx = np.flatnonzero(valid)
    n = idx.size
    d = ua[idx] @ ub[idx].T
    eye = np.eye(n)
    if kind == "clip":
        s = d / tau
        row = np.exp(s - s.max(1, keepdims=True))
        row /= row.sum(1, keepdims=True)
        col = np.exp(s - s.max(0, keepdims=True))
        col /= col.sum(0, keepdims=True)

        def lse(x, axis):
            m = x.max(axis)
            return m + np.log(np.exp(x - np.expand_dims(m, axis)).sum(axis))

        value = 0.5 * np.mean(lse(s, 1) - np.diag(s)) + 0.5 * np.mean(lse(s, 0) - np.diag(s))
        g_s = (row - eye + col - eye) / (2 * n)
        g_d = g_s / tau
        g_tau = -np.sum(g_s * s) / tau
        g_bias = 0.0
    else:
        logits = d / tau + bias
        z = 2 * eye - 1
        value = np.sum(np.logaddexp(0, -z * logits)) / n
        g_l = -z / (1 + np.exp(z * logits)) / n
        g_d = g_l / tau
        g_tau = -np.sum(g_l * d) / tau**2
        g_bias = np.sum(g_l)
    g_a, g_b = np.zeros_like(a), np.zeros_like(b)
    g_a[idx] = _back_through_norm(g_d @ ub[idx], ua[idx], na[idx])
    g_b[idx] = _back_through_norm(g_d.T @ ua[idx], ub[idx], nb[idx])
    return value, g_a, g_b, g_tau, g_bias


def _data(n, d=6, seed=0, pad=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, d)).astype(np.float32)
    b = (a + 0.8 * rng.normal(size=(n, d))).astype(np.float32)
    valid = np.ones(n, bool)
    if pad:
        valid[rng.choice(n, pad, replace=False)] = False
    return a, b, valid


def _call(kind, a, b, tau, bias, **kwargs):
    if kind == "clip":
        return losses.clip(a, b, temperature=tau, **kwargs)
    return losses.siglip(a, b, temperature=tau, bias=bias, **kwargs)


def _value_and_grads(kind, **kwargs):
    """``f(a, b, tau, bias) -> (value, (d a, d b, d tau, d bias))``, jitted."""
    return jax.jit(jax.value_and_grad(
        lambda a, b, t, c: _call(kind, a, b, t, c, **kwargs), argnums=(0, 1, 2, 3)
    ))


def _assert_matches(kind, got, ref, rtol=2e-4, atol=2e-6):
    value, grads = got
    ref_value, *ref_grads = ref
    np.testing.assert_allclose(np.asarray(value).reshape(-1)[0], ref_value, rtol=rtol, atol=atol)
    names = ("image_embeddings", "text_embeddings", "temperature", "bias")
    for name, g, r in zip(names, grads, ref_grads, strict=True):
        if kind == "clip" and name == "bias":
            continue
        np.testing.assert_allclose(np.asarray(g), r, rtol=rtol, atol=atol, err_msg=name)


KINDS = ("clip", "siglip")


# --------------------------------------------------------------------------- one device


@pytest.mark.parametrize(("kind", "block_size", "pad", "exchange"),
                         all_pairs(KINDS, [None, 3, 16], [0, 3], ["gather", "ring"]))
@pytest.mark.matrix
def test_value_and_gradients_match_the_float64_reference(kind, block_size, pad, exchange):
    a, b, valid = _data(16, pad=pad)
    got = _value_and_grads(kind, valid=jnp.asarray(valid), block_size=block_size,
                           exchange=exchange)(
        a, b, jnp.float32(TAU), jnp.float32(BIAS)
    )
    _assert_matches(kind, got, _reference(kind, a, b, TAU, BIAS, valid))


@pytest.mark.parametrize("kind", KINDS)
def test_padding_is_the_loss_of_the_real_pairs(kind):
    a, b, valid = _data(12, pad=4)
    padded = _call(kind, a, b, TAU, BIAS, valid=jnp.asarray(valid))
    real = _call(kind, a[valid], b[valid], TAU, BIAS)
    np.testing.assert_allclose(padded, real, rtol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow
def test_streaming_is_chosen_above_the_threshold_and_equals_the_dense_form(kind, monkeypatch):
    a, b, _ = _data(40, d=4, seed=3)
    dense = _value_and_grads(kind)(a, b, TAU, BIAS)
    monkeypatch.setattr(blockwise, "BLOCKWISE_THRESHOLD", 16)
    monkeypatch.setattr(blockwise, "BLOCK_ELEMENTS", 16 * 40)
    streamed_fn = _value_and_grads(kind)
    jaxpr = str(jax.make_jaxpr(lambda x, y: _call(kind, x, y, TAU, BIAS))(a, b))
    assert "custom_vjp_call" in jaxpr and "scan" in jaxpr
    streamed = streamed_fn(a, b, TAU, BIAS)
    np.testing.assert_allclose(streamed[0], dense[0], rtol=1e-6)
    for g, r in zip(streamed[1], dense[1], strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("block_size", "exchange"), [(None, "gather"), (4, "gather"),
                                                      (4, "ring")])
def test_no_n_by_n_array_when_streamed(kind, block_size, exchange):
    """The streamed value-and-gradient program holds no [N, N] array; the dense one does."""
    n = 64
    a, b, _ = _data(n, d=8)
    fn = _value_and_grads(kind, block_size=block_size, exchange=exchange)
    text = fn.lower(a, b, TAU, BIAS).as_text()
    has_square = f"tensor<{n}x{n}xf32>" in text
    assert has_square == (block_size is None)


@pytest.mark.parametrize("kind", KINDS)
def test_bfloat16_towers_accumulate_in_float32(kind):
    a, b, _ = _data(16)
    low = _call(kind, jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16), TAU, BIAS)
    assert low.dtype == jnp.float32
    rounded = [np.asarray(jnp.asarray(x, jnp.bfloat16), np.float32) for x in (a, b)]
    np.testing.assert_allclose(low, _reference(kind, *rounded, TAU, BIAS, None)[0], rtol=1e-5)


def test_siglip_matches_the_papers_pseudocode_at_its_initialisation():
    """Zhai et al., Algorithm 1: ``-sum(log_sigmoid(labels * (t x.y + b))) / n``, t = 10, b = -10."""
    a, b, _ = _data(8)
    ua, ub = _unit(a.astype(np.float64))[0], _unit(b.astype(np.float64))[0]
    logits = ua @ ub.T * 10.0 - 10.0
    labels = 2 * np.eye(8) - 1
    paper = -np.sum(-np.logaddexp(0, -labels * logits)) / 8
    np.testing.assert_allclose(losses.siglip(a, b), paper, rtol=1e-5)


def test_clip_is_the_mean_of_two_cross_entropies():
    a, b, _ = _data(8)
    ua, ub = _unit(a.astype(np.float64))[0], _unit(b.astype(np.float64))[0]
    s = ua @ ub.T / 0.07

    def ce(x):
        return np.mean(np.log(np.exp(x).sum(1)) - np.diag(x))

    np.testing.assert_allclose(losses.clip(a, b), 0.5 * (ce(s) + ce(s.T)), rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_traced_hyperparameters_are_accepted_under_jit(kind):
    a, b, _ = _data(8)
    got = jax.jit(lambda t, c: _call(kind, a, b, t, c))(TAU, BIAS)
    np.testing.assert_allclose(got, _reference(kind, a, b, TAU, BIAS, None)[0], rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"image_embeddings": np.ones((4,), np.float32)}, "image_embeddings"),
        ({"text_embeddings": np.ones((4, 3), np.int32)}, "text_embeddings"),
        ({"text_embeddings": np.ones((5, 3), np.float32)}, "text_embeddings"),
        ({"text_embeddings": np.ones((4, 2), np.float32)}, "text_embeddings"),
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"valid": np.ones((3,), bool)}, "valid"),
        ({"valid": np.ones((4,), np.int32)}, "valid"),
        ({"block_size": 0}, "block_size"),
        ({"exchange": "all_to_all"}, "exchange"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_names_the_argument(kind, kwargs, match):
    args = {"image_embeddings": np.ones((4, 3), np.float32),
            "text_embeddings": np.ones((4, 3), np.float32), "temperature": 0.1, **kwargs}
    fn = losses.clip if kind == "clip" else losses.siglip
    with pytest.raises(ValueError, match=match):
        fn(args.pop("image_embeddings"), args.pop("text_embeddings"), **args)


@pytest.mark.parametrize("bias", [float("nan"), float("inf"), np.ones(2)])
def test_siglip_refuses_a_bad_bias(bias):
    with pytest.raises(ValueError, match="bias"):
        losses.siglip(np.ones((4, 3), np.float32), np.ones((4, 3), np.float32), bias=bias)


def test_registry_records_the_paired_kind():
    for name in ("clip", "siglip"):
        assert losses.get(name) is getattr(losses, name)
        assert losses.second_argument(name) == "paired_embeddings"
        assert name in losses.embedding_losses()


# --------------------------------------------------------------------------- devices


def _mesh(shape, names):
    devices = np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape)
    return jax.sharding.Mesh(devices, names)


MESHES = {
    "1d": ((8,), ("data",), "data"),
    "2d": ((2, 4), ("x", "y"), ("x", "y")),
}


@pytest.mark.parametrize(
    ("kind", "block_size", "mesh_name", "grad_inside", "exchange"),
    all_pairs(KINDS, [None, 3], sorted(MESHES), [False, True], ["gather", "ring"]),
)
@pytest.mark.matrix
def test_shard_map_equals_one_device(kind, block_size, mesh_name, grad_inside, exchange):
    shape, names, axis_name = MESHES[mesh_name]
    mesh = _mesh(shape, names)
    a, b, valid = _data(48, pad=5, seed=1)
    rows = P(names)

    def local(x, y, t, c, v):
        return _call(kind, x, y, t, c, valid=v, axis_name=axis_name, block_size=block_size,
                     exchange=exchange)

    if grad_inside:
        def per_device(x, y, t, c, v):
            value, grads = jax.value_and_grad(local, argnums=(0, 1, 2, 3))(x, y, t, c, v)
            return value, grads

        sharded = jax.shard_map(per_device, mesh=mesh, in_specs=(rows, rows, P(), P(), rows),
                                out_specs=(P(), (rows, rows, P(), P())))
        got = jax.jit(sharded)(a, b, jnp.float32(TAU), jnp.float32(BIAS), valid)
    else:
        sharded = jax.shard_map(local, mesh=mesh, in_specs=(rows, rows, P(), P(), rows),
                                out_specs=P())
        got = jax.jit(jax.value_and_grad(
            lambda x, y, t, c: sharded(x, y, t, c, valid), argnums=(0, 1, 2, 3)
        ))(a, b, jnp.float32(TAU), jnp.float32(BIAS))
    _assert_matches(kind, got, _reference(kind, a, b, TAU, BIAS, valid))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("exchange", ["gather", "ring"])
@pytest.mark.matrix
def test_pmap_equals_one_device(kind, exchange):
    a, b, valid = _data(32, pad=3, seed=2)

    def local(x, y, v):
        return jax.value_and_grad(
            lambda x_, y_: _call(kind, x_, y_, TAU, BIAS, valid=v, axis_name="d", block_size=2,
                                 exchange=exchange),
            argnums=(0, 1),
        )(x, y)

    def split(x):
        return x.reshape((8, -1) + x.shape[1:])

    value, (g_a, g_b) = jax.pmap(local, axis_name="d")(split(a), split(b), split(valid))
    ref = _reference(kind, a, b, TAU, BIAS, valid)
    np.testing.assert_allclose(np.asarray(value), np.full(8, ref[0]), rtol=2e-4)
    np.testing.assert_allclose(np.asarray(g_a).reshape(a.shape), ref[1], rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(np.asarray(g_b).reshape(b.shape), ref[2], rtol=2e-4, atol=2e-6)


@pytest.mark.parametrize(("kind", "block_size", "mesh_name", "exchange"),
                         all_pairs(KINDS, [None, 4], sorted(MESHES), ["gather", "ring"]))
@pytest.mark.matrix
def test_jit_on_sharded_arrays_equals_one_device(kind, block_size, mesh_name, exchange):
    shape, names, _ = MESHES[mesh_name]
    mesh = _mesh(shape, names)
    a, b, valid = _data(32, pad=2, seed=4)
    put = functools.partial(jax.device_put, device=NamedSharding(mesh, P(names)))
    got = _value_and_grads(kind, valid=put(valid), block_size=block_size, exchange=exchange)(
        put(a), put(b), jnp.float32(TAU), jnp.float32(BIAS)
    )
    _assert_matches(kind, got, _reference(kind, a, b, TAU, BIAS, valid))


@pytest.mark.parametrize(("kind", "block_size", "mesh_name"),
                         all_pairs(KINDS, [None, 4], sorted(MESHES)))
@pytest.mark.slow
def test_jit_on_an_explicit_mesh_is_partitioned_and_equals_one_device(kind, block_size, mesh_name):
    """Rows sharded over Explicit axes: the loss runs per device (shard_map over those axes),
    its gradients keep the rows' sharding, and value and gradients are the reference's."""
    shape, names, _ = MESHES[mesh_name]
    mesh = jax.make_mesh(shape, names, axis_types=(jax.sharding.AxisType.Explicit,) * len(shape))
    a, b, valid = _data(32, pad=3, seed=5)
    with jax.sharding.set_mesh(mesh):
        put = functools.partial(jax.device_put, device=NamedSharding(mesh, P(names)))
        got = _value_and_grads(kind, valid=put(valid), block_size=block_size)(
            put(a), put(b), jnp.float32(TAU), jnp.float32(BIAS)
        )
        assert got[1][0].sharding.is_equivalent_to(NamedSharding(mesh, P(names)), 2)
    _assert_matches(kind, got, _reference(kind, a, b, TAU, BIAS, valid))
