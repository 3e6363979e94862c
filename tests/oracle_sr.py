"""Independent NumPy oracle of the counter-based stochastic rounding of docs/block_formats.md
("Stochastic rounding"): Threefry-2x32-20, the per-element random words, the E2M1 SR rule
and the global linear index of a (possibly sharded) block.

Written from the doc's text only, in plain NumPy: uint32 arithmetic (wrapping) for Threefry,
uint64 for the indices and float64 for the SR rule (every float32 value, its quotient by a
power-of-two step, floor and fractional part are exact in float64). Nothing here shares code
with eqx_quant.
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


def random_words(key, index_u64, stream: int) -> np.ndarray:
    """uint32 word r of each element of global index i: output word i % 2 of
    threefry2x32(key, (lo32(i // 2), hi32(i // 2) | stream << 31)).

    The elements 2j and 2j + 1 share one counter and take its words 0 and 1.
    `key` holds the two uint32 key words (jax.random.key_data of a threefry key),
    `index_u64` the global row-major linear indices, `stream` is 0 (rowwise) or 1 (colwise)."""
    if stream not in (0, 1):
        raise ValueError(f"stream must be 0 or 1, got {stream!r}")
    key = np.asarray(key, dtype=U32).reshape(2)
    idx = np.asarray(index_u64, dtype=U64)
    pair = idx // U64(2)
    lo = (pair % U64(2**32)).astype(U32)
    hi = (pair // U64(2**32)).astype(U32) | U32(stream << 31)
    word0, word1 = threefry2x32(key[0], key[1], lo, hi)
    return np.where(idx % U64(2) == U64(1), word1, word0)


def e2m1_sr(y_f32, r_u32) -> np.ndarray:
    """Stochastically rounded E2M1 codes (uint8, 0..15, sign at bit 3) of float32 y with
    random words r (broadcast together), exactly the doc's float definition:

        NaN -> 0x7;  a = |y| >= 6 (or inf) -> magnitude code 7
        step, base = (0.5, 0) if a < 2, (1, 2) if a < 4, else (2, 4)
        t = a / step;  n = floor(t);  frac = t - n;  up = (r >> 8) * 2^-24 < frac
        magnitude code = n + up (step 0.5), 4 + (n - 2) + up (step 1), 6 + up (step 2)
        the sign bit of y is kept, also for a zero result.
    """
    y = np.asarray(y_f32)
    if y.dtype != np.float32:
        raise TypeError(f"e2m1_sr expects float32 input, got {y.dtype}")
    y, r = np.broadcast_arrays(y, np.asarray(r_u32, dtype=U32))
    with np.errstate(invalid="ignore"):  # signalling NaNs
        a = np.abs(y.astype(np.float64))
    nan = np.isnan(a)
    big = a >= 6  # includes inf
    a = np.where(nan | big, 0.0, a)  # keep the arithmetic below finite
    step = np.where(a < 2, 0.5, np.where(a < 4, 1.0, 2.0))
    t = a / step  # exact: division by a power of two
    n = np.floor(t)
    frac = t - n  # exact
    u = (r >> U32(8)).astype(np.float64) * 2.0**-24  # exact: 24-bit integer times 2^-24
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
