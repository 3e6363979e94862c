"""The grouped GEMM op's own paths on CPU (its reference, the same lowering the CUDA kernel
replaces): K and N that fit the kernel send `grouped_gemm` and `grouped_wgrad` through it,
including the FP8 weight gradient on the per-group transposed (colwise) copies as stored,
the forward pass of weights with only a rowwise copy (transposed for the kernel), and vmap
folding; values against the float64 oracle."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from tests.support.cases import random_input
from tests.support.gemm import assert_product, assert_same_sums, oracle_values

M, K, N = 160, 64, 32  # K and N multiples of 16: the op's path
SIZES = [40, 0, 75, 33]
G = len(SIZES)
ROWCOL = eqq.QuantizeLayout.ROWWISE_COLWISE


def _trace_has_op(fn, *args) -> bool:
    return "eqx_quant_grouped_gemm" in str(jax.make_jaxpr(fn)(*args))


@pytest.mark.parametrize("layout", ["colwise", "rowwise"])
def test_fp8_wgrad_through_the_op(layout):
    q = eqq.CurrentScaleQuantizer(
        q_layout=eqq.QuantizeLayout.COLWISE if layout == "colwise" else eqq.QuantizeLayout.ROWWISE)
    x = jnp.asarray(random_input((M, K), jnp.bfloat16, seed=21))
    dy = jnp.asarray(random_input((M, N), jnp.bfloat16, seed=22))
    sizes = jnp.asarray(SIZES, jnp.int32)
    gx, gd = (eqq.grouped_quantize(v, sizes, q, check=False) for v in (x, dy))
    f = lambda gx, gd: eqq.grouped_wgrad(gx, gd, out_dtype=jnp.float32, check=False)  # noqa: E731
    assert _trace_has_op(f, gx, gd)
    out = f(gx, gd)
    for g, count in enumerate(SIZES):
        part = lambda t: t.colwise if t.colwise is not None else t.rowwise  # noqa: E731
        if count:
            a = oracle_values(part(gx).group_part(g))
            c = oracle_values(part(gd).group_part(g))
            assert_product(out[g], a, c, ((0,), (0,)), f"g={g}")
        else:
            np.testing.assert_array_equal(np.asarray(out[g]), 0.0)
    assert_same_sums(jax.jit(f)(gx, gd), out, "jit")


@pytest.mark.parametrize("recipe", ["fp8_rowwise_weights", "mxfp8"])
def test_forward_through_the_op(recipe):
    if recipe == "mxfp8":
        qx, qw = eqq.BlockScaleQuantizer(), eqq.BlockScaleQuantizer(q_layout=ROWCOL)
    else:  # only the rowwise (K, N) copy: the op gets it transposed
        qx, qw = eqq.CurrentScaleQuantizer(), eqq.CurrentScaleQuantizer(
            q_layout=eqq.QuantizeLayout.ROWWISE)
    x = jnp.asarray(random_input((M, K), jnp.bfloat16, seed=23))
    w = jnp.asarray(random_input((G, K, N), jnp.bfloat16, seed=24, scale=0.2))
    sizes = jnp.asarray(SIZES, jnp.int32)
    gt = eqq.grouped_quantize(x, sizes, qx, check=False)
    wt = jax.vmap(lambda wi: eqq.quantize(wi, qw))(w)
    f = lambda gt, wt: eqq.grouped_gemm(gt, wt, out_dtype=jnp.float32)  # noqa: E731
    assert _trace_has_op(f, gt, wt)
    y = f(gt, wt)
    weights = wt.colwise if wt.colwise is not None else wt.rowwise
    start = 0
    for g, count in enumerate(SIZES):
        if count:
            a = oracle_values(gt.rowwise.group_part(g))
            b = oracle_values(jax.tree.map(lambda v: v[g], weights))
            assert_product(y[start:start + count], a, b, ((1,), (0,)), f"g={g}")
        start += count
    np.testing.assert_array_equal(np.asarray(y[start:]), 0.0)

    # vmap over two routing problems folds them into one call of the op
    x2 = jnp.stack([x, x[::-1]])
    s2 = jnp.stack([sizes, sizes[::-1]])

    def one(xi, si):
        return f(eqq.grouped_quantize(xi, si, qx, check=False), wt)

    loop = np.stack([np.asarray(one(x2[i], s2[i])) for i in range(2)])
    assert_same_sums(jax.vmap(one)(x2, s2), loop, "vmap")
