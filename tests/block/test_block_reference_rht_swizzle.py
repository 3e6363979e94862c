"""Bit-exact tests of the block-format reference, continued: the random Hadamard transform,
the GEMM scale swizzle and input errors (method: test_block_reference.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqx_quant.reference import mxfp8 as mx_ref
from eqx_quant.reference import nvfp4 as nv_ref
from tests.oracle import blocks as ob
from tests.support.block_reference import callback_cores  # noqa: F401 (fixture)
from tests.support.bytes import assert_same_bytes, bits

# ---------------------------------------------------------------------------------------------
# RHT


def test_rht_matrix_orthonormal():
    s = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1])
    for mask in (0xD7E8, 0x0000, 0x0001, 0xFFFF, 0x1234):
        r = nv_ref.rht_matrix(mask)
        assert_same_bytes(r, ob.rht_matrix(mask), f"R for mask {mask:#x}")
        assert set(np.abs(r).ravel()) == {0.25}
        r64 = r.astype(np.float64)
        np.testing.assert_array_equal(r64 @ r64.T, np.eye(16))
    h = nv_ref.rht_matrix(0).astype(np.float64) * 4
    np.testing.assert_array_equal(np.diag(s) @ h / 4, nv_ref.rht_matrix(0xD7E8))
    with pytest.raises(ValueError, match="16-bit"):
        nv_ref.rht_matrix(1 << 16)


@functools.cache
def _jitted_rht(mask: int, inverse: bool):
    fn = nv_ref.inverse_rht if inverse else nv_ref.rht
    return jax.jit(functools.partial(fn, sign_mask=mask))


def test_rht_bf16_rounding_of_exact_sums():
    """Integer inputs make every float32 product and sum exact, so each output must be the
    round-to-nearest-even bf16 of the exact x @ R (many are ties or need rounding)."""
    rng = np.random.default_rng(1)
    x = rng.integers(-4096, 4096, (4, 64)).astype(np.float32)
    for mask in (0xD7E8, 0x0001):
        r = ob.rht_matrix(mask).astype(np.float64)
        exact = (x.astype(np.float64).reshape(-1, 16) @ r).reshape(x.shape)
        want = exact.astype(np.float32).astype(ob.BF16)  # exact in f32, one rounding to bf16
        got = np.asarray(_jitted_rht(mask, False)(jnp.asarray(x)))
        assert_same_bytes(got, want, f"rht mask {mask:#x}")
        assert (want.astype(np.float64) != exact).mean() > 0.5, "most outputs need rounding"
        back = np.asarray(_jitted_rht(mask, True)(jnp.asarray(exact.astype(np.float32))))
        assert_same_bytes(back, x, "inverse of exact values")
    assert (got != np.asarray(_jitted_rht(0xD7E8, False)(jnp.asarray(x)))).any()


def test_rht_summation_order():
    """Wide-range inputs: float32 rounding makes the sum order visible. The reference follows
    the documented pairwise tree (the oracle) and differs from a left-to-right sum."""
    rng = np.random.default_rng(2)
    x = (np.exp2(rng.uniform(-30, 30, (8, 64))) * rng.choice([-1, 1], (8, 64))).astype(np.float32)
    # Output 0 of this group sums [B, 1, -B, 1, 0, ...] / 4: pairwise (B+1) + (-B+1) = 0,
    # left to right ((B+1) - B) + 1 = 1 (B+1 rounds to B in float32).
    s = np.where((0xD7E8 >> np.arange(16)) & 1, -1.0, 1.0)
    x[0, :16] = s * np.array([2.0**27, 1, -(2.0**27), 1] + [0] * 12)
    got = np.asarray(_jitted_rht(0xD7E8, False)(jnp.asarray(x)))
    assert_same_bytes(got, ob.rht(x), "rht vs oracle")
    r = ob.rht_matrix()
    p = x.reshape(-1, 16)[:, :, None] * r[None]
    seq = p[:, 0]
    for i in range(1, 16):
        seq = (seq + p[:, i]).astype(np.float32)
    seq = seq.reshape(x.shape).astype(ob.BF16)
    assert (bits(seq) != bits(got)).any(), "test inputs too tame to see the order"
    inv = np.asarray(_jitted_rht(0xD7E8, True)(jnp.asarray(got)))
    assert_same_bytes(inv, ob.inverse_rht(got), "inverse rht vs oracle")
    np.testing.assert_allclose(inv, x, rtol=2**-6, atol=np.abs(x).max() * 2**-8)


def test_rht_errors():
    x = jnp.ones((24, 32), jnp.bfloat16)
    with pytest.raises(ValueError, match="multiple of 16"):
        nv_ref.rht(jnp.ones((4, 24)))
    with pytest.raises(ValueError, match="M % 16"):
        nv_ref.nvfp4_quantize_colwise(x, use_rht=True)
    with pytest.raises(ValueError, match="1D NVFP4 only"):
        nv_ref.nvfp4_quantize_2x(jnp.ones((32, 32)), use_2d=True, use_rht=True)
    with pytest.raises(ValueError, match="16-bit"):
        nv_ref.rht(jnp.ones((4, 16)), sign_mask=-1)


# ---------------------------------------------------------------------------------------------
# Swizzle

SWIZZLE_CASES = [  # (unpadded stored shape, rowwise)
    ((7, 1), True),
    ((130, 5), True),
    ((33, 2), True),
    ((1, 64), False),
    ((3, 130), False),
    ((9, 200), False),
]


@functools.cache
def _jitted_swizzle(rowwise: bool, shape: tuple):
    sw = jax.jit(functools.partial(mx_ref.swizzle_scales, rowwise=rowwise))
    un = jax.jit(functools.partial(mx_ref.unswizzle_scales, rowwise=rowwise, shape=shape))
    return sw, un


def test_swizzle_offset_formula():
    assert mx_ref.swizzle_offset(0, 0, 4) == 0
    assert mx_ref.swizzle_offset(1, 0, 4) == 16
    assert mx_ref.swizzle_offset(32, 0, 4) == 4
    assert mx_ref.swizzle_offset(0, 3, 4) == 3
    assert mx_ref.swizzle_offset(128, 0, 4) == 512
    assert mx_ref.swizzle_offset(0, 4, 8) == 512
    assert mx_ref.swizzle_offset(129, 5, 8) == 3 * 512 + 16 + 1
    r, c = np.meshgrid(np.arange(256), np.arange(12), indexing="ij")
    offs = mx_ref.swizzle_offset(r, c, 12)
    np.testing.assert_array_equal(offs, ob.swizzle_offset(r, c, 12))
    np.testing.assert_array_equal(np.sort(offs.ravel()), np.arange(256 * 12))


@pytest.mark.parametrize("shape,rowwise", SWIZZLE_CASES)
def test_swizzle_index_mapping(shape, rowwise):
    """Swizzle the two bytes of every element's index: the flat buffer must hold, at
    `swizzle_offset(r, c)`, element (r, c) of the padded (and, colwise, transposed) matrix."""
    r, c = shape if rowwise else shape[::-1]
    rp, cp = -(-r // 128) * 128, -(-c // 4) * 4
    idx = np.arange(1, shape[0] * shape[1] + 1).reshape(shape)  # 0 marks padding
    sw, _ = _jitted_swizzle(rowwise, shape)
    lo = np.asarray(sw(jnp.asarray((idx & 0xFF).astype(np.uint8))), np.int64).reshape(-1)
    hi = np.asarray(sw(jnp.asarray((idx >> 8).astype(np.uint8))), np.int64).reshape(-1)
    flat = lo | hi << 8
    stored = idx if rowwise else idx.T
    want = np.zeros(rp * cp, np.int64)
    for i in range(rp):
        for j in range(cp):
            want[mx_ref.swizzle_offset(i, j, cp)] = stored[i, j] if i < r and j < c else 0
    np.testing.assert_array_equal(flat, want)


@pytest.mark.parametrize("dtype", [jnp.float8_e8m0fnu, jnp.float8_e4m3fn])
@pytest.mark.parametrize("shape,rowwise", SWIZZLE_CASES)
def test_swizzle_round_trip_and_oracle(shape, rowwise, dtype):
    rng = np.random.default_rng(4)
    s = rng.integers(1, 255, shape, dtype=np.uint8).view(np.dtype(dtype))
    sw, un = _jitted_swizzle(rowwise, shape)
    got = sw(jnp.asarray(s))
    assert got.dtype == dtype
    padded = mx_ref.padded_scale_shape(shape, rowwise)
    assert got.shape == padded, (got.shape, padded)
    flat = bits(got).reshape(-1)
    np.testing.assert_array_equal(flat, ob.swizzle_scales(s, rowwise))
    assert (flat == 0).sum() == flat.size - s.size, "padding is byte 0x00, data never 0"
    assert_same_bytes(un(got), s, "unswizzle(swizzle(s))")
    np.testing.assert_array_equal(ob.unswizzle_scales(flat, rowwise, shape), bits(s))


# ---------------------------------------------------------------------------------------------
# Errors


def test_bad_inputs():
    with pytest.raises(ValueError, match="float8_e4m3fn or float8_e5m2"):
        mx_ref.mxfp8_quantize_rowwise(jnp.ones((2, 32)), jnp.float4_e2m1fn)
    with pytest.raises(ValueError, match="2-D"):
        mx_ref.mxfp8_quantize_rowwise(jnp.ones((32,)), jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match="2-D"):
        nv_ref.nvfp4_quantize(jnp.ones((2, 2, 16)))
    with pytest.raises(ValueError, match="does not match"):
        mx_ref.mxfp8_dequantize_rowwise(
            jnp.zeros((2, 64), jnp.float8_e4m3fn),
            jnp.zeros((2, 1), jnp.float8_e8m0fnu),
            jnp.float32,
        )
    with pytest.raises(ValueError, match=r"pad to \(256, 4\)"):
        mx_ref.unswizzle_scales(jnp.zeros((128, 4), jnp.uint8), True, (129, 1))
