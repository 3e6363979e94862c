"""The grouped (MoE) cases of `python -m eqx_quant.bench`: an M x N bf16 token matrix in 8
ragged groups (sizes not multiples of 32), ours against a hand-written jnp version.

The hand-written version is what a user would write without eqx_quant: rowwise MXFP8 of the
whole matrix (a rowwise block never crosses a group), each group's scales gathered into its
padded, swizzled region; for the colwise copy, the rows scattered into a buffer where every
group starts at a multiple of 32 (so that blocks do not straddle groups), quantized colwise
there and gathered back. NVFP4 likewise with blocks of 16 and each group's global scale from
its own amax (a segment max); its colwise codes are left in the group-padded row order (the
per-group transpose of the op would add one more gather, so XLA's figure is a lower bound).
The `_sr_` ops add stochastic rounding (how NVFP4 recipes quantize the gradients of an MoE
layer): ours with `key` (Threefry bits per group), XLA's by uniform noise before the cast.
The `fp8_block` ops (1x128 blocks, TE's power-of-two scales): rowwise blocks run along a row,
so the dense jnp version serves every group; for the colwise copy, the rows scattered into a
buffer where every group starts at a multiple of 128, quantized along its columns there, and
each group's transpose gathered into the op's flat layout (a host-side table, as for MXFP8).
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..reference import grouped, mxfp8
from ._xla import fp8_blocks, mxfp8_blocks

OPS = (
    "grouped_mxfp8_row",
    "grouped_mxfp8_rowcol",
    "grouped_nvfp4_row",
    "grouped_nvfp4_rowcol",
    "grouped_nvfp4_sr_row",
    "grouped_nvfp4_sr_rowcol",
    "grouped_dbias",
    "grouped_fp8_block_row",
    "grouped_fp8_block_rowcol",
)
# Fractions of M per group (8 groups); the last group takes the remainder.
_SHARES = (0.0916, 0.1648, 0.116, 0.1892, 0.061, 0.1404, 0.1038)


def group_sizes(m: int) -> np.ndarray:
    sizes = [int(round(m * s)) for s in _SHARES]
    return np.asarray(sizes + [m - sum(sizes)], np.int32)


def ours(op: str, m: int) -> Callable:
    import eqx_quant as eqq

    sizes = jnp.asarray(group_sizes(m))
    if op == "grouped_dbias":
        return lambda x, scale: eqq.grouped_dbias(x, sizes, check=False, impl="ffi")
    layout = (
        eqq.QuantizeLayout.ROWWISE_COLWISE if op.endswith("rowcol") else eqq.QuantizeLayout.ROWWISE
    )
    if "fp8_block" in op:
        block_q = eqq.Float8BlockQuantizer(q_layout=layout)
        return lambda x, scale: eqq.grouped_quantize(x, sizes, block_q, check=False)
    key = None
    if "nvfp4" in op:
        q = eqq.NVFP4Quantizer(q_layout=layout, stochastic_rounding="_sr_" in op)
        key = jax.random.key(0) if q.stochastic_rounding else None
    else:
        q = eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, layout)
    return lambda x, scale: eqq.grouped_quantize(x, sizes, q, key=key, check=False, impl="ffi")


def _swizzled_gather(m: int, cols: int, sizes: np.ndarray) -> np.ndarray:
    """For each byte of the per-group swizzled buffer, the flat index of its scale in the
    dense (m, cols) scale matrix, or m * cols for padding (a host-side table, as a user
    would precompute it for fixed sizes)."""

    total = grouped.scale_buffer_length(m, cols * 32, len(sizes), 32, colwise=False)
    table = np.full(total, m * cols, np.int64)
    q = -(-cols // 4) * 4
    offset, start = 0, 0
    for size in sizes:
        r = np.arange(size)[:, None]
        c = np.arange(cols)[None, :]
        table[offset + mxfp8.swizzle_offset(r, c, q)] = (start + r) * cols + c
        offset += -(-size // 128) * 128 * q
        start += size
    return table


def _group_aligned(sizes: np.ndarray, block: int):
    """(each group's rows rounded up to `block`, where each group starts in a buffer of those,
    each row's place in it): the buffer where no block straddles two groups."""
    aligned = -(-sizes // block) * block
    padded_starts = np.concatenate([[0], np.cumsum(aligned)[:-1]])
    to_padded = np.concatenate([ps + np.arange(s) for ps, s in zip(padded_starts, sizes)])
    return aligned, padded_starts, jnp.asarray(to_padded)


def _nvfp4_blocks(xb, s_enc, axis: int):
    """(E2M1 codes, E4M3 scales) of the blocks of 16 along `axis` of a 3-D f32 `xb`, with the
    global encode scale `s_enc` broadcastable against the block amaxes."""
    amax = jnp.max(jnp.abs(xb), axis=axis, keepdims=True)
    sdb = (amax * (s_enc * jnp.float32(1.0 / 6.0))).astype(jnp.float8_e4m3fn)
    enc = 1.0 / (sdb.astype(jnp.float32) * (1.0 / s_enc))
    return jnp.clip(xb * enc, -6.0, 6.0).astype(jnp.float4_e2m1fn), sdb


def xla(op: str, m: int, n: int):

    sizes = group_sizes(m)
    if "fp8_block" in op:
        return _fp8_block_1x128(sizes, n, op.endswith("rowcol"))
    if op == "grouped_dbias":
        segments = jnp.asarray(np.repeat(np.arange(len(sizes)), sizes))

        def dbias(x, scale):
            del scale
            summed = jax.ops.segment_sum(x.astype(jnp.float32), segments, len(sizes))
            return summed.astype(x.dtype)

        return dbias
    block = 16 if "nvfp4" in op else 32
    row_table = jnp.asarray(_swizzled_gather(m, n // block, sizes))
    aligned, padded_starts, to_padded = _group_aligned(sizes, block)
    padded_rows = int(aligned.sum())

    segments = jnp.asarray(np.repeat(np.arange(len(sizes)), sizes))
    padded_segments = jnp.asarray(np.repeat(np.arange(len(sizes)), aligned))

    def grouped_nvfp4(x, scale):
        del scale
        xf = x.astype(jnp.float32)
        if "_sr_" in op:  # SR as in bench.py: uniform noise of about one grid step
            noise = jax.random.uniform(jax.random.key(0), x.shape, jnp.float32, -0.25, 0.25)
            xf = xf + noise * jnp.abs(xf)
        amax = jax.ops.segment_max(jnp.max(jnp.abs(xf), axis=1), segments, len(sizes))
        s_enc = 2688.0 / amax
        row, row_scale = _nvfp4_blocks(xf.reshape(m, n // 16, 16), s_enc[segments, None, None], 2)
        flat = jnp.concatenate([row_scale.reshape(-1), jnp.zeros((1,), row_scale.dtype)])
        out = {"row": row.reshape(m, n), "row_scale": flat[row_table]}
        if op.endswith("rowcol"):
            padded = jnp.zeros((padded_rows, n), jnp.float32).at[to_padded].set(xf)
            block_s_enc = s_enc[padded_segments[::16], None, None]
            col, col_scale = _nvfp4_blocks(padded.reshape(-1, 16, n), block_s_enc, 1)
            out["col"] = col.reshape(padded_rows, n)[to_padded]
            out["col_scale"] = col_scale
        return out

    if "nvfp4" in op:
        return grouped_nvfp4

    def grouped_op(x, scale):
        del scale
        row, row_scale = mxfp8_blocks(x, 1)
        flat = jnp.concatenate([row_scale.reshape(-1), jnp.zeros((1,), jnp.uint8)])
        out = {"row": row, "row_scale": flat[row_table]}
        if op.endswith("rowcol"):
            padded = jnp.zeros((padded_rows, n), x.dtype).at[to_padded].set(x)
            col, col_scale = mxfp8_blocks(padded, 0)
            out["col"] = col[to_padded]
            out["col_scale"] = col_scale  # (a swizzle would add one more gather)
        return out

    return grouped_op


def _fp8_block_1x128(sizes: np.ndarray, n: int, colwise: bool):
    aligned, padded_starts, to_padded = _group_aligned(sizes, 128)
    padded_rows = int(aligned.sum())
    # Group g's transpose (n, size_g) at start_g * n of the flat colwise data: its element
    # (i, j) is (i, padded_start_g + j) of the (n, padded_rows) colwise matrix.
    flat = []
    for ps, s in zip(padded_starts, sizes):
        i, j = np.divmod(np.arange(n * s), max(s, 1))
        flat.append(i * padded_rows + ps + j)
    from_padded_t = jnp.asarray(np.concatenate(flat))

    def grouped_fp8_block(x, scale):
        del scale
        row, row_scale = fp8_blocks(x, False)
        out = {"row": row, "row_scale": row_scale}
        if colwise:
            padded = jnp.zeros((padded_rows, n), x.dtype).at[to_padded].set(x)
            col, col_scale = fp8_blocks(padded.T, False)
            out["col"] = col.reshape(-1)[from_padded_t]
            out["col_scale"] = col_scale  # (n, sum of the groups' blocks)
        return out

    return grouped_fp8_block


def bytes_moved(op: str, m: int, n: int, itemsize: int) -> int:
    if op == "grouped_dbias":
        return m * n * itemsize + (len(_SHARES) + 1) * n * itemsize
    if "fp8_block" in op:  # x once; E4M3 bytes and a float32 scale per 128 per copy
        parts = 2 if op.endswith("rowcol") else 1
        return m * n * itemsize + parts * (m * n + m * n // 128 * 4)
    if "nvfp4" in op:  # the amax pass and the quantize pass read x; codes and E4M3 scales
        parts = 2 if op.endswith("rowcol") else 1
        return 2 * m * n * itemsize + parts * (m * n // 2 + m * n // 16)
    total = m * n * itemsize + m * n + m * n // 32
    if op.endswith("rowcol"):
        total += m * n + m * n // 32
    return total

