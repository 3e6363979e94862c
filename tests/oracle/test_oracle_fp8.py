"""Tests of the FP8 oracle (tests/oracle/fp8.py) against hand-computed values (no library code
involved)."""

import ml_dtypes
import numpy as np
import pytest

from tests.oracle.fp8 import (
    amax,
    bytes_of,
    compute_scale,
    current_scaling,
    dbias,
    dbias_cast,
    delayed_update,
    dequantize_tensor,
    quantize_tensor,
    reciprocal,
    to_fp8,
    tree_sum,
)

E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2
BF16 = ml_dtypes.bfloat16
F32 = np.float32
E = 2.0**-24  # half an ulp of 1.0 in float32


def f32(*v):
    return np.array(v, dtype=F32)


def one_byte(value, q):
    return int(bytes_of(to_fp8(f32(value), q))[0])


# ---- to_fp8 -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value, byte",
    [
        (1.0, 0x38),
        (1.0625, 0x38),  # tie between 1.0 and 1.125 -> even (1.0)
        (1.0625 + 2.0**-20, 0x39),  # just above the tie -> 1.125
        (1.1875, 0x3A),  # tie between 1.125 and 1.25 -> even (1.25)
        (448.0, 0x7E),
        (464.0, 0x7E),  # would be NaN without saturation
        (1e6, 0x7E),
        (np.inf, 0x7E),
        (-np.inf, 0xFE),
        (np.nan, 0x7F),
        (-np.nan, 0x7F),
        (2.0**-9, 0x01),  # min subnormal
        (2.0**-10, 0x00),  # half the min subnormal -> even (0)
        (3 * 2.0**-11, 0x01),  # 0.75 * min subnormal -> 2^-9
        (0.0, 0x00),
        (-0.0, 0x80),
        (-1e-30, 0x80),  # underflow keeps sign
        (-3.0, 0xC4),
    ],
)
def test_to_fp8_e4m3(value, byte):
    assert one_byte(value, E4M3) == byte


@pytest.mark.parametrize(
    "value, byte",
    [
        (57344.0, 0x7B),
        (61440.0, 0x7B),  # tie towards inf -> saturates
        (np.inf, 0x7B),
        (-np.inf, 0xFB),
        (np.nan, 0x7F),
        (-np.nan, 0x7F),
        (2.0**-16, 0x01),
        (2.0**-17, 0x00),  # tie -> even (0)
        (1.0, 0x3C),
        (1.125, 0x3C),  # tie between 1.0 and 1.25 -> even
        (1.375, 0x3E),  # tie between 1.25 and 1.5 -> even (1.5)
        (-1e-30, 0x80),
    ],
)
def test_to_fp8_e5m2(value, byte):
    assert one_byte(value, E5M2) == byte


def test_to_fp8_shape_dtype_and_nan_bytes():
    y = f32(np.nan, -np.nan, 1.0, np.nan).reshape(2, 2)
    for q in (E4M3, E5M2):
        out = to_fp8(y, q)
        assert out.dtype == np.dtype(q) and out.shape == (2, 2)
        assert bytes_of(out).tolist() == [[0x7F, 0x7F], [0x38 if q is E4M3 else 0x3C, 0x7F]]
    assert to_fp8(np.array(F32(2.0)), E4M3).shape == ()


def test_to_fp8_rejects_non_f32():
    with pytest.raises(TypeError):
        to_fp8(np.array([1.0]), E4M3)


# ---- compute_scale / reciprocal / amax -----------------------------------------------------
def test_compute_scale_rules():
    prev = f32(3.0)
    assert compute_scale(f32(448.0), E4M3, 0.0, prev).tolist() == [1.0]
    assert compute_scale(f32(57344.0), E5M2, 0.0, prev).tolist() == [1.0]
    assert compute_scale(f32(2.0), E4M3, 0.0, prev).tolist() == [224.0]
    assert compute_scale(f32(448.0), E4M3, 1.0, prev).tolist() == [0.5]
    assert compute_scale(f32(448.0), E4M3, 2.0, prev).tolist() == [0.25]
    for bad in (0.0, -0.0, np.inf, np.nan):
        assert compute_scale(f32(bad), E4M3, 0.0, prev).tolist() == [3.0]
    assert compute_scale(f32(1e-45), E4M3, 0.0, prev).tolist() == [np.inf]
    s = compute_scale(f32(3.0), E4M3, 0.0, prev)
    assert s.dtype == F32 and s[0] == F32(448.0) / F32(3.0)


def test_compute_scale_fractional_margin_and_batch():
    s = compute_scale(f32(448.0), E4M3, 0.5, f32(1.0))
    r2 = F32(2.0) ** F32(0.5)
    assert s[0] == F32(1.0) / r2 and abs(float(s[0]) - 2**-0.5) < 1e-7
    a = f32(448.0, 0.0, np.nan, 7.0).reshape(4, 1)
    s = compute_scale(a, E4M3, 0.0, f32(5.0))
    assert s.shape == (4, 1) and s.dtype == F32
    assert s.ravel().tolist() == [1.0, 5.0, 5.0, 64.0]


def test_reciprocal():
    assert reciprocal(f32(4.0, np.inf, 0.0)).tolist() == [0.25, 0.0, np.inf]
    r = reciprocal(f32(3.0))
    assert r.dtype == F32 and r[0] == F32(1.0) / F32(3.0)


def test_amax():
    assert amax(f32(1.0, -3.0, np.nan, 2.0)).tolist() == [3.0]
    assert amax(np.zeros((0, 3), F32)).tolist() == [0.0]
    assert amax(f32(np.nan, np.nan)).tolist() == [0.0]
    assert amax(f32(-np.inf, 1.0)).tolist() == [np.inf]
    out = amax(np.array([[-0.5, 0.25]], dtype=BF16))
    assert out.shape == (1,) and out.dtype == F32 and out.tolist() == [0.5]
    assert not np.signbit(amax(f32(-0.0))[0])


# ---- tree_sum / dbias -----------------------------------------------------------------------
def test_tree_sum_small_exact():
    assert tree_sum(np.zeros(0, F32), 0).tolist() == 0.0
    assert not np.signbit(tree_sum(np.zeros(0, F32), 0))
    assert np.signbit(tree_sum(f32(-0.0), 0))  # n == 1 returns v[0] as is
    assert tree_sum(f32(7.0), 0) == 7.0
    assert tree_sum(f32(1, 2), 0) == 3.0
    assert tree_sum(f32(1, 2, 4), 0) == 7.0
    assert tree_sum(f32(1, 2, 4, 8, 16), 0) == 31.0
    assert tree_sum(f32(1, 2, 4, 8, 16), 0).dtype == F32


def test_tree_sum_order_matters():
    # n=3, h=2: (1 + e) + e; each add is a tie -> even -> 1.0. (h=1 would give 1 + 2^-23.)
    assert tree_sum(f32(1.0, E, E), 0) == F32(1.0)
    # n=4: (1 + e) + (e + e) = 1 + 2^-23 exactly; left-to-right gives 1.0.
    assert tree_sum(f32(1.0, E, E, E), 0) == F32(1.0 + 2.0**-23)
    # n=5, h=3: T(1,e,e) + T(e,e) = 1 + 2^-23; an h=n//2 split gives 1 + 3e -> tie -> 1 + 2^-22.
    assert tree_sum(f32(1.0, E, E, E, E), 0) == F32(1.0 + 2.0**-23)
    # n=3 with the small values first: (e + e) + 1 = 1 + 2^-23.
    assert tree_sum(f32(E, E, 1.0), 0) == F32(1.0 + 2.0**-23)


def test_tree_sum_vectorised_axes():
    v = np.arange(24, dtype=F32).reshape(2, 3, 4)
    for ax in range(3):
        got = tree_sum(v, ax)
        assert got.dtype == F32 and np.array_equal(got, v.sum(axis=ax))
    cols = np.stack([f32(1.0, E, E, E), f32(E, E, 1.0, 0.0)], axis=1)  # (4, 2)
    assert tree_sum(cols, 0).tolist() == [1.0 + 2.0**-23, 1.0 + 2.0**-23]
    assert tree_sum(cols.T.copy(), -1).tolist() == [1.0 + 2.0**-23, 1.0 + 2.0**-23]


def test_dbias_shapes_and_keep():
    x = np.arange(2 * 3 * 4, dtype=F32).reshape(2, 3, 4)
    assert np.array_equal(dbias(x, 2), x.sum(axis=(0, 1)))
    assert np.array_equal(dbias(x, -1), x.sum(axis=(0, 1)))
    assert np.array_equal(dbias(x, 1), x.sum(axis=0))
    assert dbias(x, 0).shape == (2, 3, 4) and dbias(x, 3).shape == ()
    k = dbias(x, 2, keep=1)
    assert k.shape == (2, 4) and np.array_equal(k, x.sum(axis=1))
    y = np.arange(2 * 3 * 2 * 5, dtype=F32).reshape(2, 3, 2, 5)
    assert np.array_equal(dbias(y, 3, keep=1), y.sum(axis=(1, 2)))
    assert dbias(y, 3, keep=1).shape == (2, 5)


def test_dbias_innermost_first():
    # rows first: (1+0)=1, (e+e)=2^-23, 0 -> (1 + 2^-23) + 0.
    # axis 0 first would give 1 + e = 1; a flat 6-element tree also gives 1.
    x = f32(1.0, 0.0, E, E, 0.0, 0.0).reshape(3, 2, 1)
    out = dbias(x, 2)
    assert out.shape == (1,) and out.dtype == F32 and out[0] == F32(1.0 + 2.0**-23)


def test_dbias_cast_bf16():
    # bf16 ulp at 1 is 2^-7: f32 tree (1 + 2^-8) + 2^-8 = 1 + 2^-7 exactly, representable in bf16.
    x = np.array([[1.0], [2.0**-8], [2.0**-8]], dtype=BF16)
    out = dbias_cast(x, 1)
    assert out.dtype == np.dtype(BF16) and out.shape == (1,)
    assert float(out[0]) == 1.0 + 2.0**-7
    # f32 sum 1 + 2^-8 is a bf16 tie -> even (1.0) after the cast
    assert float(dbias_cast(np.array([[1.0], [2.0**-8]], dtype=BF16), 1)[0]) == 1.0


# ---- quantize / current scaling / delayed / dequantize ---------------------------------------
def test_quantize_tensor_layouts():
    x = (np.arange(24, dtype=F32).reshape(2, 3, 4) - 12.0) / 4.0
    s = f32(2.0)
    r1 = quantize_tensor(x, s, E4M3, 1, True, True)
    assert r1["row"].shape == (2, 3, 4) and r1["col"].shape == (3, 4, 2)
    assert np.array_equal(bytes_of(r1["col"]), bytes_of(np.transpose(r1["row"], (1, 2, 0))))
    r2 = quantize_tensor(x, s, E4M3, 2, True, True)
    assert r2["col"].shape == (4, 2, 3)
    assert np.array_equal(bytes_of(r2["col"]), bytes_of(np.transpose(r2["row"], (2, 0, 1))))
    rn = quantize_tensor(x, s, E4M3, -1, True, True)
    assert np.array_equal(bytes_of(rn["col"]), bytes_of(r2["col"]))
    assert np.array_equal(bytes_of(r1["row"]), bytes_of(to_fp8(x * F32(2.0), E4M3)))
    assert r1["scale_inv"].tolist() == [0.5] and r1["amax"].tolist() == [3.0]
    only_col = quantize_tensor(x, s, E4M3, 1, False, True)
    assert only_col["row"] is None and only_col["col"] is not None
    only_row = quantize_tensor(x, s, E4M3, 1, True, False)
    assert only_row["col"] is None


def test_quantize_tensor_values():
    x = np.array([1.0625, -3.0, np.nan, 1000.0], dtype=BF16)
    r = quantize_tensor(x, f32(1.0), E4M3, -1, True, False)
    assert bytes_of(r["row"]).tolist() == [0x38, 0xC4, 0x7F, 0x7E]
    assert r["amax"].tolist() == [1000.0]
    r = quantize_tensor(f32(1.0, 2.0), f32(0.5), E5M2, 1, True, True)
    assert bytes_of(r["row"]).tolist() == [0x38, 0x3C]  # 0.5, 1.0 in e5m2


def test_current_scaling():
    r = current_scaling(f32(1.0, -2.0, 0.5), E4M3, -1, True, True)
    assert r["scale"].tolist() == [224.0] and r["amax"].tolist() == [2.0]
    assert bytes_of(r["row"]).tolist() == [0x76, 0xFE, 0x6E]  # 224, -448, 112
    assert r["scale_inv"][0] == F32(1.0) / F32(224.0)
    z = current_scaling(np.zeros((2, 2), F32), E5M2, 1, True, False)
    assert z["scale"].tolist() == [1.0] and not bytes_of(z["row"]).any()
    n = current_scaling(f32(np.nan, 4.0), E4M3, 1, True, False)  # maxNum amax ignores NaN
    assert n["scale"].tolist() == [112.0] and bytes_of(n["row"]).tolist() == [0x7F, 0x7E]


def test_delayed_update_order_and_algos():
    h, s = delayed_update(f32(9, 1, 2, 3), f32(1.0), f32(4.0), E4M3, 0.0, "max")
    assert h.tolist() == [0.0, 2.0, 3.0, 4.0] and s.tolist() == [112.0]
    h, s = delayed_update(f32(0, 8, 0, 0), f32(1.0), f32(0.5), E4M3, 0.0, "most_recent")
    assert s.tolist() == [896.0] and h.tolist() == [0.0, 0.0, 0.0, 0.5]
    _, s = delayed_update(f32(0, 8, 0, 0), f32(1.0), f32(0.5), E4M3, 1.0, "max")
    assert s.tolist() == [28.0]
    _, s = delayed_update(f32(0, 8), f32(3.0), f32(np.nan), E4M3, 0.0, "max")
    assert s.tolist() == [3.0]  # NaN propagates through max -> previous scale kept
    _, s = delayed_update(f32(0, 0), f32(3.0), f32(0.0), E4M3, 0.0, "max")
    assert s.tolist() == [3.0]
    h, s = np.zeros(3, F32), f32(1.0)
    seen = []
    for a in (1.0, 2.0, 3.0):
        h, s = delayed_update(h, s, f32(a), E4M3, 0.0, "max")
        seen.append((h.tolist(), float(s[0])))
    assert seen[0] == ([0.0, 0.0, 1.0], 448.0)
    assert seen[1] == ([0.0, 1.0, 2.0], 224.0)
    assert seen[2] == ([0.0, 2.0, 3.0], float(F32(448.0) / F32(3.0)))


def test_delayed_update_does_not_mutate_inputs():
    hist = f32(5, 6, 7)
    delayed_update(hist, f32(1.0), f32(1.0), E5M2, 0.0, "max")
    assert hist.tolist() == [5.0, 6.0, 7.0]


def test_dequantize_tensor():
    data = np.array([0x38, 0x7E, 0xC4, 0x7F], dtype=np.uint8).view(E4M3)
    out = dequantize_tensor(data, f32(0.5), BF16)
    assert out.dtype == np.dtype(BF16)
    assert out[:3].astype(F32).tolist() == [0.5, 224.0, -1.5] and np.isnan(float(out[3]))
    out = dequantize_tensor(data[:3], f32(3.0), F32)
    assert out.tolist() == [3.0, 1344.0, -9.0]
