"""Shared parametrisation tables and comparison helpers."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import eqx_quant as eqq


Q_DTYPES = {"e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}
NP_Q_DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
X_DTYPES = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16}
LAYOUTS = list(eqq.QuantizeLayout)

# (shape, flatten_axis): TE's quantize suite (§10.2) minus the 67M-element one, plus odd shapes.
TE_SHAPES = [
    ((32, 64), -1),
    ((2, 64, 32), -1),
    ((64, 2, 32), -2),
    ((32, 256, 128), -1),
    ((32, 256, 128), -2),
    ((64, 32, 32, 256), -1),
]
ODD_SHAPES = [
    ((1, 7), -1),
    ((7, 1), -1),
    ((7, 13), -1),
    ((3, 5, 7), -2),
    ((3, 5, 7), -3),
    ((13,), -1),
    ((0, 5), -1),
    ((5, 0), -1),
    ((2, 0, 3), -1),
]
SHAPES = TE_SHAPES + ODD_SHAPES


def impls() -> list[str]:
    """Implementations to test on this machine: the reference always, the CPU kernel if built."""
    return ["reference"] + (["ffi"] if "cpu" in eqq.native_platforms() else [])


def random_input(shape, dtype, seed=0, scale=3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * scale
    return np.asarray(jnp.asarray(x, dtype))


def bytes_equal(a, b, what="") -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    va, vb = a.view(np.uint8), b.view(np.uint8)
    bad = np.nonzero(va != vb)
    assert bad[0].size == 0, (
        f"{what}: {bad[0].size} of {va.size} bytes differ; first at {tuple(i[0] for i in bad)}: "
        f"{va[tuple(i[0] for i in bad)]:#04x} vs {vb[tuple(i[0] for i in bad)]:#04x}"
    )


def f32_bits_equal(a, b, what="") -> None:
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg=what)


def rounding_tie_rows(dtype) -> np.ndarray:
    """Two rows whose float32 sum is every finite `dtype` value a plus exactly half its ulp
    (a tie), 1/4 and 3/4 of it, and their negations, in the same sign and the other."""
    info = ml_dtypes.finfo(dtype)
    a = np.arange(2**16, dtype=np.uint16).view(dtype).astype(np.float32)
    a = a[np.isfinite(a)]
    _, exp2 = np.frexp(a)  # a = f * 2^exp2, 0.5 <= |f| < 1
    half_ulp = np.ldexp(np.float32(1), np.maximum(exp2 - 1, info.minexp) - info.nmant - 1)
    rows = [
        (a, (np.sign(a) * s * half_ulp).astype(np.float32))
        for s in (1.0, 0.5, 1.5, -1.0, -0.5, -1.5)
    ]
    x = np.concatenate([np.stack(r) for r in rows], axis=1)
    return x.astype(dtype)


def to_numpy(x: jax.Array) -> np.ndarray:
    return np.asarray(x)


BLOCK_KERNEL_OPS = ("mxfp8_quantize", "nvfp4_amax", "nvfp4_quantize")


def fast_impl() -> str:
    """The CPU kernels when built (they compile in milliseconds), else the reference."""
    from eqx_quant._ops import _ffi

    have = _ffi.native_ops("cpu")
    return "ffi" if all(op in have for op in BLOCK_KERNEL_OPS) else "reference"


def cuda_device():
    """The first CUDA device, or None (no GPU, or JAX without CUDA support)."""
    try:
        devices = jax.devices("cuda")
    except RuntimeError:
        return None
    return devices[0] if devices else None
