"""Independent NumPy oracle of the counter-based stochastic rounding of docs/block_formats.md
("Stochastic rounding"): Threefry-2x32-20, the per-element random bytes (one Threefry call
per eight consecutive indices), the E2M1 SR rule with 8 random bits and the global linear
index of a (possibly sharded) block.

Written from the doc's text only, in plain NumPy: uint32 arithmetic (wrapping) for Threefry,
uint64 for the indices and the byte selection, float64 for the SR rule (every float32
value, its quotient by a power-of-two step, floor and fractional part, and (r + 1/2) / 256
are exact in float64). Nothing here shares code with eqx_quant.
"""

from __future__ import annotations

import numpy as np

U32 = np.uint32
U64 = np.uint64
KS_PARITY = 0x1BD11BDA
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # groups 0, 2, 4 / groups 1, 3
E2M1_NAN_CODE = 0x7
E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])  # magnitude of codes 0..7


def _rotl(v: np.ndarray, r: int) -> np.ndarray:
    return (v << U32(r)) | (v >> U32(32 - r))


def threefry2x32(k0, k1, c0, c1) -> tuple[np.ndarray, np.ndarray]:
    """Random123 Threefry-2x32 with 20 rounds of counter (c0, c1) under key (k0, k1).

    All four arguments are cast to uint32 and broadcast together; returns the two output
    words as uint32 arrays of the broadcast shape. Key schedule ks = (k0, k1, k0^k1^parity);
    five groups of four rounds, each group followed by a key injection."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in (k0, k1, c0, c1)))
    # 1-d copies: NumPy wraps uint32 arrays silently (0-d operands would warn on overflow).
    k0, k1, c0, c1 = (
        np.broadcast_to(np.asarray(a, dtype=U32), shape).reshape(-1).copy()
        for a in (k0, k1, c0, c1)
    )
    ks = (k0, k1, k0 ^ k1 ^ U32(KS_PARITY))
    x0 = c0 + ks[0]
    x1 = c1 + ks[1]
    for g in range(5):
        for r in ROTATIONS[g % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r)
            x1 = x1 ^ x0
        x0 = x0 + ks[(g + 1) % 3]
        x1 = x1 + ks[(g + 2) % 3] + U32(g + 1)
    return x0.reshape(shape), x1.reshape(shape)


def random_bytes(key, index_u64, stream: int) -> np.ndarray:
    """uint32 random byte r (0..255) of each element of 64-bit index i:

        octet    = i >> 3
        (w0, w1) = threefry2x32(key, (lo32(octet), hi32(octet) | stream << 31))
        r        = byte (i & 7) of the little-endian 64-bit value w0 | w1 << 32

    so the eight elements 8j .. 8j + 7 share the counter of j: bytes 0..3 come from w0
    (byte 0 = its low 8 bits), bytes 4..7 from w1. `key` holds the two uint32 key words
    (jax.random.key_data of a threefry key), `index_u64` the elements' indices (rowwise: in
    the global x; colwise: in the global T layout), `stream` is 0 (rowwise) or 1 (colwise)."""
    if stream not in (0, 1):
        raise ValueError(f"stream must be 0 or 1, got {stream!r}")
    key = np.asarray(key, dtype=U32).reshape(2)
    idx = np.asarray(index_u64, dtype=U64)
    octet = idx >> U64(3)
    lo = (octet & U64(0xFFFFFFFF)).astype(U32)
    hi = (octet >> U64(32)).astype(U32) | U32(stream << 31)
    word0, word1 = threefry2x32(key[0], key[1], lo, hi)
    value = word0.astype(U64) | (word1.astype(U64) << U64(32))
    shift = (idx & U64(7)) * U64(8)
    return ((value >> shift) & U64(0xFF)).astype(U32)


def e2m1_sr(y_f32, r_bytes) -> np.ndarray:
    """Stochastically rounded E2M1 codes (uint8, 0..15, sign at bit 3) of float32 y with
    random bytes r (integers 0..255, broadcast together), exactly the doc's float definition:

        NaN -> 0x7;  a = |y| >= 6 (or inf) -> magnitude code 7
        step = 0.5 if a < 2, 1 if a < 4, else 2
        t = a / step;  n = floor(t);  frac = t - n;  up = (r + 1/2) * 2^-8 < frac
        magnitude code = n + up (step 0.5), 4 + (n - 2) + up (step 1), 6 + up (step 2)
        the sign bit of y is kept, also for a zero result.

    So P(up) over uniform bytes is #{r : (r + 1/2) / 256 < frac} / 256."""
    y = np.asarray(y_f32)
    if y.dtype != np.float32:
        raise TypeError(f"e2m1_sr expects float32 input, got {y.dtype}")
    r = np.asarray(r_bytes)
    if r.dtype.kind not in "iu":
        raise TypeError(f"e2m1_sr expects integer random bytes, got {r.dtype}")
    r = r.astype(np.int64)
    if r.size and (r.min() < 0 or r.max() > 255):
        raise ValueError("random bytes must be in 0..255")
    y, r = np.broadcast_arrays(y, r)
    with np.errstate(invalid="ignore"):  # signalling NaNs
        a = np.abs(y.astype(np.float64))
    nan = np.isnan(a)
    big = a >= 6  # includes inf
    a = np.where(nan | big, 0.0, a)  # keep the arithmetic below finite
    step = np.where(a < 2, 0.5, np.where(a < 4, 1.0, 2.0))
    t = a / step  # exact: division by a power of two
    n = np.floor(t)
    frac = t - n  # exact
    u = (r.astype(np.float64) + 0.5) / 256.0  # exact: 9 significant bits
    up = (u < frac).astype(np.int64)
    n = n.astype(np.int64)
    mag = np.where(step == 0.5, n + up, np.where(step == 1.0, 4 + (n - 2) + up, 6 + up))
    mag = np.where(big, 7, mag)
    sign = np.where(np.signbit(y), 0x8, 0)
    code = np.where(nan, E2M1_NAN_CODE, mag | sign)
    return code.astype(np.uint8)


def e2m1_value(codes) -> np.ndarray:
    """float64 value of E2M1 codes 0..15 (bit 3 = sign; code 8 is -0.0)."""
    c = np.asarray(codes).astype(np.int64)
    mag = E2M1_GRID[c & 7]
    return np.where(c & 8, -mag, mag)


def global_index(local_shape, offset, global_shape) -> np.ndarray:
    """uint64 row-major linear index in `global_shape` of every element of a local block of
    `local_shape` whose first element sits at `offset` (one int per dim): the index of local
    element s is ravel(s + offset, global_shape)."""
    local_shape = tuple(int(d) for d in local_shape)
    global_shape = tuple(int(d) for d in global_shape)
    offset = tuple(int(o) for o in np.asarray(offset).reshape(-1))
    if not len(local_shape) == len(offset) == len(global_shape):
        raise ValueError(f"rank mismatch: {local_shape}, {offset}, {global_shape}")
    for n_loc, off, n_glob in zip(local_shape, offset, global_shape):
        if off < 0 or off + n_loc > n_glob:
            raise ValueError(f"block {local_shape} at {offset} is outside {global_shape}")
    idx = np.zeros(local_shape, dtype=U64)
    for d, (off, n_glob) in enumerate(zip(offset, global_shape)):
        coord = np.arange(local_shape[d], dtype=U64) + U64(off)
        coord = coord.reshape((1,) * d + (-1,) + (1,) * (len(local_shape) - d - 1))
        idx = idx * U64(n_glob) + coord
    return idx


def t_layout(v, flatten_axis: int) -> tuple:
    """The T-layout order `v[fa:] + v[:fa]` of a per-dim tuple (a shape, an offset or a
    multi-index of x); `flatten_axis` in [-n, n) is made non-negative."""
    v = tuple(int(d) for d in np.asarray(v).reshape(-1))
    fa = flatten_axis % len(v)
    return v[fa:] + v[:fa]


def colwise_global_index(local_shape, offset, global_shape, flatten_axis: int) -> np.ndarray:
    """uint64 colwise SR index of every element of the colwise (T-layout) block of a local
    x block: shape `t_layout(local_shape)`, the row-major index in the global T layout
    `t_layout(global_shape)` of T position `t_layout(s + offset)` (the element of x at global
    multi-index g sits at T multi-index `g[fa:] + g[:fa]`)."""
    return global_index(
        t_layout(local_shape, flatten_axis),
        t_layout(offset, flatten_axis),
        t_layout(global_shape, flatten_axis),
    )
