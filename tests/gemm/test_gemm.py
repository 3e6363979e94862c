"""`gemm` of quantized tensors against a float64 NumPy product of the oracle's dequantized
values, with the float32-accumulation bound as tolerance; transforms; errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.support.bytes import assert_same_bytes, u8
from tests.support.cases import random_input
from tests.support.gemm import (
    assert_product,
    assert_same_sums,
    dot_operand_dtypes,
    lowered_dot_operand_types,
    oracle_values,
    sum_error,
)

L = eqq.QuantizeLayout

RECIPES = {
    "current_e4m3": lambda: eqq.CurrentScaleQuantizer(),
    "delayed_e5m2": lambda: eqq.DelayedScaleQuantizer(
        q_dtype=jnp.float8_e5m2, scale=jnp.array([2.0], jnp.float32)
    ),
    "mxfp8_e4m3": lambda: eqq.BlockScaleQuantizer(),
    "mxfp8_e5m2": lambda: eqq.BlockScaleQuantizer(q_dtype=jnp.float8_e5m2),
    "nvfp4_1d": lambda: eqq.NVFP4Quantizer(),
    "nvfp4_2d": lambda: eqq.NVFP4Quantizer(use_2d=True),
    "nvfp4_rht": lambda: eqq.NVFP4Quantizer(use_rht=True),
}


# (x shape, x flatten_axis, w shape, w flatten_axis, contracting dims, part of x, part of w)
PATTERNS = {
    # y = x @ w: x's trailing dims (rowwise) with w's leading dims (colwise)
    "fprop": ((4, 32, 64), -1, (64, 48), 1, ((2,), (0,)), "rowwise", "colwise"),
    # dgrad = dy @ w.T: both trailing (rowwise)
    "dgrad": ((4, 32, 48), -1, (64, 48), 1, ((2,), (1,)), "rowwise", "rowwise"),
    # wgrad = x.T @ dy over the two token dims: both leading (colwise)
    "wgrad": ((4, 32, 64), 2, (4, 32, 48), 2, ((0, 1), (0, 1)), "colwise", "colwise"),
    # K not a multiple of any block: partial blocks
    "odd_k": ((5, 40), -1, (40, 7), 1, ((1,), (0,)), "rowwise", "colwise"),
}


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("recipe", RECIPES)
def test_gemm_values(recipe, pattern):
    x_shape, x_fa, w_shape, w_fa, dims, x_part, w_part = PATTERNS[pattern]
    if recipe == "nvfp4_rht" and pattern == "odd_k":
        pytest.skip("the RHT needs the colwise axis to be a multiple of 16")
    q = RECIPES[recipe]()
    x = jnp.asarray(random_input(x_shape, jnp.bfloat16, seed=1))
    w = jnp.asarray(random_input(w_shape, jnp.bfloat16, seed=2, scale=0.5))
    xt, wt = eqq.quantize(x, q, x_fa), eqq.quantize(w, q, w_fa)
    for out_dtype in (jnp.float32, jnp.bfloat16):
        y = eqq.gemm(xt, wt, dims, out_dtype=out_dtype)
        assert y.dtype == out_dtype
        a = oracle_values(getattr(xt, x_part))
        b = oracle_values(getattr(wt, w_part))
        assert_product(y, a, b, dims, f"{recipe} {pattern}")
    assert eqq.gemm(xt, wt, dims).dtype == jnp.bfloat16  # default: lhs's dtype


def test_block_gemm_reads_the_copy_with_blocks_along_k():
    # MXFP8 rowwise and colwise copies hold different values: fprop must use w's colwise one.
    q = eqq.BlockScaleQuantizer()
    x = jnp.asarray(random_input((32, 64), jnp.float32, seed=3))
    w = np.array(random_input((64, 64), jnp.float32, seed=4))
    w[:, 0] *= 1000.0  # the rowwise blocks of w (along N) then crush the other columns
    w = jnp.asarray(w)
    xt, wt = eqq.quantize(x, q), eqq.quantize(w, q)
    y = np.asarray(eqq.gemm(xt, wt, out_dtype=jnp.float32), np.float64)
    a = oracle_values(xt.rowwise)
    with_colwise = a @ oracle_values(wt.colwise)
    with_rowwise = a @ oracle_values(wt.rowwise)
    assert np.abs(y - with_colwise).max() < 1e-3 < 0.05 < np.abs(y - with_rowwise).max()
    # A part passed alone is used as given (after the check that it fits the contraction).
    alone = eqq.gemm(xt.rowwise, wt.colwise)
    np.testing.assert_array_equal(np.asarray(alone), np.asarray(eqq.gemm(xt, wt)))


def test_fp8_dot_on_gpu_widened_on_cpu():
    # The FP8 dot reaches a GPU as FP8 (tensor cores); on CPU, whose XLA dot has no FP8 path,
    # the operands are widened to bfloat16 first (the same exact products, 2x faster there).
    q = eqq.CurrentScaleQuantizer()
    xt = eqq.quantize(jnp.asarray(random_input((32, 64), jnp.bfloat16, seed=1)), q)
    wt = eqq.quantize(jnp.asarray(random_input((64, 16), jnp.bfloat16, seed=2)),
                      eqq.CurrentScaleQuantizer(q_dtype=jnp.float8_e5m2))
    f = lambda a, b: eqq.gemm(a, b, out_dtype=jnp.float32)  # noqa: E731
    assert lowered_dot_operand_types(f, (xt, wt), "cuda") == [("f8E4M3FN", "f8E5M2")]
    assert lowered_dot_operand_types(f, (xt, wt), "cpu") == [("bf16", "bf16")]


@pytest.mark.parametrize("recipe", ["mxfp8_e4m3", "mxfp8_e5m2", "nvfp4_1d", "nvfp4_2d"])
@pytest.mark.parametrize("pattern", ["fprop", "wgrad"])
def test_block_formats_multiply_bfloat16_values(recipe, pattern):
    # Payload times block scale is exact in bfloat16 (docs/api.md, "GEMMs"): the forward GEMM
    # is one bfloat16 dot (float32 sums), never a float32 one.
    x_shape, x_fa, w_shape, w_fa, dims, _, _ = PATTERNS[pattern]
    q = RECIPES[recipe]()
    xt = eqq.quantize(jnp.asarray(random_input(x_shape, jnp.bfloat16, seed=1)), q, x_fa)
    wt = eqq.quantize(jnp.asarray(random_input(w_shape, jnp.bfloat16, seed=2)), q, w_fa)
    f = lambda a, b: eqq.gemm(a, b, dims, out_dtype=jnp.float32)  # noqa: E731
    assert dot_operand_dtypes(f, xt, wt) == [("bfloat16", "bfloat16")]


def test_rht_cancels_or_is_undone_in_float32():
    # wgrad of two RHT'd colwise copies: the transform cancels (one bfloat16 dot, the RHT
    # left in); with the RHT on one side only it is undone, and the product is float32.
    x_shape, x_fa, w_shape, w_fa, dims, _, _ = PATTERNS["wgrad"]
    x = jnp.asarray(random_input(x_shape, jnp.bfloat16, seed=1))
    w = jnp.asarray(random_input(w_shape, jnp.bfloat16, seed=2))
    f = lambda a, b: eqq.gemm(a, b, dims, out_dtype=jnp.float32)  # noqa: E731
    rht = eqq.NVFP4Quantizer(use_rht=True)
    other_mask = eqq.NVFP4Quantizer(use_rht=True, rht_sign_mask=0x1234)
    for wq, want in ((rht, "bfloat16"), (eqq.NVFP4Quantizer(), "float32"),
                     (other_mask, "float32")):
        xt, wt = eqq.quantize(x, rht, x_fa), eqq.quantize(w, wq, w_fa)
        assert dot_operand_dtypes(f, xt, wt) == [(want, want)], wq
        a, b = oracle_values(xt.colwise), oracle_values(wt.colwise)
        assert_product(f(xt, wt), a, b, dims, f"rht x {want}")


def test_mxfp8_values_below_float32_normals():
    # A block whose E8M0 scale is 2^-127 holds values down to 2^-136, subnormal in float32 and
    # bfloat16 alike: XLA's CPU dot flushes them to zero (as its float32 dot did), and a GPU
    # keeps them to bfloat16's grid of 2^-133. Either way each such value moves the product
    # by at most its own size; blocks of ordinary size are untouched.
    q = eqq.BlockScaleQuantizer()
    x = np.array(random_input((4, 64), jnp.float32, seed=21))
    x[0] *= 2.0**-126  # block amax ~ 2^-124: E8M0 scale 2^-127 (the smallest)
    w = jnp.asarray(random_input((64, 8), jnp.float32, seed=22))
    xt, wt = eqq.quantize(jnp.asarray(x), q), eqq.quantize(w, q)
    assert u8(xt.rowwise.scale_inv)[0].min() == 0  # 2^-127
    y = np.asarray(eqq.gemm(xt, wt, out_dtype=jnp.float32), np.float64)
    a, b = oracle_values(xt.rowwise), oracle_values(wt.colwise)
    normal = np.abs(a[0]) >= 2.0**-126
    assert normal.any() and (~normal & (a[0] != 0)).any()
    slack = np.abs(np.where(normal, 0.0, a[0])) @ np.abs(b) + 2.0**-134 * np.abs(b).sum(axis=0)
    bound = slack + sum_error(64) * (np.abs(a[0]) @ np.abs(b)) + 2.0**-149
    assert np.all(np.abs(y[0] - a[0] @ b) <= bound)
    assert np.abs(y[0] - a[0] @ b).max() < 0.5 * np.abs(a[0] @ b).max()  # the normal ones count
    assert_product(jnp.asarray(y[1:]), a[1:], b, ((1,), (0,)), "ordinary rows")


def test_tensor_scaling_any_copy_and_any_dims():
    # Per-tensor FP8 copies hold the same values: either copy, and any contracted dims.
    q = eqq.CurrentScaleQuantizer(q_layout=L.ROWWISE_COLWISE)
    x = jnp.asarray(random_input((6, 8, 10), jnp.float32, seed=5))
    w = jnp.asarray(random_input((8, 3), jnp.float32, seed=6))
    xt, wt = eqq.quantize(x, q), eqq.quantize(w, q)
    y = eqq.gemm(xt, wt, ((1,), (0,)), out_dtype=jnp.float32)  # x's middle dim
    assert_product(y, oracle_values(xt.rowwise), oracle_values(wt.rowwise), ((1,), (0,)))
    y_col = eqq.gemm(xt.colwise, wt.rowwise, ((1,), (0,)), out_dtype=jnp.float32)
    assert_same_sums(y_col, y, "colwise copy")
    assert y.shape == (6, 10, 3)


def test_mixed_fp8_dtypes_and_recipes():
    x = jnp.asarray(random_input((16, 32), jnp.float32, seed=7))
    w = jnp.asarray(random_input((32, 8), jnp.float32, seed=8))
    xt = eqq.quantize(x, eqq.CurrentScaleQuantizer())
    wt = eqq.quantize(w, eqq.DelayedScaleQuantizer(q_dtype=jnp.float8_e5m2))
    y = eqq.gemm(xt, wt)
    assert_product(y, oracle_values(xt.rowwise), oracle_values(wt.colwise), ((1,), (0,)))


@pytest.mark.parametrize("recipe", ["current_e4m3", "mxfp8_e4m3", "nvfp4_1d"])
def test_edge_values(recipe):
    q = RECIPES[recipe]()
    x = np.array(random_input((8, 32), jnp.float32, seed=9))
    x[0] = 0.0  # a zero row gives a zero row
    x[1, 3] = np.nan
    x[2, :] = 2.0**-140  # subnormal in float32: quantizes to zero or tiny, never NaN
    w = jnp.asarray(random_input((32, 16), jnp.float32, seed=10))
    xt, wt = eqq.quantize(jnp.asarray(x), q), eqq.quantize(w, q)
    y = np.asarray(eqq.gemm(xt, wt, out_dtype=jnp.float32))
    np.testing.assert_array_equal(y[0], 0.0)
    # FP8 writes NaN as NaN, which fills its row of the product; E2M1 has no NaN and
    # writes it as +6 (docs/block_formats.md), so the NVFP4 row stays finite.
    nan_row = recipe != "nvfp4_1d"
    assert np.isnan(y[1]).all() == nan_row and np.isfinite(np.delete(y, 1, 0)).all()
    keep = [0, 2, 3, 4, 5, 6, 7] if nan_row else list(range(8))
    assert_product(jnp.asarray(y[keep]), oracle_values(xt.rowwise)[keep],
                   oracle_values(wt.colwise), ((1,), (0,)))


def test_empty_operands():
    q = eqq.BlockScaleQuantizer()
    xt = eqq.quantize(jnp.zeros((0, 32), jnp.float32), q)
    wt = eqq.quantize(jnp.ones((32, 5), jnp.float32), q)
    y = eqq.gemm(xt, wt)
    assert y.shape == (0, 5) and y.dtype == jnp.float32


@pytest.mark.parametrize("recipe", ["current_e4m3", "mxfp8_e4m3", "nvfp4_rht"])
def test_jit_and_vmap(recipe):
    q = RECIPES[recipe]()
    x = jnp.asarray(random_input((3, 32, 64), jnp.bfloat16, seed=11))
    w = jnp.asarray(random_input((64, 16), jnp.bfloat16, seed=12))
    wt = eqq.quantize(w, q)

    def one(xi):
        return eqq.gemm(eqq.quantize(xi, q), wt, out_dtype=jnp.float32)

    loop = np.stack([np.asarray(one(x[i])) for i in range(3)])
    assert_same_sums(jax.jit(one)(x[0]), loop[0], "jit")
    # Each example gets its own scales under vmap, as in a loop: the quantized values are
    # the loop's bit for bit, and the batched dot may sum in another order.
    batched = jax.vmap(lambda xi: eqq.quantize(xi, q).rowwise.data)(x)
    for i in range(3):
        assert_same_bytes(batched[i], eqq.quantize(x[i], q).rowwise.data, f"example {i}")
    assert_same_sums(jax.vmap(one)(x), loop, "vmap")


@pytest.mark.parametrize("recipe", ["current_e4m3", "mxfp8_e4m3", "nvfp4_1d"])
def test_grad_is_straight_through(recipe):
    q = RECIPES[recipe]()
    x = jnp.asarray(random_input((16, 64), jnp.float32, seed=13))
    w = jnp.asarray(random_input((64, 24), jnp.float32, seed=14))
    c = jnp.asarray(random_input((16, 24), jnp.float32, seed=15))

    def loss(x, w):
        y = eqq.gemm(eqq.quantize(x, q), eqq.quantize(w, q), out_dtype=jnp.float32)
        return jnp.sum(y * c)

    dx, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    xt, wt = eqq.quantize(x, q), eqq.quantize(w, q)
    a, b = oracle_values(xt.rowwise), oracle_values(wt.colwise)
    cn = np.asarray(c, np.float64)
    # d/dx sum(c * (x^ @ w^)) = c @ w^.T, and d/dw = x^.T @ c (straight through quantize).
    assert_product(dx, cn, b, ((1,), (1,)), "dx")
    assert_product(dw, a, cn, ((0,), (0,)), "dw")


def _mesh():
    return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("recipe", ["delayed_e5m2", "mxfp8_e4m3", "nvfp4_2d"])
def test_sharded_jit_rows(recipe):
    q = RECIPES[recipe]()
    mesh = _mesh()
    x = jnp.asarray(random_input((64, 64), jnp.bfloat16, seed=16))
    w = jnp.asarray(random_input((64, 32), jnp.bfloat16, seed=17))
    xt, wt = eqq.quantize(x, q), eqq.quantize(w, q)
    f = jax.jit(lambda xt, wt: eqq.gemm(xt, wt, out_dtype=jnp.float32))
    want = np.asarray(f(xt, wt))
    rows = NamedSharding(mesh, P("x"))
    xt_sharded = jax.tree.map(
        lambda a: jax.device_put(a, rows if a.shape[0] == 64 else NamedSharding(mesh, P())), xt
    )
    got = f(xt_sharded, wt)
    # Token rows are independent: no collective, and the same sums as unsharded.
    hlo = f.lower(xt_sharded, wt).compile().as_text()
    assert "all-" not in hlo and "collective-permute" not in hlo
    assert got.sharding.spec[0] == "x"
    assert_same_sums(got, want, "rows sharded")


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_sharded_jit_contracting_dim():
    # Sharding K: XLA reduces the partial products across devices; sums within tolerance.
    q = eqq.BlockScaleQuantizer()
    mesh = _mesh()
    x = jnp.asarray(random_input((16, 256), jnp.float32, seed=18))
    w = jnp.asarray(random_input((256, 8), jnp.float32, seed=19))
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "x")))
    ws = jax.device_put(w, NamedSharding(mesh, P("x", None)))
    f = jax.jit(lambda x, w: eqq.gemm(eqq.quantize(x, q), eqq.quantize(w, q)))
    got = f(xs, ws)
    xt, wt = eqq.quantize(x, q), eqq.quantize(w, q)
    assert_product(got, oracle_values(xt.rowwise), oracle_values(wt.colwise), ((1,), (0,)))


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_shard_map_local_gemm():
    q = eqq.BlockScaleQuantizer()
    mesh = _mesh()
    x = jnp.asarray(random_input((64, 64), jnp.float32, seed=20))
    w = jnp.asarray(random_input((64, 16), jnp.float32, seed=21))
    wt = eqq.quantize(w, q)

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))
    def local(x, w):
        return eqq.gemm(eqq.quantize(x, q), eqq.quantize(w, q), out_dtype=jnp.float32)

    got = local(x, w)
    xt = eqq.quantize(x, q)  # MXFP8 blocks run along K, so local rows quantize as global ones
    assert_product(got, oracle_values(xt.rowwise), oracle_values(wt.colwise), ((1,), (0,)))


# ---------------------------------------------------------------------------------------------
# errors


def _operands(q=None, x_shape=(8, 32), w_shape=(32, 4), **kw):
    q = q or eqq.BlockScaleQuantizer()
    x = eqq.quantize(jnp.ones(x_shape, jnp.float32), q)
    w = eqq.quantize(jnp.ones(w_shape, jnp.float32), kw.get("wq", q))
    return x, w


def test_error_unquantized_operand():
    x, w = _operands()
    with pytest.raises(TypeError, match="gemm: rhs must be a ScaledTensor .* got ArrayImpl"):
        eqq.gemm(x, jnp.ones((32, 4)))


def test_error_mixed_families():
    x, w = _operands(wq=eqq.CurrentScaleQuantizer())
    with pytest.raises(ValueError, match="lhs is MXFP8_1D_SCALING and rhs is CURRENT_TENSOR"):
        eqq.gemm(x, w)


def test_error_block_dims_not_a_side_of_the_view():
    q = eqq.BlockScaleQuantizer()
    x = eqq.quantize(jnp.ones((4, 8, 32), jnp.float32), q)
    w = eqq.quantize(jnp.ones((8, 5), jnp.float32), q)
    with pytest.raises(ValueError, match=r"contracts one side .* got dims \(1,\)"):
        eqq.gemm(x, w, ((1,), (0,)))


def test_error_block_missing_copy():
    q = eqq.BlockScaleQuantizer(q_layout=L.ROWWISE)
    x, w = _operands(q)
    with pytest.raises(ValueError, match="reads the colwise copy .* rhs has no colwise copy"):
        eqq.gemm(x, w)
    with pytest.raises(ValueError, match="reads the colwise copy"):
        eqq.gemm(x.rowwise, w.rowwise)


def test_error_contracted_sizes_differ():
    x, w = _operands(x_shape=(8, 32), w_shape=(64, 4))
    with pytest.raises(ValueError, match=r"contracted sizes differ: lhs dims \(1,\)"):
        eqq.gemm(x, w)


@pytest.mark.parametrize(
    "dims, err, match",
    [
        (((2,), (0,)), ValueError, r"lhs contracting dim 2 is not an int in \[-2, 1\]"),
        (((), ()), ValueError, "must name at least one dim"),
        (((1, 1), (0, 0)), ValueError, "each at most once"),
        ((1, 0), TypeError, "pair of sequences of ints"),
        (((-1,),), TypeError, r"pair \(lhs_dims, rhs_dims\)"),
    ],
)
def test_error_bad_contracting_dims(dims, err, match):
    x, w = _operands(eqq.CurrentScaleQuantizer())
    with pytest.raises(err, match=match):
        eqq.gemm(x, w, dims)


def test_error_unsorted_dims_and_out_dtype_and_batch():
    q = eqq.CurrentScaleQuantizer()
    x = eqq.quantize(jnp.ones((4, 8, 3), jnp.float32), q)
    w = eqq.quantize(jnp.ones((8, 4, 2), jnp.float32), q)
    with pytest.raises(ValueError, match="in increasing order"):
        eqq.gemm(x, w, ((1, 0), (0, 1)))
    xs, ws = _operands(q)
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        eqq.gemm(xs, ws, out_dtype=jnp.int8)
    batch = jax.vmap(lambda v: eqq.quantize(v, q))(jnp.ones((3, 8, 32), jnp.float32))
    with pytest.raises(ValueError, match="1 leading vmapped dims .* inside jax.vmap"):
        eqq.gemm(batch, ws)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("recipe", ["current_e4m3", "mxfp8_e4m3"])
def test_explicit_axes(recipe):
    # Under Explicit mesh axes the product carries the token sharding in its type.
    q = RECIPES[recipe]()
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    x = jnp.asarray(random_input((256, 128), jnp.bfloat16, seed=22))
    w = jnp.asarray(random_input((128, 32), jnp.bfloat16, seed=23))
    f = jax.jit(lambda x, w: eqq.gemm(eqq.quantize(x, q), eqq.quantize(w, q)))
    want = f(x, w)
    with jax.set_mesh(mesh):
        got = f(jax.device_put(x, NamedSharding(mesh, P("data", None))), w)
    assert jax.typeof(got).sharding.spec[0] == "data"
    assert_same_sums(got, want, "explicit axes")
