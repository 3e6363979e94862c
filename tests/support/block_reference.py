"""Shared machinery of the block-reference tests (tests/block/test_block_reference*.py): the
core callbacks that keep compile times short (see test_block_reference.py) and wide inputs."""

import functools

import jax
import ml_dtypes
import numpy as np
import pytest

from eqx_quant.reference import mxfp8 as mx_ref
from eqx_quant.reference import nvfp4 as nv_ref

CORES = [
    (mx_ref, "_mx_encode_core"),
    (mx_ref, "decode_blocks"),
    (nv_ref, "_nv_encode_core"),
    (nv_ref, "decode_blocks"),
    (nv_ref, "_rht_core"),
]
CHUNK = 2048  # blocks per compiled core call
ORIGINAL_CORES = {(module.__name__, name): getattr(module, name) for module, name in CORES}


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
# Inputs


def wide_input(rng, shape, dtype) -> np.ndarray:
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
