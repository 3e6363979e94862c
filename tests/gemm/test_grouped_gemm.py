"""`grouped_gemm` (MoE expert GEMM) against a float64 NumPy product, group by group, of the
oracle's values of each group's part and each expert's weight; transforms; errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
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

RECIPES = {
    "current": (eqq.CurrentScaleQuantizer, eqq.CurrentScaleQuantizer),
    "delayed_e5m2": (
        lambda: eqq.GroupedDelayedScaleQuantizer(num_groups=G, q_dtype=jnp.float8_e5m2),
        lambda: eqq.DelayedScaleQuantizer(scale=jnp.array([4.0], jnp.float32)),
    ),
    "mxfp8": (eqq.BlockScaleQuantizer, eqq.BlockScaleQuantizer),
    "nvfp4_2d_weights": (eqq.NVFP4Quantizer, lambda: eqq.NVFP4Quantizer(use_2d=True)),
}


def _operands(recipe, w_shape=(G, K, N), dtype=jnp.bfloat16, x_seed=1):
    qx, qw = (make() for make in RECIPES[recipe])
    x = jnp.asarray(random_input((M, K), dtype, seed=x_seed))
    w = jnp.asarray(random_input(w_shape, dtype, seed=2, scale=0.2))
    sizes = jnp.asarray(SIZES, jnp.int32)
    gt = eqq.grouped_quantize(x, sizes, qx, check=False)
    wt = jax.vmap(lambda wi: eqq.quantize(wi, qw))(w)
    return x, w, sizes, gt, wt


def _expert(part, g):
    return jax.tree.map(lambda a: a[g], part)


def _check_groups(y, gt, weight_part, contract, what):
    """Each group's rows against its expert's weight; rows of no group are exactly 0."""
    start = 0
    for g, count in enumerate(SIZES):
        if count:
            a = oracle_values(gt.rowwise.group_part(g))
            b = oracle_values(_expert(weight_part, g))
            rows = y[start : start + count]  # in y's dtype: the bound includes its rounding
            assert_product(rows, a, b, ((1,), (contract,)), f"{what} g={g}")
        start += count
    np.testing.assert_array_equal(np.asarray(y[start:].astype(jnp.float32)), 0.0)


@pytest.mark.parametrize("recipe", RECIPES)
def test_grouped_gemm_values(recipe):
    _, _, _, gt, wt = _operands(recipe)
    for out_dtype in (jnp.float32, jnp.bfloat16):
        y = eqq.grouped_gemm(gt, wt, out_dtype=out_dtype)
        assert y.shape == (M, N) and y.dtype == out_dtype
        # (K, N) weights contract K, their leading dim: the colwise copy
        _check_groups(y, gt, wt.colwise, 0, recipe)
    assert eqq.grouped_gemm(gt, wt).dtype == jnp.bfloat16


@pytest.mark.parametrize("recipe", ["current", "mxfp8"])
def test_grouped_gemm_transposed_weights(recipe):
    # (N, K) weights contract their trailing dim: the rowwise copy.
    _, _, _, gt, wt = _operands(recipe, w_shape=(G, N, K))
    y = eqq.grouped_gemm(gt, wt, rhs_contracting=1, out_dtype=jnp.float32)
    _check_groups(y, gt, wt.rowwise, 1, recipe)


@pytest.mark.parametrize("recipe", ["current", "mxfp8", "nvfp4_2d_weights"])
def test_grouped_gemm_jit_vmap_grad(recipe):
    x, w, sizes, gt, wt = _operands(recipe)
    qx, qw = (make() for make in RECIPES[recipe])
    f = lambda gt, wt: eqq.grouped_gemm(gt, wt, out_dtype=jnp.float32)  # noqa: E731
    assert_same_sums(jax.jit(f)(gt, wt), f(gt, wt), "jit")

    # vmap over two routing problems equals two calls
    x2 = jnp.stack([x, x[::-1]])
    sizes2 = jnp.stack([sizes, sizes[::-1]])

    def one(xi, si):
        return f(eqq.grouped_quantize(xi, si, qx, check=False), wt)

    loop = np.stack([np.asarray(one(x2[i], sizes2[i])) for i in range(2)])
    # vmap folds the two problems into one ragged product: the same quantized values, the
    # float32 sums possibly in another order.
    assert_same_sums(jax.vmap(one)(x2, sizes2), loop, "vmap")

    # grad: straight through both quantizations
    c = jnp.asarray(random_input((M, N), jnp.float32, seed=3))

    def loss(x, w):
        gx = eqq.grouped_quantize(x, sizes, qx, check=False)
        return jnp.sum(f(gx, jax.vmap(lambda wi: eqq.quantize(wi, qw))(w)) * c)

    dx, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(x.astype(jnp.float32), w.astype(jnp.float32))
    gt32 = eqq.grouped_quantize(x.astype(jnp.float32), sizes, qx, check=False)
    wt32 = jax.vmap(lambda wi: eqq.quantize(wi, qw))(w.astype(jnp.float32))
    cn, start = np.asarray(c, np.float64), 0
    for g, count in enumerate(SIZES):
        rows = slice(start, start + count)
        a = oracle_values(gt32.rowwise.group_part(g))
        b = oracle_values(_expert(wt32.colwise, g))
        if count:
            assert_product(dx[rows], cn[rows], b, ((1,), (1,)), f"dx g={g}")
        assert_product(dw[g], a, cn[rows], ((0,), (0,)), f"dw g={g}")  # 0 for the empty group
        start += count
    np.testing.assert_array_equal(np.asarray(dx[start:]), 0.0)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_grouped_gemm_sharded_jit():
    # Tokens sharded, experts replicated: the same values as unsharded.
    _, _, _, gt, wt = _operands("mxfp8")
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    f = jax.jit(lambda gt, wt: eqq.grouped_gemm(gt, wt, out_dtype=jnp.float32))
    want = np.asarray(f(gt, wt))
    rows = NamedSharding(mesh, P("x"))
    data = jax.device_put(gt.rowwise.data, rows)
    gt_sharded = eqq.GroupedScaledTensor(
        rowwise=eqq.GroupedScaledTensor1x(
            data, gt.rowwise.scale_inv, gt.rowwise.amax, gt.rowwise.group_sizes,
            gt.rowwise.scaling_mode, gt.rowwise.original_shape, gt.rowwise.flatten_axis,
            gt.rowwise.dq_dtype, gt.rowwise.data_layout,
        ),
        colwise=None,
    )
    assert_same_sums(f(gt_sharded, wt), want, "sharded")


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_grouped_gemm_shard_map_per_device_problems():
    # Each device routes its own tokens (data parallel MoE): one grouped GEMM per device.
    qx, qw = (make() for make in RECIPES["mxfp8"])
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.asarray(random_input((8, 64, K), jnp.float32, seed=4))
    rng = np.random.default_rng(5)
    sizes = jnp.asarray(rng.multinomial(64, [0.25] * 4, size=8), jnp.int32)
    w = jnp.asarray(random_input((G, K, N), jnp.float32, seed=6))
    wt = jax.vmap(lambda wi: eqq.quantize(wi, qw))(w)

    def one(x, s):
        return eqq.grouped_gemm(eqq.grouped_quantize(x, s, qx), wt, out_dtype=jnp.float32)

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"))
    def local(x, s):
        return one(x[0], s[0])[None]

    want = np.stack([np.asarray(one(x[i], sizes[i])) for i in range(8)])
    assert_same_sums(local(x, sizes), want, "shard_map")


# ---------------------------------------------------------------------------------------------
# errors


def test_grouped_gemm_errors():
    _, _, sizes, gt, wt = _operands("mxfp8")
    with pytest.raises(TypeError, match="lhs must be a GroupedScaledTensor"):
        eqq.grouped_gemm(wt, wt)
    with pytest.raises(TypeError, match="rhs must be a ScaledTensor holding one quantized"):
        eqq.grouped_gemm(gt, jnp.ones((G, K, N)))
    one_weight = eqq.quantize(jnp.ones((K, N)), eqq.BlockScaleQuantizer())
    stack_of_4 = r"must stack 4 quantized 2-D weights .* got leading dims \(\)"
    with pytest.raises(ValueError, match=stack_of_4):
        eqq.grouped_gemm(gt, one_weight)
    three = jax.tree.map(lambda a: a[:3], wt)
    with pytest.raises(ValueError, match=r"got leading dims \(3,\)"):
        eqq.grouped_gemm(gt, three)
    with pytest.raises(ValueError, match="rhs_contracting is the dim"):
        eqq.grouped_gemm(gt, wt, rhs_contracting=2)
    k_mismatch = r"lhs has K = 64 but each expert's weight \(64, 24\) has 24"
    with pytest.raises(ValueError, match=k_mismatch):
        eqq.grouped_gemm(gt, wt, rhs_contracting=1)
    col_only = eqq.grouped_quantize(
        jnp.ones((M, K)), sizes, eqq.BlockScaleQuantizer(q_layout=eqq.QuantizeLayout.COLWISE),
        check=False,
    )
    with pytest.raises(ValueError, match="lhs has no rowwise copy"):
        eqq.grouped_gemm(col_only, wt)
    fp8_w = jax.vmap(lambda wi: eqq.quantize(wi, eqq.CurrentScaleQuantizer()))(jnp.ones((G, K, N)))
    with pytest.raises(ValueError, match="lhs is MXFP8_1D_SCALING and rhs is CURRENT"):
        eqq.grouped_gemm(gt, fp8_w)
    row_w = jax.vmap(lambda wi: eqq.quantize(wi, eqq.BlockScaleQuantizer(
        q_layout=eqq.QuantizeLayout.ROWWISE)))(jnp.ones((G, K, N)))
    with pytest.raises(ValueError, match="reads the colwise copy"):
        eqq.grouped_gemm(gt, row_w)
    nd = eqq.grouped_quantize(jnp.ones((8, 20, K)), jnp.asarray([4, 4, 0, 0], jnp.int32),
                              eqq.BlockScaleQuantizer())
    with pytest.raises(ValueError, match=r"must be a \(tokens, K\) matrix"):
        eqq.grouped_gemm(nd, wt)
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        eqq.grouped_gemm(gt, wt, out_dtype=jnp.int32)


def test_grouped_gemm_vmap_of_grad_and_nested_vmap():
    # The folded ragged products (eqx_quant/_ragged.py) under vmap of the backward pass and
    # under two vmaps: the same as a loop, up to the order of the float32 sums.
    qx, qw = (make() for make in RECIPES["mxfp8"])
    x = jnp.asarray(random_input((2, 3, M, K), jnp.float32, seed=7))
    rng = np.random.default_rng(8)
    sizes = jnp.asarray(rng.multinomial(M - 10, [0.25] * 4, size=(2, 3)), jnp.int32)
    w = jnp.asarray(random_input((G, K, N), jnp.float32, seed=9))

    def loss(x, s, w):
        gx = eqq.grouped_quantize(x, s, qx, check=False)
        wt = jax.vmap(lambda wi: eqq.quantize(wi, qw))(w)
        y = eqq.grouped_gemm(gx, wt, out_dtype=jnp.float32)
        return jnp.sum(y * jnp.arange(N, dtype=jnp.float32)[None, :]), y

    grads = jax.grad(lambda *a: loss(*a)[0], argnums=(0, 2))
    got_dx, got_dw = jax.vmap(jax.vmap(grads, (0, 0, None)), (0, 0, None))(x, sizes, w)
    got_y = jax.vmap(jax.vmap(lambda *a: loss(*a)[1], (0, 0, None)), (0, 0, None))(x, sizes, w)
    for i in range(2):
        for j in range(3):
            dx, dw = grads(x[i, j], sizes[i, j], w)
            y = loss(x[i, j], sizes[i, j], w)[1]
            for got, want in ((got_dx[i, j], dx), (got_dw[i, j], dw), (got_y[i, j], y)):
                assert_same_sums(got, want, f"problem {i}, {j}")


@pytest.mark.parametrize("recipe", ["mxfp8", "nvfp4_2d_weights"])
def test_block_formats_multiply_bfloat16_values(recipe):
    # The exact bfloat16 values of both operands, float32 sums (as gemm): no float32 product.
    _, _, _, gt, wt = _operands(recipe)
    f = lambda a, b: eqq.grouped_gemm(a, b, out_dtype=jnp.float32)  # noqa: E731
    assert set(dot_operand_dtypes(f, gt, wt)) == {("bfloat16", "bfloat16")}


def test_fp8_dot_on_gpu_widened_on_cpu():
    # FP8 operands reach a GPU's ragged dot as FP8; on CPU they are widened to bfloat16 first
    # (the same exact products; XLA's CPU ragged dot of FP8 runs 10x slower).
    _, _, _, gt, wt = _operands("current")
    f = lambda a, b: eqq.grouped_gemm(a, b, out_dtype=jnp.float32)  # noqa: E731
    assert lowered_dot_operand_types(f, (gt, wt), "cuda") == [("f8E4M3FN", "f8E4M3FN")]
    assert lowered_dot_operand_types(f, (gt, wt), "cpu") == [("bf16", "bf16")]
