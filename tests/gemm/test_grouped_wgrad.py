"""`grouped_wgrad` (the expert GEMM's weight gradient) against a float64 NumPy product of the
oracle's values of each group's parts; transforms; errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.support.cases import random_input
from tests.support.gemm import (
    SIZES,
    G,
    K,
    M,
    N,
    assert_product,
    assert_same_sums,
    dot_operand_dtypes,
    lowered_dot_operand_types,
    oracle_values,
)

QUANTIZERS = {
    "current": eqq.CurrentScaleQuantizer,
    "current_colwise_only": lambda: eqq.CurrentScaleQuantizer(q_layout=eqq.QuantizeLayout.COLWISE),
    "delayed_e5m2": lambda: eqq.GroupedDelayedScaleQuantizer(num_groups=G, q_dtype=jnp.float8_e5m2),
    "mxfp8": eqq.BlockScaleQuantizer,
    "nvfp4": eqq.NVFP4Quantizer,
}


def _operands(name, dtype=jnp.bfloat16):
    q = QUANTIZERS[name]()
    x = jnp.asarray(random_input((M, K), dtype, seed=1))
    dy = jnp.asarray(random_input((M, N), dtype, seed=2, scale=0.01))
    sizes = jnp.asarray(SIZES, jnp.int32)
    gx = eqq.grouped_quantize(x, sizes, q, check=False)
    gg = eqq.grouped_quantize(dy, sizes, q, check=False)
    return x, dy, sizes, gx, gg, q


def _part(t):
    """The copy the weight gradient reads: colwise (blocks down the rows), or either copy of
    per-tensor FP8 (their values are the same)."""
    return t.colwise if t.colwise is not None else t.rowwise


def _check(out, gx, gg, what):
    for g, count in enumerate(SIZES):
        if count:
            a = oracle_values(_part(gx).group_part(g))
            c = oracle_values(_part(gg).group_part(g))
            assert_product(out[g], a, c, ((0,), (0,)), f"{what} g={g}")
        else:
            np.testing.assert_array_equal(np.asarray(out[g].astype(jnp.float32)), 0.0)


@pytest.mark.parametrize("name", QUANTIZERS)
def test_grouped_wgrad_values(name):
    _, _, _, gx, gg, _ = _operands(name)
    for out_dtype in (jnp.float32, jnp.bfloat16):
        out = eqq.grouped_wgrad(gx, gg, out_dtype=out_dtype)
        assert out.shape == (G, K, N) and out.dtype == out_dtype
        _check(out, gx, gg, name)


@pytest.mark.parametrize("name", ["current", "mxfp8", "nvfp4"])
def test_grouped_wgrad_jit_vmap_grad(name):
    x, dy, sizes, gx, gg, q = _operands(name, jnp.float32)
    f = lambda gx, gg: eqq.grouped_wgrad(gx, gg, out_dtype=jnp.float32)  # noqa: E731
    assert_same_sums(jax.jit(f)(gx, gg), f(gx, gg), "jit")

    def one(x, dy, s):
        return f(eqq.grouped_quantize(x, s, q, check=False),
                 eqq.grouped_quantize(dy, s, q, check=False))

    sizes2 = jnp.stack([sizes, sizes[::-1]])
    x2, dy2 = jnp.stack([x, x[::-1]]), jnp.stack([dy, -dy])
    loop = jnp.stack([one(x2[i], dy2[i], sizes2[i]) for i in range(2)])
    assert_same_sums(jax.vmap(one)(x2, dy2, sizes2), loop, "vmap")

    # grad, straight through: d/dx sum(c * out) = dy_g @ c[g].T on group g's rows
    c = jnp.asarray(random_input((G, K, N), jnp.float32, seed=3))
    dx, ddy = jax.grad(lambda x, dy: jnp.sum(one(x, dy, sizes) * c), argnums=(0, 1))(x, dy)
    cn, start = np.asarray(c, np.float64), 0
    for g, count in enumerate(SIZES):
        rows = slice(start, start + count)
        if count:
            a = oracle_values(_part(gx).group_part(g))
            d = oracle_values(_part(gg).group_part(g))
            assert_product(dx[rows], d, cn[g], ((1,), (1,)), f"dx g={g}")
            assert_product(ddy[rows], a, cn[g], ((1,), (0,)), f"ddy g={g}")
        start += count
    np.testing.assert_array_equal(np.asarray(dx[start:]), 0.0)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_grouped_wgrad_shard_map_then_psum():
    # Data parallel: each device's experts' gradients from its tokens, summed over devices.
    q = eqq.BlockScaleQuantizer()
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.asarray(random_input((8, 64, K), jnp.float32, seed=4))
    dy = jnp.asarray(random_input((8, 64, N), jnp.float32, seed=5))
    sizes = jnp.asarray(np.random.default_rng(6).multinomial(64, [0.25] * 4, size=8), jnp.int32)

    def one(x, dy, s):
        gx = eqq.grouped_quantize(x, s, q)
        return eqq.grouped_wgrad(gx, eqq.grouped_quantize(dy, s, q), out_dtype=jnp.float32)

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("x"), P("x"), P("x")), out_specs=P())
    def total(x, dy, s):
        return jax.lax.psum(one(x[0], dy[0], s[0]), "x")

    want = sum(one(x[i], dy[i], sizes[i]) for i in range(8))
    np.testing.assert_allclose(np.asarray(total(x, dy, sizes)), np.asarray(want), rtol=0,
                               atol=1e-5 * float(jnp.abs(want).max()))


def test_grouped_wgrad_errors():
    _, _, sizes, gx, gg, _ = _operands("mxfp8")
    with pytest.raises(TypeError, match="dy must be a GroupedScaledTensor"):
        eqq.grouped_wgrad(gx, jnp.ones((M, N)))
    rowwise = eqq.BlockScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    g_row = eqq.grouped_quantize(jnp.ones((M, N)), sizes, rowwise, check=False)
    with pytest.raises(ValueError, match="dy is MXFP8_1D_SCALING without a colwise copy"):
        eqq.grouped_wgrad(gx, g_row)
    short = eqq.grouped_quantize(jnp.ones((M - 32, N)), sizes, eqq.BlockScaleQuantizer(),
                                 check=False)
    with pytest.raises(ValueError, match="same tokens and groups"):
        eqq.grouped_wgrad(gx, short)
    fp8 = eqq.grouped_quantize(jnp.ones((M, N)), sizes, eqq.CurrentScaleQuantizer(), check=False)
    with pytest.raises(ValueError, match="x is MXFP8_1D_SCALING and dy is CURRENT"):
        eqq.grouped_wgrad(gx, fp8)
    other = eqq.grouped_quantize(jnp.ones((M, N)), sizes[::-1], eqq.BlockScaleQuantizer(),
                                 check=False)
    with pytest.raises(Exception, match="grouped by the same group_sizes"):
        jax.block_until_ready(eqq.grouped_wgrad(gx, other))
    eqq.grouped_wgrad(gx, other, check=False)  # the check can be turned off


@pytest.mark.parametrize("name", ["mxfp8", "nvfp4"])
def test_block_formats_multiply_bfloat16_values(name):
    # The exact bfloat16 values of both operands, float32 sums (as gemm): no float32 product.
    _, _, _, gx, gg, _ = _operands(name)
    f = lambda a, b: eqq.grouped_wgrad(a, b, out_dtype=jnp.float32, check=False)  # noqa: E731
    assert set(dot_operand_dtypes(f, gx, gg)) == {("bfloat16", "bfloat16")}


def test_fp8_dot_on_gpu_widened_on_cpu():
    # FP8 operands reach a GPU's ragged dot as FP8; on CPU they are widened to bfloat16 first
    # (the same exact products; XLA's CPU ragged dot of FP8 runs 10x slower).
    _, _, _, gx, gg, _ = _operands("current")
    f = lambda a, b: eqq.grouped_wgrad(a, b, check=False)  # noqa: E731
    assert lowered_dot_operand_types(f, (gx, gg), "cuda") == [("f8E4M3FN", "f8E4M3FN")]
    assert lowered_dot_operand_types(f, (gx, gg), "cpu") == [("bf16", "bf16")]
