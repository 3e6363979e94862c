"""Self-tests of the N-d block oracle (`tests/oracle/nd.py`), including its stochastic rounding, and
bit-exact cross-checks of the library's SR block reference (`eqx_quant.reference.blocks_nd`)
against it (docs/block_formats.md). The SR oracle's own tests: test_oracle_sr.py."""

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from eqx_quant.reference import blocks_nd as blocks_ref
from tests.oracle import blocks as ob
from tests.oracle import nd as on
from tests.oracle import sr as osr
from tests.support.bytes import u8

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
KEY = np.array([0x12345678, 0x9ABCDEF0], np.uint32)
NV_MODES = [(False, False), (True, False), (False, True)]  # (use_2d, use_rht)


def _rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# N-d oracle


def _x(shape, seed=0):
    """Normal values with a per-element magnitude spread of e^+-3."""
    spread = np.exp(_rng(seed + 1).uniform(-3, 3, shape))
    return (_rng(seed).standard_normal(shape) * spread).astype(np.float32)


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
        assert np.array_equal(u8(o["row"]), u8(d)) and np.array_equal(o["row_scale"], u8(s))
        d, s = ob.mxfp8_quantize_colwise(x, q)
        assert np.array_equal(u8(o["col"]), u8(d)) and np.array_equal(o["col_scale"], u8(s))
        y = on.mxfp8_dequantize_nd(o["col"], o["col_scale"], np.float32, 1, False)
        np.testing.assert_array_equal(y, ob.mxfp8_dequantize_colwise(d, s, np.float32))
    for use_2d, use_rht in NV_MODES:
        if use_rht and shape[0] % 16:
            continue  # the RHT needs K % 16 == 0
        o = on.nvfp4_quantize_nd(x, 1, True, True, use_2d, use_rht)
        col = ob.nvfp4_quantize_colwise(x, use_2d, use_rht)
        refs = dict(row=ob.nvfp4_quantize(x, use_2d), col=col)
        for part, (d, s, g) in refs.items():
            assert np.array_equal(o[part], u8(d)) and np.array_equal(o[part + "_scale"], u8(s))
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
        assert np.array_equal(u8(o["row"]), u8(d).reshape(shape))
        assert np.array_equal(o["row_scale"], u8(s).reshape(shape[:-1] + (-1,)))
        d, s = ob.mxfp8_quantize_colwise(x2, q)
        assert np.array_equal(u8(o["col"]), u8(d).reshape(shape))
        assert np.array_equal(o["col_scale"], u8(s).reshape(lead + (k // 32,) + trail))
    for use_2d, use_rht in NV_MODES:
        o = on.nvfp4_quantize_nd(x, fa, True, True, use_2d, use_rht)
        d, s, _ = ob.nvfp4_quantize(x2, use_2d)
        assert np.array_equal(o["row"], u8(d).reshape(shape))
        assert np.array_equal(o["row_scale"], u8(s).reshape(shape[:-1] + (-1,)))
        d, s, _ = ob.nvfp4_quantize_colwise(x2, use_2d, use_rht)
        assert np.array_equal(o["col"], u8(d).reshape(trail + shape[:fa]))
        assert np.array_equal(o["col_scale"], u8(s).reshape(trail + lead + (k // 16,)))


def test_nd_blocks_differ_from_flattened_view_when_unaligned():
    x = _x((16, 3, 24), 8)  # fa = 1: C = 3, L = 24: flattened rows cross the l-rows
    o = on.nvfp4_quantize_nd(x, 1, True, False)
    d, s, _ = ob.nvfp4_quantize(x.reshape(16, 72))
    assert o["row_scale"].shape == (16, 3, 2) and s.shape == (16, 5)
    assert not np.array_equal(o["row"], u8(d).reshape(16, 3, 24))
    o = on.mxfp8_quantize_nd(x.reshape(2, 8, 3, 24), E4M3, 2, False, True)  # K = 8, C = 3
    d, _ = ob.mxfp8_quantize_colwise(x.reshape(16, 72), E4M3)
    assert not np.array_equal(u8(o["col"]).reshape(16, 72), u8(d))


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
            assert np.array_equal(u8(small[p]), u8(v)), p
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


# (global shape, fa, shards as (offset, size)): splits along every dim, at block edges
SHARD_CASES = [
    ((4, 32, 6, 16), 2, [((2, 0, 0, 0), (2, 32, 6, 16)), ((0, 0, 3, 0), (4, 32, 3, 16)),
                         ((1, 16, 2, 0), (3, 16, 4, 16))]),  # A = 4, K = 32, C = 6, L = 16
    ((48, 80), 1, [((16, 32), (32, 48)), ((0, 64), (48, 16)), ((32, 0), (16, 80))]),
    ((3, 16, 2, 32, 48), 4, [((1, 0, 1, 16, 16), (2, 16, 1, 16, 32)),
                              ((0, 8, 0, 0, 0), (3, 8, 2, 32, 48))]),  # K = 32, C = 1
]


@pytest.mark.parametrize("use_2d,use_rht", NV_MODES)
@pytest.mark.parametrize("shape,fa,shards", SHARD_CASES, ids=[str(c[0]) for c in SHARD_CASES])
def test_sr_shards_equal_slices_of_full(shape, fa, shards, use_2d, use_rht):
    """A shard (offset, global_shape, the global amaxes) gives the slices of the unsharded
    result: rowwise at the x slice, colwise at the T-layout slice."""
    x = _x(shape, 13)
    kw = dict(use_2d=use_2d, use_rht=use_rht, key=KEY)
    full = on.nvfp4_quantize_nd(x, fa, True, True, **kw)
    amaxes = dict(amax=full["row_amax"], col_amax=full["col_amax"])
    for off, size in shards:
        if use_2d and (off[fa - 1] % 16 or off[-1] % 16):
            continue  # a 2D shard must not split a tile (the op gathers such dims)
        sl = tuple(slice(o, o + n) for o, n in zip(off, size))
        kw_shard = dict(offset=off, global_shape=shape, **amaxes, **kw)
        shard = on.nvfp4_quantize_nd(x[sl], fa, True, True, **kw_shard)
        assert np.array_equal(shard["row"], full["row"][sl])
        assert np.array_equal(shard["col"], full["col"][sl[fa:] + sl[:fa]])
        local = on.nvfp4_quantize_nd(x[sl], fa, True, True, **amaxes, **kw)  # offset ignored
        assert not np.array_equal(local["row"], full["row"][sl])
        assert not np.array_equal(local["col"], full["col"][sl[fa:] + sl[:fa]])


def _unit_scale_input(shape, fa, seed):
    """x in (-6, 6) with a 6 in every 16-element block along L and along K (at (k - l) % 16
    == 0) and so in every 16x16 tile: with amax_g = 2688 the multiplier is 1 and y = x."""
    rng = _rng(seed)
    x = rng.uniform(-6, 6, shape).astype(np.float32)
    k = np.arange(shape[fa - 1]).reshape((-1,) + (1,) * (len(shape) - fa))
    l_ = np.arange(shape[-1])
    x[np.broadcast_to((k - l_) % 16 == 0, shape)] = 6.0
    return x


@pytest.mark.parametrize("use_2d", [False, True])
def test_sr_nd_random_bytes_by_hand(use_2d):
    """With y = x the SR codes are e2m1_sr(x, bytes): rowwise with stream 0 at the element's
    index in arange over the global x, colwise with stream 1 at the colwise element's index in
    arange over the global T layout G[fa:] + G[:fa], for the whole tensor and for a shard.
    Consecutive elements of a colwise block (along K) have consecutive indices."""
    shape, fa = (3, 32, 2, 48), 2
    perm = (2, 3, 0, 1)  # x -> T layout
    x = _unit_scale_input(shape, fa, 41)
    g = np.float32([2688.0])
    n = x.size
    row_idx = np.arange(n, dtype=np.uint64).reshape(shape)
    col_idx = np.arange(n, dtype=np.uint64).reshape(osr.t_layout(shape, fa))
    for off, size in [((0, 0, 0, 0), shape), ((1, 16, 1, 16), (2, 16, 1, 32))]:
        sl = tuple(slice(o, o + d) for o, d in zip(off, size))
        t_sl = osr.t_layout(range(len(shape)), fa)  # the dims in T order
        t_sl = tuple(sl[d] for d in t_sl)
        xs = x[sl]
        o = on.nvfp4_quantize_nd(xs, fa, True, True, use_2d=use_2d, key=KEY, offset=off,
                                 global_shape=shape, amax=g, col_amax=g)
        assert np.all(o["row_scale"] == 0x38) and np.all(o["col_scale"] == 0x38)  # 1.0
        want = osr.e2m1_sr(xs, osr.random_bytes(KEY, row_idx[sl], 0))
        np.testing.assert_array_equal(o["row"], want)
        xt = np.ascontiguousarray(xs.transpose(perm))
        want = osr.e2m1_sr(xt, osr.random_bytes(KEY, col_idx[t_sl], 1))
        np.testing.assert_array_equal(o["col"], want)
        # the old definition (the colwise part at the x element's index) differs
        old = osr.e2m1_sr(xt, osr.random_bytes(KEY, row_idx[sl].transpose(perm), 1))
        assert np.mean(old != o["col"]) > 0.15


# (global shape, fa, offset, local shape): non-square shards with offset and global_shape
LIB_CASES = [
    ((4, 48, 3, 40), 2, (1, 16, 1, 8), (2, 32, 2, 24)),
    ((70, 300), 1, (16, 250), (48, 37)),
    ((2, 5, 32, 3, 24), 3, (1, 1, 0, 1, 0), (1, 3, 32, 2, 24)),
]


@pytest.mark.parametrize("use_2d,use_rht", NV_MODES)
@pytest.mark.parametrize("glob,fa,offset,local", LIB_CASES, ids=[str(c[0]) for c in LIB_CASES])
def test_library_blocks_sr_matches_oracle(glob, fa, offset, local, use_2d, use_rht):
    """The library's pure-JAX `blocks_ref.nvfp4_quantize` with SR on a shard (offset,
    global_shape) gives the oracle's bytes: rowwise at the x index, colwise at the T-layout
    index (with RHT too)."""
    if use_rht and local[fa - 1] % 16:
        pytest.skip("the RHT needs K % 16 == 0")
    x = _x(local, 42)
    o = on.nvfp4_quantize_nd(x, fa, True, True, use_2d=use_2d, use_rht=use_rht, key=KEY,
                             offset=offset, global_shape=glob)
    fn = jax.jit(blocks_ref.nvfp4_quantize, static_argnames=(
        "block_axis", "rowwise", "colwise", "use_2d", "use_rht", "sign_mask",
        "stochastic_rounding", "global_shape"))
    got = fn(jnp.asarray(x), jnp.asarray(o["row_amax"]), jnp.asarray(o["col_amax"]),
             jnp.asarray(KEY), jnp.asarray(offset, jnp.int32), block_axis=fa - 1, rowwise=True,
             colwise=True, use_2d=use_2d, use_rht=use_rht, sign_mask=0xD7E8,
             stochastic_rounding=True, global_shape=glob)
    for name, g in zip(("row", "row_scale", "col", "col_scale"), got):
        g = np.asarray(g)
        assert g.shape == o[name].shape, name
        bad = np.argwhere(g != o[name])
        assert bad.size == 0, (name, len(bad), tuple(bad[0]))


def test_sr_mutations_change_results(monkeypatch):
    """A wrong stream, colwise index or index order is visible. In 2D the colwise y are the
    exact transpose of the rowwise ones, so where the colwise part draws the rowwise bytes
    (stream 0 at the x element's index) its codes are the exact transpose of the rowwise
    codes; the T-layout index alone, or stream 1 alone, keeps them apart."""
    shape, fa = (2, 32, 3, 32), 2
    perm = (2, 3, 0, 1)
    x = _x(shape, 14)
    kw = dict(use_2d=True, key=KEY)
    good = on.nvfp4_quantize_nd(x, fa, True, True, **kw)
    t = lambda o: o["col"].transpose(2, 3, 0, 1)  # T layout (c, l, a, k) back to (a, k, c, l)
    assert np.mean(t(good) != good["row"]) > 0.2
    random_bytes, global_index = osr.random_bytes, osr.global_index

    def x_index(s, o, g, f):  # the colwise element at the index of its x element
        return np.ascontiguousarray(global_index(s, o, g).transpose(perm))

    stream0 = lambda key, idx, stream: random_bytes(key, idx, 0)  # noqa: E731
    for mutations in ({"random_bytes": stream0}, {"colwise_global_index": x_index},
                      {"random_bytes": stream0, "colwise_global_index": x_index}):
        for name, fn in mutations.items():
            monkeypatch.setattr(osr, name, fn)
        bad = on.nvfp4_quantize_nd(x, fa, True, True, **kw)
        monkeypatch.undo()
        assert np.array_equal(bad["row"], good["row"]), mutations
        if len(mutations) == 2:
            assert np.array_equal(t(bad), bad["row"])
        else:
            assert np.mean(bad["col"] != good["col"]) > 0.15, mutations
            assert np.mean(t(bad) != bad["row"]) > 0.15, mutations

    def column_major(s, o, g):
        return np.ascontiguousarray(global_index(s[::-1], o[::-1], g[::-1]).T)

    monkeypatch.setattr(osr, "global_index", column_major)
    bad = on.nvfp4_quantize_nd(x, fa, True, True, **kw)
    assert np.mean(bad["row"] != good["row"]) > 0.2 and np.mean(bad["col"] != good["col"]) > 0.2
