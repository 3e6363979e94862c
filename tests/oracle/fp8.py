"""Independent bit-level oracle for per-tensor FP8 quantization (numpy + ml_dtypes only).

Written from the TE/JAX specification (te_reference.md §1.1-1.3, §1.8, §2.2, §3, §6.2),
not from eqx_quant's JAX code. Every function takes and returns numpy arrays and has no
side effects. All arithmetic is IEEE float32 unless stated otherwise.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

F32 = np.float32
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
_FP8_MAX = {E4M3: F32(448.0), E5M2: F32(57344.0)}
NAN_BYTE = 0x7F  # canonical positive NaN used for both FP8 formats


def fp8_max(q_dtype) -> np.float32:
    """Largest finite value of an FP8 format as float32 (448 for e4m3fn, 57344 for e5m2)."""
    q = np.dtype(q_dtype)
    if q not in _FP8_MAX:
        raise ValueError(f"unsupported FP8 dtype {q}")
    return _FP8_MAX[q]


def _norm_axis(flatten_axis: int, ndim: int) -> int:
    """Normalise flatten_axis: negative values map to fa % ndim; result must lie in [0, ndim]."""
    fa = flatten_axis % ndim if (flatten_axis < 0 and ndim > 0) else flatten_axis
    if not 0 <= fa <= ndim:
        raise ValueError(f"flatten_axis {flatten_axis} out of range for ndim {ndim}")
    return fa


def bytes_of(a: np.ndarray) -> np.ndarray:
    """Raw bytes of an array as uint8 (same shape for 1-byte dtypes such as FP8)."""
    a = np.asarray(a).copy(order="C")
    if a.dtype.itemsize == 1:
        return a.view(np.uint8).reshape(a.shape)
    return a.reshape(-1).view(np.uint8)


def to_fp8(y_f32: np.ndarray, q_dtype) -> np.ndarray:
    """Saturating RNE cast float32 -> FP8.

    Clips to [-max, max] (so +-inf -> +-max), rounds to nearest even via ml_dtypes, keeps
    the sign of zero, and writes every NaN as the byte 0x7F. Input must already be float32
    (a float64 input would be rounded twice), so anything else raises TypeError.
    """
    y = np.asarray(y_f32)
    if y.dtype != np.float32:
        raise TypeError(f"to_fp8 expects float32 input, got {y.dtype}")
    m = fp8_max(q_dtype)
    clipped = np.clip(y, -m, m)  # NaN passes through unchanged
    q = clipped.astype(np.dtype(q_dtype)).reshape(-1)  # 1-D copy
    raw = q.view(np.uint8)
    raw[np.isnan(y).reshape(-1)] = NAN_BYTE
    return raw.view(np.dtype(q_dtype)).reshape(y.shape)


def compute_scale(amax_f32, q_dtype, margin: float, prev_scale_f32) -> np.ndarray:
    """TE/JAX compute_scale_from_amax in float32, elementwise (shapes (1,) or (B,1)).

    sf = (fp8_max / amax) / 2**margin, with 2**margin = float32(2) ** float32(margin);
    sf = prev where amax <= 0 (or NaN) or amax is not finite. No epsilon, no clamp, so a
    tiny amax gives sf = inf.
    """
    amax = np.asarray(amax_f32, dtype=F32)
    prev = np.asarray(prev_scale_f32, dtype=F32)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        pow_margin = F32(2.0) ** F32(margin)
        sf = (fp8_max(q_dtype) / amax) / pow_margin
        sf = np.where(amax > 0, sf, prev)
        sf = np.where(np.isfinite(amax), sf, prev)
    return np.asarray(sf, dtype=F32)


def reciprocal(scale) -> np.ndarray:
    """float32 1/scale, IEEE (1/inf = 0, 1/0 = inf)."""
    s = np.asarray(scale, dtype=F32)
    with np.errstate(divide="ignore", over="ignore"):
        return np.asarray(F32(1.0) / s, dtype=F32)


def amax(x) -> np.ndarray:
    """max |float32(x)| ignoring NaN (maxNum, kernel semantics).

    0.0 when empty or all-NaN. Shape (1,), float32.
    """
    a = np.abs(np.asarray(x).astype(F32).reshape(-1))
    a = a[~np.isnan(a)]
    return np.array([a.max() if a.size else 0.0], dtype=F32)


def _tree(v: np.ndarray) -> np.ndarray:
    """Pairwise tree sum along axis 0 of a float32 array (see tree_sum)."""
    n = v.shape[0]
    if n == 0:
        return np.zeros(v.shape[1:], dtype=F32)
    if n == 1:
        return v[0]
    h = (n + 1) // 2
    with np.errstate(over="ignore", invalid="ignore"):
        return (_tree(v[:h]) + _tree(v[h:])).astype(F32)


def tree_sum(v: np.ndarray, axis: int) -> np.ndarray:
    """Canonical float32 pairwise tree sum along one axis.

    T(empty) = +0.0, T([a]) = a, otherwise with h = (n+1)//2: T(v[:h]) + T(v[h:])
    as one float32 add. Vectorised over the other axes; the axis is removed.
    """
    v = np.asarray(v)
    if v.dtype != np.float32:
        raise TypeError(f"tree_sum expects float32 input, got {v.dtype}")
    return np.array(_tree(np.moveaxis(v, axis, 0)), dtype=F32, copy=True)


def dbias(x, flatten_axis: int, keep: int = 0) -> np.ndarray:
    """float32(x) tree-summed over axes keep..fa-1, innermost (fa-1) first, then fa-2, ..., keep.

    Axes 0..keep-1 are kept; result shape is x.shape[:keep] + x.shape[fa:], dtype float32.
    """
    f = np.asarray(x).astype(F32)
    fa = _norm_axis(flatten_axis, f.ndim)
    if not 0 <= keep <= fa:
        raise ValueError(f"keep {keep} must lie in [0, flatten_axis={fa}]")
    for ax in range(fa - 1, keep - 1, -1):
        f = tree_sum(f, ax)
    return np.asarray(f, dtype=F32)


def canonical_nan_cast(v, dtype) -> np.ndarray:
    """float32 `v` cast (RNE, overflow to inf) to `dtype`, every NaN the positive quiet NaN."""
    v = np.asarray(v, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(np.where(np.isnan(v), F32(np.nan), v).astype(dtype))


def dbias_cast(x, flatten_axis: int) -> np.ndarray:
    """Public dbias result: float32 tree sum over axes 0..fa-1, cast (RNE) to x's dtype."""
    x = np.asarray(x)
    return canonical_nan_cast(dbias(x, flatten_axis, 0), x.dtype)


def quantize_tensor(x, scale, q_dtype, flatten_axis: int, rowwise: bool, colwise: bool) -> dict:
    """Per-tensor FP8 quantization of one example with a given scale.

    y = float32(x) * float32(scale[0]) (one multiply), data = to_fp8(y). Returns
    dict(row=data or None, col=transposed data or None, scale_inv=(1,), amax=(1,)).
    col is the transpose of the 2-D view (prod(S[:fa]), prod(S[fa:])) reshaped to
    S[fa:] + S[:fa].
    """
    x = np.asarray(x)
    shape = x.shape
    fa = _norm_axis(flatten_axis, x.ndim)
    s = np.asarray(scale, dtype=F32).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(F32) * s[0]
    data = to_fp8(np.asarray(y, dtype=F32), q_dtype)
    col = None
    if colwise:
        m = int(np.prod(shape[:fa], dtype=np.int64))
        n = int(np.prod(shape[fa:], dtype=np.int64))
        col = np.ascontiguousarray(data.reshape(m, n).T).reshape(shape[fa:] + shape[:fa])
    return dict(
        row=data if rowwise else None,
        col=col,
        scale_inv=reciprocal(s[:1]),
        amax=amax(x),
    )


def current_scaling(x, q_dtype, flatten_axis: int, rowwise: bool, colwise: bool) -> dict:
    """Current scaling: amax(x) -> compute_scale(margin 0, prev 1.0) -> quantize_tensor.

    Returns quantize_tensor's dict plus "scale" (1,).
    """
    a = amax(x)
    s = compute_scale(a, q_dtype, 0.0, np.ones((1,), dtype=F32))
    out = quantize_tensor(x, s, q_dtype, flatten_axis, rowwise, colwise)
    out["scale"] = s
    return out


def delayed_update(amax_history, scale, new_amax, q_dtype, margin: float, algo: str = "max"):
    """Delayed-scaling state update (TE §1.3). Returns (new_history (L,), new_scale (1,)).

    h[0] = new_amax; amax_for_scale = np.max(h) (NaN propagates) for "max", or h[0] for
    "most_recent"; scale = compute_scale(amax_for_scale, margin, prev=scale);
    h = roll(h, -1); h[0] = 0.
    """
    h = np.array(amax_history, dtype=F32, copy=True).reshape(-1)
    h[0] = np.asarray(new_amax, dtype=F32).reshape(-1)[0]
    if algo == "max":
        a = np.array([np.max(h)], dtype=F32)
    elif algo == "most_recent":
        a = h[:1].copy()
    else:
        raise ValueError(f"unknown amax algo {algo!r}")
    new_scale = compute_scale(a, q_dtype, margin, np.asarray(scale, dtype=F32))
    h = np.roll(h, -1)
    h[0] = 0.0
    return h, new_scale


def dequantize_tensor(data, scale_inv, out_dtype) -> np.ndarray:
    """float32(data) * float32(scale_inv[0]), cast to out_dtype."""
    si = np.asarray(scale_inv, dtype=F32).reshape(-1)[0]
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.asarray(data).astype(F32) * si
    return np.asarray(y, dtype=F32).astype(out_dtype)
