"""Bit-exact tests of the block-format reference (`eqx_quant.reference.mxfp8`, `.nvfp4`) against
the independent NumPy oracle (`tests/oracle/blocks.py`), plus hand-checked edge values.

Compile time: the bit-level cores take seconds each to compile on XLA:CPU, the layout code
around them milliseconds. A module fixture therefore swaps each core for a `pure_callback`
into the same core jitted once on fixed-size chunks of blocks, so each test shape compiles
only its layout graph. `test_traced_cores_match` runs the real, inlined cores once.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqx_quant.reference import mxfp8 as mx_ref
from eqx_quant.reference import nvfp4 as nv_ref
from tests.oracle import blocks as ob
from tests.support.block_reference import (  # noqa: F401 (fixture)
    CORES,
    ORIGINAL_CORES,
    callback_cores,
    wide_input,
)
from tests.support.bytes import assert_same_bytes, bits, u8
from tests.support.dtypes import Q_DTYPES, X_DTYPES

SHAPES = [(32, 64), (64, 128), (1, 32), (7, 13), (33, 48), (128, 96)]


def _variants(shape, dtype, seed) -> np.ndarray:
    """Inputs of `dtype`: normal values, and wide-range values (`wide_input`) of every x dtype's
    grid (for float32 inputs; bf16/f16 values are exactly float32 values)."""
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(shape).astype(np.float32) * 3]
    grids = [X_DTYPES[n] for n in ("f32", "bf16", "f16")] if dtype == jnp.float32 else [dtype]
    out += [wide_input(rng, shape, g).astype(np.float32) for g in grids]
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
            out[f"mx_{qn}_row"] = mx_ref.mxfp8_quantize_rowwise(x, q)
            out[f"mx_{qn}_col"] = mx_ref.mxfp8_quantize_colwise(x, q)
        row, col = mx_ref.mxfp8_quantize_2x(x, q)
        out[f"mx_{qn}_2x_row"], out[f"mx_{qn}_2x_col"] = row, col
        out[f"mx_{qn}_row_deq"] = mx_ref.mxfp8_dequantize_rowwise(*row, dt)
        out[f"mx_{qn}_col_deq"] = mx_ref.mxfp8_dequantize_colwise(*col, dt)
    for mode in _nv_modes(m):
        kw = NV_MODES[mode]
        if full:
            if mode != "rht":
                out[f"nv_{mode}_row"] = nv_ref.nvfp4_quantize(x, **kw)
            out[f"nv_{mode}_col"] = nv_ref.nvfp4_quantize_colwise(x, **kw)
        row, col = nv_ref.nvfp4_quantize_2x(x, **kw)
        out[f"nv_{mode}_2x_row"], out[f"nv_{mode}_2x_col"] = row, col
        out[f"nv_{mode}_row_deq"] = nv_ref.nvfp4_dequantize(*row, dt)
        out[f"nv_{mode}_col_deq"] = nv_ref.nvfp4_dequantize_colwise(*col, dt, use_rht=mode == "rht")
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
                assert_same_bytes(a[v], e, f"{what} variant {v} {key}[{i}]")
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
    assert_same_bytes(np.swapaxes(col, 1, 2), row, f"{shape} 2D colwise == rowwise.T")


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_dtypes_match_oracle(dtype):
    """True bf16 / f16 inputs on (48, 40): M % 16 == 0 (RHT), partial blocks, three tiles."""
    xs = _variants((48, 40), X_DTYPES[dtype], seed=7)
    _compare_all(xs, full=True, what=f"(48, 40) {dtype}")


def test_traced_cores_match():
    """The real cores, inlined in one jit (no callbacks), give the same bits."""
    x = jnp.asarray(_variants((7, 48), jnp.bfloat16, seed=3)[1])

    def f(x):
        return (
            mx_ref.mxfp8_quantize_2x(x, jnp.float8_e4m3fn),
            nv_ref.nvfp4_quantize_2x(x, use_2d=True),
        )

    via_callback = jax.jit(f)(x)
    with pytest.MonkeyPatch.context() as mp:
        for module, name in CORES:
            mp.setattr(module, name, ORIGINAL_CORES[module.__name__, name])
        traced = jax.jit(lambda x: f(x))(x)  # a new function: jit must not reuse f's trace
        assert "callback" not in jax.jit(lambda x: f(x)).lower(x).as_text()
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(via_callback), strict=True):
        assert_same_bytes(a, b, "traced vs callback")


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
    f = jax.jit(lambda x: [mx_ref.mxfp8_quantize_2x(x, q) for q in Q_DTYPES.values()])
    got = f(jnp.asarray(x))
    for (qn, q), ((rd, rs), (cd, cs)) in zip(Q_DTYPES.items(), got, strict=True):
        od, os_ = ob.mxfp8_quantize_rowwise(x, q)
        assert_same_bytes(rd, od, f"edge {qn} row data")
        assert_same_bytes(rs, os_, f"edge {qn} row scale")
        od, os_ = ob.mxfp8_quantize_colwise(x, q)
        assert_same_bytes(cd, od, f"edge {qn} col data")
        assert_same_bytes(cs, os_, f"edge {qn} col scale")
    (rd, rs), _ = got[0]  # e4m3: hand-checked values
    e = bits(rs)
    for row, want in expected_e.items():
        for blk, w in enumerate(want):
            if w is not None:
                assert e[row, blk] == w, f"row {row} block {blk}: E {e[row, blk]} != {w}"
    d = bits(rd)
    assert d[1, 1] == 0x7F and (d[1, 32:] == 0x7F).all(), "NaN -> 0x7F"
    assert d[2, 0] == 0x7E and d[2, 33] == 0xFE and d[2, 1] == 0x80, "inf saturates, -1 -> -0"
    assert d[3, 5] == 0x7E and d[3, 40] == 0xFE, "448 * 2^k -> +-448"
    assert (d[10, :32] == 0x80).all(), "-0.0 keeps its sign"
    assert (d[6, :32] == 0).all(), "2^-13 underflows e4m3"
    assert (d[11, :31] % 2 == 0).all() and (d[11, 32:63] % 2 == 0).all(), "ties to even"
    d5 = bits(got[1][0][0])
    assert (d5[6, :32] == 0x08).all(), "2^-13 is the e5m2 byte 0x08"


# ---------------------------------------------------------------------------------------------
# NVFP4 edge values


@functools.cache
def _nv_with_amax():
    return jax.jit(jax.vmap(lambda x, g: nv_ref.nvfp4_quantize(x, global_amax=g)))


def _check_nv(xs, gs, what):
    """Reference vs oracle for each (x, global_amax) pair; returns the reference outputs."""
    got = jax.tree.map(np.asarray, _nv_with_amax()(jnp.asarray(xs), jnp.asarray(gs)))
    for v in range(xs.shape[0]):
        want = ob.nvfp4_quantize(xs[v], False, gs[v])
        for i in range(3):
            assert_same_bytes(got[i][v], want[i], f"{what} case {v} output {i}")
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
    d, s = bits(d), bits(s)
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
    return u8(ob.to_fp8(np.asarray(v, _F), ob.E4M3))


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
    s = bits(s)[..., 0]
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
    f = jax.jit(lambda x: nv_ref.nvfp4_quantize_2x(x, use_2d=True))
    (rd, rs, ra), (cd, cs, ca) = f(jnp.asarray(x))
    od, os_, _ = ob.nvfp4_quantize(x, use_2d=True)
    assert_same_bytes(rd, od, "2D row data")
    assert_same_bytes(rs, os_, "2D row scale")
    rs, cs = bits(rs), bits(cs)
    tiles = rs[::16]  # (3, 2): one scale per tile
    assert len(np.unique(tiles)) == 6
    for r in range(m):
        assert (rs[r] == tiles[r // 16]).all(), f"row {r}"
    bug = np.tile(tiles, (16, 1))  # row r -> tile-row r mod 3
    assert (bug != rs).any()
    for c in range(n):
        assert (cs[c] == tiles[:, c // 16]).all(), f"colwise row {c}"
    assert_same_bytes(np.asarray(cd).T, np.asarray(rd), "2D colwise data == rowwise.T")
