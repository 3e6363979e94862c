"""Hand-written jnp versions of the dense quantize and dequantize ops: what a user would write
without eqx_quant, jitted by XLA, timed beside ours in the same run."""

from collections.abc import Callable

import jax
import jax.numpy as jnp

FP8_MAX = 448.0


def cast(x, scale):
    y = jnp.clip(x.astype(jnp.float32) * scale, -FP8_MAX, FP8_MAX)
    return y.astype(jnp.float8_e4m3fn)


def mxfp8_blocks(x, axis: int):
    """(e4m3 data, E8M0 scale bytes) of a 2-D `x` with blocks of 32 along `axis` (0 or 1)."""
    m, n = x.shape
    xb = x.astype(jnp.float32)
    xb = xb.reshape(m, n // 32, 32) if axis == 1 else xb.reshape(m // 32, 32, n)
    amax = jnp.max(jnp.abs(xb), axis=axis + 1, keepdims=True)
    bits = jax.lax.bitcast_convert_type(amax * (1.0 / FP8_MAX), jnp.uint32)
    exponent = bits >> 23
    e = exponent + (((bits & 0x7FFFFF) != 0) & (exponent < 254)).astype(jnp.uint32)  # round up
    factor = jax.lax.bitcast_convert_type((254 - e) << 23, jnp.float32)  # 2^(127 - e)
    q = jnp.clip(xb * factor, -FP8_MAX, FP8_MAX).astype(jnp.float8_e4m3fn)
    return q.reshape(m, n), jnp.squeeze(e, axis + 1).astype(jnp.uint8)


def nvfp4_rows(x):
    """(E2M1 data, E4M3 scales) of a 2-D `x`, 1x16 blocks, TE's formulas in plain jnp."""
    m, n = x.shape
    xb = x.astype(jnp.float32).reshape(m, n // 16, 16)
    s_enc = 2688.0 / jnp.max(jnp.abs(xb))
    block_amax = jnp.max(jnp.abs(xb), axis=-1, keepdims=True)
    sdb = (block_amax * (s_enc * jnp.float32(1.0 / 6.0))).astype(jnp.float8_e4m3fn)
    enc = 1.0 / (sdb.astype(jnp.float32) * (1.0 / s_enc))
    q = jnp.clip(xb * enc, -6.0, 6.0).astype(jnp.float4_e2m1fn)
    return q.reshape(m, n), jnp.squeeze(sdb, -1)


def nvfp4_tiles(x):
    """(E2M1 data, E4M3 scales per row) of a 2-D `x`, 16x16 tiles, TE's formulas in plain jnp."""
    m, n = x.shape
    xb = x.astype(jnp.float32).reshape(m // 16, 16, n // 16, 16)
    s_enc = 2688.0 / jnp.max(jnp.abs(xb))
    tile_amax = jnp.max(jnp.abs(xb), axis=(1, 3), keepdims=True)
    sdb = (tile_amax * (s_enc * jnp.float32(1.0 / 6.0))).astype(jnp.float8_e4m3fn)
    enc = 1.0 / (sdb.astype(jnp.float32) * (1.0 / s_enc))
    q = jnp.clip(xb * enc, -6.0, 6.0).astype(jnp.float4_e2m1fn)
    scales = jnp.broadcast_to(sdb, (m // 16, 16, n // 16, 1)).reshape(m, n // 16)
    return q.reshape(m, n), scales


def rht16(x):
    """The 16-point Hadamard transform along the last axis (bf16 result), as a matmul."""
    h = jnp.array([[(-1.0) ** bin(i & j).count("1") for j in range(16)] for i in range(16)])
    m, n = x.shape
    y = x.reshape(m, n // 16, 16).astype(jnp.float32) @ (h / 4.0)
    return y.reshape(m, n).astype(jnp.bfloat16)


def fp8_blocks(x, use_2d: bool):
    """(E4M3 data, float32 scale_inv) of a 2-D `x` (dims multiples of 128) with one
    power-of-two scale per 1x128 block or 128x128 tile, TE's formulas in plain jnp."""
    m, n = x.shape
    xf = x.astype(jnp.float32)
    if use_2d:
        amax = jnp.abs(xf).reshape(m // 128, 128, n // 128, 128).max(axis=(1, 3))
    else:
        amax = jnp.abs(xf).reshape(m, n // 128, 128).max(axis=-1)
    scale = jnp.where(amax > 0, FP8_MAX / amax, 1.0)
    scale = jax.lax.bitcast_convert_type(
        jax.lax.bitcast_convert_type(scale, jnp.uint32) & jnp.uint32(0xFF800000), jnp.float32
    )
    rows = 128 if use_2d else 1
    full = jnp.repeat(jnp.repeat(scale, rows, axis=0), 128, axis=1)
    q = jnp.clip(xf * full, -FP8_MAX, FP8_MAX).astype(jnp.float8_e4m3fn)
    return q, 1.0 / scale


def mxfp8_values(data, scale_bytes):
    """bfloat16 values of (R, N) FP8 payloads with one E8M0 byte per 32 along N."""
    m, n = data.shape
    scale = jax.lax.bitcast_convert_type(scale_bytes.astype(jnp.uint32) << 23, jnp.float32)
    y = data.astype(jnp.float32).reshape(m, n // 32, 32) * scale[..., None]
    return y.reshape(m, n).astype(jnp.bfloat16)


def nvfp4_values(codes, scales, amax):
    """bfloat16 values of (R, N) E2M1 codes with one E4M3 scale per 16 along N and the
    tensor's global decode scale amax / 2688."""
    m, n = codes.shape
    block = scales.astype(jnp.float32)[..., None] * (amax / 2688.0)
    y = codes.astype(jnp.float32).reshape(m, n // 16, 16) * block
    return y.reshape(m, n).astype(jnp.bfloat16)


def xla(op: str) -> Callable:
    if op == "mxfp8_dequant_row":
        return lambda part, scale: mxfp8_values(part.data, part.scale_inv.view(jnp.uint8))
    if op == "nvfp4_dequant_row":
        return lambda part, scale: nvfp4_values(part.data, part.scale_inv, part.amax[0])
    transposed = op.endswith("rowcol")
    if op.startswith("fp8_block"):
        use_2d = "_2d_" in op

        def fp8_block(x, scale):
            del scale
            out = dict(zip(("row", "row_scale"), fp8_blocks(x, use_2d)))
            if transposed:
                if use_2d:
                    out.update(col=out["row"].T, col_scale=out["row_scale"].T)
                else:
                    out.update(zip(("col", "col_scale"), fp8_blocks(x.T, False)))
            return out

        return fp8_block
    if op.startswith("nvfp4"):

        def nvfp4(x, scale):
            del scale
            if "_sr_" in op:  # SR by adding uniform noise of one grid step before rounding
                noise = jax.random.uniform(jax.random.key(0), x.shape, jnp.float32, -0.25, 0.25)
                x = (x.astype(jnp.float32) + noise * jnp.abs(x.astype(jnp.float32))).astype(x.dtype)
            if "_2d_" in op:
                row, row_scale = nvfp4_tiles(x)
                col_scale = row_scale.reshape(-1, 16, row_scale.shape[1])[:, 0].T
                col_scale = jnp.repeat(col_scale, 16, axis=0)  # (n, m / 16)
                return dict(row=row, row_scale=row_scale, col=row.T, col_scale=col_scale)
            out = dict(zip(("row", "row_scale"), nvfp4_rows(x)))
            if transposed:
                out.update(zip(("col", "col_scale"), nvfp4_rows(rht16(x.T))))
            return out

        return nvfp4
    if op.startswith("mxfp8"):

        def mxfp8(x, scale):
            del scale
            out = dict(zip(("row", "row_scale"), mxfp8_blocks(x, 1)))
            if transposed:
                out.update(zip(("col", "col_scale"), mxfp8_blocks(x, 0)))
            if "dbias" in op:
                out["dbias"] = x.astype(jnp.float32).sum(0).astype(x.dtype)
            return out

        return mxfp8

    def fn(x, scale):
        out = {}
        amax = jnp.max(jnp.abs(x)).astype(jnp.float32)
        if op.startswith("delayed"):
            s = scale[0]
            out["amax"] = amax
        else:
            s = FP8_MAX / amax
        y = cast(x, s)
        out["row"] = y
        out["scale_inv"] = 1.0 / s
        if transposed:
            out["col"] = y.T
        if op.startswith("dbias"):
            out["dbias"] = x.astype(jnp.float32).sum(0).astype(x.dtype)
        return out

    return fn
