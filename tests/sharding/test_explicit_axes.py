"""Explicit mesh axes (`jax.make_mesh`'s default, with `jax.set_mesh`): every value's type
carries its sharding. The ops, their dequantize and their straight-through gradient must work
there and give the bytes of the unsharded call (8 fake CPU devices)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.support.bytes import assert_same_bytes, f32_bits_equal
from tests.support.cases import product_with_one_in_turn, random_input
from tests.support.kernels import impls

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")

QUANTIZERS = {
    "current": lambda: eqq.CurrentScaleQuantizer(),
    "delayed": lambda: eqq.DelayedScaleQuantizer(scale=jnp.array([2.5], jnp.float32)),
    "mxfp8": lambda: eqq.BlockScaleQuantizer(),
    "nvfp4": lambda: eqq.NVFP4Quantizer(),
    "nvfp4_rht": lambda: eqq.NVFP4Quantizer(use_rht=True),
}
# Shards of 64 x 64 (or 32 x 128): whole blocks of every format, nothing to gather.
SPECS = [P("data", "model"), P(("data", "model"), None)]


def _mesh():
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    assert mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)
    return mesh


def _same(got, expected, what):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        if a.dtype == jnp.float32:
            f32_bits_equal(a, b, what)
        else:
            assert_same_bytes(a, b, what)


def _x():
    return jnp.asarray(random_input((256, 128), jnp.bfloat16, seed=21) * 5)


# Every format under both specs, each spec on the two implementations in turn.
QUANTIZE_CASES = product_with_one_in_turn(impls(), sorted(QUANTIZERS), SPECS)


@pytest.mark.parametrize("name,spec,impl", QUANTIZE_CASES, ids=str)
def test_quantize_under_explicit_axes(name, spec, impl):
    q = QUANTIZERS[name]()
    f = jax.jit(lambda x: eqq.quantize(x, q, impl=impl))
    x = _x()
    expected = f(x)
    mesh = _mesh()
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    with jax.set_mesh(mesh):
        got = f(xs)
        hlo = f.lower(xs).compile().as_text()
        dequantized = jax.jit(lambda t: t.dequantize())(got)
    _same(got, expected, f"{name} {spec}")
    assert "all-gather" not in hlo, "the input must not be gathered"
    assert_same_bytes(dequantized, expected.dequantize(), f"{name} {spec} dequantize")
    assert jax.typeof(dequantized).sharding.spec == spec


@pytest.mark.parametrize("name", ["current", "delayed", "mxfp8"])
def test_quantize_dbias_under_explicit_axes(name):
    q = QUANTIZERS[name]()
    f = jax.jit(lambda x: eqq.quantize_dbias(x, q))
    x = _x()
    expected = f(x)
    mesh = _mesh()
    with jax.set_mesh(mesh):
        got = f(jax.device_put(x, NamedSharding(mesh, P("data", "model"))))
    _same(got, expected, f"dbias {name}")


@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_straight_through_grad_under_explicit_axes(name):
    """The cotangent of x has x's sharding in its type (a custom VJP requires it)."""
    q = QUANTIZERS[name]()

    def loss(x):
        y = eqq.quantize(x, q).dequantize().astype(jnp.float32)
        return jnp.sum(y * jnp.arange(y.shape[-1], dtype=jnp.float32)[None, :])

    g = jax.jit(jax.grad(loss))
    x = _x()
    expected = g(x)
    mesh = _mesh()
    xs = jax.device_put(x, NamedSharding(mesh, P("data", "model")))
    with jax.set_mesh(mesh):
        got = g(xs)
    assert jax.typeof(got).sharding.spec == P("data", "model")
    assert_same_bytes(got, expected, f"grad {name}")
    # Straight-through: d loss / dx is the weight of each column, exactly.
    want = np.tile(np.arange(128, dtype=np.float32), (256, 1)).astype(jnp.bfloat16)
    assert_same_bytes(np.asarray(got), want, f"grad {name} values")


GROUP_SIZES = np.array([100, 0, 56, 100], np.int32)
GROUPED_QUANTIZERS = ["current", "mxfp8", "nvfp4"]


@pytest.mark.parametrize("spec", [P("data", "model"), P(None, "model")], ids=str)
@pytest.mark.parametrize("name", GROUPED_QUANTIZERS)
def test_grouped_quantize_under_explicit_axes(name, spec):
    q = QUANTIZERS[name]()
    f = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, check=False))
    x, sizes = _x(), jnp.asarray(GROUP_SIZES)
    expected = f(x, sizes)
    mesh = _mesh()
    with jax.set_mesh(mesh):
        got = f(jax.device_put(x, NamedSharding(mesh, spec)), sizes)
        dequantized = jax.jit(lambda t: t.dequantize())(got)
    _same(got, expected, f"grouped {name} {spec}")
    assert_same_bytes(dequantized, expected.dequantize(), f"grouped {name} {spec} dequantize")


@pytest.mark.parametrize("name", GROUPED_QUANTIZERS)
def test_grouped_grad_under_explicit_axes(name):
    q = QUANTIZERS[name]()

    def loss(x, s):
        tensor, dbias = eqq.grouped_quantize_dbias(x, s, q, check=False)
        weights = jnp.arange(x.shape[-1], dtype=jnp.float32)[None, :]
        y = tensor.dequantize().astype(jnp.float32) * weights
        return jnp.sum(y) + jnp.sum(dbias.astype(jnp.float32))

    g = jax.jit(jax.grad(loss))
    x, sizes = _x(), jnp.asarray(GROUP_SIZES)
    expected = g(x, sizes)
    mesh = _mesh()
    with jax.set_mesh(mesh):
        got = g(jax.device_put(x, NamedSharding(mesh, P("data", "model"))), sizes)
    assert jax.typeof(got).sharding.spec == P("data", "model")
    assert_same_bytes(got, expected, f"grouped grad {name}")
    # Straight-through: column weight + 1 from the dbias of each row's group.
    want = np.tile(np.arange(128, dtype=np.float32) + 1, (256, 1)).astype(jnp.bfloat16)
    assert_same_bytes(np.asarray(got), want, f"grouped grad {name} values")


def test_grouped_dbias_under_explicit_axes():
    f = jax.jit(lambda x, s: eqq.grouped_dbias(x, s, check=False))
    x, sizes = _x(), jnp.asarray(GROUP_SIZES)
    expected = f(x, sizes)
    mesh = _mesh()
    with jax.set_mesh(mesh):
        xs = jax.device_put(x, NamedSharding(mesh, P(None, "model")))
        got = f(xs, sizes)
        hlo = f.lower(xs, sizes).compile().as_text()
    assert_same_bytes(got, expected, "grouped dbias")
    assert "all-" not in hlo, "column-sharded dbias needs no collective"
