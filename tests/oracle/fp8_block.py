"""Independent oracle for FP8 block scaling (1x128 / 128x128), numpy + ml_dtypes only.

Written from TE's kernels' rules (`common/recipe/recipe_common.cuh`, `compute_scale_from_amax`;
`common/transpose/quantize_transpose_{vector,square}_blockwise.cu`) as docs/block_formats.md
states them, not from eqx_quant's JAX code. numpy's float32 arithmetic is IEEE (subnormals
kept, round to nearest even), as the kernels' is.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from tests.oracle.fp8 import fp8_max, to_fp8

F32 = np.float32
BLOCK = 128
INPUT_MAX = {
    np.dtype(np.float32): F32(np.finfo(np.float32).max),
    np.dtype(ml_dtypes.bfloat16): F32(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
    np.dtype(np.float16): F32(np.finfo(np.float16).max),
}


def _blocks(use_2d: bool) -> tuple[int, int]:
    return (BLOCK, BLOCK) if use_2d else (1, BLOCK)


def scales(x2d: np.ndarray, q_dtype, use_2d: bool, power_2: bool, epsilon: float) -> np.ndarray:
    """The float32 scale of every block of a 2-D array (x's own dtype decides the value of an
    overflowing scale)."""
    br, bc = _blocks(use_2d)
    r, c = x2d.shape
    nr, nc = math.ceil(r / br), math.ceil(c / bc)
    mag = np.abs(x2d.astype(F32))
    mag[np.isnan(mag)] = 0  # fmaxf ignores NaN
    padded = np.zeros((nr * br, nc * bc), F32)
    padded[:r, :c] = mag
    amax = padded.reshape(nr, br, nc, bc).max(axis=(1, 3)) if r and c else np.zeros((nr, nc), F32)
    amax = np.where(amax < F32(epsilon), F32(epsilon), amax).astype(F32)
    with np.errstate(divide="ignore", over="ignore"):
        scale = (fp8_max(q_dtype) / amax).astype(F32)
    scale = np.where(np.isinf(scale), INPUT_MAX[np.dtype(x2d.dtype)], scale).astype(F32)
    if power_2:
        scale = (scale.view(np.uint32) & np.uint32(0xFF800000)).view(F32)
    return np.where((amax == 0) | np.isinf(amax), F32(1), scale).astype(F32)


def _expand(s: np.ndarray, shape, use_2d: bool) -> np.ndarray:
    br, bc = _blocks(use_2d)
    return np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[: shape[0], : shape[1]]


def quantize_2d(x2d, q_dtype, use_2d=False, power_2=True, epsilon=0.0):
    """(FP8 data, float32 scale_inv per block) of a 2-D array."""
    s = scales(x2d, q_dtype, use_2d, power_2, epsilon)
    with np.errstate(over="ignore", invalid="ignore"):
        y = (x2d.astype(F32) * _expand(s, x2d.shape, use_2d)).astype(F32)
    return to_fp8(y, q_dtype), (F32(1) / s).astype(F32)


def quantize(x, q_dtype, flatten_axis, use_2d=False, power_2=True, epsilon=0.0):
    """{"row", "row_scale", "col", "col_scale"} of an N-D x: the 2-D view `(prod S[:fa],
    prod S[fa:])` quantized, and its transpose quantized (stored as `S[fa:] + S[:fa]`)."""
    s, fa = x.shape, flatten_axis
    x2d = x.reshape(math.prod(s[:fa]), math.prod(s[fa:]))
    row, row_scale = quantize_2d(x2d, q_dtype, use_2d, power_2, epsilon)
    col, col_scale = quantize_2d(np.ascontiguousarray(x2d.T), q_dtype, use_2d, power_2, epsilon)
    return {"row": row.reshape(s), "row_scale": row_scale,
            "col": col.reshape(s[fa:] + s[:fa]), "col_scale": col_scale}


def dequantize_2d(q2d, scale_inv, use_2d, dq_dtype) -> np.ndarray:
    """`fl(float32(q) * scale_inv)` per block, rounded once to `dq_dtype`."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = (q2d.astype(F32) * _expand(scale_inv, q2d.shape, use_2d)).astype(F32)
    return y.astype(dq_dtype)
