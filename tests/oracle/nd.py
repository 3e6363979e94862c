"""N-d MXFP8 / NVFP4 oracle (docs/block_formats.md, "The blocked axes", "MXFP8", "NVFP4",
"Stochastic rounding") built on the 2-D NumPy oracle `blocks` and on `sr` (this package).

x of shape S (rank n) and fa = flatten_axis (made non-negative) are viewed row-major as
(A, K, C, L) = (prod S[:fa-1], S[fa-1], prod S[fa:n-1], S[n-1]). Every (a, c) slab (K, L) is
zero-padded to block multiples (L always; K where blocks or tiles run along it), the slabs
are stacked into one 2-D matrix whose rows are whole slab rows, and the 2-D oracle quantizes
that matrix; the padding is then cut off. Because every slab is padded to whole blocks (and
to whole 16-row tiles in 2D mode), no block or tile of the stacked matrix mixes two slabs,
and the zero padding is exactly the doc's "quantized as if zero-padded".

Conventions of the returned dicts: absent parts are None; FP8 data keep their ml_dtypes
dtype; **NVFP4 data are uint8 E2M1 codes 0..15** (sign at bit 3, as the FFI ops return them;
`sr.e2m1_value` or the dequantizers below decode them); **all scales are uint8
bytes** (E8M0 for MXFP8, E4M3 for NVFP4); amaxes are float32 (1,).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from tests.oracle import blocks as ob
from tests.oracle import sr as osr
from tests.support.bytes import u8

F32 = np.float32
E2M1 = np.dtype(ml_dtypes.float4_e2m1fn)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def view_dims(shape, flatten_axis: int, need_k: bool):
    """(fa, (A, K, C, L)) for x of `shape`; fa in [-n, n) is made non-negative. With fa = 0
    (allowed only when no block runs along K) the view is (prod S[:n-1], 1, 1, L)."""
    shape = tuple(int(d) for d in shape)
    n = len(shape)
    if n < 1:
        raise ValueError("x must have rank >= 1")
    if not -n <= flatten_axis < n:
        raise ValueError(f"flatten_axis {flatten_axis} out of range for rank {n}")
    fa = flatten_axis % n
    if fa == 0:
        if need_k:
            raise ValueError("colwise / 2D output needs flatten_axis >= 1")
        return fa, (math.prod(shape[:-1]), 1, 1, shape[-1])
    return fa, (math.prod(shape[: fa - 1]), shape[fa - 1], math.prod(shape[fa:-1]), shape[-1])


def _pad_kl(x4: np.ndarray, kp: int, lp: int) -> np.ndarray:
    """Zero-pad axes 1 (K) and 3 (L) of an (A, K, C, L) array to kp and lp."""
    a, k, c, l = x4.shape
    out = np.zeros((a, kp, c, lp), dtype=x4.dtype)
    out[:, :k, :, :l] = x4
    return out


# ---------------------------------------------------------------------------------------------
# MXFP8


def mxfp8_quantize_nd(x, q_dtype, flatten_axis: int = -1, rowwise=True, colwise=False):
    """dict(row, row_scale, col, col_scale): row/col data q_dtype of shape S (colwise in N
    layout), row_scale uint8 S[:n-1] + (ceil(L/32),), col_scale uint8
    S[:fa-1] + (ceil(K/32),) + S[fa:]."""
    x = np.asarray(x).astype(F32)  # exact for f32 / bf16 / f16
    s = x.shape
    fa, (a, k, c, l) = view_dims(s, flatten_axis, need_k=colwise)
    b = ob.MX_BLOCK
    x4 = x.reshape(a, k, c, l)
    out = dict(row=None, row_scale=None, col=None, col_scale=None)
    if rowwise:
        lp = _cdiv(l, b) * b
        rows = _pad_kl(x4, k, lp).reshape(-1, lp)  # rows (a, k, c)
        d, sc = ob.mxfp8_quantize_rowwise(rows, q_dtype)
        out["row"] = d.reshape(a, k, c, lp)[..., :l].reshape(s)
        out["row_scale"] = u8(sc).reshape(s[:-1] + (lp // b,))
    if colwise:
        kp = _cdiv(k, b) * b
        cols = _pad_kl(x4, kp, l).transpose(1, 0, 2, 3).reshape(kp, -1)  # columns (a, c, l)
        d, sc = ob.mxfp8_quantize_colwise(cols, q_dtype)
        d = d.reshape(kp, a, c, l)[:k].transpose(1, 0, 2, 3)
        out["col"] = np.ascontiguousarray(d).reshape(s)
        sc = u8(sc).reshape(kp // b, a, c, l).transpose(1, 0, 2, 3)
        out["col_scale"] = np.ascontiguousarray(sc).reshape(s[: fa - 1] + (kp // b,) + s[fa:])
    return out


def mxfp8_dequantize_nd(data, scale, dq_dtype, flatten_axis: int = -1, rowwise=True):
    """Shape-S values of one part: fl(float(q) * 2^(E-127)) cast to dq_dtype. `scale` may be
    uint8 bytes or float8_e8m0fnu; colwise data are in N layout."""
    data = np.asarray(data)
    s = data.shape
    sc = np.asarray(scale).view(np.uint8).view(E8M0)
    fa, (a, k, c, l) = view_dims(s, flatten_axis, need_k=not rowwise)
    if rowwise:
        y = ob.mxfp8_dequantize_rowwise(data.reshape(-1, l), sc.reshape(-1, sc.shape[-1]), dq_dtype)
        return y.reshape(s)
    kb = sc.shape[fa - 1]
    dk = data.reshape(a, k, c, l).transpose(1, 0, 2, 3).reshape(k, -1)
    sk = sc.reshape(a, kb, c, l).transpose(1, 0, 2, 3).reshape(kb, -1)
    y = ob.mxfp8_dequantize_colwise(dk, sk, dq_dtype)
    return np.ascontiguousarray(y.reshape(k, a, c, l).transpose(1, 0, 2, 3)).reshape(s)


# ---------------------------------------------------------------------------------------------
# NVFP4


def _nv_rows(rows, use_2d, amax, key, idx_rows, stream):
    """NVFP4 of a stacked 2-D matrix: (codes uint8, scale bytes, amax (1,)). RN through the
    2-D oracle, or SR: y = fl(x * enc) from the 2-D oracle's block quantities, rounded by
    sr.e2m1_sr with the random bytes of the elements' SR indices `idx_rows` (rowwise:
    in the global x; colwise: in the global T layout)."""
    m, n = rows.shape
    if key is None:
        d, sc, g = ob.nvfp4_quantize(rows, use_2d, amax)
        return u8(d), u8(sc), g
    blocks, sc, enc, g = ob.nvfp4_block_encode(rows, use_2d, amax)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        y = (blocks * enc[:, :, None]).astype(F32).reshape(m, -1)[:, :n]
    r = osr.random_bytes(key, idx_rows, stream)
    return osr.e2m1_sr(y, r), u8(sc), g


def nvfp4_quantize_nd(
    x,
    flatten_axis: int = -1,
    rowwise=True,
    colwise=False,
    use_2d=False,
    use_rht=False,
    sign_mask=0xD7E8,
    key=None,
    offset=None,
    global_shape=None,
    amax=None,
    col_amax=None,
):
    """dict(row, row_scale, row_amax, col, col_scale, col_amax) of NVFP4 on N-d x.

    row: uint8 codes, shape S; row_scale: uint8 E4M3, S[:n-1] + (ceil(L/16),).
    col: uint8 codes in T layout S[fa:] + S[:fa] (element (a, k, c, l) at (c, l, a, k));
    col_scale: S[fa:] + S[:fa-1] + (ceil(K/16),). 2D: 16x16 tiles (a, k//16, c, l//16).
    RHT (1D, colwise only, K % 16 == 0): bf16 RHT along K before the colwise part.
    amax / col_amax: the rowwise / colwise global amax (default: max|x|; the colwise one is
    max|RHT(x)| with RHT, else the rowwise one). key: two uint32 words -> stochastic rounding,
    stream 0 rowwise with index ravel(s + offset, global_shape) of the x element, stream 1
    colwise with index ravel(T(s + offset), T(global_shape)) of the colwise element, its
    position in the global T layout, T(v) = v[fa:] + v[:fa] (with RHT too: the position, not
    the source element) (defaults: offset 0, global_shape S)."""
    x = np.asarray(x).astype(F32)
    s = x.shape
    fa, (a, k, c, l) = view_dims(s, flatten_axis, need_k=colwise or use_2d)
    b = ob.NV_BLOCK
    if use_rht and use_2d:
        raise ValueError("the RHT applies to 1D NVFP4 only")
    if use_rht and colwise and k % b:
        raise ValueError(f"the RHT needs K % 16 == 0, got K = {k}")
    x4 = x.reshape(a, k, c, l)
    i4 = np.zeros((a, k, c, l), np.uint64)  # rowwise SR index, at x's (a, k, c, l)
    it4 = np.zeros((c, l, a, k), np.uint64)  # colwise SR index, at the T layout's (c, l, a, k)
    if key is not None:
        off = np.zeros(len(s), np.int64) if offset is None else offset
        glob = s if global_shape is None else global_shape
        i4 = osr.global_index(s, off, glob).reshape(a, k, c, l)
        if colwise:
            it4 = osr.colwise_global_index(s, off, glob, fa).reshape(c, l, a, k)
    amax_r = ob.global_amax(x) if amax is None else np.asarray(amax, F32).reshape(1)
    kp = _cdiv(k, b) * b if use_2d else k
    lp = _cdiv(l, b) * b
    out = dict(row=None, row_scale=None, row_amax=None, col=None, col_scale=None, col_amax=None)
    if rowwise:
        # slabs (a, c) of (kp, lp) stacked as rows (a, c, k)
        rows = _pad_kl(x4, kp, lp).transpose(0, 2, 1, 3).reshape(-1, lp)
        irows = _pad_kl(i4, kp, lp).transpose(0, 2, 1, 3).reshape(-1, lp)
        d, sc, g = _nv_rows(rows, use_2d, amax_r, key, irows, 0)
        d = d.reshape(a, c, kp, lp)[:, :, :k, :l].transpose(0, 2, 1, 3)
        sc = sc.reshape(a, c, kp, lp // b)[:, :, :k].transpose(0, 2, 1, 3)
        out["row"] = np.ascontiguousarray(d).reshape(s)
        out["row_scale"] = np.ascontiguousarray(sc).reshape(s[:-1] + (lp // b,))
        out["row_amax"] = g
    if colwise:
        xt = x4.transpose(2, 0, 3, 1)  # (C, A, L, K): T-layout rows, grouped per (a, c) slab
        if use_rht:
            xt = ob.rht(xt.reshape(-1, k), sign_mask).astype(F32).reshape(c, a, l, k)
        if col_amax is not None:
            amax_c = np.asarray(col_amax, F32).reshape(1)
        else:
            amax_c = ob.global_amax(xt) if use_rht else amax_r
        lq = lp if use_2d else l  # tiles of the T layout run 16 along L
        kq = _cdiv(k, b) * b

        def pad(t):  # (C, A, L, K) -> (C, A, lq, kq), zeros appended
            return _pad_kl(t.transpose(1, 3, 0, 2), kq, lq).transpose(2, 0, 3, 1)

        rows = pad(xt).reshape(-1, kq)  # rows (c, a, l); blocks along K
        irows = pad(it4.transpose(0, 2, 1, 3)).reshape(-1, kq)  # index in the T layout
        d, sc, g = _nv_rows(rows, use_2d, amax_c, key, irows, 1)
        d = d.reshape(c, a, lq, kq)[:, :, :l, :k].transpose(0, 2, 1, 3)
        sc = sc.reshape(c, a, lq, kq // b)[:, :, :l].transpose(0, 2, 1, 3)
        out["col"] = np.ascontiguousarray(d).reshape(s[fa:] + s[:fa])
        out["col_scale"] = np.ascontiguousarray(sc).reshape(s[fa:] + s[: fa - 1] + (kq // b,))
        out["col_amax"] = g
    return out


def _as_e2m1(data) -> np.ndarray:
    data = np.asarray(data)
    if data.dtype == E2M1:
        return data
    codes = data.astype(np.uint8)
    if codes.size and codes.max() > 15:
        raise ValueError("E2M1 codes must be in 0..15")
    return codes.view(E2M1)


def nvfp4_dequantize_nd(
    data, scale, amax, dq_dtype, shape, flatten_axis=-1, rowwise=True, use_rht=False,
    sign_mask=0xD7E8,
):
    """Shape-`shape` (= S) values of one part: fl(fl(float(q) * float(sdb)) * fl(amax/2688)),
    for the colwise part in float32 followed by the inverse RHT (if use_rht) and moved back
    from the T layout; rounded once to dq_dtype. `data`: uint8 codes or float4_e2m1fn;
    `scale`: uint8 bytes or float8_e4m3fn."""
    s = tuple(int(d) for d in shape)
    q = _as_e2m1(data)
    sc = np.asarray(scale).view(np.uint8).view(E4M3)
    fa, (a, k, c, l) = view_dims(s, flatten_axis, need_k=not rowwise)
    if rowwise:
        y = ob.nvfp4_dequantize(q.reshape(-1, l), sc.reshape(-1, sc.shape[-1]), amax, dq_dtype)
        return y.reshape(s)
    y = ob.nvfp4_dequantize_colwise(
        q.reshape(-1, k), sc.reshape(-1, sc.shape[-1]), amax, dq_dtype, use_rht, sign_mask
    )  # (K, C*L*A)
    return np.ascontiguousarray(y.reshape(k, c, l, a).transpose(3, 0, 1, 2)).reshape(s)
