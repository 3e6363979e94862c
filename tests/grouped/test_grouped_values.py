"""Grouped (MoE) quantization against the NumPy oracle, continued: special values (NaN / Inf
in one group must not leak into another), dequantize, invalid group sizes (clamped with
check=False, an error with check=True) and dbias. Cases and machinery: tests/support/grouped.py."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import eqx_quant as eqq
from tests.oracle import blocks as ob
from tests.oracle import grouped as og
from tests.support.bytes import assert_same_bytes, f32_bits_equal, u8
from tests.support.cases import rounding_tie_rows
from tests.support.dtypes import X_DTYPES
from tests.support.grouped import (
    IMPLS,
    KEY,
    MODES,
    PATTERNS,
    REF_MODES,
    REF_SHAPE,
    REFERENCE_CASES,
    G,
    L,
    M,
    check_against_oracle,
    dense_quantizer,
    expected,
    make_input,
    make_quantizer,
    run,
)

# --------------------------------------------------------------------------------------------
# Special values; NaN / Inf in one group must not leak into another


SPECIAL_SIZES = [37, 45, 0, 50, 189, 0]  # 321 rows, G = 6 (REF_SHAPE, as REFERENCE_CASES)
POISONED = 1
NP_DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _special_input(dtype, poison=True) -> np.ndarray:
    np_dtype = np.dtype(dtype)
    info = ml_dtypes.finfo(np_dtype)
    x = make_input(REF_SHAPE, jnp.float32, seed=51).astype(np.float32)
    # group 0 (rows 0..36): plain values and a zero block
    x[0:3] = 0.0
    # group 1 (rows 37..81): NaN and +-Inf inside
    if poison:
        x[40, 3], x[41, 30] = np.nan, -np.nan
        x[50, 5], x[60, 39] = np.inf, -np.inf
    # group 3 (rows 82..131): zeros and subnormals of the input dtype
    x[82:90] = 0.0
    x[90:100] = np.float32(info.smallest_subnormal) * np.arange(1, 41, dtype=np.float32)
    x[100:132] *= np.float32(info.tiny)
    # group 4 (rows 132..320): +-max of the input dtype
    x[132, :8] = float(info.max)
    x[133, 8:16] = -float(info.max)
    x[200, 20:40] = float(info.max)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np_dtype)


def _group_bytes(gt, tag, name, g, sizes, shape):
    """(data bytes, scale bytes, amax) of group g in one part, cut out of the grouped buffers
    with the oracle's geometry (the doc's offsets and regions)."""
    part = getattr(gt, tag)
    r, n, u = og.view_2d(shape, -1)
    start, _ = og.group_offsets(sizes, r, u)
    lo, hi = start[g], start[g + 1]
    data = u8(part.data).reshape(-1)[lo * n : hi * n]  # N layout rows or flat T: same span
    if name in ("current", "delayed"):
        scale = u8(np.asarray(part.scale_inv)[g : g + 1])
    else:
        block = ob.NV_BLOCK if name.startswith("nvfp4") else ob.MX_BLOCK
        off, size = og.scale_regions(sizes, r, u, n, block, tag == "colwise")[g]
        scale = u8(part.scale_inv).reshape(-1)[off : off + size]
    return data, scale, np.asarray(part.amax)[g : g + 1]


def _check_special(name, dtype, layout, impl):
    x = _special_input(NP_DTYPES[dtype])
    clean = _special_input(NP_DTYPES[dtype], poison=False)
    gt = run(x, SPECIAL_SIZES, name, layout, impl)
    o = expected(x, SPECIAL_SIZES, name, layout)
    check_against_oracle(gt, o, name, x.shape, -1, SPECIAL_SIZES, f"special {dtype} {impl}")
    gc = run(clean, SPECIAL_SIZES, name, layout, impl)
    for tag in ("rowwise", "colwise"):
        if getattr(gt, tag) is None:
            continue
        for g in range(len(SPECIAL_SIZES)):
            if g == POISONED:
                continue
            w = f"{name} {tag}: group {g} affected by NaN/Inf in group {POISONED}"
            a = _group_bytes(gt, tag, name, g, SPECIAL_SIZES, x.shape)
            b = _group_bytes(gc, tag, name, g, SPECIAL_SIZES, x.shape)
            assert_same_bytes(a[0], b[0], f"{w} (data)")
            assert_same_bytes(a[1], b[1], f"{w} (scales)")
            f32_bits_equal(a[2], b[2], f"{w} (amax)")
    if name in ("current", "nvfp4"):  # the poisoned group's amax ignores NaN, sees the Inf
        assert np.asarray(gt.amax)[POISONED] == np.inf
        assert np.asarray(gc.amax)[POISONED] < np.inf


SPECIAL_CASES = [(n, d) for n in ("current", "nvfp4") for d in X_DTYPES]
SPECIAL_CASES += [("delayed", "f16"), ("mxfp8_e4m3", "f32"), ("mxfp8_e5m2", "bf16"),
                  ("nvfp4_2d", "f16"), ("nvfp4_sr", "f32")]


@pytest.mark.parametrize("name,dtype", SPECIAL_CASES)
def test_special_values_ffi(name, dtype):
    _check_special(name, dtype, L.ROWWISE_COLWISE, "ffi")


@pytest.mark.parametrize("name", REF_MODES)
def test_special_values_reference(name):
    dtype, layout = REFERENCE_CASES[name]
    _check_special(name, dtype, layout, "reference")


# --------------------------------------------------------------------------------------------
# dequantize


def _expected_dequantize(o, x, sizes, name, fa, rowwise):
    xn = np.asarray(x)
    r, n, u = og.view_2d(xn.shape, fa)
    if name in ("current", "delayed"):
        if rowwise:
            y = og.dequantize_tensor_rowwise(
                o["row"].view(MODES[name][0]), o["scale_inv"], sizes, u, xn.dtype
            )
        else:
            y = og.dequantize_tensor_colwise(
                o["col"].view(MODES[name][0]), o["scale_inv"], sizes, u, (r, n), xn.dtype
            )
    elif name.startswith("mxfp8"):
        y = og.dequantize_mxfp8(o, MODES[name][0], sizes, u, (r, n), xn.dtype, rowwise)
    else:
        y = og.dequantize_nvfp4(o, sizes, u, (r, n), xn.dtype, rowwise)
    return y.reshape(xn.shape)


def dequantized_equal(actual, expected_, what):
    """Bit-exact, except that a NaN matches any NaN (host NaN sign bits differ)."""
    a = np.asarray(actual)
    e = np.asarray(expected_)
    got, want = (a.shape, a.dtype), (e.shape, e.dtype)
    assert got == want, f"{what}: {got} vs {want}"
    af, ef = a.astype(np.float32), e.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(af), np.isnan(ef), err_msg=f"{what}: NaN positions")
    assert_same_bytes(np.where(np.isnan(af), 0, af), np.where(np.isnan(ef), 0, ef), what)


def test_dequantize_nd_and_weight_like():
    cases = [
        ((50, 3, 40), [7, 0, 30, 13], "mxfp8_e4m3", L.COLWISE),  # 32-row blocks across U = 3
        ((4, 40, 72), None, "nvfp4_2d", L.ROWWISE_COLWISE),
    ]
    for shape, sizes, name, layout in cases:
        x = make_input(shape, jnp.float32, seed=63)
        gt = run(x, sizes, name, layout, "ffi", num_groups=4)
        s = [1, 1, 1, 1] if sizes is None else sizes
        o = expected(x, s, name, layout)
        y = gt.dequantize()
        e = _expected_dequantize(o, x, s, name, -1, layout.has_rowwise)
        dequantized_equal(y, e, f"{name} {shape}")


# --------------------------------------------------------------------------------------------
# Invalid group sizes: clamped with check=False, an error with check=True; dequantize


BAD_SIZES = {
    "short": [50, 0, 100, 50, 0, 0],  # sum 200 < 321
    "long": [100, 150, 0, 200, 30, 5],  # sum 485 > 321: group 3 clamped, 4 and 5 empty
    "negative": [100, -20, 200, 21, 0, 20],  # -20 counts as 0; sum 321
    "huge": [2**31 - 1, 5, 0, 0, 0, 0],  # everything in group 0, no int32 overflow
}
# Each dequantize path once: tensor scaling rowwise (current) / colwise (delayed), MXFP8
# rowwise (mxfp8_e4m3, reference) / colwise (mxfp8_e5m2), NVFP4 rowwise (nvfp4_sr) / colwise
# (nvfp4_2d); the layouts are REFERENCE_CASES'.
BAD_CASES = [(n, "ffi") for n in ("current", "delayed", "mxfp8_e5m2", "nvfp4_2d", "nvfp4_sr")]
BAD_CASES += [(n, "reference") for n in ("current", "mxfp8_e4m3")]


@pytest.mark.parametrize("name,impl", BAD_CASES)
def test_sizes_clamped_without_check_and_dequantize(name, impl):
    """check=False: offsets clamped as documented, nothing out of bounds, rows past the sum
    zero in every buffer and in dequantize, and absent from amax and dbias. The valid
    patterns check dequantize (rowwise or colwise part, per REFERENCE_CASES' layout)."""
    dtype, layout = REFERENCE_CASES[name]
    x = make_input(REF_SHAPE, X_DTYPES[dtype], seed=81)
    x[-21:] = -3e4  # rows past a short sum: must change nothing
    cases = dict(valid0=PATTERNS[0], valid1=PATTERNS[1], **BAD_SIZES)
    for case, sizes in cases.items():
        gt = run(x, sizes, name, layout, impl, check=False)
        o = expected(x, sizes, name, layout)
        check_against_oracle(gt, o, name, REF_SHAPE, -1, sizes, f"{case} {impl}")
        y = np.asarray(gt.dequantize())
        e = _expected_dequantize(o, x, sizes, name, -1, layout.has_rowwise)
        dequantized_equal(y, e, f"{name} {impl} {case} dequantize")
        end = og.group_offsets(sizes, M)[0][-1]
        assert not u8(y[end:]).any(), f"{case}: rows past the sum dequantize to non-zero"


def test_sizes_dbias_without_check():
    x = make_input(REF_SHAPE, jnp.bfloat16, seed=82)
    x[-21:] = -3e4
    for case, sizes in BAD_SIZES.items():
        gs = jnp.asarray(sizes, jnp.int32)
        db = eqq.grouped_dbias(jnp.asarray(x), gs, check=False, impl="ffi")
        e = og.grouped_dbias(x, sizes, 1, x.dtype)
        assert_same_bytes(np.asarray(db), e, f"{case} dbias")


CHECK_MESSAGE = r"group_sizes must be non-negative and sum to (x|dx|grad)\.shape\[0\]"


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_sizes_raise_with_check(impl):
    """check=True (default): a run-time error. The reference reuses the compiled functions of
    test_reference_matches_oracle / test_grouped_dbias (same configuration)."""
    x = jnp.asarray(make_input(REF_SHAPE, jnp.bfloat16, seed=83))
    q = make_quantizer("mxfp8_e4m3", L.ROWWISE_COLWISE)
    for case, sizes in BAD_SIZES.items():
        gs = jnp.asarray(sizes, jnp.int32)
        with pytest.raises(Exception, match=CHECK_MESSAGE):
            jax.block_until_ready(eqq.grouped_quantize(x, gs, q, impl=impl))
        with pytest.raises(Exception, match=CHECK_MESSAGE):
            jax.block_until_ready(eqq.grouped_dbias(x, gs, impl=impl))
        if impl == "ffi":
            with pytest.raises(Exception, match=CHECK_MESSAGE):
                jax.block_until_ready(eqq.grouped_quantize_dbias(x, gs, q, impl=impl))
    if impl == "reference":
        return
    # Under jit too (the sizes are traced), and a valid vector passes the same function.
    f = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, impl=impl))
    with pytest.raises(Exception, match=CHECK_MESSAGE):
        jax.block_until_ready(f(x, jnp.asarray(BAD_SIZES["negative"], jnp.int32)))
    gt = f(x, jnp.asarray(PATTERNS[0], jnp.int32))
    o = expected(np.asarray(x), PATTERNS[0], "mxfp8_e4m3", L.ROWWISE_COLWISE)
    check_against_oracle(gt, o, "mxfp8_e4m3", REF_SHAPE, -1, PATTERNS[0], "jit check=True")


# --------------------------------------------------------------------------------------------
# dbias


DBIAS_SIZES = [0, 32, 33, 127, 129, 0]  # 321 rows; empty first and last
DBIAS_CASES = [(d, "ffi") for d in X_DTYPES] + [("bf16", "reference")]


@pytest.mark.parametrize("dtype,impl", DBIAS_CASES)
def test_grouped_dbias(dtype, impl):
    x = make_input(REF_SHAPE, X_DTYPES[dtype], seed=71)
    x[5:40:3] *= 64  # mixed magnitudes: the summation order shows in the low bits
    for sizes in (DBIAS_SIZES, PATTERNS[0], PATTERNS[4]):
        db = eqq.grouped_dbias(jnp.asarray(x), jnp.asarray(sizes, jnp.int32), impl=impl)
        e = og.grouped_dbias(x, sizes, 1, x.dtype)
        assert db.shape == (len(sizes), 40) and db.dtype == x.dtype
        assert_same_bytes(np.asarray(db), e, f"dbias {dtype} {impl} {sizes}")
        for g in range(len(sizes)):
            if sizes[g] == 0:  # +0, not -0
                assert not u8(np.asarray(db)[g]).any(), f"empty group {g} is not +0"



@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_grouped_dbias_cast_rounds_to_nearest_even(dtype, impl):
    """The cast of each group's float32 sum to x's dtype (in the kernel): ties to even at every
    binade, overflow to inf, NaN as the dtype's quiet NaN. Rows (a, tie offset) twice over,
    the second copy behind a NaN row, in groups of 2 and 3 rows."""
    pairs = rounding_tie_rows(X_DTYPES[dtype])
    nan_row = np.full((1, pairs.shape[1]), np.nan, pairs.dtype)
    x = np.concatenate([pairs, nan_row, pairs])
    sizes = [2, 0, 3]
    db = eqq.grouped_dbias(jnp.asarray(x), jnp.asarray(sizes, jnp.int32), impl=impl)
    e = og.grouped_dbias(x, sizes, 1, x.dtype)
    e = np.where(np.isnan(e.astype(np.float32)), np.asarray(np.nan, x.dtype), e)
    assert_same_bytes(np.asarray(db), e, f"dbias {dtype} {impl}")

def test_grouped_dbias_3d():
    """[M, A, B] -> [G, A, B]: each group sums its entries along axis 0."""
    shape = (60, 3, 24)
    x = make_input(shape, jnp.float32, seed=72)
    sizes = [10, 0, 49, 1]
    db = eqq.grouped_dbias(jnp.asarray(x), jnp.asarray(sizes, jnp.int32), impl="ffi")
    e = og.grouped_dbias(x.reshape(60, 72), sizes, 1, np.float32).reshape(4, 3, 24)
    assert db.shape == (4, 3, 24)
    assert_same_bytes(np.asarray(db), e, "dbias 3d")


# (The reference's dbias op is test_grouped_dbias's; its quantize ops are tested above.)
QDBIAS_CASES = [(n, "ffi") for n in ("current", "mxfp8_e4m3", "nvfp4_sr")]


@pytest.mark.parametrize("name,impl", QDBIAS_CASES)
def test_grouped_quantize_dbias(name, impl):
    dtype, layout = REFERENCE_CASES[name]
    x = make_input(REF_SHAPE, X_DTYPES[dtype], seed=73)
    q = make_quantizer(name, layout)
    kw = {"key": KEY} if MODES[name][1] else {}
    for sizes in (PATTERNS[3], PATTERNS[0]):
        gt, db = eqq.grouped_quantize_dbias(
            jnp.asarray(x), jnp.asarray(sizes, jnp.int32), q, impl=impl, **kw
        )
        o = expected(x, sizes, name, layout)
        check_against_oracle(gt, o, name, REF_SHAPE, -1, sizes, f"quantize_dbias {impl}")
        e = og.grouped_dbias(x, sizes, 1, x.dtype)
        assert db.shape == (G, 40) and db.dtype == x.dtype
        assert_same_bytes(np.asarray(db), e, f"{name} {impl} dbias")
    if name != "current":
        return
    # Equal to the dense quantize_dbias of each group's rows (sizes = PATTERNS[0]).
    start, _ = og.group_offsets(sizes, M)
    for g in range(G):
        xg = jnp.asarray(x[start[g] : start[g + 1]])
        kw = {"key": jax.random.fold_in(KEY, g)} if MODES[name][1] else {}
        _, dense_db = eqq.quantize_dbias(xg, dense_quantizer(name, q, g), 1, impl="ffi", **kw)
        assert_same_bytes(np.asarray(db)[g], np.asarray(dense_db), f"{name} dense dbias group {g}")


def test_grouped_quantize_dbias_nd():
    """dbias of an N-d x: [G, *S[fa:]], the tree sum over the group's rows of the 2-D view."""
    shape, fa, sizes = (50, 3, 40), -1, [7, 0, 30, 13]
    x = make_input(shape, jnp.float32, seed=74)
    q = make_quantizer("mxfp8_e4m3", L.ROWWISE_COLWISE)
    gs = jnp.asarray(sizes, jnp.int32)
    gt, db = eqq.grouped_quantize_dbias(jnp.asarray(x), gs, q, fa, impl="ffi")
    e = og.grouped_dbias(x.reshape(150, 40), sizes, 3, np.float32)
    assert db.shape == (4, 40)
    assert_same_bytes(np.asarray(db), e, "nd dbias")
    check_against_oracle(
        gt, expected(x, sizes, "mxfp8_e4m3", L.ROWWISE_COLWISE, fa), "mxfp8_e4m3", shape, fa,
        sizes, "nd quantize_dbias",
    )


@pytest.mark.parametrize(
    "name,impl", [("mxfp8_e4m3", "ffi"), ("nvfp4_sr", "ffi"), ("delayed", "reference")]
)
def test_huge_sizes_times_rows_per_unit(name, impl):
    """size * U past int32 (U = 2): the offsets are computed without overflow (int64 in the
    kernels), clamped to the rows, with check=False."""
    shape, fa = (20, 2, 3, 16), 2
    x = make_input(shape, jnp.float32, seed=3)
    for sizes in ([3, 2**30 + 5, 7, 0], [2**31 - 1, 2**31 - 1, 0, 0], [5, -(2**31), 2**30, 1]):
        gt = run(x, sizes, name, L.ROWWISE_COLWISE, impl, fa=fa, check=False)
        o = expected(x, sizes, name, L.ROWWISE_COLWISE, fa=fa)
        check_against_oracle(gt, o, name, shape, fa, sizes, f"{impl} {sizes}")


@pytest.mark.parametrize("impl", IMPLS)
def test_check_catches_sizes_whose_int32_sum_wraps(impl):
    x = jnp.asarray(make_input(REF_SHAPE, jnp.bfloat16, seed=84))
    gs = jnp.asarray([2**31 - 1, 2**31 - 1, 323, 0, 0, 0], jnp.int32)
    q = make_quantizer("mxfp8_e4m3", L.ROWWISE_COLWISE)
    with pytest.raises(Exception, match=CHECK_MESSAGE):
        jax.block_until_ready(eqq.grouped_quantize(x, gs, q, impl=impl))
