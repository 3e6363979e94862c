"""Shared machinery of the NVFP4 CPU kernel tests (tests/kernels/test_nvfp4_kernel*.py):
calling the FFI targets that eqx_quant's loader registered, the reference expectations built
from the pure-JAX reference's 2-D functions, and test inputs. See test_nvfp4_kernel.py for
the method."""

import functools
import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from eqx_quant.reference import ieee as ieee_ref
from eqx_quant.reference import nvfp4 as nv_ref
from eqx_quant.reference import stochastic_rounding as sr_ref
from tests.support.bytes import assert_bytes, u8
from tests.support.kernels import ffi_target, missing_cpu_kernels

AMAX_TARGET = ffi_target("nvfp4_amax")
QUANTIZE_TARGET = ffi_target("nvfp4_quantize")
MASK = nv_ref.DEFAULT_RHT_SIGN_MASK
CHUNK = 4096  # blocks per jitted reference-core call
# The quantize kernel's outputs: row, row_scale, col, col_scale.
OUT_DTYPES = (jnp.float4_e2m1fn, jnp.float8_e4m3fn, jnp.float4_e2m1fn, jnp.float8_e4m3fn)


# ---------------------------------------------------------------------------------------------
# Kernel library


@pytest.fixture(scope="module", autouse=True)
def kernels():
    """Skips a module whose CPU library lacks the NVFP4 kernels; runs it on the CPU device,
    also where a GPU is the default."""
    reason = missing_cpu_kernels("nvfp4_amax", "nvfp4_quantize")
    if reason is not None:
        pytest.skip(reason)
    with jax.default_device(jax.devices("cpu")[0]):
        yield


# ---------------------------------------------------------------------------------------------
# Reference cores on fixed-size chunks


_ORIGINAL = {name: getattr(nv_ref, name) for name in ("_nv_encode_core", "_rht_core")}


def _sr_core(xb, amax_b, amax_g, r):
    """The stochastic-rounding path of the reference's block computation (`r`: the random
    bytes of the elements, 0..255)."""
    s_enc = nv_ref.global_encode_scale(amax_g)
    sdb = nv_ref.block_scale_bytes(amax_b, s_enc)
    enc = nv_ref.block_encode_scale(sdb, s_enc)
    y = ieee_ref.multiply(xb, jnp.broadcast_to(enc[:, None], xb.shape))
    return sr_ref.encode_e2m1_sr(y, r), sdb


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
            mp.setattr(nv_ref, name, _chunked(core))
        yield


# ---------------------------------------------------------------------------------------------
# Kernel calls


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def positive_axis(shape, flatten_axis: int) -> int:
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
    fa = positive_axis(s, fa)
    if block_axis is None:
        block_axis = n_batch + fa - 1 if (colwise or use_2d) else -1
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
        QUANTIZE_TARGET,
        tuple(jax.ShapeDtypeStruct(sh, dt) for sh, dt in zip(shapes, OUT_DTYPES)),
        vmap_method=None,
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
    return [code_bytes(o) for o in out]


def code_bytes(a) -> np.ndarray:
    """The E2M1 codes (0..15) / E4M3 bytes of an f4 / e4m3 array, one uint8 each. `np.asarray`
    unpacks XLA's packed f4 buffer (element 2i in the low nibble of byte i), so this reads
    what the kernel packed."""
    a = np.asarray(a)
    assert a.dtype in (np.dtype(ml_dtypes.float4_e2m1fn), np.dtype(ml_dtypes.float8_e4m3fn)), (
        a.dtype
    )
    return u8(a)


def kernel_amax(x, *, n_batch=0, fa=-1, with_rht=False, mask=MASK, block_axis=None):
    x = jnp.asarray(x)
    batch, s = x.shape[:n_batch], x.shape[n_batch:]
    if block_axis is None:
        block_axis = n_batch + positive_axis(s, fa) - 1 if with_rht else -1
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


def _ref_2d(x2, use_2d: bool, amax_g, bytes2=None):
    """(codes, scale bytes) of a 2-D view: `nvfp4_quantize`, or its SR path with the random
    bytes `bytes2` (one per element of `x2`)."""
    g = np.asarray(amax_g, np.float32).reshape(1)
    if bytes2 is None:
        data, scale, _ = nv_ref.nvfp4_quantize(jnp.asarray(x2), use_2d, g)
        return np.asarray(nv_ref.e2m1_codes(data)), u8(scale)
    m, n = x2.shape
    xb, ab = nv_ref._blocks(jnp.asarray(x2), use_2d)
    nb = ab.shape[1]
    rp = np.pad(np.asarray(bytes2), ((0, 0), (0, nb * 16 - n))).reshape(-1, 16)
    codes, sdb = _SR_CORE(
        np.asarray(xb).reshape(-1, 16), np.asarray(ab).reshape(-1), np.full(m * nb, g[0]), rp
    )
    return codes.reshape(m, nb * 16)[:, :n], sdb.reshape(m, nb)


def row_sr_bytes(s, key, offset, global_shape) -> np.ndarray:
    """The rowwise SR bytes (stream 0) of an example block of shape `s` at `offset` in
    `global_shape`: at the element's row-major index in the global x; shape `s`."""
    lo, hi = sr_ref.global_index(tuple(s), jnp.asarray(offset, jnp.int32), tuple(global_shape))
    return np.asarray(sr_ref.random_bytes(jnp.asarray(key, jnp.uint32), lo, hi, 0))


def col_sr_bytes(s, fa: int, key, offset, global_shape) -> np.ndarray:
    """The colwise SR bytes (stream 1) of the same block: at the colwise element's row-major
    index in the global T layout `G[fa:] + G[:fa]`; shape `s[fa:] + s[:fa]` (T layout)."""
    offset = [int(o) for o in np.asarray(offset).reshape(-1)]
    s, g = tuple(s), tuple(global_shape)
    t_offset = jnp.asarray(offset[fa:] + offset[:fa], jnp.int32)
    lo, hi = sr_ref.global_index(s[fa:] + s[:fa], t_offset, g[fa:] + g[:fa])
    return np.asarray(sr_ref.random_bytes(jnp.asarray(key, jnp.uint32), lo, hi, 1))


def reference_example(xe, amax, col_amax, fa, rowwise, colwise, use_2d, use_rht, mask=MASK,
                      key=None, offset=None, global_shape=None):
    """Expected (row, row_scale, col, col_scale) of one example, each in its 4-D view."""
    s = xe.shape
    a, k, c, l_ = _view(s, fa, colwise or use_2d)
    x4 = np.asarray(xe).reshape(a, k, c, l_)
    sr = key is not None
    if sr:
        b_row = row_sr_bytes(s, key, offset, global_shape).reshape(a, k, c, l_)
        if colwise:
            b_col = col_sr_bytes(s, fa, key, offset, global_shape).reshape(c, l_, a, k)
    out = [None] * 4
    if rowwise:
        r = _to_2d(b_row, use_2d) if sr else None
        codes, scale = _ref_2d(_to_2d(x4, use_2d), use_2d, amax, r)
        out[0] = _from_2d(codes, x4.shape, use_2d)
        out[1] = _from_2d(scale, x4.shape, use_2d)
    if colwise:
        xt = x4.transpose(2, 3, 0, 1)  # (C, L, A, K)
        x2 = _to_2d(xt, use_2d)
        if use_rht:
            x2 = np.asarray(nv_ref.rht(jnp.asarray(x2), mask))
        r = _to_2d(b_col, use_2d) if sr else None
        codes, scale = _ref_2d(x2, use_2d, col_amax, r)
        out[2] = _from_2d(codes, xt.shape, use_2d)
        out[3] = _from_2d(scale, xt.shape, use_2d)
    return out


def rht_amax_reference(xe, fa, mask=MASK) -> np.float32:
    s = xe.shape
    a, k, c, l_ = _view(s, fa, True)
    x2 = np.asarray(xe).reshape(a, k, c, l_).transpose(2, 3, 0, 1).reshape(-1, k)
    return np.asarray(ieee_ref.max_abs(nv_ref.rht(jnp.asarray(x2), mask)))


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
    fa = positive_axis(s, fa)
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


def finite_amax(xe) -> np.float32:
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


def example_amaxes(x, n_batch=1) -> np.ndarray:
    flat = x.reshape((math.prod(x.shape[:n_batch]),) + x.shape[n_batch:])
    return np.array([finite_amax(e) for e in flat], np.float32)


def example_rht_amaxes(x, fa, n_batch=1) -> np.ndarray:
    flat = x.reshape((math.prod(x.shape[:n_batch]),) + x.shape[n_batch:])
    return np.array([rht_amax_reference(e, positive_axis(e.shape, fa)) for e in flat], np.float32)


def rht_ok(shape, fa) -> bool:
    """Whether the RHT applies: the colwise-blocked axis is a multiple of 16."""
    return shape[positive_axis(shape, fa) - 1] % 16 == 0
