"""Bit-exact FP8 tensor scaling: reference and CPU kernel against the NumPy oracle."""

import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import eqx_quant as eqq
from tests.oracle import fp8 as oracle
from tests.support.bytes import assert_same_bytes, f32_bits_equal
from tests.support.cases import (
    LAYOUTS,
    ODD_SHAPES,
    TE_SHAPES,
    every_then_cycled,
    random_input,
    rounding_tie_rows,
)
from tests.support.dtypes import NP_Q_DTYPES, Q_DTYPES, X_DTYPES
from tests.support.kernels import impls


def _check_against_oracle(t, expected, layout, what):
    if layout.has_rowwise:
        assert_same_bytes(t.rowwise.data, expected["row"], f"{what} row")
        f32_bits_equal(t.rowwise.scale_inv, expected["scale_inv"], f"{what} scale_inv")
        f32_bits_equal(t.rowwise.amax, expected["amax"], f"{what} amax")
    else:
        assert t.rowwise is None
    if layout.has_colwise:
        assert_same_bytes(t.colwise.data, expected["col"], f"{what} col")
        f32_bits_equal(t.colwise.scale_inv, expected["scale_inv"], f"{what} col scale_inv")
        f32_bits_equal(t.colwise.amax, expected["amax"], f"{what} col amax")
    else:
        assert t.colwise is None


# Every input and output dtype on TE's first three shapes; on the others they take turns.
CURRENT_CASES = every_then_cycled(
    TE_SHAPES[:3], TE_SHAPES[3:] + ODD_SHAPES, [(xd, q) for xd in X_DTYPES for q in Q_DTYPES]
)


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("shape,fa,xd,q", CURRENT_CASES, ids=str)
def test_current_scaling_bit_exact(shape, fa, xd, q, impl):
    _current_scaling_case(shape, fa, xd, q, eqq.QuantizeLayout.ROWWISE_COLWISE, impl)


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: l.name)
@pytest.mark.parametrize("shape,fa", [((32, 256, 128), -2), ((7, 13), -1)], ids=str)
def test_every_layout_bit_exact(shape, fa, layout, impl):
    _current_scaling_case(shape, fa, "bf16", "e4m3", layout, impl)


def _current_scaling_case(shape, fa, xd, q, layout, impl):
    x = random_input(shape, X_DTYPES[xd], seed=len(shape) + shape[-1])
    quantizer = eqq.CurrentScaleQuantizer(Q_DTYPES[q], layout)
    t = jax.jit(lambda x: eqq.quantize(x, quantizer, fa, impl=impl))(jnp.asarray(x))
    expected = oracle.current_scaling(x, NP_Q_DTYPES[q], fa, layout.has_rowwise, layout.has_colwise)
    _check_against_oracle(t, expected, layout, f"{shape} {xd} {q}")
    assert t.scaling_mode is eqq.ScalingMode.CURRENT_TENSOR_SCALING
    if layout.has_colwise:
        assert t.colwise.data_layout == "T"
        assert t.colwise.data.shape == shape[fa % len(shape) :] + shape[: fa % len(shape)]


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("q", Q_DTYPES)
@pytest.mark.parametrize("xd", X_DTYPES)
@pytest.mark.parametrize("scale", [1.0, 0.37, 300.0, 1e-6, 2.0**20])
def test_delayed_scale_given_bit_exact(scale, xd, q, impl):
    """A given scale pushes values past the fp8 max and into fp8 subnormals."""
    x = random_input((33, 48), X_DTYPES[xd], seed=7)
    s = np.array([scale], np.float32)
    quantizer = eqq.DelayedScaleQuantizer(Q_DTYPES[q], amax_history_len=4, scale=jnp.asarray(s))
    t = eqq.quantize(jnp.asarray(x), quantizer, impl=impl)
    expected = oracle.quantize_tensor(x, s, NP_Q_DTYPES[q], -1, True, True)
    _check_against_oracle(t, expected, eqq.QuantizeLayout.ROWWISE_COLWISE, f"scale={scale}")


def _special_values(xd):
    finfo = jnp.finfo(X_DTYPES[xd])
    tiny_sub = float(finfo.smallest_subnormal)
    vals = [0.0, -0.0, tiny_sub, -tiny_sub, 3 * tiny_sub, float(finfo.tiny), float(finfo.max),
            -float(finfo.max), np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 448.0, 464.0,
            57344.0, 61440.0, 1e-3, 2.0**-10, 1.0625, 1.1875]
    return np.asarray(jnp.asarray(np.array(vals, np.float32), X_DTYPES[xd]))


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("q", Q_DTYPES)
@pytest.mark.parametrize("xd", X_DTYPES)
@pytest.mark.parametrize("scale", [1.0, 1.0 / 64, 4096.0, np.inf, 1e38])
def test_special_values(scale, xd, q, impl):
    """zeros, subnormals, +-max, values above the fp8 max, NaN, +-Inf, and an infinite scale."""
    specials = _special_values(xd)
    x = np.concatenate([specials, random_input((42,), X_DTYPES[xd], seed=3)]).reshape(4, 16)
    s = np.array([scale], np.float32)
    quantizer = eqq.DelayedScaleQuantizer(Q_DTYPES[q], amax_history_len=1, scale=jnp.asarray(s))
    t = eqq.quantize(jnp.asarray(x), quantizer, impl=impl)
    expected = oracle.quantize_tensor(x, s, NP_Q_DTYPES[q], -1, True, True)
    _check_against_oracle(t, expected, eqq.QuantizeLayout.ROWWISE_COLWISE, f"scale={scale}")


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize(
    "values",
    [np.zeros(64), np.full(64, np.nan), np.array([np.inf] + [1.0] * 63), np.full(64, 1e-45),
     np.array([np.nan, 2.0] * 32), np.full(64, -0.0)],
    ids=["zeros", "all_nan", "inf", "tiny_amax", "nan_ignored", "neg_zero"],
)
def test_current_scaling_amax_edge_cases(values, impl):
    """amax = 0 -> scale 1; NaN is ignored by amax; Inf amax -> scale 1; tiny amax -> inf scale."""
    x = values.astype(np.float32).reshape(8, 8)
    quantizer = eqq.CurrentScaleQuantizer()
    t = eqq.quantize(jnp.asarray(x), quantizer, impl=impl)
    expected = oracle.current_scaling(x, ml_dtypes.float8_e4m3fn, -1, True, True)
    _check_against_oracle(t, expected, eqq.QuantizeLayout.ROWWISE_COLWISE, "edge")


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("n_batch", [0, 1])
def test_scale_from_amax_in_the_op(impl, n_batch):
    """The op's current scaling (scale_from_amax): scale = fp8_max / amax(x) per example, the
    `scale` operand only where the amax is 0, NaN or Inf (here 4.0, so it shows)."""
    from eqx_quant._ops.fp8_quantize import Fp8QuantizeParams, fp8_quantize_op

    examples = [
        np.linspace(-3.0, 5.0, 48, dtype=np.float32).reshape(6, 8),
        np.zeros((6, 8), np.float32),
        np.full((6, 8), np.nan, np.float32),
        np.where(np.arange(48) == 7, np.inf, 1.0).astype(np.float32).reshape(6, 8),
    ]
    params = Fp8QuantizeParams(
        q_dtype="float8_e4m3fn", flatten_axis=1, rowwise=True, colwise=True,
        with_dbias=False, impl=impl, scale_from_amax=True, n_batch=n_batch,
    )
    fallback = np.array([4.0], np.float32)
    xs = [np.stack(examples)] if n_batch else examples
    for x in xs:
        scale = np.broadcast_to(fallback, x.shape[:n_batch] + (1,))
        row, col, scale_inv, amax, _ = fp8_quantize_op.bind(
            jnp.asarray(x), jnp.asarray(scale), params=params
        )
        for b, xe in enumerate(x.reshape((-1, 6, 8))):
            s = oracle.compute_scale(oracle.amax(xe), ml_dtypes.float8_e4m3fn, 0.0, fallback)
            want = oracle.quantize_tensor(xe, s, ml_dtypes.float8_e4m3fn, 1, True, True)
            got = {"row": row, "col": col}
            for key in got:
                got_b = np.asarray(got[key]).reshape((-1,) + want[key].shape)[b]
                assert_same_bytes(got_b, want[key], key)
            f32_bits_equal(
                np.asarray(scale_inv).reshape(-1)[b:b + 1], want["scale_inv"], "scale_inv"
            )
            f32_bits_equal(np.asarray(amax).reshape(-1)[b:b + 1], want["amax"], "amax")


# The first TE shape with every input dtype on each implementation; the other shapes one
# (dtype, implementation) each, in turn.
DBIAS_CASES = every_then_cycled(
    TE_SHAPES[:1], TE_SHAPES[1:] + ODD_SHAPES, itertools.product(X_DTYPES, impls())
)


@pytest.mark.parametrize("shape,fa,xd,impl", DBIAS_CASES, ids=str)
def test_dbias_bit_exact(shape, fa, xd, impl):
    x = random_input(shape, X_DTYPES[xd], seed=11)
    quantizer = eqq.CurrentScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    t, dbias = jax.jit(lambda x: eqq.quantize_dbias(x, quantizer, fa, impl=impl))(jnp.asarray(x))
    expected = oracle.dbias_cast(x, fa)
    assert dbias.dtype == x.dtype and dbias.shape == expected.shape
    assert_same_bytes(dbias, expected, "dbias")
    want = oracle.current_scaling(x, ml_dtypes.float8_e4m3fn, fa, True, False)["row"]
    assert_same_bytes(t.rowwise.data, want)


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize(
    "split,xd", [(1, "f32"), (2, "bf16"), (8, "f16"), (64, "bf16")], ids=str
)
def test_dbias_split_nodes_with_node_zero_finished(impl, split, xd):
    """The kernel's dbias split (inner primitive): node p holds the tree sum of its chunk of
    rows, except node 0, which holds the tree over all nodes, i.e. the whole axis' sum, which
    `_dbias.finish` takes; `dbias_cast` is node 0 in x's dtype (NaN canonical). With a kept
    leading axis (dbias_keep=1), one split per kept index."""
    from eqx_quant._ops.fp8_quantize import Fp8QuantizeParams, fp8_quantize_op

    x = np.array(random_input((3, 128, 24), X_DTYPES[xd], seed=split))
    x[1, 100, 3] = np.nan  # in a later node: reaches node 0 (as the canonical NaN)
    params = Fp8QuantizeParams(
        q_dtype="float8_e4m3fn", flatten_axis=2, rowwise=True, colwise=False,
        with_dbias=True, impl=impl, dbias_keep=1, dbias_split=split, dbias_cast=True,
    )
    *_, dbias, cast = fp8_quantize_op.bind_inner(
        jnp.asarray(x), jnp.ones((1,), jnp.float32), params=params
    )
    assert dbias.shape == (3, split, 24)
    chunks = x.astype(np.float32).reshape(3, split, 128 // split, 24)
    want = np.stack([[oracle.tree_sum(rows, 0) for rows in xk] for xk in chunks])
    want[:, 0] = np.stack([oracle.tree_sum(xk, 0) for xk in x.astype(np.float32)])
    f32_bits_equal(dbias, want, "dbias nodes")
    assert cast.dtype == x.dtype and cast.shape == (3, 24)
    assert_same_bytes(cast, oracle.canonical_nan_cast(want[:, 0], x.dtype), "dbias_cast")


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("xd", ["bf16", "f16"])
def test_dbias_cast_rounds_to_nearest_even(impl, xd):
    """The dbias cast to x's dtype (in the kernel, common/float_narrow.h) rounds to nearest
    even at every binade of bf16 / f16, subnormals and overflow to inf included."""
    dtype = X_DTYPES[xd]
    x = rounding_tie_rows(dtype)
    quantizer = eqq.CurrentScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    _, dbias = jax.jit(lambda x: eqq.quantize_dbias(x, quantizer, 1, impl=impl))(jnp.asarray(x))
    assert_same_bytes(dbias, oracle.dbias_cast(x, 1), "dbias")


@pytest.mark.skipif("cpu" not in eqq.native_platforms(), reason="CPU kernel not built")
def test_dbias_split_above_the_kernel_limit_is_rejected():
    """The kernels take at most 64 dbias nodes per kept row (kMaxDbiasSplit)."""
    from eqx_quant._ops.fp8_quantize import Fp8QuantizeParams, fp8_quantize_op

    params = Fp8QuantizeParams(
        q_dtype="float8_e4m3fn", flatten_axis=1, rowwise=True, colwise=False,
        with_dbias=True, impl="ffi", dbias_split=128,
    )
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"dbias_split=128 must be in \[1, 64\]"):
        # On a GPU the error surfaces when the result is awaited.
        jax.block_until_ready(fp8_quantize_op.bind_inner(
            jnp.ones((256, 8), jnp.float32), jnp.ones((1,), jnp.float32), params=params
        ))


@pytest.mark.skipif("cpu" not in eqq.native_platforms(), reason="CPU kernel not built")
@pytest.mark.parametrize("q", Q_DTYPES)
def test_kernel_equals_reference_all_bf16_patterns(q):
    """The CPU kernel and the pure-JAX reference agree on every bf16 bit pattern."""
    bits = np.arange(2**16, dtype=np.uint16).reshape(256, 256)
    x = jnp.asarray(bits.view(ml_dtypes.bfloat16))
    for scale in [1.0, 1.5, 2.0**-7, 2.0**30, 3e-3]:
        quantizer = eqq.DelayedScaleQuantizer(
            Q_DTYPES[q], amax_history_len=1, scale=jnp.full((1,), scale, jnp.float32)
        )
        outs = [eqq.quantize_dbias(x, quantizer, impl=impl) for impl in ("ffi", "reference")]
        (t_k, db_k), (t_r, db_r) = outs
        assert_same_bytes(t_k.rowwise.data, t_r.rowwise.data, "row")
        assert_same_bytes(t_k.colwise.data, t_r.colwise.data, "col")
        f32_bits_equal(t_k.amax, t_r.amax, "amax")
        f32_bits_equal(t_k.rowwise.scale_inv, t_r.rowwise.scale_inv, "scale_inv")
        assert_same_bytes(db_k, db_r, "dbias")


@pytest.mark.parametrize("impl", impls())
def test_te_large_shape(impl):
    """TE's largest quantize shape (8192, 2, 4096), flatten_axis=-2, bf16, both layouts."""
    x = random_input((8192, 2, 4096), jnp.bfloat16, seed=5)
    quantizer = eqq.CurrentScaleQuantizer()
    t = jax.jit(lambda x: eqq.quantize(x, quantizer, -2, impl=impl))(jnp.asarray(x))
    expected = oracle.current_scaling(x, ml_dtypes.float8_e4m3fn, -2, True, True)
    _check_against_oracle(t, expected, eqq.QuantizeLayout.ROWWISE_COLWISE, "large")


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: l.name)
@pytest.mark.parametrize("xd", X_DTYPES)
def test_dequantize_round_trip(xd, layout):
    """Dequantize = float32(data) * scale_inv cast to x's dtype, in x's shape, for each part."""
    x = random_input((6, 5, 8), X_DTYPES[xd], seed=2)
    t = eqq.quantize(jnp.asarray(x), eqq.CurrentScaleQuantizer(q_layout=layout), -2)
    expected = oracle.current_scaling(x, ml_dtypes.float8_e4m3fn, -2, True, True)
    want = oracle.dequantize_tensor(expected["row"], expected["scale_inv"], x.dtype)
    for part in (t.rowwise, t.colwise):
        if part is not None:
            y = part.dequantize()
            assert y.shape == x.shape and y.dtype == x.dtype
            assert_same_bytes(y, want, f"dequantize {part.data_layout}")
    np.testing.assert_allclose(
        np.asarray(t.dequantize(), np.float32), x.astype(np.float32), rtol=0.07, atol=0.05
    )


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("xd", X_DTYPES)
def test_dbias_special_values(xd, impl):
    """Subnormals are summed exactly (no flush); NaN and Inf propagate; NaN is canonical."""
    specials = _special_values(xd)
    x = np.stack([specials, specials[::-1], np.zeros_like(specials), specials]).reshape(2, 2, -1)
    quantizer = eqq.CurrentScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    _, dbias = eqq.quantize_dbias(jnp.asarray(x), quantizer, -1, impl=impl)
    expected = oracle.dbias_cast(x, -1)
    got = np.asarray(dbias)
    np.testing.assert_array_equal(
        np.isnan(got.astype(np.float32)), np.isnan(expected.astype(np.float32))
    )
    finite = ~np.isnan(expected.astype(np.float32))
    assert_same_bytes(got[finite], expected[finite], "dbias (non-NaN)")
    nan_bits = got.view(np.uint16 if got.itemsize == 2 else np.uint32)[~finite]
    assert len(set(nan_bits.tolist())) <= 1, "NaN must be canonical"
    # A subnormal-only column is not flushed to zero.
    tiny = np.full((64, 1), float(jnp.finfo(X_DTYPES[xd]).smallest_subnormal), np.float32)
    tiny = np.asarray(jnp.asarray(tiny, X_DTYPES[xd]))
    _, db = eqq.quantize_dbias(jnp.asarray(tiny), quantizer, -1, impl=impl)
    assert_same_bytes(db, oracle.dbias_cast(tiny, -1), "subnormal dbias")
    assert float(np.asarray(db, np.float32)[0]) > 0


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize("rows", [27, 100, 216, 96, 1000])
def test_dbias_tree_order_for_unaligned_row_counts(rows, impl):
    """Row counts whose tree nodes are not ceil(p*n/P)-aligned (a past bug); values whose
    float32 sum depends on the order, so any other order shows."""
    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, 64)) * np.exp(rng.uniform(-12, 12, (rows, 64)))).astype(
        np.float32
    )
    q = eqq.CurrentScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    _, dbias = eqq.quantize_dbias(jnp.asarray(x), q, impl=impl)
    assert_same_bytes(dbias, oracle.dbias_cast(x, -1), f"dbias rows={rows}")


@pytest.mark.parametrize("impl", impls())
@pytest.mark.parametrize(
    "shape,fa,xd",
    every_then_cycled(
        [((256, 24), 1)], [((7, 5), 1), ((3, 40, 24), 2), ((2, 64, 16), 1), ((0, 8), 1)],
        [(xd,) for xd in X_DTYPES],
    ),
    ids=str,
)
def test_dbias_without_fp8_output(shape, fa, xd, impl):
    """The op with dbias alone (rowwise = colwise = False: the block formats' quantize_dbias):
    empty FP8 outputs and the canonical tree sum in x's dtype. On a GPU one reduced axis runs
    the column tree sums and two long ones the walk, neither writing FP8 bytes."""
    from eqx_quant._ops.fp8_quantize import Fp8QuantizeParams, fp8_quantize_op

    x = np.array(random_input(shape, X_DTYPES[xd], seed=sum(shape)))
    if x.size:
        x.reshape(-1)[x.size // 2] = np.nan
    params = Fp8QuantizeParams(
        q_dtype="float8_e4m3fn", flatten_axis=fa, rowwise=False, colwise=False,
        with_dbias=True, impl=impl,
    )
    row, col, _, amax, dbias = jax.jit(
        lambda x: fp8_quantize_op.bind(x, jnp.ones((1,), jnp.float32), params=params)
    )(jnp.asarray(x))
    assert row.shape == (0,) and col.shape == (0,)
    assert_same_bytes(dbias, oracle.dbias_cast(x, fa), "dbias")
    f32_bits_equal(np.asarray(amax), oracle.amax(x), "amax")
