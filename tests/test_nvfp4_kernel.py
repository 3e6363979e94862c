"""Bit-exact tests of the NVFP4 CPU kernels (`eqx_quant_nvfp4_amax`, `eqx_quant_nvfp4_quantize`,
docs/block_formats.md) against the pure-JAX reference (`eqx_quant.reference._nvfp4`, `._sr`).

The kernel library is `$EQXQ_KERNEL_LIB` if set, else the installed `eqx_quant/_kernels_cpu.so`;
the tests skip when it lacks the NVFP4 symbols. The FFI targets are called directly with
`jax.ffi.ffi_call`.

Expected values come from the reference's 2-D functions on views of each example: rowwise is
`nvfp4_quantize` of the `(rows, L)` view, colwise of the `(C*L*A, K)` view of x moved to
`(C, L, A, K)` (after `rht` with RHT). In 2D mode the 16x16 tiles of an example are the
tiles of its `(a, c)` slices `(K, L)`; the slices are stacked (zero-padded to 16 rows each) so
that one reference call covers them all. Stochastic rounding reuses the reference's scale
functions and `encode_e2m1_sr` with the words of `random_words` / `global_index`.

Compile time: the reference's bit-level cores take seconds to compile, so they run here
eagerly on fixed-size chunks of blocks, each jitted once (`_chunked`).
"""

import ctypes
import functools
import importlib.util
import math
import os
import zlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from eqx_quant.reference import _ieee, _nvfp4, _sr

AMAX_TARGET = "eqx_quant_nvfp4_amax_cpu"
QUANTIZE_TARGET = "eqx_quant_nvfp4_quantize_cpu"
MASK = _nvfp4.DEFAULT_RHT_SIGN_MASK
X_DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16}
CHUNK = 4096  # blocks per jitted reference-core call


# ---------------------------------------------------------------------------------------------
# Kernel library


def _library_path() -> str | None:
    path = os.environ.get("EQXQ_KERNEL_LIB")
    if path:
        return path
    spec = importlib.util.find_spec("eqx_quant._kernels_cpu")
    return spec.origin if spec is not None and spec.origin else None


@functools.cache
def _register() -> str | None:
    """Load the library and register both targets; returns a skip reason or None."""
    path = _library_path()
    if path is None or not os.path.exists(path):
        return f"no CPU kernel library (EQXQ_KERNEL_LIB unset and none installed; got {path!r})"
    library = ctypes.cdll.LoadLibrary(path)
    for target, symbol in ((AMAX_TARGET, "Nvfp4AmaxCpu"), (QUANTIZE_TARGET, "Nvfp4QuantizeCpu")):
        if not hasattr(library, symbol):
            return f"{path} has no symbol {symbol}"
        try:
            jax.ffi.register_ffi_target(
                target, jax.ffi.pycapsule(getattr(library, symbol)), platform="cpu"
            )
        except Exception:  # already registered (e.g. by eqx_quant itself)
            pass
    return None


@pytest.fixture(scope="module", autouse=True)
def kernels():
    reason = _register()
    if reason is not None:
        pytest.skip(reason)


# ---------------------------------------------------------------------------------------------
# Reference cores on fixed-size chunks


_ORIGINAL = {name: getattr(_nvfp4, name) for name in ("_nv_encode_core", "_rht_core")}


def _sr_core(xb, amax_b, amax_g, words):
    """The stochastic-rounding path of the reference's block computation."""
    s_enc = _nvfp4.global_encode_scale(amax_g)
    sdb = _nvfp4.block_scale_bytes(amax_b, s_enc)
    enc = _nvfp4.block_encode_scale(sdb, s_enc)
    y = _ieee.multiply(xb, jnp.broadcast_to(enc[:, None], xb.shape))
    return _sr.encode_e2m1_sr(y, words), sdb


@functools.cache
def _jitted(core, statics):
    return jax.jit(functools.partial(core, **dict(statics)))


def _chunked(core):
    """`core` (independent per index of the leading axis) run eagerly in jitted chunks of
    CHUNK blocks, so every shape reuses one compilation."""

    def run(*arrays, **statics):
        fn = _jitted(core, tuple(sorted(statics.items())))
        arrays = [np.asarray(a) for a in arrays]
        total = arrays[0].shape[0]
        pieces = []
        for start in range(0, max(total, 1), CHUNK):
            chunk = [a[start : start + CHUNK] for a in arrays]
            k = chunk[0].shape[0]
            chunk = [np.pad(a, [(0, CHUNK - k)] + [(0, 0)] * (a.ndim - 1)) for a in chunk]
            pieces.append(jax.tree.map(lambda o, k=k: np.asarray(o)[:k], fn(*chunk)))
        return jax.tree.map(lambda *p: np.concatenate(p), *pieces)

    return run


_SR_CORE = _chunked(_sr_core)


@pytest.fixture(scope="module", autouse=True)
def chunked_cores():
    with pytest.MonkeyPatch.context() as mp:
        for name, core in _ORIGINAL.items():
            mp.setattr(_nvfp4, name, _chunked(core))
        yield


# ---------------------------------------------------------------------------------------------
# Kernel calls


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _fa(shape, flatten_axis: int) -> int:
    return flatten_axis % len(shape) if flatten_axis < 0 else flatten_axis


def _view(s, fa: int, blocked: bool):
    """(A, K, C, L) of one example of shape `s`."""
    n = len(s)
    if not blocked:
        return math.prod(s[: n - 1]), 1, 1, s[n - 1]
    return math.prod(s[: fa - 1]), s[fa - 1], math.prod(s[fa : n - 1]), s[n - 1]


def kernel_quantize(x, amax, col_amax, *, n_batch=0, fa=-1, rowwise=True, colwise=True,
                    use_2d=False, use_rht=False, sr=False, key=None, offset=None,
                    global_shape=None, mask=MASK, block_axis=None):
    x = jnp.asarray(x)
    batch, s = x.shape[:n_batch], x.shape[n_batch:]
    n = len(s)
    fa = _fa(s, fa)
    if block_axis is None:
        block_axis = n_batch + fa - 1 if (colwise or use_2d) else -1
    u8 = jnp.uint8
    lb, kb = _cdiv(s[-1], 16), _cdiv(s[fa - 1], 16) if fa >= 1 else 0
    shapes = (
        batch + s if rowwise else (0,),
        batch + s[:-1] + (lb,) if rowwise else (0,),
        batch + s[fa:] + s[:fa] if colwise else (0,),
        batch + s[fa:] + s[: fa - 1] + (kb,) if colwise else (0,),
    )
    key = np.zeros(batch + (2,), np.uint32) if key is None else key
    offset = np.zeros((n,), np.int32) if offset is None else offset
    global_shape = s if global_shape is None else global_shape
    call = jax.ffi.ffi_call(
        QUANTIZE_TARGET, tuple(jax.ShapeDtypeStruct(sh, u8) for sh in shapes), vmap_method=None
    )
    out = call(
        x,
        jnp.asarray(amax, jnp.float32).reshape(batch + (1,)),
        jnp.asarray(col_amax, jnp.float32).reshape(batch + (1,)),
        jnp.asarray(key, jnp.uint32),
        jnp.asarray(offset, jnp.int32),
        n_batch=np.int64(n_batch),
        block_axis=np.int64(block_axis),
        rowwise=bool(rowwise),
        colwise=bool(colwise),
        use_2d=bool(use_2d),
        use_rht=bool(use_rht),
        rht_sign_mask=np.int64(mask),
        stochastic_rounding=bool(sr),
        global_shape=np.asarray(global_shape, np.int64),
    )
    return [np.asarray(o) for o in out]


def kernel_amax(x, *, n_batch=0, fa=-1, with_rht=False, mask=MASK, block_axis=None):
    x = jnp.asarray(x)
    batch, s = x.shape[:n_batch], x.shape[n_batch:]
    if block_axis is None:
        block_axis = n_batch + _fa(s, fa) - 1 if with_rht else -1
    f32 = jnp.float32
    shapes = (batch + (1,), batch + (1,) if with_rht else (0,))
    call = jax.ffi.ffi_call(
        AMAX_TARGET, tuple(jax.ShapeDtypeStruct(sh, f32) for sh in shapes), vmap_method=None
    )
    out = call(
        x,
        n_batch=np.int64(n_batch),
        block_axis=np.int64(block_axis),
        with_rht=bool(with_rht),
        rht_sign_mask=np.int64(mask),
    )
    return [np.asarray(o) for o in out]


# ---------------------------------------------------------------------------------------------
# Reference on the views of one example


def _to_2d(a4: np.ndarray, use_2d: bool) -> np.ndarray:
    """(P, Q, R, N) -> 2-D view with blocks along N: rows (p, q, r) in 1D; in 2D the (p, r)
    slices (Q, N), each zero-padded to a multiple of 16 rows, stacked."""
    p, q, r, n = a4.shape
    if not use_2d:
        return a4.reshape(p * q * r, n)
    qp = _cdiv(q, 16) * 16
    t = np.pad(a4.transpose(0, 2, 1, 3), ((0, 0), (0, 0), (0, qp - q), (0, 0)))
    return t.reshape(p * r * qp, n)


def _from_2d(b: np.ndarray, shape4, use_2d: bool) -> np.ndarray:
    """Inverse of `_to_2d` for codes / scales (last axis length may differ)."""
    p, q, r, _ = shape4
    if not use_2d:
        return b.reshape(p, q, r, b.shape[-1])
    qp = _cdiv(q, 16) * 16
    return b.reshape(p, r, qp, b.shape[-1])[:, :, :q].transpose(0, 2, 1, 3)


def _ref_2d(x2, use_2d: bool, amax_g, words2=None):
    """(codes, scale bytes) of a 2-D view: `nvfp4_quantize`, or its SR path with `words2`."""
    g = np.asarray(amax_g, np.float32).reshape(1)
    if words2 is None:
        data, scale, _ = _nvfp4.nvfp4_quantize(jnp.asarray(x2), use_2d, g)
        return np.asarray(_nvfp4.e2m1_codes(data)), np.asarray(scale).view(np.uint8)
    m, n = x2.shape
    xb, ab = _nvfp4._blocks(jnp.asarray(x2), use_2d)
    nb = ab.shape[1]
    wp = np.pad(np.asarray(words2), ((0, 0), (0, nb * 16 - n))).reshape(-1, 16)
    codes, sdb = _SR_CORE(
        np.asarray(xb).reshape(-1, 16), np.asarray(ab).reshape(-1), np.full(m * nb, g[0]), wp
    )
    return codes.reshape(m, nb * 16)[:, :n], sdb.reshape(m, nb)


def _words(s, key, offset, global_shape, stream: int) -> np.ndarray:
    lo, hi = _sr.global_index(tuple(s), jnp.asarray(offset, jnp.int32), tuple(global_shape))
    return np.asarray(_sr.random_words(jnp.asarray(key, jnp.uint32), lo, hi, stream))


def reference_example(xe, amax, col_amax, fa, rowwise, colwise, use_2d, use_rht, mask=MASK,
                      key=None, offset=None, global_shape=None):
    """Expected (row, row_scale, col, col_scale) of one example, each in its 4-D view."""
    s = xe.shape
    a, k, c, l_ = _view(s, fa, colwise or use_2d)
    x4 = np.asarray(xe).reshape(a, k, c, l_)
    sr = key is not None
    if sr:
        w_row = _words(s, key, offset, global_shape, 0).reshape(a, k, c, l_)
        w_col = _words(s, key, offset, global_shape, 1).reshape(a, k, c, l_)
    out = [None] * 4
    if rowwise:
        words = _to_2d(w_row, use_2d) if sr else None
        codes, scale = _ref_2d(_to_2d(x4, use_2d), use_2d, amax, words)
        out[0] = _from_2d(codes, x4.shape, use_2d)
        out[1] = _from_2d(scale, x4.shape, use_2d)
    if colwise:
        xt = x4.transpose(2, 3, 0, 1)  # (C, L, A, K)
        x2 = _to_2d(xt, use_2d)
        if use_rht:
            x2 = np.asarray(_nvfp4.rht(jnp.asarray(x2), mask))
        words = _to_2d(w_col.transpose(2, 3, 0, 1), use_2d) if sr else None
        codes, scale = _ref_2d(x2, use_2d, col_amax, words)
        out[2] = _from_2d(codes, xt.shape, use_2d)
        out[3] = _from_2d(scale, xt.shape, use_2d)
    return out


def _rht_amax_ref(xe, fa, mask=MASK) -> np.float32:
    s = xe.shape
    a, k, c, l_ = _view(s, fa, True)
    x2 = np.asarray(xe).reshape(a, k, c, l_).transpose(2, 3, 0, 1).reshape(-1, k)
    return np.asarray(_ieee.max_abs(_nvfp4.rht(jnp.asarray(x2), mask)))


def assert_bytes(actual, expected, what: str) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    bad = np.argwhere(actual != expected)
    assert bad.size == 0, (
        f"{what}: {len(bad)} of {actual.size} differ; first at {tuple(bad[0])}: kernel "
        f"{actual[tuple(bad[0])]:#x}, reference {expected[tuple(bad[0])]:#x}"
    )


def check_quantize(x, amaxes, col_amaxes, *, n_batch=0, fa=-1, rowwise=True, colwise=True,
                   use_2d=False, use_rht=False, mask=MASK, keys=None, offset=None,
                   global_shape=None):
    """Run the kernel on x (batch dims first) and compare every example with the reference."""
    x = np.asarray(x)
    batch, s = x.shape[:n_batch], x.shape[n_batch:]
    sr = keys is not None
    offset = np.zeros(len(s), np.int32) if offset is None else np.asarray(offset, np.int32)
    out = kernel_quantize(
        x, amaxes, col_amaxes, n_batch=n_batch, fa=fa, rowwise=rowwise, colwise=colwise,
        use_2d=use_2d, use_rht=use_rht, sr=sr, key=keys, offset=offset,
        global_shape=global_shape, mask=mask,
    )
    fa = _fa(s, fa)
    a, k, c, l_ = _view(s, fa, colwise or use_2d)
    p_count = math.prod(batch)
    views = [(a, k, c, l_), (a, k, c, _cdiv(l_, 16)), (c, l_, a, k), (c, l_, a, _cdiv(k, 16))]
    names = ("row", "row_scale", "col", "col_scale")
    amaxes = np.asarray(amaxes, np.float32).reshape(-1)
    col_amaxes = np.asarray(col_amaxes, np.float32).reshape(-1)
    keys_flat = None if keys is None else np.asarray(keys, np.uint32).reshape(-1, 2)
    for p in range(p_count):
        xe = x.reshape((p_count,) + s)[p]
        expected = reference_example(
            xe, amaxes[p], col_amaxes[p], fa, rowwise, colwise, use_2d, use_rht, mask,
            key=None if keys_flat is None else keys_flat[p], offset=offset,
            global_shape=s if global_shape is None else global_shape,
        )
        for i, name in enumerate(names):
            enabled = rowwise if i < 2 else colwise
            if not enabled:
                assert out[i].shape == (0,), f"{name} of a disabled part: {out[i].shape}"
                continue
            got = out[i].reshape((p_count,) + views[i])[p]
            assert_bytes(got, expected[i], f"example {p} {name}")
    return out


# ---------------------------------------------------------------------------------------------
# Inputs


def _finite_amax(xe) -> np.float32:
    """max |x| over the finite elements (so that inf inputs still leave a finite amax)."""
    a = np.abs(np.asarray(xe, np.float32)).reshape(-1)
    a = a[np.isfinite(a)]
    return np.float32(a.max()) if a.size else np.float32(0)


def make_inputs(shape, dtype, seed=0) -> np.ndarray:
    """Three examples of `shape` stacked on a new leading axis: normal values; normal values
    with zero blocks, NaN, +-inf, subnormals of `dtype` and exact E2M1 ties; magnitudes
    log-uniform over all of `dtype`'s range with random signs."""
    rng = np.random.default_rng(seed)
    np_dtype = np.dtype(dtype)
    finfo = ml_dtypes.finfo(np_dtype)
    size = math.prod(shape)
    normal = rng.standard_normal(size).astype(np.float32) * 3
    special = rng.standard_normal(size).astype(np.float32) * 3
    if size:
        special[: min(16, size)] = 0.0
        pick = lambda frac: rng.integers(0, size, max(1, int(size * frac)))  # noqa: E731
        special[pick(0.03)] = np.nan
        special[pick(0.01)] = np.inf
        special[pick(0.01)] = -np.inf
        where = pick(0.05)
        sub = float(finfo.smallest_subnormal) * rng.integers(1, 8, where.size)
        special[where] = sub * rng.choice([-1.0, 1.0], where.size)
        where = pick(0.05)
        special[where] = rng.choice([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.0], where.size)
    lo, hi = np.log2(float(finfo.smallest_subnormal)), np.log2(float(finfo.max)) - 1
    wide = (np.exp2(rng.uniform(lo, hi, size)) * rng.choice([-1.0, 1.0], size)).astype(np.float32)
    x = np.stack([normal, special, wide]).reshape((3,) + tuple(shape))
    return np.asarray(jnp.asarray(x, dtype))


def _amaxes(x, n_batch=1) -> np.ndarray:
    flat = x.reshape((math.prod(x.shape[:n_batch]),) + x.shape[n_batch:])
    return np.array([_finite_amax(e) for e in flat], np.float32)


def _rht_amaxes(x, fa, n_batch=1) -> np.ndarray:
    flat = x.reshape((math.prod(x.shape[:n_batch]),) + x.shape[n_batch:])
    return np.array([_rht_amax_ref(e, _fa(e.shape, fa)) for e in flat], np.float32)


# ---------------------------------------------------------------------------------------------
# Tests: round to nearest


# (shape, flatten_axis)
SHAPES = [
    ((32, 64), -1),
    ((2, 64, 32), -1),
    ((64, 2, 32), -2),
    ((32, 256, 128), -1),
    ((32, 256, 128), -2),
    ((7, 13), -1),
    ((33, 65), -1),
    ((16, 48), -1),
    ((3, 32, 40), -2),
    ((16, 2100), -1),  # L spans several of the kernel's 256-position chunks
    ((16, 3, 1030), -2),
]


def _rht_ok(shape, fa) -> bool:
    return shape[_fa(shape, fa) - 1] % 16 == 0


@pytest.mark.parametrize("dtype", list(X_DTYPES))
@pytest.mark.parametrize("shape,fa", SHAPES, ids=[f"{s}-fa{f}" for s, f in SHAPES])
@pytest.mark.parametrize("mode", ["1d", "2d", "rht"])
def test_quantize_both(shape, fa, dtype, mode):
    if mode == "rht" and not _rht_ok(shape, fa):
        pytest.skip("RHT needs K % 16 == 0")
    if dtype != "f32" and math.prod(shape) > 4096 and mode != "1d":
        pytest.skip("large shapes: f32 only in 2d/rht (keeps the matrix moderate)")
    x = make_inputs(shape, X_DTYPES[dtype], seed=zlib.crc32(repr((shape, fa, dtype)).encode()))
    amax = _amaxes(x)
    use_rht = mode == "rht"
    # A colwise amax different from the rowwise one (the true post-RHT amax with RHT).
    col_amax = _rht_amaxes(x, fa) if use_rht else amax * np.float32(0.75)
    check_quantize(x, amax, col_amax, n_batch=1, fa=fa, use_2d=mode == "2d", use_rht=use_rht)


@pytest.mark.parametrize(
    "shape,fa,colwise,use_2d",
    [
        ((32, 64), -1, False, False),
        ((7, 13), -1, False, False),
        ((13,), -1, False, False),
        ((0, 16), -1, False, False),
        ((0, 16), -1, True, True),
        ((16, 0), -1, True, False),
        ((33, 65), -1, False, True),
        ((3, 32, 40), -2, False, True),
        ((33, 65), -1, True, False),
    ],
)
@pytest.mark.parametrize("rowwise", [True, False])
def test_quantize_parts(shape, fa, colwise, use_2d, rowwise):
    if not rowwise and not colwise:
        pytest.skip("at least one part")
    x = make_inputs(shape, jnp.float32, seed=3)
    amax = _amaxes(x)
    check_quantize(x, amax, amax, n_batch=1, fa=fa, rowwise=rowwise, colwise=colwise,
                   use_2d=use_2d)


def test_quantize_unbatched_and_two_batch_dims():
    x = make_inputs((2, 16, 48), jnp.bfloat16, seed=5)  # (3, 2, 16, 48)
    amax = _amaxes(x, n_batch=2)
    check_quantize(x, amax, amax, n_batch=2, fa=-1, use_2d=True)
    check_quantize(x[1, 0], amax[2], amax[2], n_batch=0, fa=-1)
    col = _rht_amaxes(x[1], -1, n_batch=1)
    check_quantize(x[1], amax[2:4], col, n_batch=1, fa=-1, use_rht=True, mask=0x1234)


@pytest.mark.parametrize(
    "amax_g",
    [0.0, np.inf, 1e-40, 3e-45, 1e38, np.float32(3.4028235e38), np.nan, 2688.0, 1.0,
     -2.0, -1e-45],
)
@pytest.mark.parametrize("use_2d", [False, True])
def test_global_amax_edges(amax_g, use_2d):
    x = make_inputs((33, 48), jnp.float32, seed=11)
    amax = np.full((3,), amax_g, np.float32)
    check_quantize(x, amax, amax[::-1].copy(), n_batch=1, use_2d=use_2d)


def test_all_special_blocks():
    """Blocks of only zeros / NaN / inf / subnormals / values above every scale."""
    rows = [
        np.zeros(32),
        np.full(32, np.nan),
        np.r_[np.full(16, np.nan), np.zeros(16)],
        np.r_[np.inf, np.zeros(15), -np.inf, np.ones(15)],
        np.full(32, 1e-45) * np.resize([1, -1], 32),
        np.full(32, 3e38) * np.resize([1, -1, 0.5, 1.125], 32),
        np.r_[np.nan, np.full(15, -1e-40), np.full(16, 6.0)],
        np.linspace(-7, 7, 32),
    ]
    x = np.stack(rows * 2).astype(np.float32)  # (16, 32)
    for amax_g in (np.float32(7.0), np.float32(3e38), np.float32(0.0), np.float32(1e-42)):
        check_quantize(x[None], amax_g[None], amax_g[None], n_batch=1)
        check_quantize(x[None], amax_g[None], amax_g[None], n_batch=1, use_2d=True)
        check_quantize(x[None], amax_g[None], amax_g[None], n_batch=1, use_rht=True)


# ---------------------------------------------------------------------------------------------
# Tests: stochastic rounding


# (local shape, fa, offset, global shape)
SR_CASES = [
    ((32, 64), -1, (32, 128), (128, 256)),
    ((2, 64, 32), -1, (1, 64, 0), (4, 256, 32)),
    ((3, 32, 40), -2, (5, 0, 40), (8, 32, 80)),
    ((7, 13), -1, (3, 19), (10, 40)),
    ((16, 48), -1, (0, 0), (16, 48)),
    ((16, 1100), -1, (16, 5), (64, 2048)),
]


@pytest.mark.parametrize("mode", ["1d", "2d", "rht", "rowwise_only"])
@pytest.mark.parametrize(
    "shape,fa,offset,global_shape", SR_CASES, ids=[str(c[0]) for c in SR_CASES]
)
def test_stochastic_rounding(shape, fa, offset, global_shape, mode):
    if mode == "rht" and not _rht_ok(shape, fa):
        pytest.skip("RHT needs K % 16 == 0")
    dtype = jnp.bfloat16 if mode == "2d" else jnp.float32
    x = make_inputs(shape, dtype, seed=21)
    amax = _amaxes(x)
    use_rht = mode == "rht"
    col_amax = _rht_amaxes(x, fa) if use_rht else amax
    keys = np.array([[0, 0], [123, 456], [0xDEADBEEF, 0x01234567]], np.uint32)
    check_quantize(x, amax, col_amax, n_batch=1, fa=fa, use_2d=mode == "2d", use_rht=use_rht,
                   colwise=mode != "rowwise_only", keys=keys,
                   offset=np.array(offset, np.int32), global_shape=global_shape)


def test_stochastic_rounding_exact_threshold():
    """Elements whose fraction is exactly the element's 24 random bits: `r24 < threshold` is
    false, so they round down. amax_g = 2688 and a 6 in every block make the multiplier 1,
    so y = x = r24 * 2^-25 (exact, frac(y / 0.5) = r24 * 2^-24)."""
    shape, key = (16, 32), np.array([7, 9], np.uint32)
    for stream, rowwise in ((0, True), (1, False)):
        words = _words(shape, key, np.zeros(2, np.int32), shape, stream)
        x = ((words >> 8).astype(np.float64) * 2.0**-25).astype(np.float32)
        x *= np.resize(np.float32([1, -1, -1, 1, 1]), x.shape)
        if rowwise:
            x[:, ::16] = 6.0
        else:
            x[0, :] = 6.0
        g = np.float32([2688.0])
        out = check_quantize(x[None], g, g, n_batch=1, rowwise=rowwise, colwise=not rowwise,
                             keys=key[None])
        codes = out[0][0] if rowwise else out[2][0].T
        assert ((codes & 7) == np.where(x == 6.0, 7, 0)).all()


def test_stochastic_rounding_large_index():
    """Global linear indices above 2^32 (the hi word of the counter)."""
    shape, global_shape, offset = (16, 32), (70000, 70000), (69000, 1000)
    x = make_inputs(shape, jnp.float16, seed=4)
    amax = _amaxes(x)
    keys = np.array([[1, 2], [3, 4], [5, 6]], np.uint32)
    check_quantize(x, amax, amax, n_batch=1, keys=keys, offset=np.array(offset, np.int32),
                   global_shape=global_shape)


def test_stochastic_rounding_changes_with_key_and_stream():
    x = make_inputs((32, 64), jnp.float32, seed=8)[0]
    amax = _finite_amax(x)
    outs = [kernel_quantize(x, amax, amax, sr=True, key=np.array(k, np.uint32))
            for k in ([1, 2], [1, 3])]
    assert (outs[0][0] != outs[1][0]).any()
    # the colwise part draws other words than the rowwise part for the same element
    assert (outs[0][0] != outs[0][2].T).any()
    rn = kernel_quantize(x, amax, amax)
    assert (outs[0][0] != rn[0]).any() and (outs[0][1] == rn[1]).all()


# ---------------------------------------------------------------------------------------------
# Tests: amax op


@pytest.mark.parametrize("dtype", list(X_DTYPES))
@pytest.mark.parametrize(
    "shape,fa",
    [((32, 64), -1), ((64, 2, 32), -2), ((3, 32, 40), -1), ((7, 13), -1), ((16, 0), -1),
     ((32, 256, 128), -2)],
)
def test_amax(shape, fa, dtype):
    x = make_inputs(shape, X_DTYPES[dtype], seed=2)
    flat = x.reshape((3, math.prod(shape)))
    expected = np.array([np.asarray(_ieee.max_abs(jnp.asarray(e))) for e in flat], np.float32)
    amax, none = kernel_amax(x, n_batch=1, fa=fa)
    assert_bytes(amax.view(np.uint32), expected.reshape(3, 1).view(np.uint32), "amax")
    assert none.shape == (0,)
    if _rht_ok(shape, fa):
        amax2, rht_amax = kernel_amax(x, n_batch=1, fa=fa, with_rht=True)
        assert_bytes(amax2.view(np.uint32), amax.view(np.uint32), "amax with RHT")
        expected_rht = np.array(
            [_rht_amax_ref(e, _fa(shape, fa)) for e in x], np.float32
        ).reshape(3, 1)
        assert_bytes(rht_amax.view(np.uint32), expected_rht.view(np.uint32), "rht_amax")


def _summation_order_groups(mask: int) -> np.ndarray:
    """Groups of 16 (as (16, 1) examples) whose max |RHT| output depends on the summation
    order: for an output j, the products are 1 at position 0, 2^-8 at position a and 2^-24 at
    positions b, c. The pairwise tree adds 2^-24 + 2^-24 first when b, c are siblings, which
    lifts 1 + 2^-8 above the bf16 midpoint (-> 1 + 2^-7); adding them one by one ties twice
    to even (-> 1.0)."""
    r = _nvfp4.rht_matrix(mask)
    groups = []
    for j in (0, 5, 15):
        for a, b, c in ((1, 2, 3), (4, 8, 12), (2, 4, 6), (8, 1, 3), (12, 14, 15)):
            p = np.zeros(16)
            p[0], p[a], p[b], p[c] = 1.0, 2.0**-8, 2.0**-24, 2.0**-24
            groups.append((p / r[:, j]).astype(np.float32))
    return np.stack(groups)[:, :, None]


@pytest.mark.parametrize("mask", [MASK, 0x0000, 0xFFFF, 0x8421])
def test_rht_summation_order(mask):
    x = _summation_order_groups(mask)
    _, rht_amax = kernel_amax(x, n_batch=1, fa=-1, with_rht=True, mask=mask)
    expected = np.array([_rht_amax_ref(e, 1, mask) for e in x], np.float32)
    assert_bytes(rht_amax.reshape(-1).view(np.uint32), expected.view(np.uint32), "rht_amax")
    # sibling pairs (b, c) in the tree give 1 + 2^-7, the others 1.0
    assert (expected == np.float32(1 + 2.0**-7)).sum() >= 3 and (expected == 1.0).sum() >= 3


# ---------------------------------------------------------------------------------------------
# Tests: operand validation


def _quantize_error(**overrides):
    x = np.ones((32, 64), np.float32)
    args = dict(
        x=x, amax=np.ones((1,), np.float32), col_amax=np.ones((1,), np.float32),
        key=np.zeros((2,), np.uint32), offset=np.zeros((2,), np.int32),
    )
    attrs = dict(
        n_batch=np.int64(0), block_axis=np.int64(0), rowwise=True, colwise=True, use_2d=False,
        use_rht=False, rht_sign_mask=np.int64(MASK), stochastic_rounding=False,
        global_shape=np.array([32, 64], np.int64),
    )
    shapes = {"row": (32, 64), "row_scale": (32, 4), "col": (64, 32), "col_scale": (64, 2)}
    dtypes = {k: jnp.uint8 for k in shapes}
    for name, value in overrides.items():
        if name in args:
            args[name] = value
        elif name in attrs:
            attrs[name] = value
        elif name.endswith("_dtype"):
            dtypes[name[: -len("_dtype")]] = value
        else:
            shapes[name] = value
    call = jax.ffi.ffi_call(
        QUANTIZE_TARGET,
        tuple(jax.ShapeDtypeStruct(shapes[k], dtypes[k]) for k in shapes),
        vmap_method=None,
    )
    with pytest.raises(Exception) as info:
        jax.block_until_ready(call(*args.values(), **attrs))
    return str(info.value)


@pytest.mark.parametrize(
    "overrides,words",
    [
        (dict(x=np.ones((32, 64), np.int32)), ["x", "s32", "f32, f16 or bf16"]),
        (dict(row=(32, 63)), ["row", "[32,63]", "[32,64]"]),
        (dict(row_scale=(32, 3)), ["row_scale", "[32,4]"]),
        (dict(col=(32, 64)), ["col", "[64,32]"]),
        (dict(col_scale=(64, 1)), ["col_scale", "[64,2]"]),
        (dict(row_dtype=jnp.int8), ["row", "s8", "u8"]),
        (dict(amax=np.ones((2,), np.float32)), ["amax", "[1]"]),
        (dict(col_amax=np.ones((1,), np.int32)), ["col_amax", "s32", "f32"]),
        (dict(key=np.zeros((2,), np.int32)), ["key", "s32", "u32"]),
        (dict(offset=np.zeros((3,), np.int32)), ["offset", "[2]"]),
        (dict(block_axis=np.int64(1)), ["block_axis=1", "[0, 0]"]),
        (dict(block_axis=np.int64(-1)), ["block_axis=-1", "colwise=true"]),
        (dict(n_batch=np.int64(2)), ["n_batch=2"]),
        (dict(rowwise=False, colwise=False), ["rowwise and colwise"]),
        (dict(use_rht=True, use_2d=True), ["use_rht", "use_2d"]),
        (dict(rht_sign_mask=np.int64(1 << 16)), ["rht_sign_mask=65536"]),
        (dict(global_shape=np.array([32], np.int64)), ["global_shape", "expected 2"]),
    ],
)
def test_quantize_errors(overrides, words):
    message = _quantize_error(**overrides)
    assert "eqx_quant_nvfp4_quantize: " in message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_quantize_error_rht_needs_k_multiple_of_16():
    x = np.ones((8, 64), np.float32)
    message = _quantize_error(
        x=x, use_rht=True, row=(8, 64), row_scale=(8, 4), col=(64, 8), col_scale=(64, 1),
        global_shape=np.array([8, 64], np.int64),
    )
    assert "eqx_quant_nvfp4_quantize: " in message and "multiple of 16" in message


def test_amax_errors():
    x = np.ones((8, 64), np.float32)
    for kwargs, shapes, words in [
        (dict(with_rht=True, block_axis=np.int64(0)), ((1,), (1,)), ["multiple of 16"]),
        (dict(with_rht=True, block_axis=np.int64(-1)), ((1,), (1,)), ["block_axis=-1"]),
        (dict(with_rht=False, block_axis=np.int64(-1)), ((1,), (1,)), ["rht_amax", "[0]"]),
        (dict(with_rht=False, block_axis=np.int64(-1)), ((2,), (0,)), ["amax", "[1]"]),
    ]:
        call = jax.ffi.ffi_call(
            AMAX_TARGET, tuple(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes),
            vmap_method=None,
        )
        with pytest.raises(Exception) as info:
            jax.block_until_ready(
                call(x, n_batch=np.int64(0), rht_sign_mask=np.int64(MASK), **kwargs)
            )
        message = str(info.value)
        assert "eqx_quant_nvfp4_amax: " in message
        for word in words:
            assert word in message, f"{word!r} not in {message!r}"
