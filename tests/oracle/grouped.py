"""Independent NumPy + ml_dtypes oracle of grouped (MoE) quantization (docs/grouped.md).

Every group is quantized by the existing dense oracles (`fp8`, `blocks`, `nd`, `sr` of
this package) on its own rows of the 2-D view; this module only computes the
clamped group offsets and assembles the grouped layouts of the doc:

- tensor scaling: rowwise data in x's shape, colwise data flat `(R*N,)` with group g's
  `(N, rows_g)` transpose at `start_g * N`, scale_inv / amax float32 `(G,)`;
- MXFP8 / NVFP4: data as above (MXFP8 colwise in the N layout), scales as per-group
  matrices `T_g` padded to `(pad128, pad4)` with 0x00 and stored at `O_g` in the cuBLAS
  128x4 tile order, in a zero-filled buffer of the worst-case length given by `W(R, G, u)`;
- rows past `start_G` are zero bytes and enter no amax or dbias;
- dbias: the canonical float32 tree sum of each group's rows, cast to x's dtype.

Conventions: FP8 data are returned as uint8 bytes, NVFP4 data as uint8 E2M1 codes (0..15),
block scales as uint8 bytes, tensor scale_inv and amaxes as float32. Nothing here imports
eqx_quant or JAX.
"""

from __future__ import annotations

import math

import numpy as np

from tests.oracle import blocks as ob
from tests.oracle import fp8 as ot
from tests.oracle import nd as ond
from tests.support.bytes import u8

F32 = np.float32


# ---------------------------------------------------------------------------------------------
# Geometry


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pad_to(a: int, m: int) -> int:
    return cdiv(a, m) * m


def view_2d(shape, flatten_axis: int):
    """(R, N, U) of the grouped 2-D view: R = prod S[:fa], N = prod S[fa:], U = prod S[1:fa]."""
    shape = tuple(int(d) for d in shape)
    n = len(shape)
    fa = flatten_axis % n
    if fa < 1:
        raise ValueError("grouped quantization needs flatten_axis >= 1")
    return math.prod(shape[:fa]), math.prod(shape[fa:]), math.prod(shape[1:fa])


def group_offsets(group_sizes, num_rows: int, rows_per_unit: int = 1):
    """(start (G+1,), rows (G,)) as int64, clamped exactly as the doc says:
    rows_g = min(max(size_g, 0) * U, R - start_g), start_{g+1} = start_g + rows_g."""
    sizes = [int(s) for s in np.asarray(group_sizes).reshape(-1)]
    start = [0]
    rows = []
    for s in sizes:
        r = min(max(s, 0) * rows_per_unit, num_rows - start[-1])
        rows.append(r)
        start.append(start[-1] + r)
    return np.array(start, np.int64), np.array(rows, np.int64)


def worst_case_units(num_rows: int, num_groups: int, u: int) -> int:
    """W(R, G, u): the largest sum_g ceil(rows_g / u) over group sizes summing to at most R."""
    if num_rows == 0:
        return 0
    k = min(num_groups, num_rows)
    return k - 1 + cdiv(num_rows - k + 1, u)


def worst_case_units_brute(num_rows: int, num_groups: int, u: int) -> int:
    """W by exhaustive search over compositions (tiny R and G only): a self-test of the formula."""
    best = 0

    def rec(g, left, acc):
        nonlocal best
        if g == num_groups:
            best = max(best, acc)
            return
        for r in range(left + 1):
            rec(g + 1, left - r, acc + cdiv(r, u))

    rec(0, num_rows, 0)
    return best


def rowwise_scale_length(n: int, num_rows: int, num_groups: int, block: int) -> int:
    return 128 * pad_to(cdiv(n, block), 4) * worst_case_units(num_rows, num_groups, 128)


def colwise_scale_length(n: int, num_rows: int, num_groups: int, block: int) -> int:
    return pad_to(n, 128) * 4 * worst_case_units(num_rows, num_groups, 4 * block)


def swizzle_offset(i, j, q: int):
    """The doc's formula, written out here (compared with `blocks`' copy in the tests)."""
    return ((i // 128) * (q // 4) + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4


def swizzled_region(t) -> np.ndarray:
    """T (r, c) uint8 -> its padded (pad128(r), pad4(c)) region in the 128x4 tile order."""
    t = np.asarray(t, np.uint8)
    r, c = t.shape
    p, q = pad_to(r, 128), pad_to(c, 4)
    out = np.full(p * q, 0xA5, np.uint8)  # every slot is written below
    padded = np.zeros((p, q), np.uint8)
    padded[:r, :c] = t
    ii, jj = np.meshgrid(np.arange(p), np.arange(q), indexing="ij")
    out[swizzle_offset(ii, jj, q).reshape(-1)] = padded.reshape(-1)
    return out


def region_shapes(t_shapes):
    """(O_g, P_g, Q_g) of each group's region."""
    out, o = [], 0
    for r, c in t_shapes:
        p, q = pad_to(r, 128), pad_to(c, 4)
        out.append((o, p, q))
        o += p * q
    return out


def t_shapes(group_sizes, num_rows, rows_per_unit, n, block, colwise: bool):
    """Shape of each group's T_g: (rows_g, ceil(N/B)) rowwise, (N, ceil(rows_g/B)) colwise."""
    _, rows = group_offsets(group_sizes, num_rows, rows_per_unit)
    if colwise:
        return [(n, cdiv(int(r), block)) if r else (n, 0) for r in rows]
    return [(int(r), cdiv(n, block)) for r in rows]


def scale_regions(group_sizes, num_rows, rows_per_unit, n, block, colwise: bool):
    """[(O_g, P_g * Q_g)] of each group's swizzled scale region in the grouped buffer."""
    shapes = t_shapes(group_sizes, num_rows, rows_per_unit, n, block, colwise)
    return [(o, p * q) for o, p, q in region_shapes(shapes)]


def assemble_scales(t_mats, length: int) -> np.ndarray:
    """Concatenate the groups' swizzled regions at O_g into a zero buffer of `length` bytes."""
    buf = np.zeros(length, np.uint8)
    o = 0
    for t in t_mats:
        reg = swizzled_region(t)
        assert o + reg.size <= length, "regions exceed the worst-case length"
        buf[o : o + reg.size] = reg
        o += reg.size
    return buf


def unswizzle_region(buf, offset: int, shape) -> np.ndarray:
    """T_g (r, c) uint8 read back from a grouped buffer at O_g (the inverse of the layout)."""
    r, c = shape
    q = pad_to(c, 4)
    buf = np.asarray(buf).view(np.uint8).reshape(-1)
    if r == 0 or c == 0:
        return np.zeros((r, c), np.uint8)
    ii, jj = np.meshgrid(np.arange(r), np.arange(c), indexing="ij")
    return buf[offset + swizzle_offset(ii, jj, q)]


# ---------------------------------------------------------------------------------------------
# Tree sum / dbias


def tree_sum_rows(v: np.ndarray) -> np.ndarray:
    """Canonical float32 tree sum over axis 0 (split at ceil(n/2); empty -> +0), written as an
    explicit post-order walk (independent of `fp8.tree_sum`, which the tests compare it with)."""
    v = np.asarray(v)
    if v.dtype != np.float32:
        raise TypeError(f"tree_sum_rows expects float32, got {v.dtype}")
    n = v.shape[0]
    if n == 0:
        return np.zeros(v.shape[1:], F32)
    stack = [(0, n, False)]
    results: list[np.ndarray] = []
    while stack:
        lo, hi, expanded = stack.pop()
        if hi - lo == 1:
            results.append(v[lo].astype(F32))
            continue
        if not expanded:
            mid = lo + (hi - lo + 1) // 2
            stack.append((lo, hi, True))
            stack.append((mid, hi, False))
            stack.append((lo, mid, False))
            continue
        right = results.pop()
        left = results.pop()
        with np.errstate(over="ignore", invalid="ignore"):
            results.append(np.asarray(left + right, F32))
    (out,) = results
    return out


def grouped_dbias(x2d, group_sizes, rows_per_unit: int, out_dtype) -> np.ndarray:
    """(G, N): tree sum of each group's rows in float32, cast (RNE) to out_dtype."""
    x2d = np.asarray(x2d)
    start, rows = group_offsets(group_sizes, x2d.shape[0], rows_per_unit)
    xf = x2d.astype(F32)
    out = np.zeros((len(rows), x2d.shape[1]), F32)
    for g in range(len(rows)):
        out[g] = tree_sum_rows(xf[start[g] : start[g + 1]])
    with np.errstate(over="ignore", invalid="ignore"):
        return out.astype(out_dtype)


# ---------------------------------------------------------------------------------------------
# Quantization


def tensor_scaling(x2d, group_sizes, rows_per_unit, q_dtype, rowwise, colwise, scales=None):
    """Current scaling (scales=None: each group's own amax -> scale, margin 0) or delayed
    scaling (scales: float32 (G,), group g quantized with scales[g]).

    dict(row (R, N) uint8 or None, col (R*N,) uint8 or None, scale_inv (G,), amax (G,),
    scale (G,))."""
    x2d = np.asarray(x2d)
    r, n = x2d.shape
    start, rows = group_offsets(group_sizes, r, rows_per_unit)
    g_count = len(rows)
    row = np.zeros((r, n), np.uint8) if rowwise else None
    col = np.zeros(r * n, np.uint8) if colwise else None
    scale = np.zeros(g_count, F32)
    scale_inv = np.zeros(g_count, F32)
    amax = np.zeros(g_count, F32)
    for g in range(g_count):
        xg = x2d[start[g] : start[g + 1]]
        if scales is None:
            s = ot.compute_scale(ot.amax(xg), q_dtype, 0.0, np.ones((1,), F32))
        else:
            s = np.asarray(scales, F32).reshape(-1)[g : g + 1]
        o = ot.quantize_tensor(xg, s, q_dtype, 1, rowwise, colwise)
        scale[g] = s[0]
        scale_inv[g] = o["scale_inv"][0]
        amax[g] = o["amax"][0]
        if rowwise:
            row[start[g] : start[g + 1]] = u8(o["row"])
        if colwise:
            col[start[g] * n : start[g + 1] * n] = u8(o["col"]).reshape(-1)
    return dict(row=row, col=col, scale_inv=scale_inv, amax=amax, scale=scale)


def mxfp8(x2d, group_sizes, rows_per_unit, q_dtype, rowwise, colwise):
    """dict(row (R, N) uint8, row_scale (len,) uint8, col (R, N) uint8 (N layout),
    col_scale (len,) uint8, amax (G,) zeros, row_t / col_t: the per-group T_g matrices)."""
    x2d = np.asarray(x2d)
    r, n = x2d.shape
    start, rows = group_offsets(group_sizes, r, rows_per_unit)
    g_count = len(rows)
    b = ob.MX_BLOCK
    out = dict(row=None, row_scale=None, col=None, col_scale=None, amax=np.zeros(g_count, F32))
    row_t, col_t = [], []
    row = np.zeros((r, n), np.uint8)
    col = np.zeros((r, n), np.uint8)
    for g in range(g_count):
        lo, hi = start[g], start[g + 1]
        if hi == lo:
            row_t.append(np.zeros((0, cdiv(n, b)), np.uint8))
            col_t.append(np.zeros((n, 0), np.uint8))
            continue
        o = ond.mxfp8_quantize_nd(x2d[lo:hi], q_dtype, -1, rowwise=rowwise, colwise=colwise)
        if rowwise:
            row[lo:hi] = u8(o["row"])
            row_t.append(o["row_scale"])  # (rows_g, ceil(N/32))
        if colwise:
            col[lo:hi] = u8(o["col"])
            col_t.append(np.ascontiguousarray(o["col_scale"].T))  # (N, ceil(rows_g/32))
    if rowwise:
        out["row"] = row
        out["row_scale"] = assemble_scales(row_t, rowwise_scale_length(n, r, g_count, b))
        out["row_t"] = row_t
    if colwise:
        out["col"] = col
        out["col_scale"] = assemble_scales(col_t, colwise_scale_length(n, r, g_count, b))
        out["col_t"] = col_t
    return out


def nvfp4(x2d, group_sizes, rows_per_unit, rowwise, colwise, use_2d=False, keys=None):
    """dict(row (R, N) codes, row_scale (len,) uint8, col (R*N,) codes (T layout per group),
    col_scale (len,) uint8, amax (G,) float32 (the group's amax, also its global amax),
    row_t / col_t). keys: None (round to nearest) or per-group uint32 key words (G, 2)."""
    x2d = np.asarray(x2d)
    r, n = x2d.shape
    start, rows = group_offsets(group_sizes, r, rows_per_unit)
    g_count = len(rows)
    b = ob.NV_BLOCK
    amax = np.zeros(g_count, F32)
    row = np.zeros((r, n), np.uint8)
    col = np.zeros(r * n, np.uint8)
    row_t, col_t = [], []
    for g in range(g_count):
        lo, hi = start[g], start[g + 1]
        if hi == lo:
            row_t.append(np.zeros((0, cdiv(n, b)), np.uint8))
            col_t.append(np.zeros((n, 0), np.uint8))
            continue
        xg = x2d[lo:hi]
        amax[g] = ob.global_amax(xg)[0]
        key = None if keys is None else np.asarray(keys, np.uint32)[g]
        o = ond.nvfp4_quantize_nd(
            xg, -1, rowwise=rowwise, colwise=colwise, use_2d=use_2d, key=key,
            amax=amax[g : g + 1], col_amax=amax[g : g + 1],
        )
        if rowwise:
            row[lo:hi] = o["row"]
            row_t.append(o["row_scale"])  # (rows_g, ceil(N/16))
        if colwise:
            col[lo * n : hi * n] = o["col"].reshape(-1)  # (N, rows_g) row-major
            col_t.append(o["col_scale"])  # (N, ceil(rows_g/16))
    out = dict(row=None, row_scale=None, col=None, col_scale=None, amax=amax)
    if rowwise:
        out.update(row=row, row_t=row_t,
                   row_scale=assemble_scales(row_t, rowwise_scale_length(n, r, g_count, b)))
    if colwise:
        out.update(col=col, col_t=col_t,
                   col_scale=assemble_scales(col_t, colwise_scale_length(n, r, g_count, b)))
    return out


# ---------------------------------------------------------------------------------------------
# Dequantization (of the oracle's own parts, group by group)


def dequantize_tensor_rowwise(row, scale_inv, group_sizes, rows_per_unit, out_dtype):
    r, n = row.shape
    start, rows = group_offsets(group_sizes, r, rows_per_unit)
    out = np.zeros((r, n), out_dtype)
    for g in range(len(rows)):
        lo, hi = start[g], start[g + 1]
        out[lo:hi] = ot.dequantize_tensor(row[lo:hi], scale_inv[g : g + 1], out_dtype)
    return out


def dequantize_tensor_colwise(col, scale_inv, group_sizes, rows_per_unit, shape_2d, out_dtype):
    r, n = shape_2d
    start, rows = group_offsets(group_sizes, r, rows_per_unit)
    out = np.zeros((r, n), out_dtype)
    for g in range(len(rows)):
        lo, hi = start[g], start[g + 1]
        t = col[lo * n : hi * n].reshape(n, hi - lo)
        out[lo:hi] = ot.dequantize_tensor(t, scale_inv[g : g + 1], out_dtype).T
    return out


def dequantize_mxfp8(o, q_dtype, group_sizes, rows_per_unit, shape_2d, out_dtype, rowwise):
    r, n = shape_2d
    start, rows = group_offsets(group_sizes, r, rows_per_unit)
    out = np.zeros((r, n), out_dtype)
    tag = "row" if rowwise else "col"
    data = o[tag].view(np.dtype(q_dtype))
    for g in range(len(rows)):
        lo, hi = start[g], start[g + 1]
        if hi == lo:
            continue
        t = o[f"{tag}_t"][g]
        sc = t if rowwise else np.ascontiguousarray(t.T)  # dense layout of the scales
        out[lo:hi] = ond.mxfp8_dequantize_nd(data[lo:hi], sc, out_dtype, -1, rowwise=rowwise)
    return out


def dequantize_nvfp4(o, group_sizes, rows_per_unit, shape_2d, out_dtype, rowwise):
    r, n = shape_2d
    start, rows = group_offsets(group_sizes, r, rows_per_unit)
    out = np.zeros((r, n), out_dtype)
    for g in range(len(rows)):
        lo, hi = start[g], start[g + 1]
        if hi == lo:
            continue
        amax = o["amax"][g : g + 1]
        if rowwise:
            data, sc = o["row"][lo:hi], o["row_t"][g]
        else:
            data = o["col"][lo * n : hi * n].reshape(n, hi - lo)
            sc = o["col_t"][g]
        out[lo:hi] = ond.nvfp4_dequantize_nd(
            data, sc, amax, out_dtype, (hi - lo, n), -1, rowwise=rowwise
        )
    return out
