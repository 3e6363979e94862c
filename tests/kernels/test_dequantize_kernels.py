"""The MXFP8 and NVFP4 dequantize CPU kernels (`eqx_quant_{mxfp8,nvfp4}_dequantize_cpu`, and
`eqx_quant_grouped_mxfp8_dequantize_cpu`) against the ops' pure-JAX reference, byte for byte:
every FP8 payload byte and E2M1 code, NaN and zero (2^-127: subnormal products) E8M0 scales,
E4M3 scale bytes from subnormal to NaN, NaN / inf / subnormal decode scales, both output dtypes,
rowwise and colwise views, partial blocks, odd row lengths (packed codes across rows), several
examples, and views large enough to be split over XLA's threads; grouped parts with ragged and
empty groups, rows past the last group, sizes past the rows (clamped), groups counted in units
of rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant._ops import (
    GroupedDequantizeParams,
    Mxfp8DequantizeParams,
    Nvfp4DequantizeParams,
    grouped_mxfp8_dequantize_op,
    mxfp8_dequantize_op,
    nvfp4_dequantize_op,
)
from tests.support.bytes import assert_same_bytes

MX_VIEWS = [(8, 64, 1), (3, 100, 7), (1, 33, 1), (5, 40, 1), (2, 70, 48), (512, 1024, 1),
            (4, 256, 512)]
GROUPED_CASES = [((256, 96), [100, 0, 156], 1), ((130, 40), [7, 60, 0, 50], 1),
                 ((64, 33), [40, 40], 1), ((96, 64), [0, 20, 28], 2), ((1024, 256), [300] * 3, 1)]
NV_CASES = [((8, 64), 1), ((6, 100), 3), ((1, 17), 1), ((7, 33), 7), ((512, 1024), 2)]


def _both(bind, params_type, out_dtype, *args):
    """(kernel, reference) results of one op on the same operands."""
    return tuple(
        jax.jit(lambda *a, impl=impl: bind(*a, params=params_type(out_dtype, impl))[0])(*args)
        for impl in ("ffi", "reference")
    )


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("q_dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2])
@pytest.mark.parametrize("view", MX_VIEWS, ids=str)
def test_mxfp8_kernel_matches_reference(view, q_dtype, out_dtype):
    a, length, b = view
    rng = np.random.default_rng(sum(view))
    data = rng.integers(0, 256, size=view, dtype=np.uint8)
    flat_data = data.reshape(-1)
    flat_data[:256] = np.arange(min(256, flat_data.size))  # every payload byte
    scales = rng.integers(100, 150, size=(a, -(-length // 32), b), dtype=np.uint8)
    flat = scales.reshape(-1)
    flat[::7] = 0xFF  # NaN scales
    flat[1::5] = 0  # 2^-127: subnormal products
    flat[2::11] = 3
    flat[3::13] = 0xFE
    data_q = jax.lax.bitcast_convert_type(jnp.asarray(data), q_dtype)
    kernel = jax.jit(lambda d, s: mxfp8_dequantize_op.bind(
        d, s, params=Mxfp8DequantizeParams(out_dtype, "ffi")))
    assert "eqx_quant_mxfp8_dequantize_cpu" in kernel.lower(data_q, scales).as_text()
    got, want = _both(mxfp8_dequantize_op.bind, Mxfp8DequantizeParams, out_dtype, data_q,
                      jnp.asarray(scales))
    assert_same_bytes(np.asarray(got), np.asarray(want), f"{view} {q_dtype} {out_dtype}")


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("shape,examples", NV_CASES, ids=str)
def test_nvfp4_kernel_matches_reference(shape, examples, out_dtype):
    rows, cols = shape
    rng = np.random.default_rng(rows + examples)
    codes = rng.integers(0, 16, size=shape, dtype=np.uint8)
    codes.reshape(-1)[:16] = np.arange(min(16, codes.size))  # every code
    codes = jax.lax.bitcast_convert_type(jnp.asarray(codes).astype(jnp.uint4), jnp.float4_e2m1fn)
    scales = rng.integers(0, 256, size=(rows, -(-cols // 16)), dtype=np.uint8)
    for i, byte in enumerate((0x01, 0x7F, 0xFF, 0x00)):  # subnormal, NaN, -NaN, zero
        scales.reshape(-1)[i::9] = byte
    decode = rng.uniform(0.01, 3.0, size=(examples,)).astype(np.float32)
    special = np.array([1.0, np.inf, np.nan, 1e-40, 3e38], np.float32)
    decode[: min(examples, 5)] = special[: min(examples, 5)]
    got, want = _both(nvfp4_dequantize_op.bind, Nvfp4DequantizeParams, out_dtype, codes,
                      jnp.asarray(scales), jnp.asarray(decode))
    assert_same_bytes(np.asarray(got), np.asarray(want), f"{shape} {examples} {out_dtype}")


@pytest.mark.parametrize("q_dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2])
@pytest.mark.parametrize("shape,sizes,rows_per_unit", GROUPED_CASES, ids=str)
def test_grouped_mxfp8_kernel_matches_reference(shape, sizes, rows_per_unit, q_dtype):
    rng = np.random.default_rng(shape[0] + len(sizes))
    x = jnp.asarray(rng.standard_normal(shape).astype(np.float32))
    quantizer = eqq.BlockScaleQuantizer(q_dtype, eqq.QuantizeLayout.ROWWISE)
    gs = jnp.asarray([shape[0]] + [0] * (len(sizes) - 1), jnp.int32)  # for the buffer length
    length = eqq.grouped_quantize(x, gs, quantizer, check=False).rowwise.scale_inv.shape[0]
    data = rng.integers(0, 256, size=shape, dtype=np.uint8)
    scales = rng.integers(100, 150, size=(length,), dtype=np.uint8)
    scales[::7], scales[1::5], scales[2::11] = 0xFF, 0, 0xFE  # NaN, 2^-127, 2^127
    args = (jax.lax.bitcast_convert_type(jnp.asarray(data), q_dtype), jnp.asarray(scales),
            jnp.asarray(sizes, jnp.int32))
    got, want = (
        jax.jit(lambda *a, impl=impl: grouped_mxfp8_dequantize_op.bind(
            *a, params=GroupedDequantizeParams(rows_per_unit, impl))[0])(*args)
        for impl in ("ffi", "reference")
    )
    assert_same_bytes(np.asarray(got), np.asarray(want), f"{shape} {sizes} {q_dtype}")


def test_kernels_name_a_bad_operand():
    """Called through their FFI targets with operands that break the ops' contract, the kernels
    fail with the target and the operand's expected form, instead of reading out of bounds."""
    assert eqq.library_paths()  # loads the libraries and registers their targets
    data = jax.lax.bitcast_convert_type(jnp.zeros((4, 64, 1), jnp.uint8), jnp.float8_e4m3fn)
    call = jax.ffi.ffi_call("eqx_quant_mxfp8_dequantize_cpu",
                            jax.ShapeDtypeStruct((4, 64, 1), jnp.bfloat16))
    with pytest.raises(Exception, match=r"mxfp8_dequantize_cpu: scales must be U8 \(A, ceil"):
        jax.jit(call)(data, jnp.zeros((4, 1, 1), jnp.uint8))
    codes = jax.lax.bitcast_convert_type(jnp.zeros((6, 32), jnp.uint4), jnp.float4_e2m1fn)
    call = jax.ffi.ffi_call("eqx_quant_nvfp4_dequantize_cpu",
                            jax.ShapeDtypeStruct((6, 32), jnp.float32))
    with pytest.raises(Exception, match="decode_scales must be F32 .E,. with E >= 1 dividing A"):
        jax.jit(call)(codes, jnp.zeros((6, 2), jnp.uint8), jnp.ones((4,), jnp.float32))
