"""Shared cases and machinery of the grouped numerics tests (tests/grouped/
test_grouped_numerics.py, test_grouped_values.py): group-size patterns, modes, quantizers,
inputs, the oracle's expectations and the full-buffer comparison.

Run time: the group sizes are traced, so every pattern of one (shape, mode, layout, dtype)
reuses one compiled function: tests loop over patterns instead of parametrizing over them.
The pure-JAX reference compiles for seconds per configuration, so its tests use one shape
(REF_SHAPE) and one dtype / layout per mode (REFERENCE_CASES), shared by all of them.
`group_part` and `dequantize` compile per shape eagerly; they are exercised on a few cases.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import eqx_quant as eqq
from tests.oracle import blocks as ob
from tests.oracle import grouped as og
from tests.support.bytes import assert_same_bytes, f32_bits_equal, u8

L = eqq.QuantizeLayout
IMPLS = ["ffi", "reference"]
KEY = jax.random.key(77)

# G = 6 patterns over M = 321 rows: sizes 1/31/33/127/129, empty groups at the start, the end
# and in between, one giant group (first / middle / last), a random draw with zeros.
M = 321
PATTERNS = [
    [1, 31, 33, 127, 129, 0],
    [0, 129, 0, 127, 33, 32],
    [0, 0, 321, 0, 0, 0],
    [321, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 321],
    [57, 0, 98, 13, 0, 153],
    [64, 64, 64, 64, 64, 1],
    [1, 1, 1, 1, 1, 316],
]
G = 6
# Delayed scaling: distinct per-group scales (powers of two and not), some saturating.
DELAYED_SCALES = np.array(
    [0.5, 3.0, 16.0, 0.0625, 1000.0, 0.3, 7.0, 1.0, 2.5, 0.01, 64.0, 1.5, 9.0, 0.7, 4.0, 0.2],
    np.float32,
)

# name -> (q_dtype of the oracle, keyed)
MODES = {
    "current": (ob.E4M3, False),
    "delayed": (ob.E5M2, False),
    "mxfp8_e4m3": (ob.E4M3, False),
    "mxfp8_e5m2": (ob.E5M2, False),
    "nvfp4": (None, False),
    "nvfp4_2d": (None, False),
    "nvfp4_sr": (None, True),
}


def make_quantizer(name, layout, num_groups=G):
    if name == "current":
        return eqq.CurrentScaleQuantizer(jnp.float8_e4m3fn, layout)
    if name == "delayed":
        scale = jnp.asarray(DELAYED_SCALES[:num_groups])
        return eqq.GroupedDelayedScaleQuantizer(
            num_groups, jnp.float8_e5m2, layout, amax_history_len=4, scale=scale
        )
    if name == "mxfp8_e4m3":
        return eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, layout)
    if name == "mxfp8_e5m2":
        return eqq.BlockScaleQuantizer(jnp.float8_e5m2, layout)
    if name == "nvfp4":
        return eqq.NVFP4Quantizer(q_layout=layout)
    if name == "nvfp4_2d":
        return eqq.NVFP4Quantizer(q_layout=layout, use_2d=True)
    if name == "nvfp4_sr":
        return eqq.NVFP4Quantizer(q_layout=layout, stochastic_rounding=True)
    raise ValueError(name)


def dense_quantizer(name, gq, g):
    """The dense quantizer that group g of a grouped call with `gq` must match."""
    return gq.group(g) if name == "delayed" else gq


def make_input(shape, dtype, seed=0) -> np.ndarray:
    """Normal values with a per-leading-index magnitude 2^k (k in [-6, 6]), so that groups
    (and blocks) get distinct amaxes and scales. Within f16 range."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * 3.0
    mag = (2.0 ** rng.integers(-6, 7, shape[0])).astype(np.float32)
    x *= mag.reshape((-1,) + (1,) * (len(shape) - 1))
    return np.array(jnp.asarray(x, dtype))  # a writable copy


def group_keys(key, num_groups):
    """The key words of jax.random.fold_in(key, g) (the contract's per-group key)."""
    return np.stack(
        [np.asarray(jax.random.key_data(jax.random.fold_in(key, g))) for g in range(num_groups)]
    ).astype(np.uint32)


def expected(x, sizes, name, layout, fa=-1, key=KEY):
    """The oracle's parts of grouped_quantize(x, sizes, make_quantizer(name, layout), fa)."""
    xn = np.asarray(x)
    r, n, u = og.view_2d(xn.shape, fa)
    x2 = xn.reshape(r, n)
    row, col = layout.has_rowwise, layout.has_colwise
    q_dtype = MODES[name][0]
    g = len(sizes)
    if name == "current":
        return og.tensor_scaling(x2, sizes, u, q_dtype, row, col)
    if name == "delayed":
        return og.tensor_scaling(x2, sizes, u, q_dtype, row, col, DELAYED_SCALES[:g])
    if name.startswith("mxfp8"):
        return og.mxfp8(x2, sizes, u, q_dtype, row, col)
    keys = group_keys(key, g) if MODES[name][1] else None
    return og.nvfp4(x2, sizes, u, row, col, use_2d=name == "nvfp4_2d", keys=keys)


def run(x, sizes, name, layout, impl, fa=-1, check=True, num_groups=None):
    q = make_quantizer(name, layout, num_groups or (len(sizes) if sizes is not None else G))
    kw = {"key": KEY} if MODES[name][1] else {}
    gs = None if sizes is None else jnp.asarray(np.asarray(sizes, np.int32))
    return eqq.grouped_quantize(jnp.asarray(x), gs, q, fa, check=check, impl=impl, **kw)


def check_against_oracle(gt, o, name, shape, fa, sizes, what=""):
    """Every buffer of both parts, byte for byte, plus the documented shapes and dtypes."""
    r, n, _ = og.view_2d(shape, fa)
    tensor = name in ("current", "delayed")
    nv = name.startswith("nvfp4")
    g = len(sizes)
    assert tuple(gt.original_shape) == tuple(shape), what
    np.testing.assert_array_equal(np.asarray(gt.group_sizes), np.asarray(sizes, np.int32))
    for tag, part in (("row", gt.rowwise), ("col", gt.colwise)):
        w = f"{what} {name} {tag}"
        if o[tag] is None:
            assert part is None, w
            continue
        assert part is not None, w
        data = np.asarray(part.data)
        flat = tag == "col" and not name.startswith("mxfp8")
        assert data.shape == ((r * n,) if flat else tuple(shape)), f"{w}: data shape {data.shape}"
        if nv:
            assert data.dtype == ml_dtypes.float4_e2m1fn, w
        else:
            assert data.dtype == MODES[name][0], w
        assert_same_bytes(u8(data).reshape(-1), o[tag].reshape(-1), f"{w} data")
        if tensor:
            f32_bits_equal(part.scale_inv, o["scale_inv"], f"{w} scale_inv")
            assert np.asarray(part.scale_inv).shape == (g,), w
        else:
            sdt = ml_dtypes.float8_e4m3fn if nv else ml_dtypes.float8_e8m0fnu
            assert np.asarray(part.scale_inv).dtype == sdt, w
            assert_same_bytes(u8(part.scale_inv).reshape(-1), o[f"{tag}_scale"], f"{w} scale bytes")
        assert np.asarray(part.amax).dtype == np.float32, w
        f32_bits_equal(part.amax, o["amax"], f"{w} amax")
        np.testing.assert_array_equal(np.asarray(part.group_sizes), np.asarray(sizes, np.int32))


REF_SHAPE = (M, 40)
# mode -> (dtype, layout) of every test on REF_SHAPE (both implementations).
REFERENCE_CASES = {
    "current": ("f32", L.ROWWISE_COLWISE),
    "delayed": ("bf16", L.COLWISE),
    "mxfp8_e4m3": ("bf16", L.ROWWISE_COLWISE),
    "mxfp8_e5m2": ("f16", L.COLWISE),
    "nvfp4": ("f16", L.ROWWISE),
    "nvfp4_2d": ("f32", L.COLWISE),
    "nvfp4_sr": ("bf16", L.ROWWISE),
}
# The representative subset that also runs through the pure-JAX reference (the fp8, MXFP8
# and NVFP4 ops, each part, 1D / 2D, round-to-nearest / stochastic).
REF_MODES = ["current", "delayed", "mxfp8_e4m3", "nvfp4_2d", "nvfp4_sr"]
