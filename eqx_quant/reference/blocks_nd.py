"""Pure-JAX reference of the block-format ops on one example of any rank (docs/block_formats.md).

One example `x` of shape `S` is viewed as `(A, K, C, L)` (`view_dims`): rowwise blocks run
along `L` (the last axis), colwise blocks along `K` (axis `block_axis = fa - 1`). The block
arithmetic is the 2-D reference of `mxfp8.py` / `nvfp4.py` on flat `(blocks, B)` arrays, with
partial blocks zero-padded; this module only arranges the blocks. Every function here takes
and returns the kernels' operand forms (`uint8` codes and scale bytes) so the op layer can
compare or swap them freely.
"""

import math

import jax.numpy as jnp
from jaxtyping import Array, Float, Shaped, UInt8

from . import mxfp8, nvfp4
from .stochastic_rounding import encode_e2m1_sr, global_index, random_bytes


def view_dims(shape: tuple[int, ...], block_axis: int) -> tuple[int, int, int, int]:
    """`(A, K, C, L)` of one example; `block_axis = -1` gives `(prod(S[:-1]), 1, 1, L)`."""
    n = len(shape)
    if block_axis < 0:
        return math.prod(shape[:-1]), 1, 1, shape[-1]
    if block_axis >= n - 1:
        raise ValueError(f"block_axis={block_axis} must be below the last axis of {shape}")
    return (
        math.prod(shape[:block_axis]),
        shape[block_axis],
        math.prod(shape[block_axis + 1 : n - 1]),
        shape[-1],
    )


def _pad_to(a: Array, axis: int, block: int, value=0) -> Array:
    extra = -a.shape[axis] % block
    if extra == 0:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return jnp.pad(a, widths, constant_values=value)


def _row_blocks(x4: Array, block: int) -> Array:
    """(A, K, C, L) -> (A*K*C*nb, block), L zero-padded."""
    return _pad_to(x4, 3, block).reshape(-1, block)


def _col_view(x4: Array) -> Array:
    """(A, K, C, L) -> (C, L, A, K): the colwise (T layout) order."""
    return jnp.transpose(x4, (2, 3, 0, 1))


def _col_blocks(xc: Array, block: int) -> Array:
    """(C, L, A, K) -> (C*L*A*kb, block), K zero-padded."""
    return _pad_to(xc, 3, block).reshape(-1, block)


def _unblock(flat: Array, lead: tuple[int, ...], length: int, block: int) -> Array:
    """(prod(lead)*nb*block,) -> lead + (length,), dropping the padding."""
    nb = mxfp8.cdiv(length, block)
    return flat.reshape(lead + (nb * block,))[..., :length]


def _empty() -> Array:
    return jnp.zeros((0,), jnp.uint8)


# --------------------------------------------------------------------------------------------
# MXFP8


def mxfp8_quantize(
    x: Float[Array, "..."], q_dtype, block_axis: int, rowwise: bool, colwise: bool
) -> tuple[Array, Array, Array, Array]:
    """`(row, row_scale, col, col_scale)` of one example: fp8 data (x's shape) and E8M0
    bytes, `(0,)` for an absent part. Both layouts go through one block computation."""
    shape = x.shape
    a, k, c, l = view_dims(shape, block_axis if colwise else -1)
    x4 = x.astype(jnp.float32).reshape(a, k, c, l)
    b = mxfp8.MX_BLOCK
    parts = []
    if rowwise:
        parts.append(_row_blocks(x4, b))
    if colwise:
        parts.append(_row_blocks(jnp.transpose(x4, (0, 2, 3, 1)), b))  # (A, C, L, K) rows
    none = jnp.zeros((0,), q_dtype)
    if not parts:
        return none, _empty(), none, _empty()
    data, e = mxfp8.mxfp8_encode_blocks(jnp.concatenate(parts), q_dtype)
    row, row_scale, col, col_scale = none, _empty(), none, _empty()
    start = 0
    if rowwise:
        n = parts[0].shape[0]
        row = _unblock(data[:n].reshape(-1), (a, k, c), l, b).reshape(shape)
        row = mxfp8.from_byte_view(row, q_dtype)
        row_scale = e[:n].reshape(shape[:-1] + (mxfp8.cdiv(l, b),))
        start = n
    if colwise:
        d = _unblock(data[start:].reshape(-1), (a, c, l), k, b)  # (A, C, L, K)
        col = mxfp8.from_byte_view(jnp.transpose(d, (0, 3, 1, 2)).reshape(shape), q_dtype)
        s = e[start:].reshape(a, c, l, mxfp8.cdiv(k, b))
        fa = block_axis + 1
        col_scale = jnp.transpose(s, (0, 3, 1, 2)).reshape(
            shape[: fa - 1] + (mxfp8.cdiv(k, b),) + shape[fa:]
        )
    return row, row_scale, col, col_scale


def mxfp8_dequantize(
    data: Shaped[Array, "..."], scale: UInt8[Array, "..."], axis: int, dq_dtype
) -> Shaped[Array, "..."]:
    """One example's MXFP8 part back to `dq_dtype`: blocks of 32 along `axis` (the last axis
    for rowwise data, `fa - 1` for colwise data; both in x's layout)."""
    moved = jnp.moveaxis(mxfp8.byte_view(data), axis, -1)
    s = jnp.moveaxis(scale, axis, -1)
    lead, length = moved.shape[:-1], moved.shape[-1]
    qb = _pad_to(moved, moved.ndim - 1, mxfp8.MX_BLOCK).reshape(-1, mxfp8.MX_BLOCK)
    out = mxfp8.decode_blocks(qb, s.reshape(-1), q_name=mxfp8.dtype_name(data.dtype))
    out = _unblock(out.reshape(-1), lead, length, mxfp8.MX_BLOCK)
    return jnp.moveaxis(mxfp8.round_to_dtype(out, dq_dtype), -1, axis)


# --------------------------------------------------------------------------------------------
# NVFP4


def _tile_amax(x4: Array) -> Array:
    """(A, K, C, L) -> (A, Kt, C, Lt) amax of each zero-padded 16x16 tile (NaN ignored)."""
    t = nvfp4.NVFP4_BLOCK
    xp = _pad_to(_pad_to(x4, 1, t), 3, t)
    a, kp, c, lp = xp.shape
    return mxfp8.block_amax(xp.reshape(a, kp // t, t, c, lp // t, t), axis=(2, 5))


def _colwise_values(x4: Array, use_rht: bool, sign_mask: int) -> Array:
    """(C, L, A, K) float32 values the colwise part quantizes (after the RHT if asked)."""
    xc = _col_view(x4)
    if use_rht:
        xc = nvfp4.rht(xc, sign_mask).astype(jnp.float32)
    return xc


def nvfp4_amax(
    x: Float[Array, "..."], block_axis: int, with_rht: bool, sign_mask: int
) -> tuple[Float[Array, "1"], Float[Array, "..."]]:
    """`(max |x|, max |RHT_K(x)|)` of one example, NaN ignored; the second is `(0,)` without RHT."""
    amax = mxfp8.block_amax(x.reshape(-1), axis=0).reshape(1)
    if not with_rht:
        return amax, jnp.zeros((0,), jnp.float32)
    x4 = x.astype(jnp.float32).reshape(view_dims(x.shape, block_axis))
    xc = _colwise_values(x4, True, sign_mask)
    return amax, mxfp8.block_amax(xc.reshape(-1), axis=0).reshape(1)


def _nv_codes(xb, amax_b, amax_g, r):
    """E2M1 codes and E4M3 scale bytes of (B, 16) blocks; SR with random bytes `r` (B, 16)."""
    s_enc = nvfp4.global_encode_scale(amax_g)
    sdb = nvfp4.block_scale_bytes(amax_b, s_enc)
    enc = nvfp4.block_encode_scale(sdb, s_enc)
    y = nvfp4.multiply(xb, jnp.broadcast_to(enc[:, None], xb.shape))
    codes = nvfp4.encode_e2m1(y) if r is None else encode_e2m1_sr(y, r)
    return codes, sdb


def nvfp4_quantize(
    x: Float[Array, "..."],
    amax: Float[Array, "1"],
    col_amax: Float[Array, "1"],
    key: Shaped[Array, " w"],
    offset: Shaped[Array, " n"],
    *,
    block_axis: int,
    rowwise: bool,
    colwise: bool,
    use_2d: bool,
    use_rht: bool,
    sign_mask: int,
    stochastic_rounding: bool,
    global_shape: tuple[int, ...],
) -> tuple[Array, Array, Array, Array]:
    """`(row, row_scale, col, col_scale)` of one example as uint8 E2M1 codes / E4M3 bytes.

    Rowwise in x's shape; colwise in the T layout `S[fa:] + S[:fa]`; `(0,)` when absent.
    `key` (2 words) and `offset` (one per dim) are read only with stochastic rounding; without
    it they may be empty."""
    shape = x.shape
    t = nvfp4.NVFP4_BLOCK
    a, k, c, l = view_dims(shape, block_axis)
    x4 = x.astype(jnp.float32).reshape(a, k, c, l)
    tiles = _tile_amax(x4) if use_2d else None
    blocks, amax_b, amax_g, rbytes, sizes = [], [], [], [], []
    if rowwise:
        xb = _row_blocks(x4, t)
        if use_2d:
            ab = jnp.repeat(tiles, t, axis=1)[:, :k].reshape(-1)  # (A, K, C, Lt)
        else:
            ab = mxfp8.block_amax(xb, axis=-1)
        blocks.append(xb)
        amax_b.append(ab)
        amax_g.append(jnp.broadcast_to(amax.reshape(()), ab.shape))
        if stochastic_rounding:  # the rowwise index is the element's in the global x
            lo, hi = global_index(shape, offset, global_shape)
            lo4, hi4 = lo.reshape(a, k, c, l), hi.reshape(a, k, c, l)
            rbytes.append(
                random_bytes(key, _row_blocks(lo4, t), _row_blocks(hi4, t), 0)
            )
        sizes.append(xb.shape[0])
    if colwise:
        xb = _col_blocks(_colwise_values(x4, use_rht, sign_mask), t)
        if use_2d:
            ct = jnp.transpose(tiles, (2, 3, 0, 1))  # (C, Lt, A, Kt)
            ab = jnp.repeat(ct, t, axis=1)[:, :l].reshape(-1)
        else:
            ab = mxfp8.block_amax(xb, axis=-1)
        blocks.append(xb)
        amax_b.append(ab)
        amax_g.append(jnp.broadcast_to(col_amax.reshape(()), ab.shape))
        if stochastic_rounding:
            # The colwise index is the element's in the global T layout S[fa:] + S[:fa].
            fa = block_axis + 1
            t_lo, t_hi = global_index(
                shape[fa:] + shape[:fa],
                jnp.concatenate([offset[fa:], offset[:fa]]),
                global_shape[fa:] + global_shape[:fa],
            )
            lo_c = _col_blocks(t_lo.reshape(c, l, a, k), t)
            hi_c = _col_blocks(t_hi.reshape(c, l, a, k), t)
            rbytes.append(random_bytes(key, lo_c, hi_c, 1))
    if not blocks:
        return _empty(), _empty(), _empty(), _empty()
    codes, sdb = _nv_codes(
        jnp.concatenate(blocks),
        jnp.concatenate(amax_b),
        jnp.concatenate(amax_g),
        jnp.concatenate(rbytes) if stochastic_rounding else None,
    )
    row = row_scale = col = col_scale = _empty()
    start = 0
    if rowwise:
        n = sizes[0]
        row = _unblock(codes[:n].reshape(-1), (a, k, c), l, t).reshape(shape)
        row_scale = sdb[:n].reshape(shape[:-1] + (mxfp8.cdiv(l, t),))
        start = n
    if colwise:
        fa = block_axis + 1
        col = _unblock(codes[start:].reshape(-1), (c, l, a), k, t).reshape(shape[fa:] + shape[:fa])
        col_scale = sdb[start:].reshape(shape[fa:] + shape[: fa - 1] + (mxfp8.cdiv(k, t),))
    return row, row_scale, col, col_scale


def nvfp4_dequantize(
    codes: UInt8[Array, "..."],
    scale: UInt8[Array, "..."],
    amax: Float[Array, "..."],
    dq_dtype,
    rht_sign_mask: int | None,
) -> Float[Array, "..."]:
    """An NVFP4 part in its stored layout (blocks along the last axis) back to `dq_dtype`,
    with the inverse RHT on each block when `rht_sign_mask` is given. `amax` is the global
    amax, broadcastable to `scale` (one per example for a batch of examples); its decode
    scale is computed before broadcasting, once per example."""
    return nvfp4_dequantize_with(codes, scale, nvfp4.global_decode_scale(amax), dq_dtype,
                                 rht_sign_mask)


def nvfp4_dequantize_with(
    codes: UInt8[Array, "..."],
    scale: UInt8[Array, "..."],
    decode_scale: Float[Array, "..."],
    dq_dtype,
    rht_sign_mask: int | None,
) -> Float[Array, "..."]:
    """`nvfp4_dequantize` given the global decode scale (`fl(amax / 2688)`, broadcastable to
    `scale`) instead of the amax."""
    lead, length = codes.shape[:-1], codes.shape[-1]
    t = nvfp4.NVFP4_BLOCK
    qb = _pad_to(codes, codes.ndim - 1, t).reshape(-1, t)
    n_blocks = qb.shape[0]
    out = nvfp4.decode_blocks(
        qb,
        scale.reshape(-1),
        jnp.broadcast_to(decode_scale, scale.shape).reshape(n_blocks),
        rht_mask=rht_sign_mask,
    )
    out = _unblock(out.reshape(-1), lead, length, t)
    return mxfp8.round_to_dtype(out, dq_dtype)
