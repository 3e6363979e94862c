"""Self-tests of the N-d block oracle (`oracle_nd.py`) and the stochastic-rounding oracle
(`oracle_sr.py`), and bit-exact cross-checks of the library's SR reference
(`eqx_quant.reference._sr`) against the latter (docs/block_formats.md)."""

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import oracle_blocks as ob
import oracle_nd as on
import oracle_sr as osr
import pytest
from jax._src.random.threefry2x32 import threefry2x32_p

from eqx_quant.reference import _sr

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
GRID = osr.E2M1_GRID
KEY = np.array([0x12345678, 0x9ABCDEF0], np.uint32)
NV_MODES = [(False, False), (True, False), (False, True)]  # (use_2d, use_rht)
R_EDGES = [0, 1, 0xFF, 0x100, 0x1FF, 0x7FFFFF00, 0x7FFFFFFF, 0x80000000, 0x800000FF,
           0xFFFFFE00, 0xFFFFFF00, 0xFFFFFFFF]


def _rng(seed=0):
    return np.random.default_rng(seed)


def _u32(rng, shape):
    return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)


def _neighbours(a):
    """Lower and upper E2M1 grid magnitudes around |y| = a in [0, 6] (searched on the grid)."""
    i = np.searchsorted(GRID, a, side="right") - 1
    lo = GRID[i]
    hi = np.where(lo == a, lo, GRID[np.minimum(i + 1, 7)])
    return lo, hi


def _edge_values():
    """float32 edge values of E2M1 SR: grid points, ties, binade edges, subnormals, specials,
    their float32 neighbours, both signs."""
    f = np.float32
    base = [0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 4.5, 5.0, 5.5, 5.999, 6.0, 7.0, 8.0,
            1e-45, 1e-40, 1.1754942e-38, 1.1754944e-38, 1e-10, 0.1, 1e30, 3.4028235e38]
    base += list(GRID) + [np.inf, np.nan]
    v = np.array(base, f)
    fin = v[np.isfinite(v)]
    with np.errstate(over="ignore"):  # nextafter(FLT_MAX, inf) = inf
        v = np.concatenate([v, np.nextafter(fin, f(np.inf)), np.nextafter(fin, f(0))])
    return np.concatenate([v, -v]).astype(f)


# ---------------------------------------------------------------------------------------------
# Threefry, random words, global index


def _random_counters(n, seed):
    rng = _rng(seed)
    args = [_u32(rng, n) for _ in range(4)]
    edge = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF], np.uint32)
    grid = [g.reshape(-1) for g in np.meshgrid(edge, edge, edge, edge, indexing="ij")]
    return [np.concatenate([a, g]) for a, g in zip(args, grid)]


def test_threefry_equals_jax_primitive_and_known_answers():
    # Random123 kat_vectors, threefry2x32 with 20 rounds: (ctr0, ctr1, key0, key1) -> out
    kat = [((0, 0, 0, 0), (0x6B200159, 0x99BA4EFE)),
           ((0xFFFFFFFF,) * 4, (0x1CB996FC, 0xBB002BE7)),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0))]
    for (c0, c1, k0, k1), want in kat:
        assert tuple(int(w) for w in osr.threefry2x32(k0, k1, c0, c1)) == want
    k0, k1, c0, c1 = _random_counters(20000, 1)
    want = threefry2x32_p.bind(*(jnp.asarray(a) for a in (k0, k1, c0, c1)))
    got = osr.threefry2x32(k0, k1, c0, c1)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))
    # broadcasting: one key, many counters
    g0, _ = osr.threefry2x32(k0[0], k1[0], c0, c1)
    full = (np.broadcast_to(a, c0.shape) for a in (k0[0], k1[0], c0, c1))
    w0 = threefry2x32_p.bind(*(jnp.asarray(a) for a in full))
    np.testing.assert_array_equal(g0, np.asarray(w0[0]))


def test_library_threefry_matches():
    k0, k1, c0, c1 = _random_counters(20000, 2)
    want = osr.threefry2x32(k0, k1, c0, c1)
    got = jax.jit(_sr.threefry2x32)(*(jnp.asarray(a) for a in (k0, k1, c0, c1)))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_random_words_layout_and_library():
    rng = _rng(3)
    idx = np.concatenate([rng.integers(0, 2**63, 5000, dtype=np.uint64),
                          np.array([0, 1, 2**32 - 1, 2**32, 2**40 + 7, 2**63 - 1], np.uint64)])
    low = idx & np.uint64(0xFFFFFFFF)
    lo, hi = low.astype(np.uint32), (idx >> np.uint64(32)).astype(np.uint32)
    lib = jax.jit(_sr.random_words, static_argnums=3)
    # the counter of element i is i // 2 (64-bit), split into 32-bit words by hand
    pair_lo = (lo >> np.uint32(1)) | (hi << np.uint32(31))
    pair_hi = hi >> np.uint32(1)
    odd = (lo & np.uint32(1)) == 1
    for stream in (0, 1):
        r = osr.random_words(KEY, idx, stream)
        w0, w1 = osr.threefry2x32(KEY[0], KEY[1], pair_lo, pair_hi | np.uint32(stream << 31))
        np.testing.assert_array_equal(r, np.where(odd, w1, w0))
        got = lib(jnp.asarray(KEY), jnp.asarray(lo), jnp.asarray(hi), stream)
        np.testing.assert_array_equal(np.asarray(got), r)
    # the streams (and the high index word) give unrelated words
    assert np.mean(osr.random_words(KEY, idx, 0) == osr.random_words(KEY, idx, 1)) < 1e-3
    assert np.mean(osr.random_words(KEY, idx, 0) == osr.random_words(KEY, low, 0)) < 0.01


def test_random_words_pair_counters():
    """Elements 2j and 2j + 1 share the counter (lo32(j), hi32(j) | stream << 31) and take its
    output words 0 and 1 (Random123 known answers and the JAX threefry primitive)."""
    # kat_vectors: counter (0, 0) under key (0, 0); counter (2^32-1, 2^32-1) under key (2^32-1,)*2
    zero = np.zeros(2, np.uint32)
    r = osr.random_words(zero, np.array([0, 1], np.uint64), 0)
    assert [int(w) for w in r] == [0x6B200159, 0x99BA4EFE]
    ones = np.full(2, 0xFFFFFFFF, np.uint32)
    r = osr.random_words(ones, np.array([2**64 - 2, 2**64 - 1], np.uint64), 1)
    assert [int(w) for w in r] == [0x1CB996FC, 0xBB002BE7]
    rng = _rng(31)
    j = np.concatenate([rng.integers(0, 2**63, 3000, dtype=np.uint64),
                        np.array([0, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62 + 5], np.uint64)])
    for stream in (0, 1):
        even = osr.random_words(KEY, 2 * j, stream)
        odd = osr.random_words(KEY, 2 * j + np.uint64(1), stream)
        c0 = (j & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        c1 = (j >> np.uint64(32)).astype(np.uint32) | np.uint32(stream << 31)
        k0, k1 = (np.full(j.shape, k, np.uint32) for k in KEY)
        w0, w1 = threefry2x32_p.bind(*(jnp.asarray(a) for a in (k0, k1, c0, c1)))
        np.testing.assert_array_equal(even, np.asarray(w0))
        np.testing.assert_array_equal(odd, np.asarray(w1))


GI_CASES = [((3, 4, 5), (0, 0, 0), (3, 4, 5)), ((2, 3), (1, 4), (4, 8)), ((5,), (7,), (12,)),
            ((2, 1, 3, 4), (1, 3, 2, 0), (3, 4, 6, 4)), ((3, 5), (69990, 69990), (70000, 70000)),
            ((2, 2, 2), (100000, 2000, 33), (100003, 2003, 40)),
            ((2, 3, 4), (2**20 - 6, 2**20 - 9, 990), (2**20, 2**20, 1000))]  # ~2^50


@pytest.mark.parametrize("local,offset,glob", GI_CASES)
def test_global_index(local, offset, glob):
    idx = osr.global_index(local, offset, glob)
    coords = np.indices(local).reshape(len(local), -1) + np.array(offset)[:, None]
    want = [sum(int(c) * math.prod(glob[d + 1:]) for d, c in enumerate(col)) for col in coords.T]
    assert idx.dtype == np.uint64 and [int(i) for i in idx.reshape(-1)] == want
    lib = jax.jit(_sr.global_index, static_argnums=(0, 2))
    lo, hi = lib(local, jnp.asarray(offset, jnp.int32), glob)
    got = np.asarray(lo).astype(np.uint64) | (np.asarray(hi).astype(np.uint64) << np.uint64(32))
    np.testing.assert_array_equal(got, idx)


def test_global_index_shards_tile_the_tensor():
    glob = (6, 4, 10)
    full = osr.global_index(glob, (0, 0, 0), glob)
    np.testing.assert_array_equal(full.reshape(-1), np.arange(240, dtype=np.uint64))
    np.testing.assert_array_equal(osr.global_index((3, 2, 5), (3, 2, 5), glob), full[3:, 2:, 5:])
    # a column-major ("wrong order") index is a different numbering
    assert not np.array_equal(full, np.arange(240, dtype=np.uint64).reshape(glob[::-1]).T)


# ---------------------------------------------------------------------------------------------
# E2M1 stochastic rounding


def _sr_cases(seed):
    """(y, r): random float32 bit patterns, values in (-8, 8), values of every binade below
    6 each with the two words either side of its exact threshold, and the edge values with
    edge and random words."""
    rng = _rng(seed)
    bits = _u32(rng, 20000).view(np.float32)  # every float32 class, mostly huge or tiny
    near = rng.uniform(-8, 8, 40000).astype(np.float32)
    exps = rng.integers(0, 130, 3000).astype(np.uint32) << np.uint32(23)
    binades = (exps | (_u32(rng, 3000) >> np.uint32(9))).view(np.float32)
    binades = binades[(binades < 6) & (_neighbours(binades)[0] != binades)]
    thr = np.array([_threshold(v) for v in binades], np.uint64)
    r_thr = np.stack([((thr - 1) << 8) | 0xFF, thr << 8]).astype(np.uint32).T.reshape(-1)
    edge = _edge_values()
    words = np.concatenate([np.array(R_EDGES, np.uint32), _u32(rng, 8)])
    y = np.concatenate([bits, near, np.repeat(binades, 2), np.repeat(edge, len(words))])
    return y, np.concatenate([_u32(rng, 60000), r_thr, np.tile(words, len(edge))])


def _threshold(a):
    """ceil(frac * 2^24) for |y| = a < 6 with exact rationals (P(up) = threshold / 2^24)."""
    step = Fraction(1, 2) if a < 2 else Fraction(1) if a < 4 else Fraction(2)
    t = Fraction(float(a)) / step
    return math.ceil((t - math.floor(t)) * 2**24)


def test_e2m1_sr_rule():
    y, r = _sr_cases(4)
    codes = osr.e2m1_sr(y, r)
    assert codes.dtype == np.uint8 and codes.max() <= 15
    nan = np.isnan(y)
    assert np.all(codes[nan] == 0x7)
    a = np.abs(y[~nan]).astype(np.float64)
    c = codes[~nan]
    assert np.array_equal(c & 8, np.where(np.signbit(y[~nan]), 8, 0))  # sign kept, also at 0
    assert np.all((c[a >= 6] & 7) == 7)  # saturation (inf too)
    lo, hi = _neighbours(np.minimum(a, 6))
    val = np.abs(osr.e2m1_value(c))
    assert np.all((val == lo) | (val == hi))  # never further than one grid step
    on_grid = lo == hi
    np.testing.assert_array_equal(c[on_grid], ob.to_e2m1(y[~nan][on_grid]).view(np.uint8))
    # exact rule: up iff r >> 8 < ceil(frac * 2^24)
    for v in np.unique(np.abs(_edge_values())):
        if not v < 6 or _neighbours(v)[0] == v:
            continue
        thr = _threshold(v)
        lo_v, hi_v = _neighbours(v)
        rs = np.array([(thr - 1) << 8, ((thr - 1) << 8) | 0xFF, thr << 8, (thr << 8) | 0xFF])
        rs = rs.astype(np.uint32)
        got = osr.e2m1_value(osr.e2m1_sr(np.full(4, v, np.float32), rs))
        np.testing.assert_array_equal(got, [hi_v, hi_v, lo_v, lo_v])


def test_library_encode_e2m1_sr_matches():
    y, r = _sr_cases(5)
    got = np.asarray(jax.jit(_sr.encode_e2m1_sr)(jnp.asarray(y), jnp.asarray(r)))
    want = osr.e2m1_sr(y, r)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(float(y[i]), hex(r[i]), int(got[i]), int(want[i])) for i in bad[:9]]


def test_e2m1_sr_is_unbiased_and_beats_rn():
    """200k random keys: the mean of SR(y) is within 4 sigma of y; RN's is not (off-grid y)
    and the mean absolute error of the SR mean is smaller than RN's (TE's SR test)."""
    rng = _rng(6)
    mags = np.array([0.1, 0.3, 0.6, 0.9, 1.1, 1.3, 1.6, 1.9,
                     2.2, 2.7, 3.3, 3.8, 4.4, 4.9, 5.3, 5.8])
    y = (mags * np.where(np.arange(16) % 3 == 0, -1, 1)).astype(np.float32)
    n = 200_000
    k0, k1 = _u32(rng, (n, 1)), _u32(rng, (n, 1))
    r = osr.threefry2x32(k0, k1, np.arange(16, dtype=np.uint32)[None], np.uint32(0))[0]
    mean = osr.e2m1_value(osr.e2m1_sr(np.broadcast_to(y, r.shape), r)).mean(axis=0)
    lo, hi = _neighbours(np.abs(y).astype(np.float64))
    sigma = np.sqrt((hi - np.abs(y)) * (np.abs(y) - lo) / n)
    rn = osr.e2m1_value(ob.to_e2m1(y).view(np.uint8))
    assert np.all(np.abs(mean - y) < 4 * sigma), (mean - y) / sigma
    assert np.all(np.abs(rn - y) > 4 * sigma)
    assert np.abs(mean - y).mean() < 0.05 * np.abs(rn - y).mean()


# ---------------------------------------------------------------------------------------------
# N-d oracle


def _x(shape, seed=0):
    """Normal values with a per-element magnitude spread of e^+-3."""
    spread = np.exp(_rng(seed + 1).uniform(-3, 3, shape))
    return (_rng(seed).standard_normal(shape) * spread).astype(np.float32)


def _u8(a):
    return np.asarray(a).view(np.uint8)


def _dq(o, part, shape, fa, use_rht=False):
    """float32 NVFP4 dequantization of part "row" / "col" of an nvfp4_quantize_nd result."""
    data, scale, amax = o[part], o[part + "_scale"], o[part + "_amax"]
    return on.nvfp4_dequantize_nd(data, scale, amax, np.float32, shape, fa, part == "row", use_rht)


@pytest.mark.parametrize("shape", [(7, 13), (33, 48), (64, 96), (1, 32), (16, 16)])
def test_nd_equals_2d_oracle_on_2d(shape):
    x = _x(shape)
    for q in (E4M3, E5M2):
        o = on.mxfp8_quantize_nd(x, q, 1, True, True)
        d, s = ob.mxfp8_quantize_rowwise(x, q)
        assert np.array_equal(_u8(o["row"]), _u8(d)) and np.array_equal(o["row_scale"], _u8(s))
        d, s = ob.mxfp8_quantize_colwise(x, q)
        assert np.array_equal(_u8(o["col"]), _u8(d)) and np.array_equal(o["col_scale"], _u8(s))
        y = on.mxfp8_dequantize_nd(o["col"], o["col_scale"], np.float32, 1, False)
        np.testing.assert_array_equal(y, ob.mxfp8_dequantize_colwise(d, s, np.float32))
    for use_2d, use_rht in NV_MODES:
        if use_rht and shape[0] % 16:
            continue  # the RHT needs K % 16 == 0
        o = on.nvfp4_quantize_nd(x, 1, True, True, use_2d, use_rht)
        col = ob.nvfp4_quantize_colwise(x, use_2d, use_rht)
        refs = dict(row=ob.nvfp4_quantize(x, use_2d), col=col)
        for part, (d, s, g) in refs.items():
            assert np.array_equal(o[part], _u8(d)) and np.array_equal(o[part + "_scale"], _u8(s))
            assert o[part + "_amax"][0] == g[0]
        y = ob.nvfp4_dequantize_colwise(*refs["col"], np.float32, use_rht)
        np.testing.assert_array_equal(_dq(o, "col", shape, 1, use_rht), y)


ALIGNED = [((2, 32, 3, 64), 2), ((3, 64, 32), 2), ((32, 2, 5, 32), 1), ((2, 2, 32, 32), 3)]


@pytest.mark.parametrize("shape,fa", ALIGNED)
def test_nd_equals_flattened_view_when_blocks_align(shape, fa):
    """With K and L block multiples, N-d blocks are TE's blocks of (prod S[:fa], prod S[fa:])."""
    x = _x(shape, 7)
    x2 = x.reshape(math.prod(shape[:fa]), -1)
    lead, k, trail = shape[: fa - 1], shape[fa - 1], shape[fa:]
    for q in (E4M3, E5M2):
        o = on.mxfp8_quantize_nd(x, q, fa, True, True)
        d, s = ob.mxfp8_quantize_rowwise(x2, q)
        assert np.array_equal(_u8(o["row"]), _u8(d).reshape(shape))
        assert np.array_equal(o["row_scale"], _u8(s).reshape(shape[:-1] + (-1,)))
        d, s = ob.mxfp8_quantize_colwise(x2, q)
        assert np.array_equal(_u8(o["col"]), _u8(d).reshape(shape))
        assert np.array_equal(o["col_scale"], _u8(s).reshape(lead + (k // 32,) + trail))
    for use_2d, use_rht in NV_MODES:
        o = on.nvfp4_quantize_nd(x, fa, True, True, use_2d, use_rht)
        d, s, _ = ob.nvfp4_quantize(x2, use_2d)
        assert np.array_equal(o["row"], _u8(d).reshape(shape))
        assert np.array_equal(o["row_scale"], _u8(s).reshape(shape[:-1] + (-1,)))
        d, s, _ = ob.nvfp4_quantize_colwise(x2, use_2d, use_rht)
        assert np.array_equal(o["col"], _u8(d).reshape(trail + shape[:fa]))
        assert np.array_equal(o["col_scale"], _u8(s).reshape(trail + lead + (k // 16,)))


def test_nd_blocks_differ_from_flattened_view_when_unaligned():
    x = _x((16, 3, 24), 8)  # fa = 1: C = 3, L = 24: flattened rows cross the l-rows
    o = on.nvfp4_quantize_nd(x, 1, True, False)
    d, s, _ = ob.nvfp4_quantize(x.reshape(16, 72))
    assert o["row_scale"].shape == (16, 3, 2) and s.shape == (16, 5)
    assert not np.array_equal(o["row"], _u8(d).reshape(16, 3, 24))
    o = on.mxfp8_quantize_nd(x.reshape(2, 8, 3, 24), E4M3, 2, False, True)  # K = 8, C = 3
    d, _ = ob.mxfp8_quantize_colwise(x.reshape(16, 72), E4M3)
    assert not np.array_equal(_u8(o["col"]).reshape(16, 72), _u8(d))


def _crop(o, shape, fa, b, mx):
    """Outputs of the zero-padded tensor cut back to those of `shape` (amaxes unchanged)."""
    sl = [slice(0, d) for d in shape]
    kb, lb = slice(0, -(-shape[fa - 1] // b)), slice(0, -(-shape[-1] // b))
    t = sl[fa:] + sl[:fa]  # T layout
    cut = dict(row=sl, row_scale=sl[:-1] + [lb], col=sl if mx else t,
               col_scale=sl[: fa - 1] + [kb] + sl[fa:] if mx else t[:-1] + [kb])
    return {p: v[tuple(cut[p])] if p in cut and v is not None else v for p, v in o.items()}


@pytest.mark.parametrize("shape,fa", [((3, 20, 2, 37), 2), ((20, 37), 1), ((2, 3, 32, 5, 21), 3)])
def test_partial_blocks_equal_zero_padded(shape, fa):
    x = _x(shape, 9)
    blocked = (fa - 1, len(shape) - 1)
    pshape = tuple(-(-d // 32) * 32 if i in blocked else d for i, d in enumerate(shape))
    xp = np.zeros(pshape, np.float32)
    xp[tuple(slice(0, d) for d in shape)] = x
    for q in (E4M3, E5M2):
        small = on.mxfp8_quantize_nd(x, q, fa, True, True)
        big = on.mxfp8_quantize_nd(xp, q, fa, True, True)
        for p, v in _crop(big, shape, fa, 32, True).items():
            assert np.array_equal(_u8(small[p]), _u8(v)), p
    modes = [m for m in NV_MODES if not m[1] or shape[fa - 1] % 16 == 0]  # RHT: K % 16 == 0
    for (use_2d, use_rht), key in [(m, k) for m in modes for k in (None, KEY)]:
        kw = dict(use_2d=use_2d, use_rht=use_rht, key=key)
        small = on.nvfp4_quantize_nd(x, fa, True, True, global_shape=pshape, **kw)
        big = on.nvfp4_quantize_nd(xp, fa, True, True, **kw)
        for p, v in _crop(big, shape, fa, 16, False).items():
            assert np.array_equal(small[p], v), (p, use_2d, use_rht, key)


def test_2d_colwise_is_transpose_of_rowwise():
    shape = (2, 20, 3, 37)
    o = on.nvfp4_quantize_nd(_x(shape, 10), 2, True, True, use_2d=True)
    np.testing.assert_array_equal(_dq(o, "row", shape, 2), _dq(o, "col", shape, 2))
    rs, cs = o["row_scale"], o["col_scale"]  # (a, k, c, lb), (c, l, a, kb)
    a, k, c, l = np.meshgrid(*map(np.arange, shape), indexing="ij")
    np.testing.assert_array_equal(rs[a, k, c, l // 16], cs[c, l, a, k // 16])


def test_dequantize_nd_round_trip():
    shape = (2, 32, 3, 40)
    x = _x(shape, 11)
    o = on.nvfp4_quantize_nd(x, 2, False, True, use_rht=True)
    err = lambda z: np.linalg.norm(z - x) / np.linalg.norm(x)
    assert err(_dq(o, "col", shape, 2, True)) < 0.15  # measured 0.10
    assert err(_dq(o, "col", shape, 2, False)) > 0.5  # the inverse RHT is needed
    m = on.mxfp8_quantize_nd(x, E4M3, 2, True, True)
    for part in ("row", "col"):
        z = on.mxfp8_dequantize_nd(m[part], m[part + "_scale"], np.float32, 2, part == "row")
        # half an E4M3 ulp (2^-4 relative) or half a subnormal step (2^-10 * 2^(E-127))
        assert np.all(np.abs(z - x) <= np.abs(x) * 2.0**-4 + np.abs(x).max() * 2.0**-9 / 448)


# ---------------------------------------------------------------------------------------------
# Stochastic rounding in the N-d oracle


def test_sr_nd_properties():
    shape = (2, 32, 3, 24)
    x = _x(shape, 12)
    rn = on.nvfp4_quantize_nd(x, 2, True, True)
    sr = on.nvfp4_quantize_nd(x, 2, True, True, key=KEY)
    again = on.nvfp4_quantize_nd(x, 2, True, True, key=KEY)
    other = on.nvfp4_quantize_nd(x, 2, True, True, key=KEY ^ np.uint32(1))
    for p in ("row", "col"):
        assert np.array_equal(sr[p + "_scale"], rn[p + "_scale"])
        assert np.array_equal(sr[p], again[p])
        assert 0.1 < np.mean(sr[p] != rn[p]) < 0.5 and np.mean(sr[p] != other[p]) > 0.15
        # SR and RN pick the same or adjacent grid points, with the same sign
        assert np.array_equal(sr[p] & 8, rn[p] & 8)
        assert np.all(np.abs((sr[p] & 7).astype(int) - (rn[p] & 7)) <= 1)


@pytest.mark.parametrize("use_2d,use_rht", NV_MODES)
def test_sr_shards_equal_slices_of_full(use_2d, use_rht):
    shape = (4, 32, 6, 16)  # fa = 2: A = 4, K = 32, C = 6, L = 16
    x = _x(shape, 13)
    kw = dict(use_2d=use_2d, use_rht=use_rht, key=KEY)
    full = on.nvfp4_quantize_nd(x, 2, True, True, **kw)
    amaxes = dict(amax=full["row_amax"], col_amax=full["col_amax"])
    shards = [((2, 0, 0, 0), (2, 32, 6, 16)), ((0, 0, 3, 0), (4, 32, 3, 16)),
              ((1, 16, 2, 0), (3, 16, 4, 16))]  # split along A, C, and K at a block edge
    for off, size in shards:
        sl = tuple(slice(o, o + n) for o, n in zip(off, size))
        kw_shard = dict(offset=off, global_shape=shape, **amaxes, **kw)
        shard = on.nvfp4_quantize_nd(x[sl], 2, True, True, **kw_shard)
        assert np.array_equal(shard["row"], full["row"][sl])
        assert np.array_equal(shard["col"], full["col"][sl[2:] + sl[:2]])
        local = on.nvfp4_quantize_nd(x[sl], 2, True, True, **amaxes, **kw)  # offset ignored
        assert not np.array_equal(local["row"], full["row"][sl])


def test_sr_mutations_change_results(monkeypatch):
    """A wrong stream or index order is visible: with stream 0 for the colwise part the 2D
    colwise codes become the exact transpose of the rowwise ones (same y, same words)."""
    shape = (2, 32, 3, 32)
    x = _x(shape, 14)
    good = on.nvfp4_quantize_nd(x, 2, True, True, use_2d=True, key=KEY)
    t = lambda o: o["col"].transpose(2, 3, 0, 1)  # T layout (c, l, a, k) back to (a, k, c, l)
    assert np.mean(t(good) != good["row"]) > 0.2
    words = osr.random_words
    monkeypatch.setattr(osr, "random_words", lambda key, idx, stream: words(key, idx, 0))
    bad = on.nvfp4_quantize_nd(x, 2, True, True, use_2d=True, key=KEY)
    assert np.array_equal(bad["row"], good["row"]) and np.array_equal(t(bad), bad["row"])
    monkeypatch.undo()
    index = osr.global_index
    def column_major(s, o, g):
        return np.ascontiguousarray(index(s[::-1], o[::-1], g[::-1]).T)

    monkeypatch.setattr(osr, "global_index", column_major)
    bad = on.nvfp4_quantize_nd(x, 2, True, True, use_2d=True, key=KEY)
    assert np.mean(bad["row"] != good["row"]) > 0.2 and np.mean(bad["col"] != good["col"]) > 0.2
