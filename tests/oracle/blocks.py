"""Independent NumPy + ml_dtypes oracle for the block-scaled formats: MXFP8, NVFP4 (1D, 2D,
RHT) and the cuBLAS 128x4 scale swizzle.

Written from te_reference.md §1.4-1.5, §2.3, §2.6, §4.4, §7.1-7.2 and §13.1 as the plain
procedure the kernels run: NumPy float32 arithmetic (IEEE, subnormals kept), ml_dtypes casts
where their rounding is the specified one (E4M3/E5M2 after clipping, E2M1, bfloat16: all RNE;
E2M1 and FP8 NaN fixed up by hand), E8M0 computed from frexp (ml_dtypes rounds E8M0 half up
and maps 0 to NaN). Inputs are 2-D views (M, N). Nothing here shares code with eqx_quant.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

F32 = np.float32
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
E2M1 = np.dtype(ml_dtypes.float4_e2m1fn)
BF16 = np.dtype(ml_dtypes.bfloat16)
FLT_MAX = np.finfo(np.float32).max
FP8_MAX = {E4M3: F32(448.0), E5M2: F32(57344.0)}
FP8_NAN_BYTE = 0x7F
E2M1_NAN_CODE = 0x7  # +6: satfinite conversion of NaN (cuda_fp4.hpp)
MX_BLOCK = 32
NV_BLOCK = 16


def _f32(x) -> np.ndarray:
    return np.asarray(x).astype(F32)


def _nan_to_zero_abs(a: np.ndarray) -> np.ndarray:
    a = np.abs(_f32(a))
    a[np.isnan(a)] = 0.0
    return a


def _pad_cols(a: np.ndarray, block: int) -> np.ndarray:
    m, n = a.shape
    nb = -(-n // block)
    out = np.zeros((m, nb * block), dtype=a.dtype)
    out[:, :n] = a
    return out


def to_fp8(y: np.ndarray, q_dtype) -> np.ndarray:
    """Saturating RNE float32 -> FP8 (clip, then ml_dtypes' RNE cast); NaN -> byte 0x7F."""
    q_dtype = np.dtype(q_dtype)
    y = np.asarray(y, dtype=F32)
    m = FP8_MAX[q_dtype]
    q = np.asarray(np.clip(y, -m, m)).astype(q_dtype)
    raw = q.view(np.uint8).copy()
    raw[np.isnan(y)] = FP8_NAN_BYTE
    return raw.view(q_dtype)


def to_e2m1(y: np.ndarray) -> np.ndarray:
    """Saturating RNE float32 -> E2M1 (ml_dtypes saturates); NaN -> +6 (code 0x7)."""
    y = np.asarray(y, dtype=F32)
    q = y.astype(E2M1)
    codes = q.view(np.uint8).copy()
    codes[np.isnan(y)] = E2M1_NAN_CODE
    return codes.view(E2M1)


# ---------------------------------------------------------------------------------------------
# MXFP8


def e8m0_round_up(v) -> np.ndarray:
    """E8M0 byte of the smallest power of two >= v (v >= 0), i.e. 127 + ceil(log2 v),
    clamped to [0x00, 0xFE]; v = 0 -> 0x00, NaN -> 0xFF, +inf -> 0xFE."""
    v = np.asarray(v, dtype=F32)
    frac, exp = np.frexp(v)  # v = frac * 2^exp, frac in [0.5, 1): exact, subnormals too
    ceil_log2 = np.where(frac == 0.5, exp - 1, exp).astype(np.int64)
    e = np.clip(ceil_log2 + 127, 0, 254)
    e = np.where(v == 0, 0, e)
    e = np.where(np.isposinf(v), 0xFE, e)
    e = np.where(np.isnan(v), 0xFF, e)
    return e.astype(np.uint8)


def _mx_rowwise(x, q_dtype):
    q_dtype = np.dtype(q_dtype)
    xf = _f32(x)
    m, n = xf.shape
    blocks = _pad_cols(xf, MX_BLOCK).reshape(m, -1, MX_BLOCK)
    rcp = F32(1.0) / FP8_MAX[q_dtype]  # fl(1/fp8_max)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        amax = _nan_to_zero_abs(blocks).max(axis=2)  # maxNum: NaN never wins
        v = (amax * rcp).astype(F32)
        e = e8m0_round_up(v)
        s = np.ldexp(np.ones(e.shape, F32), 127 - e.astype(np.int64)).astype(F32)
        s[e == 255] = np.nan
        y = (blocks * s[:, :, None]).astype(F32)
    data = to_fp8(y, q_dtype).reshape(m, -1)[:, :n]
    return data, e.view(E8M0)


def mxfp8_quantize_rowwise(x, q_dtype):
    """(data (M, N) q_dtype, scale_inv (M, ceil(N/32)) e8m0): 1x32 blocks along N."""
    return _mx_rowwise(x, q_dtype)


def mxfp8_quantize_colwise(x, q_dtype):
    """(data (M, N) q_dtype, scale_inv (ceil(M/32), N) e8m0): 32x1 blocks along M."""
    d, s = _mx_rowwise(np.asarray(x).T, q_dtype)
    return np.ascontiguousarray(d.T), np.ascontiguousarray(s.T)


def mxfp8_dequantize_rowwise(data, scale, dq_dtype):
    """float32(q) * 2^(E-127), then cast to dq_dtype."""
    m, n = data.shape
    e = np.asarray(scale).view(np.uint8).astype(np.int64)
    s = np.ldexp(np.ones(e.shape, F32), e - 127).astype(F32)
    s[e == 255] = np.nan
    s = np.repeat(s, MX_BLOCK, axis=1)[:, :n]
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.asarray(data).astype(F32) * s).astype(F32).astype(dq_dtype)


def mxfp8_dequantize_colwise(data, scale, dq_dtype):
    return np.ascontiguousarray(
        mxfp8_dequantize_rowwise(np.asarray(data).T, np.asarray(scale).T, dq_dtype).T
    )


# ---------------------------------------------------------------------------------------------
# Swizzle


def swizzle_offset(r, c, num_cols):
    """cuBLAS 128x4 tile layout offset of (r, c) in a padded (R, num_cols) scale matrix."""
    tile = (r // 128) * (num_cols // 4) + c // 4
    return tile * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


def swizzle_scales(s, rowwise: bool) -> np.ndarray:
    """Pad with byte 0x00 to (128, 4) multiples (after transposing colwise MXFP8 scales), then
    scatter every element to swizzle_offset. Returns the flat uint8 buffer."""
    u = np.asarray(s).view(np.uint8)
    if not rowwise:
        u = u.T
    r, c = u.shape
    rp, cp = -(-r // 128) * 128, -(-c // 4) * 4
    padded = np.zeros((rp, cp), np.uint8)
    padded[:r, :c] = u
    out = np.full(rp * cp, 0xAA, np.uint8)  # every slot is overwritten
    for i in range(rp):
        for j in range(cp):
            out[swizzle_offset(i, j, cp)] = padded[i, j]
    return out


def unswizzle_scales(flat, rowwise: bool, shape) -> np.ndarray:
    """Inverse of swizzle_scales: uint8 scales of the given unpadded stored shape."""
    r, c = shape if rowwise else shape[::-1]
    rp, cp = -(-r // 128) * 128, -(-c // 4) * 4
    flat = np.asarray(flat).view(np.uint8).reshape(-1)
    out = np.zeros((rp, cp), np.uint8)
    for i in range(rp):
        for j in range(cp):
            out[i, j] = flat[swizzle_offset(i, j, cp)]
    out = out[:r, :c]
    return out if rowwise else np.ascontiguousarray(out.T)


# ---------------------------------------------------------------------------------------------
# RHT


def rht_matrix(sign_mask: int = 0xD7E8) -> np.ndarray:
    """diag(s) @ H16 / 4 in float32; H16 built as the Sylvester Kronecker power of H2."""
    h2 = np.array([[1.0, 1.0], [1.0, -1.0]])
    h = np.kron(np.kron(h2, h2), np.kron(h2, h2))
    s = np.array([-1.0 if (sign_mask >> i) & 1 else 1.0 for i in range(16)])
    return (np.diag(s) @ h / 4.0).astype(F32)


def _tree16(p: np.ndarray) -> np.ndarray:
    """T(p[..., a:b]) = T(first half) + T(second half) in float32, over the last axis."""
    if p.shape[-1] == 1:
        return p[..., 0]
    h = p.shape[-1] // 2
    return (_tree16(p[..., :h]) + _tree16(p[..., h:])).astype(F32)


def _apply(x, mat) -> np.ndarray:
    xf = _f32(x)
    g = xf.reshape(-1, 16)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        prods = (g[:, :, None] * mat[None, :, :]).astype(F32)  # (G, i, j)
        out = _tree16(np.moveaxis(prods, 1, 2))  # sum over i
    return out.reshape(xf.shape)


def rht(x, sign_mask: int = 0xD7E8) -> np.ndarray:
    """bf16 of x @ R along the last axis in groups of 16 (f32 products, pairwise f32 sum)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _apply(x, rht_matrix(sign_mask)).astype(BF16)


def inverse_rht(y, sign_mask: int = 0xD7E8) -> np.ndarray:
    """float32 y @ R^T along the last axis in groups of 16."""
    return _apply(y, rht_matrix(sign_mask).T.copy())


# ---------------------------------------------------------------------------------------------
# NVFP4


def global_amax(x) -> np.ndarray:
    a = _nan_to_zero_abs(x).reshape(-1)
    return np.array([a.max() if a.size else 0.0], dtype=F32)


def global_encode_scale(amax) -> np.float32:
    amax = F32(amax)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s = F32(F32(2688.0) / amax)
    s = F32(np.fmin(s, FLT_MAX))  # fminf: NaN and +inf -> FLT_MAX
    if amax == 0 or s == 0:
        s = F32(1.0)
    return s


def nvfp4_block_encode(x, use_2d: bool = False, global_amax_value=None):
    """The per-block quantities of NVFP4 on the 2-D view x (M, N), before the E2M1 rounding:
    (blocks f32 (M, nb, 16) zero-padded along N, scale_inv e4m3 (M, nb) (the stored bytes
    sdb), enc f32 (M, nb) (the element multiplier, y = fl(x * enc)), amax f32 (1,))."""
    xf = _f32(x)
    m, n = xf.shape
    amax_g = (
        global_amax(xf)
        if global_amax_value is None
        else np.asarray(global_amax_value, F32).reshape(1)
    )
    s_enc = global_encode_scale(amax_g[0])
    factor = F32(s_enc * (F32(1.0) / F32(6.0)))
    s_dec = F32(F32(1.0) / s_enc)
    xp = _pad_cols(xf, NV_BLOCK)
    nb = xp.shape[1] // NV_BLOCK
    blocks = xp.reshape(m, nb, NV_BLOCK)
    babs = _nan_to_zero_abs(blocks)
    if use_2d:  # amax of the 16x16 tile; row r belongs to tile-row r // 16
        block_amax = np.zeros((m, nb), F32)
        for r in range(m):
            t = r // 16
            block_amax[r] = babs[t * 16 : (t + 1) * 16].max(axis=(0, 2))
    else:
        block_amax = babs.max(axis=2)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore", under="ignore"):
        scale = to_fp8((block_amax * factor).astype(F32), E4M3)
        denom = (scale.astype(F32) * s_dec).astype(F32)
        enc = np.fmin((F32(1.0) / denom).astype(F32), FLT_MAX).astype(F32)
    return blocks, scale, enc, amax_g


def nvfp4_quantize(x, use_2d: bool = False, global_amax_value=None):
    """(data e2m1 (M, N), scale_inv e4m3 (M, ceil(N/16)), amax f32 (1,))."""
    m, n = np.shape(x)
    blocks, scale, enc, amax_g = nvfp4_block_encode(x, use_2d, global_amax_value)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        data = to_e2m1((blocks * enc[:, :, None]).astype(F32)).reshape(m, -1)[:, :n]
    return data, scale, amax_g


def nvfp4_quantize_colwise(
    x, use_2d=False, use_rht=False, sign_mask=0xD7E8, global_amax_value=None
):
    """T-layout colwise output: nvfp4_quantize of x.T (after the RHT along M if use_rht)."""
    xt = np.ascontiguousarray(np.asarray(x).T)
    if use_rht:
        xt = rht(xt, sign_mask)
    return nvfp4_quantize(xt, use_2d, global_amax_value)


def nvfp4_dequantize(data, scale, amax, dq_dtype):
    """(float(q) * float(sdb)) * (amax / 2688) in float32, then cast."""
    r, k = data.shape
    s = np.repeat(np.asarray(scale).astype(F32), NV_BLOCK, axis=1)[:, :k]
    tsi = F32(F32(np.asarray(amax, F32).reshape(-1)[0]) / F32(2688.0))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        y = ((np.asarray(data).astype(F32) * s).astype(F32) * tsi).astype(F32)
        return y.astype(dq_dtype)


def nvfp4_dequantize_colwise(data, scale, amax, dq_dtype, use_rht=False, sign_mask=0xD7E8):
    y = nvfp4_dequantize(data, scale, amax, F32)
    if use_rht:
        y = inverse_rht(y, sign_mask)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(y.astype(dq_dtype).T)
