"""Bit-exact tests of the block-format reference (`eqx_quant.reference._mx`, `._nvfp4`) against
the independent NumPy oracle (`oracle_blocks.py`), plus hand-checked edge values.

Compile time: the bit-level cores take seconds each to compile on XLA:CPU, the layout code
around them milliseconds. A module fixture therefore swaps each core for a `pure_callback`
into the same core jitted once on fixed-size chunks of blocks, so each test shape compiles
only its layout graph. `test_traced_cores_match` runs the real, inlined cores once.
"""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import oracle_blocks as ob
import pytest

from eqx_quant.reference import _mx, _nvfp4

SHAPES = [(32, 64), (64, 128), (1, 32), (7, 13), (33, 48), (128, 96)]
X_DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16}
Q_DTYPES = {"e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}
CORES = [
    (_mx, "_mx_encode_core"),
    (_mx, "_mx_decode_core"),
    (_nvfp4, "_nv_encode_core"),
    (_nvfp4, "_nv_decode_core"),
    (_nvfp4, "_rht_core"),
]
CHUNK = 2048  # blocks per compiled core call
_ORIGINAL_CORES = {name: getattr(module, name) for module, name in CORES}


# ---------------------------------------------------------------------------------------------
# Core callbacks


def _callback_core(core):
    """`core` (works per index of its inputs' leading axis) reached through a callback that
    runs it jitted on chunks of CHUNK blocks: one compile per static configuration."""
    jitted = functools.cache(lambda items: jax.jit(functools.partial(core, **dict(items))))

    def host(fn, ranks, *arrays):
        extra = arrays[0].ndim - ranks[0]  # leading vmap axes (vmap_method="broadcast_all")
        batch = arrays[0].shape[: extra + 1]
        flat = [np.asarray(a).reshape((-1,) + a.shape[extra + 1 :]) for a in arrays]
        total = flat[0].shape[0]
        pieces = []
        for start in range(0, total, CHUNK):
            chunk = [a[start : start + CHUNK] for a in flat]
            k = chunk[0].shape[0]
            chunk = [np.pad(a, [(0, CHUNK - k)] + [(0, 0)] * (a.ndim - 1)) for a in chunk]
            pieces.append(jax.tree.map(lambda o, k=k: np.asarray(o)[:k], fn(*chunk)))
        outs = jax.tree.map(lambda *p: np.concatenate(p), *pieces)
        return jax.tree.map(lambda o: o.reshape(batch + o.shape[1:]), outs)

    @functools.cache
    def out_struct(items, sigs):  # output shapes for one block (tracing a core takes long)
        args = [jax.ShapeDtypeStruct((1,) + shape, dtype) for shape, dtype in sigs]
        return jax.eval_shape(jitted(items), *args)

    def call(*arrays, **static):
        items = tuple(sorted(static.items()))
        fn = jitted(items)
        sigs = tuple((a.shape[1:], a.dtype) for a in arrays)
        lead = arrays[0].shape[0]
        out = jax.tree.map(
            lambda o: jax.ShapeDtypeStruct((lead,) + o.shape[1:], o.dtype), out_struct(items, sigs)
        )
        ranks = [a.ndim for a in arrays]
        return jax.pure_callback(
            functools.partial(host, fn, ranks), out, *arrays, vmap_method="broadcast_all"
        )

    return call


@pytest.fixture(scope="module", autouse=True)
def callback_cores():
    with pytest.MonkeyPatch.context() as mp:
        for module, name in CORES:
            mp.setattr(module, name, _callback_core(getattr(module, name)))
        yield


# ---------------------------------------------------------------------------------------------
# Helpers


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def assert_bits(actual, expected, what: str) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    va, vb = _bits(actual), _bits(expected)
    bad = np.argwhere(va != vb)
    assert bad.size == 0, (
        f"{what}: {len(bad)} of {va.size} elements differ; first at {tuple(bad[0])}: "
        f"{va[tuple(bad[0])]:#x} (reference) vs {vb[tuple(bad[0])]:#x} (oracle)"
    )


def _wide(rng, shape, dtype) -> np.ndarray:
    """Magnitudes log-uniform over the whole range of `dtype` (subnormals to max/2), random
    signs, ~6% zeros and ~3% NaN, first row all zero."""
    m, n = shape
    finfo = ml_dtypes.finfo(np.dtype(dtype))
    lo, hi = np.log2(float(finfo.smallest_subnormal)), np.log2(float(finfo.max)) - 1
    b = np.exp2(rng.uniform(lo, hi, shape)) * rng.choice([-1.0, 1.0], shape)
    b = b.astype(np.float32)
    b.reshape(-1)[rng.integers(0, m * n, max(1, m * n // 17))] = 0.0
    b.reshape(-1)[rng.integers(0, m * n, max(1, m * n // 29))] = np.nan
    if m > 1:
        b[0] = 0.0
    return b.astype(np.dtype(dtype))


def _variants(shape, dtype, seed) -> np.ndarray:
    """Inputs of `dtype`: normal values, and wide-range values (`_wide`) of every x dtype's
    grid (for float32 inputs; bf16/f16 values are exactly float32 values)."""
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(shape).astype(np.float32) * 3]
    grids = list(X_DTYPES.values()) if dtype == jnp.float32 else [dtype]
    out += [_wide(rng, shape, g).astype(np.float32) for g in grids]
    return np.stack(out).astype(np.dtype(dtype))


NV_MODES = {"1d": {}, "2d": {"use_2d": True}, "rht": {"use_rht": True}}


def _nv_modes(m: int):
    return [k for k in NV_MODES if k != "rht" or m % 16 == 0]


def _reference_all(x, full: bool):
    """Reference outputs for one (M, N) input: the two-layout functions and the dequantizers;
    with `full`, also the single-layout functions."""
    m, n = x.shape
    dt = x.dtype
    out = {}
    for qn, q in Q_DTYPES.items():
        if full:
            out[f"mx_{qn}_row"] = _mx.mxfp8_quantize_rowwise(x, q)
            out[f"mx_{qn}_col"] = _mx.mxfp8_quantize_colwise(x, q)
        row, col = _mx.mxfp8_quantize_2x(x, q)
        out[f"mx_{qn}_2x_row"], out[f"mx_{qn}_2x_col"] = row, col
        out[f"mx_{qn}_row_deq"] = _mx.mxfp8_dequantize_rowwise(*row, dt)
        out[f"mx_{qn}_col_deq"] = _mx.mxfp8_dequantize_colwise(*col, dt)
    for mode in _nv_modes(m):
        kw = NV_MODES[mode]
        if full:
            if mode != "rht":
                out[f"nv_{mode}_row"] = _nvfp4.nvfp4_quantize(x, **kw)
            out[f"nv_{mode}_col"] = _nvfp4.nvfp4_quantize_colwise(x, **kw)
        row, col = _nvfp4.nvfp4_quantize_2x(x, **kw)
        out[f"nv_{mode}_2x_row"], out[f"nv_{mode}_2x_col"] = row, col
        out[f"nv_{mode}_row_deq"] = _nvfp4.nvfp4_dequantize(*row, dt)
        out[f"nv_{mode}_col_deq"] = _nvfp4.nvfp4_dequantize_colwise(*col, dt, use_rht=mode == "rht")
    return out


def _oracle_all(x, full: bool):
    m, n = x.shape
    dt = x.dtype
    out = {}
    for qn, q in Q_DTYPES.items():
        row = ob.mxfp8_quantize_rowwise(x, q)
        col = ob.mxfp8_quantize_colwise(x, q)
        if full:
            out[f"mx_{qn}_row"], out[f"mx_{qn}_col"] = row, col
        out[f"mx_{qn}_2x_row"], out[f"mx_{qn}_2x_col"] = row, col
        out[f"mx_{qn}_row_deq"] = ob.mxfp8_dequantize_rowwise(*row, dt)
        out[f"mx_{qn}_col_deq"] = ob.mxfp8_dequantize_colwise(*col, dt)
    for mode in _nv_modes(m):
        kw = NV_MODES[mode]
        row = ob.nvfp4_quantize(x, kw.get("use_2d", False))
        col = ob.nvfp4_quantize_colwise(x, **kw)
        if full:
            if mode != "rht":
                out[f"nv_{mode}_row"] = row
            out[f"nv_{mode}_col"] = col
        out[f"nv_{mode}_2x_row"], out[f"nv_{mode}_2x_col"] = row, col
        out[f"nv_{mode}_row_deq"] = ob.nvfp4_dequantize(*row, dt)
        out[f"nv_{mode}_col_deq"] = ob.nvfp4_dequantize_colwise(*col, dt, use_rht=mode == "rht")
    return out


@functools.cache
def _jitted_all(full: bool):
    return jax.jit(jax.vmap(functools.partial(_reference_all, full=full)))


def _compare_all(xs: np.ndarray, full: bool, what: str) -> dict:
    got = jax.tree.map(np.asarray, _jitted_all(full)(jnp.asarray(xs)))
    for v in range(xs.shape[0]):
        want = _oracle_all(xs[v], full)
        assert sorted(want) == sorted(got)
        for key in want:
            exp = want[key] if isinstance(want[key], tuple) else (want[key],)
            act = got[key] if isinstance(got[key], tuple) else (got[key],)
            for i, (a, e) in enumerate(zip(act, exp, strict=True)):
                assert_bits(a[v], e, f"{what} variant {v} {key}[{i}]")
    return got


# ---------------------------------------------------------------------------------------------
# Sweep: every shape; float32 inputs drawing values from all three x dtypes' grids, and true
# bf16 / f16 inputs (quantize paths and dequantization to the input dtype) on two shapes.

FULL_SHAPES = [(7, 13), (33, 48)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_sweep_matches_oracle(shape):
    xs = _variants(shape, jnp.float32, seed=shape[0] * 1000 + shape[1])
    got = _compare_all(xs, full=shape in FULL_SHAPES, what=f"{shape}")
    # 2D: rowwise and colwise values are exact transposes (same tiles, same scales).
    row, col = got["nv_2d_2x_row"][0], got["nv_2d_2x_col"][0]
    assert_bits(np.swapaxes(col, 1, 2), row, f"{shape} 2D colwise == rowwise.T")


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_dtypes_match_oracle(dtype):
    """True bf16 / f16 inputs on (48, 40): M % 16 == 0 (RHT), partial blocks, three tiles."""
    xs = _variants((48, 40), X_DTYPES[dtype], seed=7)
    _compare_all(xs, full=True, what=f"(48, 40) {dtype}")


def test_traced_cores_match():
    """The real cores, inlined in one jit (no callbacks), give the same bits."""
    x = jnp.asarray(_variants((7, 48), jnp.bfloat16, seed=3)[1])

    def f(x):
        return _mx.mxfp8_quantize_2x(x, jnp.float8_e4m3fn), _nvfp4.nvfp4_quantize_2x(x, use_2d=True)

    via_callback = jax.jit(f)(x)
    with pytest.MonkeyPatch.context() as mp:
        for module, name in CORES:
            mp.setattr(module, name, _ORIGINAL_CORES[name])
        traced = jax.jit(lambda x: f(x))(x)  # a new function: jit must not reuse f's trace
        assert "callback" not in jax.jit(lambda x: f(x)).lower(x).as_text()
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(via_callback), strict=True):
        assert_bits(a, b, "traced vs callback")


# ---------------------------------------------------------------------------------------------
# MXFP8 edge values

_F = np.float32


def _up(v):
    return np.nextafter(_F(v), _F(np.inf))


def _down(v):
    return np.nextafter(_F(v), _F(0))


def _mx_edge_input() -> tuple[np.ndarray, dict]:
    """(12, 64) float32, two 1x32 blocks a row, and the E8M0 bytes expected for e4m3."""
    x = np.full((12, 64), 0.5, _F)
    x[:, 32:] = 0.25
    x[3:6] = 0.0
    e = {}
    x[0] = 0.0
    e[0] = (0x00, 0x00)  # zero blocks -> 2^-127
    x[1, 1], x[1, 32:] = np.nan, np.nan
    x[1, 0] = 1.0
    e[1] = (119, 0x00)  # amax 1 (NaN ignored): 1/448 in (2^-9, 2^-8]; all-NaN block -> 0
    x[2, 0], x[2, 1], x[2, 33] = np.inf, -1.0, -np.inf
    e[2] = (0xFE, 0xFE)  # +inf amax saturates
    x[3, 5], x[3, 40] = 448.0, -448.0 * 2.0**20
    e[3] = (127, 147)  # amax exactly 448 * 2^k
    x[4, 5], x[4, 40] = _up(448.0), -_up(448.0 * 2.0**-20)
    e[4] = (128, 108)  # one ulp above rounds up
    x[5, 5], x[5, 40] = _down(448.0), _down(448.0 * 2.0**-20)
    e[5] = (127, 107)  # one ulp below does not
    x[6, :32] = 2.0**-140  # subnormal amax: v << 2^-127 -> E = 0, data 2^-13
    x[6, 32:] = 2.0**-149
    e[6] = (0x00, 0x00)
    x[7, :32] = 448.0 * 2.0**-126.5  # v in (2^-127, 2^-126) -> E = 1
    x[7, 32:] = 448.0 * 2.0**-127
    e[7] = (0x01, None)
    x[8, 3], x[8, 40] = np.finfo(_F).max, -np.finfo(_F).max
    e[8] = (247, 247)  # FLT_MAX / 448 ~ 2^119.2
    x[9, 5], x[9, 40] = 57344.0, _up(57344.0)
    e[9] = (134, 135)  # 57344 = 448 * 2^7
    x[10, :32] = -0.0
    x[10, 32:] = np.linspace(-448, 448, 32, dtype=_F)
    e[10] = (0x00, 127)
    e4m3 = np.arange(0x38, 0x7F, dtype=np.uint8).view(ob.E4M3).astype(np.float64)  # [1, 448]
    x[11, :31] = ((e4m3[:-1] + e4m3[1:]) / 2)[::2][:31]  # exact E4M3 ties at scale 1
    x[11, 31] = 448.0
    x[11, 32:] = -x[11, :32] * 2.0**-30
    e[11] = (127, 97)
    return x, e


def test_mxfp8_edge_values():
    x, expected_e = _mx_edge_input()
    f = jax.jit(lambda x: [_mx.mxfp8_quantize_2x(x, q) for q in Q_DTYPES.values()])
    got = f(jnp.asarray(x))
    for (qn, q), ((rd, rs), (cd, cs)) in zip(Q_DTYPES.items(), got, strict=True):
        od, os_ = ob.mxfp8_quantize_rowwise(x, q)
        assert_bits(rd, od, f"edge {qn} row data")
        assert_bits(rs, os_, f"edge {qn} row scale")
        od, os_ = ob.mxfp8_quantize_colwise(x, q)
        assert_bits(cd, od, f"edge {qn} col data")
        assert_bits(cs, os_, f"edge {qn} col scale")
    (rd, rs), _ = got[0]  # e4m3: hand-checked values
    e = _bits(rs)
    for row, want in expected_e.items():
        for blk, w in enumerate(want):
            if w is not None:
                assert e[row, blk] == w, f"row {row} block {blk}: E {e[row, blk]} != {w}"
    d = _bits(rd)
    assert d[1, 1] == 0x7F and (d[1, 32:] == 0x7F).all(), "NaN -> 0x7F"
    assert d[2, 0] == 0x7E and d[2, 33] == 0xFE and d[2, 1] == 0x80, "inf saturates, -1 -> -0"
    assert d[3, 5] == 0x7E and d[3, 40] == 0xFE, "448 * 2^k -> +-448"
    assert (d[10, :32] == 0x80).all(), "-0.0 keeps its sign"
    assert (d[6, :32] == 0).all(), "2^-13 underflows e4m3"
    assert (d[11, :31] % 2 == 0).all() and (d[11, 32:63] % 2 == 0).all(), "ties to even"
    d5 = _bits(got[1][0][0])
    assert (d5[6, :32] == 0x08).all(), "2^-13 is the e5m2 byte 0x08"


# ---------------------------------------------------------------------------------------------
# NVFP4 edge values


@functools.cache
def _nv_with_amax():
    return jax.jit(jax.vmap(lambda x, g: _nvfp4.nvfp4_quantize(x, global_amax=g)))


def _check_nv(xs, gs, what):
    """Reference vs oracle for each (x, global_amax) pair; returns the reference outputs."""
    got = jax.tree.map(np.asarray, _nv_with_amax()(jnp.asarray(xs), jnp.asarray(gs)))
    for v in range(xs.shape[0]):
        want = ob.nvfp4_quantize(xs[v], False, gs[v])
        for i in range(3):
            assert_bits(got[i][v], want[i], f"{what} case {v} output {i}")
    return got


def test_nvfp4_edge_values():
    fmax = np.finfo(_F).max
    xs = np.zeros((7, 2, 32), _F)
    gs = np.zeros((7, 1), _F)
    # 0: all zeros, amax 0 -> S_enc = 1, scales 0, data 0.
    # 1: NaN inside a block: ignored by the amaxes, encoded as +6 (code 0x7).
    xs[1, 0, :4] = [1.0, np.nan, -2.0, 0.75]
    gs[1] = 2.0
    # 2: +-inf in the tensor: amax inf -> S_enc = 1; block amax inf -> scale 448 (0x7E).
    xs[2, 0, :3] = [np.inf, 1.0, -np.inf]
    xs[2, 1, :2] = [3.0, -5.0]
    gs[2] = np.inf
    # 3: a global amax below the block amax: the E4M3 scale saturates at 448.
    xs[3, 0, :2] = [100.0, -7.0]
    gs[3] = 10.0
    # 4: small blocks next to a large global amax (S_enc = 2.688e-27): a subnormal E4M3
    #    scale, and a zero scale, whose multiplier is FLT_MAX: nonzero values saturate to +-6.
    xs[4, 0, 0], xs[4, 0, 16:18], xs[4, 1, 0] = 1e30, [1e24, -5e23], -1.3e25
    gs[4] = 1e30
    # 5: NaN global amax -> S_enc = FLT_MAX (fminf); 6: subnormal global amax -> FLT_MAX.
    xs[5, 0, :2] = [1.0, -1.0]
    gs[5] = np.nan
    xs[6, 0, :2] = [1e-40, -3e-41]
    gs[6] = 1e-40
    d, s, a = _check_nv(xs, gs, "nv edge")
    d, s = _bits(d), _bits(s)
    assert (d[0] == 0).all() and (s[0] == 0).all()
    assert d[1, 0, 1] == 0x7 and d[1, 0, 2] == 0xF, "NaN -> +6; -2 at amax 2 -> -6"
    assert s[2, 0, 0] == 0x7E and d[2, 0, 0] == 0x7 and d[2, 0, 2] == 0xF, "inf saturates"
    assert d[2, 0, 1] == 0x0, "1 / 448 rounds to 0"
    assert s[3, 0, 0] == 0x7E, "scale saturates at 448"
    assert s[4, 0, 1] == 0 and d[4, 0, 16] == 0x7 and d[4, 0, 17] == 0xF, "scale 0, data +-6"
    assert 0 < s[4, 1, 0] < 8 and d[4, 1, 0] == 0xF, "subnormal scale; -amax -> -6"
    assert s[5, 0, 0] == 0x7E, "S_enc = FLT_MAX saturates the scale"
    assert s[6, 0, 0] == 0x03, "1e-40 * fl(FLT_MAX / 6) = 5.67e-3 -> 3 * 2^-9"
    assert a[5, 0] != a[5, 0], "the global amax used is returned (NaN here)"
    del fmax


def _e4m3_byte(v) -> np.ndarray:
    return ob.to_fp8(np.asarray(v, _F), ob.E4M3).view(np.uint8)


def test_nvfp4_e4m3_scale_ties():
    """Block amaxes whose scale `amax * fl(S_enc * fl(1/6))` sits exactly on an E4M3 tie, and
    cases where TE's pure-JAX order `fl(amax / 6) * S_enc` would pick another byte."""
    e4m3 = np.arange(0x01, 0x7E, dtype=np.uint8).view(ob.E4M3).astype(_F)
    mids = ((e4m3[:-1].astype(np.float64) + e4m3[1:]) / 2).astype(_F)
    cases = {}
    for g in (_F(2688.0), _F(1000.0), _F(3.5)):
        s_enc = _F(_F(2688.0) / g)
        factor = _F(s_enc * (_F(1) / _F(6)))
        for t in mids:
            b0 = _F(t / factor)
            for k in range(-3, 4):
                b = _F(b0 + k * np.spacing(b0))
                kernel = _F(b * factor)
                alt = _F(_F(b / _F(6)) * s_enc)
                tie = kernel == t
                differs = _e4m3_byte(kernel) != _e4m3_byte(alt)
                if (tie or differs) and b <= g:
                    cases.setdefault(float(g), []).append((b, bool(tie), bool(differs)))
    gs_list = sorted(cases)
    per = max(len(v) for v in cases.values())
    xs = np.zeros((len(gs_list), per, 16), _F)
    info = []
    for i, g in enumerate(gs_list):
        for j, (b, tie, differs) in enumerate(cases[g]):
            xs[i, j, :3] = [b, -b / 2, b / 3]
            info.append((i, j, b, tie, differs))
    gs = np.array(gs_list, _F).reshape(-1, 1)
    _, s, _ = _check_nv(xs, gs, "e4m3 ties")
    s = _bits(s)[..., 0]
    n_tie = n_diff = 0
    for i, j, b, tie, differs in info:
        factor = _F(_F(_F(2688.0) / gs[i, 0]) * (_F(1) / _F(6)))
        assert s[i, j] == _e4m3_byte(_F(b * factor)), f"case g={gs[i, 0]} b={b}"
        if tie:
            n_tie += 1
            assert s[i, j] % 2 == 0, "an exact tie rounds to the even E4M3 code"
        if differs:
            n_diff += 1
            alt = _e4m3_byte(_F(_F(b / _F(6)) * _F(_F(2688.0) / gs[i, 0])))
            assert s[i, j] != alt
    assert n_tie > 20 and n_diff > 0, (n_tie, n_diff)


def test_nvfp4_2d_uses_tile_row_of_each_row():
    """M = 48 (three tile-rows) with tiles of distinct magnitude: row r carries the scale of
    tile-row r // 16, not r mod 3 (TE's pure-JAX jnp.tile)."""
    m, n = 48, 32
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.0, (m, n)).astype(_F)
    for ti in range(3):
        for tj in range(2):
            x[16 * ti : 16 * ti + 16, 16 * tj : 16 * tj + 16] *= _F(2.0 ** (3 * ti + tj))
    f = jax.jit(lambda x: _nvfp4.nvfp4_quantize_2x(x, use_2d=True))
    (rd, rs, ra), (cd, cs, ca) = f(jnp.asarray(x))
    od, os_, _ = ob.nvfp4_quantize(x, use_2d=True)
    assert_bits(rd, od, "2D row data")
    assert_bits(rs, os_, "2D row scale")
    rs, cs = _bits(rs), _bits(cs)
    tiles = rs[::16]  # (3, 2): one scale per tile
    assert len(np.unique(tiles)) == 6
    for r in range(m):
        assert (rs[r] == tiles[r // 16]).all(), f"row {r}"
    bug = np.tile(tiles, (16, 1))  # row r -> tile-row r mod 3
    assert (bug != rs).any()
    for c in range(n):
        assert (cs[c] == tiles[:, c // 16]).all(), f"colwise row {c}"
    assert_bits(np.asarray(cd).T, np.asarray(rd), "2D colwise data == rowwise.T")


# ---------------------------------------------------------------------------------------------
# RHT


def test_rht_matrix_orthonormal():
    s = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1])
    for mask in (0xD7E8, 0x0000, 0x0001, 0xFFFF, 0x1234):
        r = _nvfp4.rht_matrix(mask)
        assert_bits(r, ob.rht_matrix(mask), f"R for mask {mask:#x}")
        assert set(np.abs(r).ravel()) == {0.25}
        r64 = r.astype(np.float64)
        np.testing.assert_array_equal(r64 @ r64.T, np.eye(16))
    h = _nvfp4.rht_matrix(0).astype(np.float64) * 4
    np.testing.assert_array_equal(np.diag(s) @ h / 4, _nvfp4.rht_matrix(0xD7E8))
    with pytest.raises(ValueError, match="16-bit"):
        _nvfp4.rht_matrix(1 << 16)


@functools.cache
def _jitted_rht(mask: int, inverse: bool):
    fn = _nvfp4.inverse_rht if inverse else _nvfp4.rht
    return jax.jit(functools.partial(fn, sign_mask=mask))


def test_rht_bf16_rounding_of_exact_sums():
    """Integer inputs make every float32 product and sum exact, so each output must be the
    round-to-nearest-even bf16 of the exact x @ R (many are ties or need rounding)."""
    rng = np.random.default_rng(1)
    x = rng.integers(-4096, 4096, (4, 64)).astype(_F)
    for mask in (0xD7E8, 0x0001):
        r = ob.rht_matrix(mask).astype(np.float64)
        exact = (x.astype(np.float64).reshape(-1, 16) @ r).reshape(x.shape)
        want = exact.astype(_F).astype(ob.BF16)  # exact in f32, one rounding to bf16
        got = np.asarray(_jitted_rht(mask, False)(jnp.asarray(x)))
        assert_bits(got, want, f"rht mask {mask:#x}")
        assert (want.astype(np.float64) != exact).mean() > 0.5, "most outputs need rounding"
        back = np.asarray(_jitted_rht(mask, True)(jnp.asarray(exact.astype(_F))))
        assert_bits(back, x, "inverse of exact values")
    assert (got != np.asarray(_jitted_rht(0xD7E8, False)(jnp.asarray(x)))).any()


def test_rht_summation_order():
    """Wide-range inputs: float32 rounding makes the sum order visible. The reference follows
    the documented pairwise tree (the oracle) and differs from a left-to-right sum."""
    rng = np.random.default_rng(2)
    x = (np.exp2(rng.uniform(-30, 30, (8, 64))) * rng.choice([-1, 1], (8, 64))).astype(_F)
    # Output 0 of this group sums [B, 1, -B, 1, 0, ...] / 4: pairwise (B+1) + (-B+1) = 0,
    # left to right ((B+1) - B) + 1 = 1 (B+1 rounds to B in float32).
    s = np.where((0xD7E8 >> np.arange(16)) & 1, -1.0, 1.0)
    x[0, :16] = s * np.array([2.0**27, 1, -(2.0**27), 1] + [0] * 12)
    got = np.asarray(_jitted_rht(0xD7E8, False)(jnp.asarray(x)))
    assert_bits(got, ob.rht(x), "rht vs oracle")
    r = ob.rht_matrix()
    p = x.reshape(-1, 16)[:, :, None] * r[None]
    seq = p[:, 0]
    for i in range(1, 16):
        seq = (seq + p[:, i]).astype(_F)
    seq = seq.reshape(x.shape).astype(ob.BF16)
    assert (_bits(seq) != _bits(got)).any(), "test inputs too tame to see the order"
    inv = np.asarray(_jitted_rht(0xD7E8, True)(jnp.asarray(got)))
    assert_bits(inv, ob.inverse_rht(got), "inverse rht vs oracle")
    np.testing.assert_allclose(inv, x, rtol=2**-6, atol=np.abs(x).max() * 2**-8)


def test_rht_errors():
    x = jnp.ones((24, 32), jnp.bfloat16)
    with pytest.raises(ValueError, match="multiple of 16"):
        _nvfp4.rht(jnp.ones((4, 24)))
    with pytest.raises(ValueError, match="M % 16"):
        _nvfp4.nvfp4_quantize_colwise(x, use_rht=True)
    with pytest.raises(ValueError, match="1D NVFP4 only"):
        _nvfp4.nvfp4_quantize_2x(jnp.ones((32, 32)), use_2d=True, use_rht=True)
    with pytest.raises(ValueError, match="16-bit"):
        _nvfp4.rht(jnp.ones((4, 16)), sign_mask=-1)


# ---------------------------------------------------------------------------------------------
# Swizzle

SWIZZLE_CASES = [  # (unpadded stored shape, rowwise)
    ((7, 1), True),
    ((130, 5), True),
    ((33, 2), True),
    ((1, 64), False),
    ((3, 130), False),
    ((9, 200), False),
]


@functools.cache
def _jitted_swizzle(rowwise: bool, shape: tuple):
    sw = jax.jit(functools.partial(_mx.swizzle_scales, rowwise=rowwise))
    un = jax.jit(functools.partial(_mx.unswizzle_scales, rowwise=rowwise, shape=shape))
    return sw, un


def test_swizzle_offset_formula():
    assert _mx.swizzle_offset(0, 0, 4) == 0
    assert _mx.swizzle_offset(1, 0, 4) == 16
    assert _mx.swizzle_offset(32, 0, 4) == 4
    assert _mx.swizzle_offset(0, 3, 4) == 3
    assert _mx.swizzle_offset(128, 0, 4) == 512
    assert _mx.swizzle_offset(0, 4, 8) == 512
    assert _mx.swizzle_offset(129, 5, 8) == 3 * 512 + 16 + 1
    r, c = np.meshgrid(np.arange(256), np.arange(12), indexing="ij")
    offs = _mx.swizzle_offset(r, c, 12)
    np.testing.assert_array_equal(offs, ob.swizzle_offset(r, c, 12))
    np.testing.assert_array_equal(np.sort(offs.ravel()), np.arange(256 * 12))


@pytest.mark.parametrize("shape,rowwise", SWIZZLE_CASES)
def test_swizzle_index_mapping(shape, rowwise):
    """Swizzle the two bytes of every element's index: the flat buffer must hold, at
    `swizzle_offset(r, c)`, element (r, c) of the padded (and, colwise, transposed) matrix."""
    r, c = shape if rowwise else shape[::-1]
    rp, cp = -(-r // 128) * 128, -(-c // 4) * 4
    idx = np.arange(1, shape[0] * shape[1] + 1).reshape(shape)  # 0 marks padding
    sw, _ = _jitted_swizzle(rowwise, shape)
    lo = np.asarray(sw(jnp.asarray((idx & 0xFF).astype(np.uint8))), np.int64).reshape(-1)
    hi = np.asarray(sw(jnp.asarray((idx >> 8).astype(np.uint8))), np.int64).reshape(-1)
    flat = lo | hi << 8
    stored = idx if rowwise else idx.T
    want = np.zeros(rp * cp, np.int64)
    for i in range(rp):
        for j in range(cp):
            want[_mx.swizzle_offset(i, j, cp)] = stored[i, j] if i < r and j < c else 0
    np.testing.assert_array_equal(flat, want)


@pytest.mark.parametrize("dtype", [jnp.float8_e8m0fnu, jnp.float8_e4m3fn])
@pytest.mark.parametrize("shape,rowwise", SWIZZLE_CASES)
def test_swizzle_round_trip_and_oracle(shape, rowwise, dtype):
    rng = np.random.default_rng(4)
    s = rng.integers(1, 255, shape, dtype=np.uint8).view(np.dtype(dtype))
    sw, un = _jitted_swizzle(rowwise, shape)
    got = sw(jnp.asarray(s))
    assert got.dtype == dtype
    padded = _mx.padded_scale_shape(shape, rowwise)
    assert got.shape == padded, (got.shape, padded)
    flat = _bits(got).reshape(-1)
    np.testing.assert_array_equal(flat, ob.swizzle_scales(s, rowwise))
    assert (flat == 0).sum() == flat.size - s.size, "padding is byte 0x00, data never 0"
    assert_bits(un(got), s, "unswizzle(swizzle(s))")
    np.testing.assert_array_equal(ob.unswizzle_scales(flat, rowwise, shape), _bits(s))


# ---------------------------------------------------------------------------------------------
# Errors


def test_bad_inputs():
    with pytest.raises(ValueError, match="float8_e4m3fn or float8_e5m2"):
        _mx.mxfp8_quantize_rowwise(jnp.ones((2, 32)), jnp.float4_e2m1fn)
    with pytest.raises(ValueError, match="2-D"):
        _mx.mxfp8_quantize_rowwise(jnp.ones((32,)), jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match="2-D"):
        _nvfp4.nvfp4_quantize(jnp.ones((2, 2, 16)))
    with pytest.raises(ValueError, match="does not match"):
        _mx.mxfp8_dequantize_rowwise(
            jnp.zeros((2, 64), jnp.float8_e4m3fn),
            jnp.zeros((2, 1), jnp.float8_e8m0fnu),
            jnp.float32,
        )
    with pytest.raises(ValueError, match="fit"):
        _mx.unswizzle_scales(jnp.zeros((128, 4), jnp.uint8), True, (129, 1))
