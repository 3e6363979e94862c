"""Pure-JAX reference of MXFP8 (1x32 blocks, E8M0 scales) and of the cuBLAS 128x4 scale swizzle.

Bit-exact with TE's CUDA kernels (`transformer_engine/common/cast/mxfp8/quantize_mxfp8.cuh`,
`util/ptx.cuh`; scale shapes, padding and swizzle as `transformer_engine/jax/quantize/
scaling_modes.py`) on every backend: like `fp8.py`, every float operation whose result is promised
bit for bit is done on
the bit patterns (`ieee`), so XLA:CPU's flush-to-zero and XLA:GPU's convert folding cannot
change it. Functions work on one 2-D view `(M, N)`; a final partial block is quantized as if it
were zero-padded (zeros change neither the block amax nor the other elements).

Structure: the layout work (padding, blocking, transposes) is plain JAX around "cores"
(`_mx_encode_core`, `decode_blocks`) that do all the bit-level arithmetic on flat
`(blocks, 32)` arrays, each block independent. The bit-level graphs take seconds to compile
on XLA:CPU, the layout graphs milliseconds, so tests compile each core once and reach it for
every shape through a callback (tests/block/test_block_reference.py).

Also home of the helpers shared with `nvfp4.py`: the generic round-to-nearest-even encoder
`encode_float_bits`, exact casts to bf16/f16, the NaN-ignoring block amax and byte views.
"""

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, Shaped, UInt8

from .ieee import (
    FP8_FORMATS,
    FP8_NAN_BYTE,
    bits,
    encode_float_bits,
    from_bits,
    multiply,
)

MX_BLOCK = 32
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
# fl(1/fp8_max): the constexpr reciprocal the kernels multiply by (1/448 is not exact in f32).
FP8_MAX_RCP = {k: np.float32(1.0) / np.float32(v) for k, v in FP8_MAX.items()}
FLT_MAX_BITS = 0x7F7FFFFF
_MAG = 0x7FFFFFFF
_INF = 0x7F800000


def _u32(v: int) -> Array:
    return jnp.uint32(v)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def dtype_name(dtype) -> str:
    return jnp.dtype(dtype).name


# --------------------------------------------------------------------------------------------
# Format helpers (also used by nvfp4.py)


# (mant, emin, max_code (inf), nan_code, sign_bit) of the 16-bit float formats.
_F16_FORMATS = {
    "bfloat16": (7, -126, 0x7F80, 0x7FC0, 15),
    "float16": (10, -14, 0x7C00, 0x7E00, 15),
}


def round_to_dtype(y: Float[Array, "..."], dtype) -> Shaped[Array, "..."]:
    """IEEE round-to-nearest-even cast of float32 `y` to float32, bfloat16 or float16, done on
    the bits (XLA may fold an f32 -> bf16 -> f32 round trip or flush subnormals)."""
    name = dtype_name(dtype)
    if name == "float32":
        return y
    if name not in _F16_FORMATS:
        raise ValueError(f"unsupported output dtype {name}; expected float32, bfloat16 or float16")
    code = encode_float_bits(y, *_F16_FORMATS[name])
    return lax.bitcast_convert_type(code.astype(jnp.uint16), jnp.dtype(name))


def byte_view(a: Shaped[Array, "..."]) -> UInt8[Array, "..."]:
    """The bytes of a 1-byte dtype array, same shape."""
    return lax.bitcast_convert_type(a, jnp.uint8)


def from_byte_view(u: UInt8[Array, "..."], dtype) -> Shaped[Array, "..."]:
    return lax.bitcast_convert_type(u, jnp.dtype(dtype))


def block_amax(x: Float[Array, "..."], axis: int = -1) -> Float[Array, "..."]:
    """max |x| along `axis` ignoring NaN (maxNum, like the kernels' fmaxf/__hmax); 0 if none.

    Decided on the bit patterns, so subnormals count (XLA:CPU compares them as zero)."""
    mag = bits(x.astype(jnp.float32)) & _u32(_MAG)
    mag = jnp.where(mag > _u32(_INF), _u32(0), mag)
    return from_bits(jnp.max(mag, axis=axis, initial=_u32(0)))


def fp8_decode_table(q_dtype) -> np.ndarray:
    """float32 bit patterns of all 256 bytes of an FP8 format, from the format's definition."""
    name = dtype_name(q_dtype)
    mant, bias = {"float8_e4m3fn": (3, 7), "float8_e5m2": (2, 15)}[name]
    code = np.arange(256)
    sign = np.where(code & 0x80, -1.0, 1.0)
    e = (code & 0x7F) >> mant
    m = code & ((1 << mant) - 1)
    val = np.where(e == 0, m * 2.0 ** (1 - bias - mant), (2**mant + m) * 2.0 ** (e - bias - mant))
    val = sign * val
    if name == "float8_e4m3fn":
        val = np.where((code & 0x7F) == 0x7F, np.nan, val)
    else:
        val = np.where(e == 0x1F, np.where(m == 0, sign * np.inf, np.nan), val)
    return val.astype(np.float32).view(np.uint32)


def decode_bytes(u: UInt8[Array, "..."], table: np.ndarray) -> Float[Array, "..."]:
    """float32 values of format codes `u` by table look-up (exact, no float convert)."""
    return from_bits(jnp.asarray(table)[u.astype(jnp.int32)])


# --------------------------------------------------------------------------------------------
# E8M0


def e8m0_round_up(v: Float[Array, "..."]) -> UInt8[Array, "..."]:
    """TE's E8M0 byte of a non-negative float32 `v`: round toward +inf to a power of two.

    0 -> 0x00, NaN -> 0xFF, +inf -> 0xFE; otherwise with `e`, `m` the float32 exponent and
    mantissa fields: `e+1` if `m > 0 and e != 0xFE and not (e == 0 and m <= 0x400000)`, else
    `e` (saturates at 0xFE = 2^127; a denormal v <= 2^-127 gives 0x00, v in (2^-127, 2^-126)
    gives 0x01).
    """
    b = bits(v)
    e = (b >> 23) & _u32(0xFF)
    m = b & _u32(0x7FFFFF)
    up = (m > 0) & (e != 0xFE) & ~((e == 0) & (m <= _u32(0x400000)))
    out = e + up.astype(jnp.uint32)
    mag = b & _u32(_MAG)
    out = jnp.where(mag == _u32(_INF), _u32(0xFE), out)
    out = jnp.where(mag > _u32(_INF), _u32(0xFF), out)
    return out.astype(jnp.uint8)


def e8m0_value(e: UInt8[Array, "..."]) -> Float[Array, "..."]:
    """`2^(E-127)` as float32: E=0 -> 2^-127 (subnormal), E=255 -> NaN."""
    e = e.astype(jnp.uint32)
    out = jnp.where(e == 0, _u32(0x00400000), e << 23)
    return from_bits(jnp.where(e == 255, _u32(0x7FC00000), out))


# --------------------------------------------------------------------------------------------
# MXFP8


def _check_2d(x: Array, what: str) -> None:
    if x.ndim != 2:
        raise ValueError(f"{what} expects a 2-D view (M, N), got shape {x.shape}")


def _fp8_name(q_dtype) -> str:
    name = dtype_name(q_dtype)
    if name not in FP8_MAX:
        raise ValueError(f"MXFP8 needs float8_e4m3fn or float8_e5m2, got {name}")
    return name


def to_blocks(x: Float[Array, "M N"], block: int) -> Float[Array, "M nb block"]:
    """float32 1 x `block` blocks along N; a final partial block is zero-padded."""
    m, n = x.shape
    nb = cdiv(n, block)
    xf = jnp.pad(x.astype(jnp.float32), ((0, 0), (0, nb * block - n)))
    return xf.reshape(m, nb, block)


def _mx_encode_core(xb: Float[Array, "B 32"], q_name: str) -> tuple[Array, Array]:
    mant, emin, max_byte = FP8_FORMATS[q_name]
    amax = block_amax(xb, axis=-1)
    v = multiply(amax, jnp.full_like(amax, FP8_MAX_RCP[q_name]))
    e = e8m0_round_up(v)
    shift = jnp.broadcast_to((jnp.int32(127) - e.astype(jnp.int32))[:, None], xb.shape)
    code = encode_float_bits(xb, mant, emin, max_byte, FP8_NAN_BYTE, 7, exp_offset=shift)
    code = jnp.where(jnp.broadcast_to(e[:, None] == 255, xb.shape), _u32(FP8_NAN_BYTE), code)
    return code.astype(jnp.uint8), e


def mxfp8_encode_blocks(
    xb: Float[Array, "B 32"], q_dtype
) -> tuple[UInt8[Array, "B 32"], UInt8[Array, " B"]]:
    """The MXFP8 block computation on float32 blocks: `(data bytes, E8M0 bytes)`.

    `v = amax * fl(1/fp8_max)` (amax ignoring NaN), `E = e8m0_round_up(v)`, data = saturating
    RNE FP8 of `fl(x * 2^(127-E))`, NaN -> 0x7F. The product is not formed: with `2^(127-E)`
    exact, `fl(x * 2^(127-E))` equals the exact product unless that is below 2^-126 (its FP8
    value is then +-0 whatever the float32 rounding) or infinite (saturates either way), so
    encoding `x` with its exponent shifted by `127-E` gives the kernel's bytes. E = 255 (only
    from a NaN v, which a NaN-ignoring amax never gives) would make every element NaN.
    """
    return _mx_encode_core(xb, q_name=_fp8_name(q_dtype))


def decode_blocks(qb: UInt8[Array, "B 32"], e: UInt8[Array, " B"], q_name: str):
    q = decode_bytes(qb, fp8_decode_table(q_name))
    return multiply(q, jnp.broadcast_to(e8m0_value(e)[:, None], q.shape))


def mxfp8_quantize_rowwise(
    x: Float[Array, "M N"], q_dtype
) -> tuple[Shaped[Array, "M N"], Shaped[Array, "M nb"]]:
    """MXFP8 with 1x32 blocks along N (TE kernel numerics, docs/numerics.md).

    Per block: `amax` = max|x| ignoring NaN, `v = amax * fl(1/fp8_max)` (one float32
    multiply), `E = e8m0_round_up(v)`, data = saturating RNE FP8 of `x * 2^(127-E)` (NaN ->
    byte 0x7F). A final partial block behaves as if zero-padded.

    **Returns:** `(data, scale_inv)`: data of dtype `q_dtype` and shape (M, N), scale_inv of
    dtype float8_e8m0fnu and shape (M, ceil(N/32)).
    """
    _check_2d(x, "mxfp8_quantize_rowwise")
    m, n = x.shape
    xb = to_blocks(x, MX_BLOCK)
    data, e = mxfp8_encode_blocks(xb.reshape(-1, MX_BLOCK), q_dtype)
    data = data.reshape(m, xb.shape[1] * MX_BLOCK)[:, :n]
    e = e.reshape(xb.shape[:2])
    return from_byte_view(data, q_dtype), from_byte_view(e, jnp.float8_e8m0fnu)


def mxfp8_quantize_colwise(
    x: Float[Array, "M N"], q_dtype
) -> tuple[Shaped[Array, "M N"], Shaped[Array, "mb N"]]:
    """MXFP8 with 32x1 blocks along M; data is NOT transposed (N layout).

    **Returns:** `(data (M, N), scale_inv (ceil(M/32), N))`.
    """
    _check_2d(x, "mxfp8_quantize_colwise")
    data, scale = mxfp8_quantize_rowwise(x.T, q_dtype)
    return data.T, scale.T


def mxfp8_quantize_2x(x: Float[Array, "M N"], q_dtype) -> tuple[tuple[Array, Array], ...]:
    """`(mxfp8_quantize_rowwise(x), mxfp8_quantize_colwise(x))` with the block computation
    done once on the blocks of both layouts (half the graph of two calls)."""
    _check_2d(x, "mxfp8_quantize_2x")
    m, n = x.shape
    rb, cb = to_blocks(x, MX_BLOCK), to_blocks(x.T, MX_BLOCK)
    flat = jnp.concatenate([rb.reshape(-1, MX_BLOCK), cb.reshape(-1, MX_BLOCK)])
    data, e = mxfp8_encode_blocks(flat, q_dtype)
    k = rb.shape[0] * rb.shape[1]
    row = data[:k].reshape(m, rb.shape[1] * MX_BLOCK)[:, :n], e[:k].reshape(rb.shape[:2])
    col = data[k:].reshape(n, cb.shape[1] * MX_BLOCK)[:, :m].T, e[k:].reshape(cb.shape[:2]).T
    return tuple(
        (from_byte_view(d, q_dtype), from_byte_view(s, jnp.float8_e8m0fnu)) for d, s in (row, col)
    )


def mxfp8_dequantize_rowwise(
    data: Shaped[Array, "M N"], scale_inv: Shaped[Array, "M nb"], dq_dtype
) -> Shaped[Array, "M N"]:
    """`float32(data) * 2^(E-127)` per 1x32 block (one exact float32 multiply), cast RNE to
    `dq_dtype`."""
    _check_2d(data, "mxfp8_dequantize_rowwise")
    m, n = data.shape
    nb = cdiv(n, MX_BLOCK)
    if scale_inv.shape != (m, nb):
        raise ValueError(f"scale_inv shape {scale_inv.shape} does not match data {data.shape}")
    qb = jnp.pad(byte_view(data), ((0, 0), (0, nb * MX_BLOCK - n))).reshape(-1, MX_BLOCK)
    out = decode_blocks(qb, byte_view(scale_inv).reshape(-1), q_name=_fp8_name(data.dtype))
    return round_to_dtype(out.reshape(m, nb * MX_BLOCK)[:, :n], dq_dtype)


def mxfp8_dequantize_colwise(
    data: Shaped[Array, "M N"], scale_inv: Shaped[Array, "mb N"], dq_dtype
) -> Shaped[Array, "M N"]:
    """Inverse of `mxfp8_quantize_colwise` (blocks of 32 along M)."""
    _check_2d(data, "mxfp8_dequantize_colwise")
    return mxfp8_dequantize_rowwise(data.T, scale_inv.T, dq_dtype).T


# --------------------------------------------------------------------------------------------
# GEMM scale swizzle (cuBLAS's 128x4 tiles): MXFP8 and NVFP4 share it.

SWIZZLE_ROWS = 128
SWIZZLE_COLS = 4
SCALE_PAD_BYTE = 0x00  # E8M0 2^-127, E4M3 +0 (as TE pads)


def swizzle_offset(r, c, num_cols: int):
    """Linear offset of element `(r, c)` of a padded `(R, num_cols)` scale matrix in cuBLAS's
    128x4 tile layout (`num_cols % 4 == 0`). Works on ints and integer numpy arrays."""
    tile = (r // 128) * (num_cols // 4) + c // 4
    return tile * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4


def padded_scale_shape(shape: tuple[int, int], rowwise: bool) -> tuple[int, int]:
    """The (128, 4)-aligned shape of a scale matrix in its stored orientation: (128, 4) for
    rowwise scales, (4, 128) for MXFP8 colwise scales (ceil(M/32), N)."""
    r, c = shape
    if rowwise:
        return cdiv(r, SWIZZLE_ROWS) * SWIZZLE_ROWS, cdiv(c, SWIZZLE_COLS) * SWIZZLE_COLS
    return cdiv(r, SWIZZLE_COLS) * SWIZZLE_COLS, cdiv(c, SWIZZLE_ROWS) * SWIZZLE_ROWS


def swizzle_scales(s: Shaped[Array, "R C"], rowwise: bool) -> Shaped[Array, "Rp Cp"]:
    """GEMM-ready scales: pad with byte 0x00 to (128, 4) multiples, then the 128x4 tile layout.

    `rowwise=True` for scales whose rows are the non-scaled dimension (MXFP8 rowwise
    (M, N/32), NVFP4 rowwise (M, N/16) and NVFP4 colwise (N, M/16), which is stored T).
    `rowwise=False` for MXFP8 colwise scales (M/32, N): they are transposed to (N, M/32)
    before tiling, as TE does. The result keeps the padded shape of the input's orientation
    (like TE's `swizzled_scale`); its row-major bytes are the swizzled buffer, i.e. element
    `(r, c)` of the (transposed for colwise) padded matrix sits at flat position
    `swizzle_offset(r, c, Cp)`.
    """
    _check_2d(s, "swizzle_scales")
    dtype = s.dtype
    u = byte_view(s)
    if not rowwise:
        u = u.T
    r, c = u.shape
    rp, cp = padded_scale_shape((r, c), rowwise=True)
    u = jnp.pad(u, ((0, rp - r), (0, cp - c)), constant_values=SCALE_PAD_BYTE)
    u = u.reshape(rp // 128, 4, 32, cp // 4, 4).transpose(0, 3, 2, 1, 4)
    out_shape = (rp, cp) if rowwise else (cp, rp)
    return from_byte_view(u.reshape(out_shape), dtype)


def unswizzle_scales(
    sw: Shaped[Array, "Rp Cp"], rowwise: bool, shape: tuple[int, int]
) -> Shaped[Array, "R C"]:
    """Inverse of `swizzle_scales`: the unpadded scales of shape `shape` (stored orientation)."""
    _check_2d(sw, "unswizzle_scales")
    r, c = shape if rowwise else shape[::-1]
    rp, cp = padded_scale_shape((r, c), rowwise=True)
    expected = (rp, cp) if rowwise else (cp, rp)
    if sw.shape != expected:
        raise ValueError(
            f"unswizzle_scales: swizzled has shape {sw.shape}, but scales of shape {shape} pad "
            f"to {expected}. Pass the output of gemm_scale_inv() of the same part."
        )
    u = byte_view(sw).reshape(rp // 128, cp // 4, 32, 4, 4).transpose(0, 3, 2, 1, 4)
    u = u.reshape(rp, cp)[:r, :c]
    if not rowwise:
        u = u.T
    return from_byte_view(u, sw.dtype)
