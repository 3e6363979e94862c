"""Bit-exact tests of the MXFP8 CPU kernel (FFI target `eqx_quant_mxfp8_quantize_cpu`) against
the pure-JAX reference (`eqx_quant.reference.mxfp8`), plus its operand validation.

The kernel sees x as `(A, K, C, L)` (docs/block_formats.md): rowwise blocks run along `L`,
colwise blocks along `K = x.shape[block_axis]`. The expected bytes come from
`mxfp8_quantize_rowwise` on 2-D views: x as `(-1, L)` for rowwise; for colwise the `K` axis
moved last, `(A, K, C*L) -> (A*C*L, K)`, and the result moved back.

The kernel is the one in the CPU library that eqx_quant's loader registered; the tests skip
when that library lacks it.
"""

import functools
import math
import zlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from eqx_quant.reference import mxfp8 as mx_ref
from tests.support.bytes import assert_bytes, u8
from tests.support.cases import every_then_cycled
from tests.support.dtypes import Q_DTYPES, X_DTYPES
from tests.support.kernels import ffi_target, missing_cpu_kernels, on_cpu  # noqa: F401 (fixture)

TARGET = ffi_target("mxfp8_quantize")
LAYOUTS = {"row": (True, False), "col": (False, True), "both": (True, True)}
_SKIP_REASON = missing_cpu_kernels("mxfp8_quantize")
pytestmark = [
    pytest.mark.skipif(_SKIP_REASON is not None, reason=str(_SKIP_REASON)),
    pytest.mark.usefixtures("on_cpu"),  # the CPU kernel, also where a GPU is the default
]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kernel(x, q_dtype, block_axis, rowwise: bool, colwise: bool):
    """The FFI call; returns the four outputs as uint8 numpy arrays."""
    shape = x.shape
    row_scale = shape[:-1] + (_cdiv(shape[-1], 32),)
    col_scale = list(shape)
    if colwise:
        col_scale[block_axis] = _cdiv(shape[block_axis], 32)
    outs = (
        jax.ShapeDtypeStruct(shape if rowwise else (0,), q_dtype),
        jax.ShapeDtypeStruct(row_scale if rowwise else (0,), jnp.uint8),
        jax.ShapeDtypeStruct(shape if colwise else (0,), q_dtype),
        jax.ShapeDtypeStruct(tuple(col_scale) if colwise else (0,), jnp.uint8),
        jax.ShapeDtypeStruct((0,), jnp.float32),  # no dbias
        jax.ShapeDtypeStruct((0,), x.dtype),
    )
    result = jax.ffi.ffi_call(TARGET, outs, vmap_method=None)(
        x, **_attrs(block_axis=block_axis if colwise else -1, rowwise=rowwise, colwise=colwise)
    )
    return [u8(r) for r in result[:4]]


def _attrs(**given):
    """The op's FFI attributes: `given` over the defaults (rowwise only, no dbias)."""
    call = (
        dict(
            block_axis=-1,
            n_batch=0,
            flatten_axis=0,
            dbias_keep=0,
            dbias_split=1,
            rowwise=True,
            colwise=False,
            with_dbias=False,
            dbias_cast=False,
        )
        | given
    )
    return {k: (bool(v) if isinstance(v, bool) else np.int64(v)) for k, v in call.items()}


# ---------------------------------------------------------------------------------------------
# Expected bytes


@functools.cache
def _rowwise_2d(shape: tuple[int, int], q_name: str):
    """`mxfp8_quantize_rowwise`, jitted once per 2-D float32 shape and FP8 type."""
    fn = jax.jit(lambda x: mx_ref.mxfp8_quantize_rowwise(x, jnp.dtype(q_name)))
    return lambda x: tuple(u8(o) for o in fn(x))


def reference_rowwise(x32: np.ndarray, q_dtype):
    """Bytes of (row, row_scale); x32 is x converted (exactly) to float32."""
    length = x32.shape[-1]
    view = x32.reshape(int(np.prod(x32.shape[:-1])), length)
    data, scale = _rowwise_2d(view.shape, jnp.dtype(q_dtype).name)(view)
    return data.reshape(x32.shape), scale.reshape(x32.shape[:-1] + (scale.shape[-1],))


def reference_colwise(x32: np.ndarray, q_dtype, block_axis: int):
    """Bytes of (col, col_scale): blocks along axis `block_axis` (N layout)."""
    shape = x32.shape
    a, k = int(np.prod(shape[:block_axis])), shape[block_axis]
    w = int(np.prod(shape[block_axis + 1 :]))
    view = x32.reshape(a, k, w).transpose(0, 2, 1).reshape(a * w, k)
    data, scale = _rowwise_2d(view.shape, jnp.dtype(q_dtype).name)(view)
    data = data.reshape(a, w, k).transpose(0, 2, 1).reshape(shape)
    nb = scale.shape[-1]
    scale_shape = shape[:block_axis] + (nb,) + shape[block_axis + 1 :]
    return data, scale.reshape(a, w, nb).transpose(0, 2, 1).reshape(scale_shape)


def check_all_layouts(x: np.ndarray, q_dtype, block_axis: int | None) -> None:
    """Runs the kernel rowwise, colwise and both on x and compares every output byte."""
    x32 = x.astype(np.float32)  # exact for f16 and bf16
    row_ref = reference_rowwise(x32, q_dtype)
    col_ref = None if block_axis is None else reference_colwise(x32, q_dtype, block_axis)
    for layout, (rowwise, colwise) in LAYOUTS.items():
        if colwise and block_axis is None:
            continue
        row, row_scale, col, col_scale = kernel(x, q_dtype, block_axis, rowwise, colwise)
        tag = f"{x.dtype} {x.shape} block_axis={block_axis} {jnp.dtype(q_dtype).name} {layout}"
        if rowwise:
            assert_bytes(row, row_ref[0], f"row ({tag})")
            assert_bytes(row_scale, row_ref[1], f"row_scale ({tag})")
        else:
            assert row.shape == (0,) and row_scale.shape == (0,)
        if colwise:
            assert_bytes(col, col_ref[0], f"col ({tag})")
            assert_bytes(col_scale, col_ref[1], f"col_scale ({tag})")
        else:
            assert col.shape == (0,) and col_scale.shape == (0,)


# ---------------------------------------------------------------------------------------------
# Inputs


def random_input(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Normal values scaled by a random power of two per group of 8 elements (so blocks span
    several magnitudes), with ~8% of elements log-uniform over the whole range of `dtype`
    (subnormals included), ~4% zeros, ~2% NaN and ~1% +-inf."""
    np_dtype = np.dtype(dtype)
    finfo = ml_dtypes.finfo(np_dtype)
    size = int(np.prod(shape))
    spread = min(24, int(finfo.maxexp) - 4)
    groups = np.exp2(rng.integers(-spread, spread, _cdiv(size, 8))).repeat(8)[:size]
    x = rng.standard_normal(size) * groups
    lo, hi = np.log2(float(finfo.smallest_subnormal)), np.log2(float(finfo.max))
    wide = rng.random(size) < 0.08
    x[wide] = np.exp2(rng.uniform(lo, hi, wide.sum())) * rng.choice([-1.0, 1.0], wide.sum())
    x[rng.random(size) < 0.04] = 0.0
    x[rng.random(size) < 0.02] = np.nan
    x[rng.random(size) < 0.01] = np.inf * rng.choice([-1.0, 1.0])
    with np.errstate(over="ignore"):  # a wide value may round up to inf: fine
        return x.astype(np.float32).astype(np_dtype).reshape(shape)


def special_blocks() -> np.ndarray:
    """Blocks of 32 float32 values that probe the edges of the block rule, one per row."""
    f32 = np.float32
    tiny = np.finfo(f32).smallest_subnormal
    up = lambda v: np.nextafter(f32(v), f32(np.inf))
    down = lambda v: np.nextafter(f32(v), f32(0))
    ramp = np.linspace(-1.0, 1.0, 32, dtype=f32)
    blocks = [
        np.zeros(32, f32),
        -np.zeros(32, f32),
        np.full(32, np.nan, f32),
        np.where(np.arange(32) % 3 == 0, f32(np.nan), ramp),
        np.where(np.arange(32) == 5, f32(np.inf), ramp),
        np.where(np.arange(32) == 7, f32(-np.inf), ramp * 1e-3),
        np.array([np.inf, -np.inf] * 16, f32),
        ramp * tiny * 1000,  # amax a subnormal f32
        np.full(32, tiny, f32),
        ramp * f32(2.0**-126),
        ramp * f32(2.0**-118),  # v near 2^-127
        ramp * f32(448.0 * 2.0**-127),
        ramp * up(448.0 * 2.0**-127),
        np.full(32, np.finfo(f32).max, f32),
        ramp * np.finfo(f32).max,
        np.full(32, 1e-45, f32),
    ]
    for edge in (448.0, 57344.0, 1.0, 2.0**-10, 2.0**100):
        for v in (edge, up(edge), down(edge), f32(edge) * f32(1.0625), f32(edge) * f32(1.03125)):
            block = ramp * f32(v)
            block[3], block[4] = f32(v), -f32(v)
            blocks.append(block)
    subnormal_mix = ramp * f32(2.0**-140)
    subnormal_mix[0] = f32(2.0**-120)
    blocks.append(subnormal_mix)
    return np.stack(blocks)


# ---------------------------------------------------------------------------------------------
# Tests


# (shape, block_axis): block_axis = the colwise-blocked dim (None: rowwise only).
CASES = [
    ((32, 64), 0),
    ((2, 64, 32), 1),
    ((64, 2, 32), 0),
    ((32, 256, 128), 1),
    ((32, 256, 128), 0),
    ((7, 13), 0),
    ((1, 7), 0),
    ((33, 65), 0),
    ((3, 5, 40), 0),
    ((13,), None),
    ((0, 5), 0),
    ((5, 0), 0),
    ((40, 2, 1100), 0),  # L > one kernel tile, partial blocks both ways
    ((33, 7, 100), 0),  # several short lines per tile, a partial last tile
    ((2, 3, 33, 5, 40), 2),  # A = 6, C = 5
]


# Every input and output dtype on the aligned and the multi-tile shapes; on the small odd
# shapes (partial blocks, empty, 1-D) they take turns.
ODD = [case for case in CASES if math.prod(case[0]) < 1000]
DTYPE_CASES = every_then_cycled(
    [case for case in CASES if case not in ODD], ODD,
    [(x, q) for x in X_DTYPES for q in Q_DTYPES],
)


@pytest.mark.parametrize("shape,block_axis,x_name,q_name", DTYPE_CASES, ids=str)
def test_matches_reference(shape, block_axis, x_name, q_name):
    rng = np.random.default_rng(zlib.crc32(f"{shape} {x_name}".encode()))
    x = random_input(rng, shape, X_DTYPES[x_name])
    check_all_layouts(x, Q_DTYPES[q_name], block_axis)


@pytest.mark.parametrize("q_name", list(Q_DTYPES))
@pytest.mark.parametrize("x_name", list(X_DTYPES))
def test_special_values(x_name, q_name):
    with np.errstate(over="ignore"):  # f32 extremes become inf in f16 / bf16
        blocks = special_blocks().astype(np.dtype(X_DTYPES[x_name]))
    check_all_layouts(blocks, Q_DTYPES[q_name], 0)  # rowwise blocks = the special blocks
    check_all_layouts(np.ascontiguousarray(blocks.T), Q_DTYPES[q_name], 0)  # colwise ones


@pytest.mark.parametrize("q_name", list(Q_DTYPES))
@pytest.mark.parametrize("x_name", ["bf16", "f16"])
def test_all_16_bit_patterns(x_name, q_name):
    patterns = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    x = patterns.view(np.dtype(X_DTYPES[x_name])).reshape(256, 256)
    check_all_layouts(x, Q_DTYPES[q_name], 0)
    shuffled = np.random.default_rng(0).permutation(patterns)
    check_all_layouts(shuffled.view(x.dtype).reshape(64, 1024), Q_DTYPES[q_name], 0)


def test_reference_views_match_colwise_reference():
    """The colwise expectation (K moved last, rowwise reference) equals `mxfp8_quantize_colwise`
    on a 2-D x."""
    x = random_input(np.random.default_rng(1), (45, 70), jnp.float32)
    got = reference_colwise(x, jnp.float8_e4m3fn, 0)
    data, scale = jax.jit(lambda v: mx_ref.mxfp8_quantize_colwise(v, jnp.float8_e4m3fn))(x)
    assert_bytes(got[0], u8(data), "col")
    assert_bytes(got[1], u8(scale), "col_scale")


def _outs(
    row=(4, 64),
    row_scale=(4, 2),
    col=(0,),
    col_scale=(0,),
    q=jnp.float8_e4m3fn,
    col_q=None,
    scale=jnp.uint8,
    dbias=(0,),
    dbias_cast=(0,),
    cast_dtype=jnp.float32,
):
    """Output structs of a call on x of shape (4, 64); defaults: rowwise only, all valid."""
    return (
        jax.ShapeDtypeStruct(row, q),
        jax.ShapeDtypeStruct(row_scale, scale),
        jax.ShapeDtypeStruct(col, q if col_q is None else col_q),
        jax.ShapeDtypeStruct(col_scale, scale),
        jax.ShapeDtypeStruct(dbias, jnp.float32),
        jax.ShapeDtypeStruct(dbias_cast, cast_dtype),
    )


_F32 = ((4, 64), jnp.float32)  # x's shape and dtype in most cases
_BOTH = dict(col=(4, 64), col_scale=(1, 64))
_COLWISE = dict(block_axis=0, colwise=True)
# id: (x's shape and dtype, outputs, attributes, the message after the op name)
ERRORS = {
    "x_dtype": (((4, 64), jnp.int32), _outs(), {}, "x has element type s32 but expected f32"),
    "x_rank": (((), jnp.float32), _outs(), {}, r"x has shape \[\] but expected rank >= 1"),
    "row_shape": (_F32, _outs(row=(4, 63)), {}, r"row has shape \[4,63\] but expected \[4,64\]"),
    "row_scale_shape": (
        _F32,
        _outs(row_scale=(4, 3)),
        {},
        r"row_scale has shape \[4,3\] but expected \[4,2\]",
    ),
    "row_scale_dtype": (
        _F32,
        _outs(scale=jnp.int8),
        {},
        "row_scale has element type s8 but expected u8",
    ),
    "row_dtype": (
        _F32,
        _outs(q=jnp.bfloat16),
        {},
        "row has element type bf16 but expected f8e4m3fn",
    ),
    "col_dtype": (
        _F32,
        _outs(**_BOTH, col_q=jnp.float8_e5m2),
        _COLWISE,
        "col has element type f8e5m2 but expected f8e4m3fn",
    ),
    "col_scale_shape": (
        _F32,
        _outs(col=(4, 64), col_scale=(4, 64)),
        _COLWISE,
        r"col_scale has shape \[4,64\] but expected \[1,64\]",
    ),
    "absent_col": (_F32, _outs(col=(4, 64)), {}, r"col has shape \[4,64\] but expected \[0\]"),
    "last_axis": (
        _F32,
        _outs(**_BOTH),
        dict(block_axis=1, colwise=True),
        "block_axis=1 but expected 0 <= block_axis <= rank - 2 = 0",
    ),
    "rank1_colwise": (
        ((64,), jnp.float32),
        _outs((64,), (2,), (64,), (2,)),
        _COLWISE,
        "block_axis=0 but expected 0 <= block_axis <= rank - 2 = -1",
    ),
    "axis_without_colwise": (
        _F32,
        _outs(),
        dict(block_axis=0),
        "block_axis=0 but expected -1 with colwise=false",
    ),
    # (with every output empty XLA would drop the call, so row stays non-empty)
    "neither": (_F32, _outs(), dict(rowwise=False), "rowwise and colwise are both false"),
    "dbias_shape": (
        _F32,
        _outs(dbias=(64,)),
        dict(flatten_axis=1, with_dbias=True),
        r"dbias has shape \[64\] but expected \[1,64\]",
    ),
    "dbias_cast_dtype": (
        _F32,
        _outs(dbias=(1, 64), dbias_cast=(64,), cast_dtype=jnp.bfloat16),
        dict(flatten_axis=1, with_dbias=True, dbias_cast=True),
        "dbias_cast has element type bf16 but expected f32",
    ),
    "dbias_split_limit": (
        ((4, 64), jnp.float32),
        _outs(dbias=(2048, 64)),
        dict(flatten_axis=1, dbias_split=2048, with_dbias=True),
        r"dbias_split=2048 must be in \[1, 1024\]",
    ),
    "dbias_flatten_axis": (
        _F32,
        _outs(),
        dict(flatten_axis=3),
        r"flatten_axis=3 is out of range \[0, 2\]",
    ),
    "dbias_two_trees": (
        ((2, 4, 64), jnp.float32),
        _outs((2, 4, 64), (2, 4, 2), dbias=(2, 1, 64)),
        dict(flatten_axis=2, dbias_keep=1, with_dbias=True),
        "with_dbias=true needs one dbias tree per example over at most one axis longer than 1",
    ),
    "dbias_nested_tree": (
        ((2, 4, 64), jnp.float32),
        _outs((2, 4, 64), (2, 4, 2), dbias=(1, 64)),
        dict(flatten_axis=2, with_dbias=True),
        "with_dbias=true needs one dbias tree per example.*reduces 2 such axes",
    ),
}


@pytest.mark.parametrize("x_spec,outs,attrs,message", list(ERRORS.values()), ids=list(ERRORS))
def test_invalid_operands(x_spec, outs, attrs, message):
    fn = jax.ffi.ffi_call(TARGET, outs, vmap_method=None)
    with pytest.raises(jax.errors.JaxRuntimeError, match="eqx_quant_mxfp8_quantize: " + message):
        jax.block_until_ready(fn(jnp.zeros(*x_spec), **_attrs(**attrs)))
