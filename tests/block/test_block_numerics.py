"""MXFP8 / NVFP4 through the public API, byte for byte against the NumPy oracle
(`tests.oracle.nd`): TE's suite shapes plus odd ones, every mode and layout, edge values, SR,
swizzled scales.

The compiled CPU kernels run the full matrix (they compile in milliseconds); the pure-JAX
reference (seconds of compile per configuration) runs a representative subset, and is also
compared with the kernels in test_block_transforms.py.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant.reference import nvfp4 as nv_ref
from tests.oracle import blocks as oracle_blocks
from tests.oracle import nd as oracle_nd
from tests.support.bytes import assert_same_bytes, f32_bits_equal, u8
from tests.support.cases import every_then_cycled, random_input
from tests.support.kernels import fast_impl

IMPL = fast_impl()
L = eqq.QuantizeLayout

SHAPES = [
    ((32, 64), -1),
    ((2, 64, 32), -1),
    ((64, 2, 32), -2),
    ((32, 256, 128), -1),
    ((32, 256, 128), -2),
    ((2, 96, 64), -1),  # TE's N-d padding quirk rejects this; we must not
    ((4, 100, 64), -2),  # K = 100: partial colwise blocks
    ((7, 13), -1),
    ((1, 7), -1),
    ((33, 65), -1),
    ((3, 5, 40), -2),
    ((0, 5), -1),
    ((5, 0), -1),
]

# name -> (quantizer factory, uses key)
MODES = {
    "mxfp8_e4m3": (lambda lay: eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, lay), False),
    "mxfp8_e5m2": (lambda lay: eqq.BlockScaleQuantizer(jnp.float8_e5m2, lay), False),
    "nvfp4": (lambda lay: eqq.NVFP4Quantizer(q_layout=lay), False),
    "nvfp4_2d": (lambda lay: eqq.NVFP4Quantizer(q_layout=lay, use_2d=True), False),
    "nvfp4_rht": (lambda lay: eqq.NVFP4Quantizer(q_layout=lay, use_rht=True), False),
    "nvfp4_sr": (lambda lay: eqq.NVFP4Quantizer(q_layout=lay, stochastic_rounding=True), True),
}
KEY = jax.random.key(1234)


def _codes(data):
    return np.asarray(nv_ref.e2m1_codes(data))


def dequantized_equal(actual, expected, what):
    """Bit-exact, except that a NaN matches any NaN (the oracle's NaN is the host CPU's
    default NaN, whose sign bit differs between x86 and the IEEE canonical NaN)."""
    a = np.asarray(actual).astype(np.float32)
    e = np.asarray(expected).astype(np.float32)
    assert a.shape == e.shape, what
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    np.testing.assert_array_equal(nan_a, nan_e, err_msg=f"{what}: NaN positions")
    assert_same_bytes(np.where(nan_a, 0, a), np.where(nan_e, 0, e), what)
    assert np.asarray(actual).dtype == np.asarray(expected).dtype, what


def _check_empty(t, x, fa):
    """Zero-size x: every part exists with the documented (empty) shapes."""
    fa = fa % x.ndim
    for part in (t.rowwise, t.colwise):
        assert part.data.size == 0 and part.scale_inv.size == 0
        assert part.dequantize().shape == x.shape


def check_against_oracle(x, name, layout, fa, impl, dequantize=True):
    """quantize(x) (and its dequantize, which compiles a bit-level graph per shape, so the
    big matrices skip it) against the oracle, byte for byte."""
    make, keyed = MODES[name]
    q = make(layout)
    kw = {"key": KEY} if keyed else {}
    t = eqq.quantize(jnp.asarray(x), q, fa, impl=impl, **kw)
    xn = np.asarray(x)
    if xn.size == 0:
        return _check_empty(t, xn, fa)
    row, col = layout.has_rowwise, layout.has_colwise
    if name.startswith("mxfp8"):
        o = oracle_nd.mxfp8_quantize_nd(xn, q.q_dtype, fa, rowwise=row, colwise=col)
        parts = [("row", t.rowwise), ("col", t.colwise)]
        for tag, part in parts:
            if part is None:
                assert o[tag] is None
                continue
            assert_same_bytes(u8(part.data), u8(o[tag]), f"{tag} data")
            assert_same_bytes(u8(part.scale_inv), o[f"{tag}_scale"], f"{tag} scale")
            assert part.scale_inv.dtype == jnp.float8_e8m0fnu
            if not dequantize:
                continue
            expected = oracle_nd.mxfp8_dequantize_nd(
                o[tag], o[f"{tag}_scale"], xn.dtype, fa, rowwise=tag == "row"
            )
            dequantized_equal(part.dequantize(), expected, f"{tag} dequantize")
        return t
    use_rht = q.use_rht and col
    key_words = np.asarray(jax.random.key_data(KEY)) if keyed else None
    o = oracle_nd.nvfp4_quantize_nd(
        xn, fa, rowwise=row, colwise=col, use_2d=q.use_2d, use_rht=use_rht, key=key_words
    )
    for tag, part in (("row", t.rowwise), ("col", t.colwise)):
        if part is None:
            assert o[tag] is None
            continue
        assert part.data.dtype == jnp.float4_e2m1fn and part.scale_inv.dtype == jnp.float8_e4m3fn
        assert_same_bytes(_codes(part.data), o[tag], f"{tag} codes")
        assert_same_bytes(u8(part.scale_inv), o[f"{tag}_scale"], f"{tag} scale")
        f32_bits_equal(part.amax, o[f"{tag}_amax"], f"{tag} amax")
        if not dequantize:
            continue
        expected = oracle_nd.nvfp4_dequantize_nd(
            o[tag], o[f"{tag}_scale"], o[f"{tag}_amax"], xn.dtype, xn.shape, fa,
            rowwise=tag == "row", use_rht=use_rht and tag == "col",
        )
        dequantized_equal(part.dequantize(), expected, f"{tag} dequantize")
    return t


def _applicable(name, shape, fa):
    fa = fa % len(shape)
    if name == "nvfp4_rht" and shape[fa - 1] % 16:
        return False
    return True


# Every mode on one aligned shape and the partial-block ones; the other shapes in turn.
_EDGES = [((32, 64), -1), ((4, 100, 64), -2), ((33, 65), -1), ((7, 13), -1)]
KERNEL_ORACLE_CASES = every_then_cycled(
    _EDGES, [case for case in SHAPES if case not in _EDGES], [(name,) for name in MODES]
)


@pytest.mark.skipif(IMPL == "reference", reason="the full matrix needs the CPU kernels")
@pytest.mark.parametrize("shape,fa,name", KERNEL_ORACLE_CASES, ids=str)
def test_kernels_match_oracle(name, shape, fa):
    if not _applicable(name, shape, fa):
        pytest.skip("RHT needs the blocked axis % 16 == 0 (tested in test_block_errors)")
    x = random_input(shape, jnp.bfloat16, seed=len(shape) + shape[-1])
    small = int(np.prod(shape)) <= 4096
    check_against_oracle(x, name, L.ROWWISE_COLWISE, fa, "ffi", dequantize=small)


@pytest.mark.skipif(IMPL == "reference", reason="needs the CPU kernels")
@pytest.mark.parametrize("name", list(MODES))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
@pytest.mark.parametrize("layout", [L.ROWWISE, L.COLWISE])
def test_kernels_dtypes_and_single_layouts(name, dtype, layout):
    if name == "nvfp4_rht" and layout is L.ROWWISE:
        pytest.skip("RHT needs a colwise part")
    x = random_input((48, 80), dtype, seed=3, scale=20.0)
    check_against_oracle(x, name, layout, -1, "ffi", dequantize=dtype == jnp.float16)


def test_rowwise_1d_input():
    x = random_input((45,), jnp.float32, seed=4)
    for name in ("mxfp8_e4m3", "nvfp4"):
        check_against_oracle(x, name, L.ROWWISE, -1, IMPL)


# A representative subset through the pure-JAX reference (the kernels' own specification).
REFERENCE_CASES = [
    ("mxfp8_e4m3", (3, 5, 40), -2, jnp.bfloat16),
    ("mxfp8_e5m2", (33, 65), -1, jnp.float32),
    ("nvfp4", (3, 5, 40), -2, jnp.float16),
    ("nvfp4_2d", (33, 65), -1, jnp.bfloat16),
    ("nvfp4_rht", (2, 32, 24), -1, jnp.bfloat16),
    ("nvfp4_sr", (3, 5, 40), -2, jnp.float32),
]


@pytest.mark.parametrize("name,shape,fa,dtype", REFERENCE_CASES)
def test_reference_matches_oracle(name, shape, fa, dtype):
    x = random_input(shape, dtype, seed=11, scale=5.0)
    check_against_oracle(x, name, L.ROWWISE_COLWISE, fa, "reference")


# --------------------------------------------------------------------------------------------
# Edge values


def _special_tensor(dtype) -> np.ndarray:
    """(64, 64): a zero block, NaN / +-inf inside blocks, subnormals (of float32 and of the
    input dtype), values at and above the FP8/FP4 ranges, E8M0 extremes, a block whose amax
    is a float32 subnormal, mixed magnitudes."""
    info = ml_dtypes.finfo(dtype) if dtype == ml_dtypes.bfloat16 else np.finfo(dtype)
    x = np.array(random_input((64, 64), jnp.float32, seed=12))
    x[0, :] = 0.0
    x[1, 3], x[1, 40] = np.nan, -np.nan
    x[2, 5], x[2, 50] = np.inf, -np.inf
    x[3, :] = np.float32(info.tiny) * np.arange(1, 65, dtype=np.float32) / 64
    x[4, :] = 448.0 * (1 + np.arange(64, dtype=np.float32) / 64)
    x[5, :] = -57344.0 * (1 + np.arange(64, dtype=np.float32) / 128)
    x[6, :] = 3.0e38 if dtype == np.float32 else float(info.max) / 2
    x[7, :8] = float(info.max)
    x[8, :] = 1e-30
    x[9, :] = 6.0 * np.arange(64, dtype=np.float32) / 64
    x[10:, 0] = 1e4
    x[12, :] = x[12, :] * np.logspace(-20, 20, 64).astype(np.float32)
    if dtype == np.float32:
        x[13, :] = np.float32(1e-45) * np.arange(64, dtype=np.float32)  # f32 subnormals
    return x.astype(dtype)


@pytest.mark.skipif(IMPL == "reference", reason="needs the CPU kernels")
@pytest.mark.parametrize("name", list(MODES))
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_special_values(name, dtype):
    with np.errstate(over="ignore", invalid="ignore"):
        x = _special_tensor(dtype)
    check_against_oracle(x, name, L.ROWWISE_COLWISE, -1, "ffi")


@pytest.mark.skipif(IMPL == "reference", reason="needs the CPU kernels")
@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp8_e5m2", "nvfp4", "nvfp4_2d"])
def test_all_bf16_patterns(name):
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(512, 128)
    check_against_oracle(x, name, L.ROWWISE_COLWISE, -1, "ffi", dequantize=False)


# --------------------------------------------------------------------------------------------
# Stochastic rounding statistics (as TE's test: SR is unbiased and beats RN on the mean)


def test_stochastic_rounding_is_unbiased_and_beats_rn():
    x = jnp.asarray(random_input((32, 64), jnp.float32, seed=13))
    sr = eqq.NVFP4Quantizer(q_layout=L.ROWWISE, stochastic_rounding=True)
    rn = eqq.NVFP4Quantizer(q_layout=L.ROWWISE)
    keys = jax.random.split(jax.random.key(5), 256)
    draws = jax.vmap(lambda k: eqq.quantize(x, sr, key=k, impl=IMPL).dequantize())(keys)
    mean = np.asarray(draws).mean(axis=0)
    rn_values = np.asarray(eqq.quantize(x, rn, impl=IMPL).dequantize())
    xn = np.asarray(x)
    mae_sr, mae_rn = np.abs(mean - xn).mean(), np.abs(rn_values - xn).mean()
    assert mae_sr < 0.5 * mae_rn, (mae_sr, mae_rn)
    # Unbiased: the mean error over all elements and draws is ~0 relative to RN's error.
    assert abs((mean - xn).mean()) < 0.05 * mae_rn


# --------------------------------------------------------------------------------------------
# GEMM-ready scales


@pytest.mark.parametrize(
    "name,shape,fa",
    [("mxfp8_e4m3", (200, 96), -1), ("mxfp8_e4m3", (3, 64, 40), -2), ("nvfp4", (130, 80), -1)],
)
def test_gemm_scale_inv_matches_direct_formula(name, shape, fa):
    x = random_input(shape, jnp.float32, seed=14, scale=100.0)
    t = eqq.quantize(jnp.asarray(x), MODES[name][0](L.ROWWISE_COLWISE), fa, impl=IMPL)
    for part, rowwise in ((t.rowwise, True), (t.colwise, name.startswith("nvfp4"))):
        s = u8(part.scale_inv)
        if rowwise:
            mat = s.reshape(-1, s.shape[-1])
        else:  # MXFP8 colwise (M/32, N): tiled transposed, as TE does
            fa_n = fa % len(shape)
            mat = s.reshape(int(np.prod(s.shape[:fa_n])), -1).T
        r, c = mat.shape
        rp, cp = -(-r // 128) * 128, -(-c // 4) * 4
        expected = np.zeros(rp * cp, np.uint8)  # padding byte 0x00
        rows, cols = np.meshgrid(np.arange(r), np.arange(c), indexing="ij")
        expected[oracle_blocks.swizzle_offset(rows, cols, cp)] = mat
        sw = part.gemm_scale_inv()
        assert sw.dtype == part.scale_inv.dtype
        assert_same_bytes(u8(sw).reshape(-1), expected, "swizzled scales")
        assert_same_bytes(u8(eqq.unswizzle_scales(sw, part)), s, "unswizzle round trip")
