"""Pure-JAX reference of NVFP4 (E2M1 data, per-16 E4M3 block scales, float32 global scale),
its 16x16 "2D" mode and the 16-point random Hadamard transform (RHT).

Bit-exact with TE's CUDA kernels (`transformer_engine/common/cast/nvfp4/core_nvfp4.cuh`,
`quantize_transpose_nvfp4.cuh`, `hadamard_transform/`; docs/numerics.md) on every backend:
every float operation is done on the bit patterns (`ieee`). The kernel evaluation order
(`core_nvfp4.cuh`) is followed exactly:

    S_enc = 2688 / amax_g                        # correctly rounded float32 division
    S_enc = fminf(S_enc, FLT_MAX)                # +inf -> FLT_MAX (a NaN also -> FLT_MAX)
    S_enc = 1 if amax_g == 0 or S_enc == 0       # amax 0 or inf
    sdb   = e4m3_RN_sat(block_amax * fl(S_enc * fl(1/6)))      # stored scale_inv byte
    S_dec = fl(1 / S_enc)
    enc   = fminf(fl(1 / fl(float(sdb) * S_dec)), FLT_MAX)    # zero block: 1/0 -> FLT_MAX
    q     = e2m1_RN_sat(fl(x * enc))              # NaN -> +6 (code 0x7), as cuda_fp4.hpp does

Block amaxes and the global amax ignore NaN (maxNum). A final partial block (N % 16, or
M % 16 in 2D mode) is quantized as if zero-padded. As in `mxfp8.py`, the bit-level arithmetic
runs in cores on flat block arrays (`_nv_encode_core`, `decode_blocks`, `_rht_core`).
"""

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, Shaped, UInt8

from .ieee import (
    add,
    bits,
    divide,
    divide_by_constant,
    encode_float_bits,
    from_bits,
    multiply,
    to_fp8_bytes,
)
from .mxfp8 import (
    FLT_MAX_BITS,
    block_amax,
    byte_view,
    cdiv,
    decode_bytes,
    fp8_decode_table,
    from_byte_view,
    round_to_dtype,
)

NVFP4_BLOCK = 16
FP4_MAX = 6.0
E4M3_MAX = 448.0
GLOBAL_ENC_NUMERATOR = np.float32(E4M3_MAX * FP4_MAX)  # 2688, exact
RCP_FP4_MAX = np.float32(1.0) / np.float32(FP4_MAX)  # fl(1/6)
DEFAULT_RHT_SIGN_MASK = 0xD7E8  # bit i set iff sign s_i = -1 (TE's fixed RHT signs)
RHT_SIZE = 16

E2M1_NAN_CODE = 0x7  # E2M1 has no NaN: satfinite gives +MAX_NORM (cuda_fp4.hpp)
# Magnitudes of the E2M1 codes 0..7; codes 8..15 are their negatives.
_E2M1_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_DECODE_TABLE = (
    np.concatenate([_E2M1_MAGNITUDES, -_E2M1_MAGNITUDES]).astype(np.float32).view(np.uint32)
)


def _u32(v: int) -> Array:
    return jnp.uint32(v)


# --------------------------------------------------------------------------------------------
# Element formats


def encode_e2m1(y: Float[Array, "..."]) -> UInt8[Array, "..."]:
    """Saturating round-to-nearest-even float32 -> E2M1 codes (0..15, sign at bit 3).

    |y| > 6 and +-inf saturate to +-6, NaN gives code 0x7 (+6), the sign of zero is kept."""
    code = encode_float_bits(y, mant=1, emin=0, max_code=0x7, nan_code=E2M1_NAN_CODE, sign_bit=3)
    return code.astype(jnp.uint8)


def e2m1_from_codes(codes: UInt8[Array, "..."]) -> Shaped[Array, "..."]:
    """`jnp.float4_e2m1fn` array holding the given 4-bit codes."""
    return lax.bitcast_convert_type(codes.astype(jnp.uint4), jnp.float4_e2m1fn)


def e2m1_codes(data: Shaped[Array, "..."]) -> UInt8[Array, "..."]:
    """The 4-bit codes (0..15, as uint8) of a `jnp.float4_e2m1fn` array."""
    return lax.bitcast_convert_type(data, jnp.uint4).astype(jnp.uint8)


def decode_e2m1(codes: UInt8[Array, "..."]) -> Float[Array, "..."]:
    return decode_bytes(codes, E2M1_DECODE_TABLE)


def decode_e4m3(u: UInt8[Array, "..."]) -> Float[Array, "..."]:
    return decode_bytes(u, fp8_decode_table(jnp.float8_e4m3fn))


# --------------------------------------------------------------------------------------------
# Scales (elementwise; `s_enc` and the amaxes are scalars or one value per block)


def global_encode_scale(amax_g: Float[Array, "*b"]) -> Float[Array, "*b"]:
    """`S_enc = fminf(2688 / amax_g, FLT_MAX)`, or 1 where `amax_g == 0` or the quotient is 0
    (amax_g = inf). A NaN amax_g gives FLT_MAX (fminf drops the NaN), as in the kernel."""
    s = bits(divide(jnp.full_like(amax_g, GLOBAL_ENC_NUMERATOR), amax_g))
    s_nan = (s & _u32(0x7FFFFFFF)) > _u32(0x7F800000)
    s = jnp.where(s_nan | (s == _u32(0x7F800000)), _u32(FLT_MAX_BITS), s)
    a_zero = (bits(amax_g) & _u32(0x7FFFFFFF)) == 0
    s = jnp.where(a_zero | ((s & _u32(0x7FFFFFFF)) == 0), bits(jnp.float32(1.0)), s)
    return from_bits(s)


def block_scale_bytes(amax_b: Float[Array, "*b"], s_enc: Float[Array, "*#b"]) -> UInt8[Array, "*b"]:
    """E4M3 bytes `e4m3_RN_sat(amax_b * fl(S_enc * fl(1/6)))` (kernel order, two multiplies)."""
    factor = multiply(s_enc, jnp.full_like(s_enc, RCP_FP4_MAX))
    prod = multiply(amax_b, jnp.broadcast_to(factor, amax_b.shape))
    return to_fp8_bytes(prod, "float8_e4m3fn")


def block_encode_scale(sdb: UInt8[Array, "*b"], s_enc: Float[Array, "*#b"]) -> Float[Array, "*b"]:
    """Per-element multiplier `fminf(1 / (float(sdb) * fl(1/S_enc)), FLT_MAX)`."""
    s_dec = divide(jnp.ones_like(s_enc), s_enc)
    denom = multiply(decode_e4m3(sdb), jnp.broadcast_to(s_dec, sdb.shape))
    enc = bits(divide(jnp.ones_like(denom), denom))
    return from_bits(jnp.minimum(enc, _u32(FLT_MAX_BITS)))  # enc >= 0; inf -> FLT_MAX


def _nv_encode_core(xb, amax_b, amax_g):
    """(B, 16) blocks, (B,) block amaxes, (B,) global amaxes -> (codes, scale bytes)."""
    s_enc = global_encode_scale(amax_g)
    sdb = block_scale_bytes(amax_b, s_enc)
    enc = block_encode_scale(sdb, s_enc)
    codes = encode_e2m1(multiply(xb, jnp.broadcast_to(enc[:, None], xb.shape)))
    return codes, sdb


def nvfp4_encode_blocks(
    xb: Float[Array, "B 16"], amax_b: Float[Array, " B"], amax_g: Float[Array, " B"]
) -> tuple[UInt8[Array, "B 16"], UInt8[Array, " B"]]:
    """The NVFP4 block computation: `(E2M1 codes, E4M3 scale bytes)` of float32 blocks `xb`
    with block amaxes `amax_b` (the tile amax in 2D mode) and the global amax of each block's
    tensor `amax_g` (see the module doc for the formulas)."""
    return _nv_encode_core(xb, amax_b, amax_g)


def global_decode_scale(amax_g: Float[Array, "*b"]) -> Float[Array, "*b"]:
    """`fl(amax_g / 2688)`: the per-tensor factor of the dequantization (TE's
    `tensor_scale_inv`). Computed once per tensor, then broadcast to the blocks."""
    return divide_by_constant(amax_g, float(GLOBAL_ENC_NUMERATOR))


def decode_blocks(codes, sdb, tsi, rht_mask: int | None):
    """float32 values of (B, 16) codes with (B,) scale bytes and (B,) global decode scales
    (`global_decode_scale` of each block's tensor); with `rht_mask`, each block (an RHT group
    of the T layout) also goes through the inverse RHT."""
    q = decode_e2m1(codes)
    s = jnp.broadcast_to(decode_e4m3(sdb)[:, None], q.shape)
    y = multiply(multiply(q, s), jnp.broadcast_to(tsi[:, None], q.shape))
    if rht_mask is not None:
        y = _apply_16(y, rht_matrix(rht_mask).T)
    return y


# --------------------------------------------------------------------------------------------
# NVFP4 quantize / dequantize


def _check_2d(x: Array, what: str) -> None:
    if x.ndim != 2:
        raise ValueError(f"{what} expects a 2-D view (M, N), got shape {x.shape}")


def _blocks(x: Float[Array, "M N"], use_2d: bool) -> tuple[Array, Array]:
    """float32 1x16 blocks along N (zero-padded), shape (M, nb, 16), and their amaxes (M, nb):
    the block's own, or in 2D mode the amax of its 16x16 tile (row r uses tile-row r // 16)."""
    m, n = x.shape
    nb = cdiv(n, NVFP4_BLOCK)
    xf = x.astype(jnp.float32)
    if not use_2d:
        xb = jnp.pad(xf, ((0, 0), (0, nb * NVFP4_BLOCK - n))).reshape(m, nb, NVFP4_BLOCK)
        return xb, block_amax(xb, axis=-1)
    mt = cdiv(m, NVFP4_BLOCK)
    xp = jnp.pad(xf, ((0, mt * NVFP4_BLOCK - m), (0, nb * NVFP4_BLOCK - n)))
    tile_amax = block_amax(xp.reshape(mt, NVFP4_BLOCK, nb, NVFP4_BLOCK), axis=(1, 3))
    amax_b = jnp.repeat(tile_amax, NVFP4_BLOCK, axis=0)[:m]
    return xp[:m].reshape(m, nb, NVFP4_BLOCK), amax_b


def _global_amax(x: Float[Array, "M N"], global_amax) -> Float[Array, ""]:
    if global_amax is None:
        return block_amax(x.reshape(-1), axis=0)
    return jnp.asarray(global_amax, jnp.float32).reshape(())


def _colwise_input(x, use_2d: bool, use_rht: bool, sign_mask: int):
    if use_rht and use_2d:
        raise ValueError("the RHT applies to 1D NVFP4 only (as in TE); got use_2d=True")
    return rht(x.T, sign_mask) if use_rht else x.T


def _quantize_many(parts):
    """NVFP4 of several 2-D views `(x, use_2d, amax_g)` with one core call on all blocks."""
    blocks = [_blocks(x, use_2d) for x, use_2d, _ in parts]
    codes, sdb = nvfp4_encode_blocks(
        jnp.concatenate([xb.reshape(-1, NVFP4_BLOCK) for xb, _ in blocks]),
        jnp.concatenate([ab.reshape(-1) for _, ab in blocks]),
        jnp.concatenate([jnp.full((ab.size,), g) for (_, ab), (_, _, g) in zip(blocks, parts)]),
    )
    out, start = [], 0
    for (x, _, g), (_, ab) in zip(parts, blocks):
        m, n = x.shape
        k = ab.size
        data = e2m1_from_codes(
            codes[start : start + k].reshape(m, ab.shape[1] * NVFP4_BLOCK)[:, :n]
        )
        scale = from_byte_view(sdb[start : start + k].reshape(ab.shape), jnp.float8_e4m3fn)
        out.append((data, scale, g.reshape(1)))
        start += k
    return out


def nvfp4_quantize(
    x: Float[Array, "M N"],
    use_2d: bool = False,
    global_amax: Float[Array, "1"] | None = None,
) -> tuple[Shaped[Array, "M N"], Shaped[Array, "M nb"], Float[Array, "1"]]:
    """NVFP4 of the 2-D view with 1x16 blocks along N (TE kernel order, see module doc).

    **Arguments:**

    - `x`: float32, bfloat16 or float16 of shape (M, N).
    - `use_2d`: one scale per 16x16 tile (the tile amax); the scale of tile `(i, j)` is stored
        on each of the tile's 16 rows, i.e. row r uses tile-row `r // 16` (not TE's pure-JAX
        `jnp.tile`, which would use `r mod ceil(M/16)`).
    - `global_amax`: the float32 global amax to use (e.g. all-reduced over shards); default
        `max|x|` ignoring NaN.

    **Returns:** `(data, scale_inv, amax)`: float4_e2m1fn (M, N), float8_e4m3fn
    (M, ceil(N/16)) and the float32 (1,) global amax used.
    """
    _check_2d(x, "nvfp4_quantize")
    return _quantize_many([(x, use_2d, _global_amax(x, global_amax))])[0]


def nvfp4_quantize_colwise(
    x: Float[Array, "M N"],
    use_2d: bool = False,
    use_rht: bool = False,
    sign_mask: int = DEFAULT_RHT_SIGN_MASK,
    global_amax: Float[Array, "1"] | None = None,
) -> tuple[Shaped[Array, "N M"], Shaped[Array, "N mb"], Float[Array, "1"]]:
    """The colwise NVFP4 output, stored transposed ("T" layout): `nvfp4_quantize(x.T)`.

    With `use_rht`, the transposed rows first go through `rht` (bf16 result; needs
    M % 16 == 0) and the global amax is the post-RHT amax. `global_amax`, if given, is the
    amax of the tensor actually quantized (post-RHT with `use_rht`). In 2D mode the values
    are exactly the transpose of the rowwise ones (same tiles, same scales).
    """
    _check_2d(x, "nvfp4_quantize_colwise")
    return nvfp4_quantize(_colwise_input(x, use_2d, use_rht, sign_mask), use_2d, global_amax)


def nvfp4_quantize_2x(
    x: Float[Array, "M N"],
    use_2d: bool = False,
    use_rht: bool = False,
    sign_mask: int = DEFAULT_RHT_SIGN_MASK,
    global_amax: Float[Array, "1"] | None = None,
    global_amax_col: Float[Array, "1"] | None = None,
) -> tuple[tuple[Array, Array, Array], tuple[Array, Array, Array]]:
    """`(nvfp4_quantize(x, ...), nvfp4_quantize_colwise(x, ...))` with one core call on the
    blocks of both layouts. `global_amax_col` defaults to `global_amax` without RHT and to
    the post-RHT amax with it."""
    _check_2d(x, "nvfp4_quantize_2x")
    xc = _colwise_input(x, use_2d, use_rht, sign_mask)
    amax_r = _global_amax(x, global_amax)
    if global_amax_col is None and not use_rht:
        amax_c = amax_r
    else:
        amax_c = _global_amax(xc, global_amax_col)
    row, col = _quantize_many([(x, use_2d, amax_r), (xc, use_2d, amax_c)])
    return row, col


def nvfp4_dequantize(
    data: Shaped[Array, "R K"], scale_inv: Shaped[Array, "R kb"], amax: Float[Array, "1"], dq_dtype
) -> Shaped[Array, "R K"]:
    """TE's NVFP4Dequantizer in the stored layout: `(float(q) * float(sdb)) * fl(amax/2688)`
    (the first product is exact), cast RNE to `dq_dtype`."""
    return _dequantize(data, scale_inv, amax, dq_dtype, None)


def nvfp4_dequantize_colwise(
    data: Shaped[Array, "N M"],
    scale_inv: Shaped[Array, "N mb"],
    amax: Float[Array, "1"],
    dq_dtype,
    use_rht: bool = False,
    sign_mask: int = DEFAULT_RHT_SIGN_MASK,
) -> Shaped[Array, "M N"]:
    """Dequantize a T-layout colwise output back to (M, N): dequantize in float32, undo the
    RHT in float32 (`inverse_rht`, whose groups are exactly the 1x16 blocks of the T layout)
    if it was applied, round once to `dq_dtype`, transpose."""
    rht_mask = int(sign_mask) if use_rht else None
    return _dequantize(data, scale_inv, amax, dq_dtype, rht_mask).T


def _dequantize(data, scale_inv, amax, dq_dtype, rht_mask):
    _check_2d(data, "nvfp4_dequantize")
    r, k = data.shape
    kb = cdiv(k, NVFP4_BLOCK)
    if scale_inv.shape != (r, kb):
        raise ValueError(f"scale_inv shape {scale_inv.shape} does not match data {data.shape}")
    if rht_mask is not None:
        rht_matrix(rht_mask)  # validates the mask
        if k % RHT_SIZE:
            raise ValueError(f"RHT data needs a multiple of {RHT_SIZE} columns, got {data.shape}")
    codes = jnp.pad(e2m1_codes(data), ((0, 0), (0, kb * NVFP4_BLOCK - k)))
    tsi = global_decode_scale(jnp.asarray(amax, jnp.float32).reshape(()))
    out = decode_blocks(
        codes.reshape(-1, NVFP4_BLOCK),
        byte_view(scale_inv).reshape(-1),
        jnp.full((r * kb,), tsi),
        rht_mask=rht_mask,
    )
    return round_to_dtype(out.reshape(r, kb * NVFP4_BLOCK)[:, :k], dq_dtype)


# --------------------------------------------------------------------------------------------
# Random Hadamard transform (16-point, fixed signs; docs/block_formats.md)


def rht_matrix(sign_mask: int = DEFAULT_RHT_SIGN_MASK) -> np.ndarray:
    """`R = diag(s) @ H16 / 4` as float32 (entries +-0.25, exact), `H16[i, j] =
    (-1)^popcount(i & j)`, `s_i = -1` iff bit i of the 16-bit `sign_mask` is set."""
    if not 0 <= int(sign_mask) < 1 << RHT_SIZE:
        raise ValueError(f"the RHT sign mask must be a 16-bit integer, got {sign_mask!r}")
    i = np.arange(RHT_SIZE)
    h = np.array([[(-1) ** bin(a & b).count("1") for b in i] for a in i], dtype=np.float64)
    s = np.where((int(sign_mask) >> i) & 1, -1.0, 1.0)
    return (s[:, None] * h / 4.0).astype(np.float32)


def _apply_16(g: Float[Array, "G 16"], mat: np.ndarray) -> Float[Array, "G 16"]:
    """float32 `out[:, j] = T_i(g[:, i] * mat[i, j])`: IEEE float32 products, summed over i
    in the pairwise order `((p0+p1)+(p2+p3))+...` (the canonical tree of `tree.py` for 16
    terms: each level adds adjacent pairs), IEEE float32 adds."""
    shape = (g.shape[0], RHT_SIZE, RHT_SIZE)  # (G, i, j)
    prods = multiply(
        jnp.broadcast_to(g.astype(jnp.float32)[:, :, None], shape),
        jnp.broadcast_to(jnp.asarray(mat), shape),
    )

    def level(_, p):  # one tree level along i; the live prefix halves, the rest is padding
        s = add(p[:, 0::2], p[:, 1::2])
        return jnp.concatenate([s, jnp.zeros_like(s)], axis=1)

    return lax.fori_loop(0, 4, level, prods)[:, 0]  # rolled: one `add` in the graph


def _rht_core(g, sign_mask: int, inverse: bool):
    mat = rht_matrix(sign_mask)
    if inverse:
        return _apply_16(g, mat.T)
    return round_to_dtype(_apply_16(g, mat), jnp.bfloat16)


def _rht_groups(x, sign_mask: int, inverse: bool):
    k = x.shape[-1]
    if k % RHT_SIZE:
        raise ValueError(
            f"the RHT works on groups of {RHT_SIZE} along the transformed axis; its length {k} "
            f"is not a multiple of {RHT_SIZE} (for the colwise output: M % 16 != 0)"
        )
    rht_matrix(sign_mask)  # validates the mask
    g = x.astype(jnp.float32).reshape(-1, RHT_SIZE)
    return _rht_core(g, sign_mask=int(sign_mask), inverse=inverse).reshape(x.shape)


def rht(x: Float[Array, "... K"], sign_mask: int = DEFAULT_RHT_SIGN_MASK) -> Shaped[Array, "... K"]:
    """The 16-point RHT along the last axis in consecutive groups of 16: `v' = v @ R`.

    Each output is `bf16(T_i(float32(v_i) * R[i, j]))`: the inputs are taken exactly as
    float32 (for bf16 input that is TE's bf16 MMA operand; f32/f16 inputs are not pre-rounded
    to bf16), the products by +-0.25 are IEEE float32 multiplies (exact unless they underflow),
    the 16 terms are summed with IEEE float32 adds in the fixed pairwise order
    `((p0+p1)+(p2+p3))+...`, and the sum is rounded once, RNE, to bfloat16. For the colwise
    NVFP4 output it is applied to the transposed view (groups along the original M).
    """
    return _rht_groups(x, sign_mask, inverse=False)


def inverse_rht(
    y: Float[Array, "... K"], sign_mask: int = DEFAULT_RHT_SIGN_MASK
) -> Float[Array, "... K"]:
    """Inverse of `rht` in float32, without bf16 rounding: `v = v' @ R^T` (R is orthonormal),
    with the same product and summation rules."""
    return _rht_groups(y, sign_mask, inverse=True)
