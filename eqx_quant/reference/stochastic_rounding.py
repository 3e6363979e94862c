"""Counter-based random bits and E2M1 stochastic rounding (docs/block_formats.md).

The random byte of an element depends only on the key and the element's index (and a stream
id that separates the rowwise and colwise parts), so every implementation and every sharding
draws the same bits. The generator is Threefry-2x32 with 20 rounds, the function behind
`jax.random`'s default keys, written here with plain uint32 operations so the kernels can
follow it line by line. One Threefry call serves eight elements: the indices 8j .. 8j + 7
share the counter of j and take the bytes 0..7 of its two output words (little-endian).
"""

import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, UInt8, UInt32

from .ieee import bits

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KS_PARITY = 0x1BD11BDA


def _rotl(v: Array, r: int) -> Array:
    return (v << jnp.uint32(r)) | (v >> jnp.uint32(32 - r))


def threefry2x32(
    k0: UInt32[Array, "*#s"],
    k1: UInt32[Array, "*#s"],
    c0: UInt32[Array, "*s"],
    c1: UInt32[Array, "*#s"],
) -> tuple[UInt32[Array, "*s"], UInt32[Array, "*s"]]:
    """Threefry-2x32-20 of the counter `(c0, c1)` under the key `(k0, k1)` (broadcasting)."""
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(_KS_PARITY))
    x0, x1 = c0 + ks[0], c1 + ks[1]
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(group + 1) % 3]
        x1 = x1 + ks[(group + 2) % 3] + jnp.uint32(group + 1)
    return x0, x1


def random_bytes(
    key: UInt32[Array, "2"],
    index_lo: UInt32[Array, "*s"],
    index_hi: UInt32[Array, "*s"],
    stream: int,
) -> UInt32[Array, "*s"]:
    """The random byte (0..255, as uint32) of each 64-bit index `(index_hi:index_lo)`: byte
    `index & 7` of the two words `threefry2x32(key, (lo32(index >> 3), hi32(index >> 3) |
    stream << 31))`, word 0 holding bytes 0..3 (byte 0 in its low bits) and word 1 bytes 4..7."""
    octet_lo = (index_lo >> jnp.uint32(3)) | (index_hi << jnp.uint32(29))
    octet_hi = (index_hi >> jnp.uint32(3)) | jnp.uint32((stream & 1) << 31)
    word0, word1 = threefry2x32(key[0], key[1], octet_lo, octet_hi)
    word = jnp.where((index_lo & jnp.uint32(4)) != 0, word1, word0)
    return (word >> ((index_lo & jnp.uint32(3)) * jnp.uint32(8))) & jnp.uint32(0xFF)


def global_index(
    local_shape: tuple[int, ...], offset: Array, global_shape: tuple[int | Array, ...]
) -> tuple[UInt32[Array, "*s"], UInt32[Array, "*s"]]:
    """(lo, hi) uint32 words of the row-major global linear index of every element of a local
    block of `local_shape` placed at `offset` (int32, one per dim) in `global_shape`, whose
    dims may be traced integer scalars (below 2^32; a grouped op's group rows).

    Computed in 64-bit arithmetic emulated on uint32 pairs (JAX runs without x64)."""
    lo = jnp.zeros(local_shape, jnp.uint32)
    hi = jnp.zeros(local_shape, jnp.uint32)
    for d, (n_local, n_global) in enumerate(zip(local_shape, global_shape)):
        coord = lax.broadcasted_iota(jnp.uint32, local_shape, d) + offset[d].astype(jnp.uint32)
        lo, hi = _mul_add_u64(lo, hi, n_global, coord)
    return lo, hi


def _mul_add_u64(lo: Array, hi: Array, m: int | Array, add: Array) -> tuple[Array, Array]:
    """(hi:lo) * m + add (mod 2^64), m an integer (Python or a traced scalar) < 2^32, add
    uint32."""
    m = jnp.uint32(int(m)) if isinstance(m, (int, np.integer)) else m.astype(jnp.uint32)
    m_lo, m_hi = m & jnp.uint32(0xFFFF), m >> jnp.uint32(16)
    # lo * m as a 64-bit value from 16-bit pieces.
    a_lo, a_hi = lo & jnp.uint32(0xFFFF), lo >> jnp.uint32(16)
    p00 = a_lo * m_lo
    p01 = a_lo * m_hi
    p10 = a_hi * m_lo
    p11 = a_hi * m_hi
    mid = (p00 >> jnp.uint32(16)) + (p01 & jnp.uint32(0xFFFF)) + (p10 & jnp.uint32(0xFFFF))
    new_lo = (p00 & jnp.uint32(0xFFFF)) | (mid << jnp.uint32(16))
    carry = (mid >> jnp.uint32(16)) + (p01 >> jnp.uint32(16)) + (p10 >> jnp.uint32(16)) + p11
    new_hi = hi * m + carry
    out_lo = new_lo + add
    out_hi = new_hi + (out_lo < new_lo).astype(jnp.uint32)
    return out_lo, out_hi


def encode_e2m1_sr(y: Float[Array, "*s"], r: UInt32[Array, "*s"]) -> UInt8[Array, "*s"]:
    """Stochastically rounded E2M1 codes of float32 `y` with random bytes `r` (0..255).

    Exact integer form of the rule in docs/block_formats.md: with `a = |y|` and the grid step
    (0.5, 1, 2) of a's binade, round up to the next grid point iff `(r + 1/2) * 2^-8` is below
    the fractional position of `a` between its two neighbours; saturate at 6; NaN -> 0x7; the
    sign bit is kept (also for a zero result)."""
    b = bits(y)
    sign = (b >> jnp.uint32(28)) & jnp.uint32(0x8)
    mag = b & jnp.uint32(0x7FFFFFFF)
    nan = mag > jnp.uint32(0x7F800000)
    big = mag >= jnp.uint32(0x40C00000)  # a >= 6 (incl. inf)
    # a = sig * 2^(e_eff - 150); step = 2^step_log2; t = a / step has f fractional bits.
    exp = (mag >> jnp.uint32(23)).astype(jnp.int32)
    mant = mag & jnp.uint32(0x7FFFFF)
    sig = jnp.where(exp == 0, mant, mant | jnp.uint32(0x800000))
    e_eff = jnp.maximum(exp, 1)
    step_log2 = jnp.where(
        mag < jnp.uint32(0x40000000), -1, jnp.where(mag < jnp.uint32(0x40800000), 0, 1)
    )
    # Code of the grid point n * step: n (step 0.5), n + 2 (step 1), n + 4 (step 2).
    offset = (2 * (step_log2 + 1)).astype(jnp.uint32)
    f = 150 + step_log2 - e_eff  # >= 21 for a < 8 (a < 8 => e_eff <= 129)
    # n = floor(t); frac bits = sig mod 2^f. Compare frac * 2^24 / 2^f against r24 exactly:
    # up iff r24 < ceil(frac * 2^(24 - f)).
    f_c = jnp.minimum(f, 31).astype(jnp.uint32)
    n = jnp.where(f >= 32, jnp.uint32(0), sig >> f_c)
    frac = jnp.where(f >= 32, sig, sig & ((jnp.uint32(1) << f_c) - jnp.uint32(1)))
    # threshold = ceil(frac / 2^(f - 24)) with f - 24 >= -3.
    sh = f - 24
    sh_pos = jnp.clip(sh, 0, 31).astype(jnp.uint32)
    sh_neg = jnp.clip(-sh, 0, 31).astype(jnp.uint32)
    down = frac >> sh_pos
    rounded_up = down + (
        (frac & ((jnp.uint32(1) << sh_pos) - jnp.uint32(1))) != 0
    ).astype(jnp.uint32)
    threshold = jnp.where(
        sh >= 32, (frac != 0).astype(jnp.uint32), jnp.where(sh >= 0, rounded_up, frac << sh_neg)
    )
    # (r + 1/2) * 2^-8 < frac <=> (r * 2 + 1) * 2^15 < frac * 2^24 <=> that integer is
    # below threshold = ceil(frac * 2^24) (an integer m is below x iff below ceil(x)).
    r24 = (r.astype(jnp.uint32) << jnp.uint32(16)) | jnp.uint32(0x8000)
    up = (r24 < threshold).astype(jnp.uint32)
    code = n + up + offset
    code = jnp.where(big, jnp.uint32(7), code)
    code = jnp.where(nan, jnp.uint32(7), code | sign)
    return code.astype(jnp.uint8)
