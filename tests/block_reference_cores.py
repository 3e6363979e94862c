"""Shared machinery of the block-reference tests (test_block_reference*.py): the core
callbacks that keep compile times short (see test_block_reference.py) and bit comparisons."""

import functools

import jax
import ml_dtypes
import numpy as np
import pytest

from eqx_quant.reference import _mx, _nvfp4

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
