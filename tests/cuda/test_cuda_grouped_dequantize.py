"""The grouped MXFP8 dequantize CUDA kernel (`eqx_quant_grouped_mxfp8_dequantize_cuda`)
against the op's pure-JAX reference, byte for byte, called through its FFI target: ragged
and empty groups, rows past the last group, partial blocks, both FP8 formats, the bench's
16384 x 4096 in 8 and 128 groups. The op takes the kernel once this passes on the H200."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant.reference import grouped, mxfp8
from tests.support.bytes import assert_same_bytes
from tests.support.cuda import CUDA, requires_cuda

pytestmark = requires_cuda("grouped_mxfp8_dequantize")

CASES = [((256, 96), [100, 0, 156]), ((130, 40), [7, 60, 0, 50]), ((16384, 4096), [2048] * 8),
         ((16384, 4096), [128] * 128)]


@pytest.mark.parametrize("q_dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2])
@pytest.mark.parametrize("shape,sizes", CASES, ids=lambda c: str(c)[:40])
def test_kernel_matches_reference(shape, sizes, q_dtype):
    rng = np.random.default_rng(shape[0] + len(sizes))
    x = jnp.asarray((rng.standard_normal(shape) * 5).astype(np.float32)).astype(jnp.bfloat16)
    q = eqq.BlockScaleQuantizer(q_dtype, eqq.QuantizeLayout.ROWWISE)
    gs = jnp.asarray(sizes, jnp.int32)
    with jax.default_device(jax.devices("cpu")[0]):
        t = eqq.grouped_quantize(x, gs, q, check=False).rowwise
        data, scales = t.data, mxfp8.byte_view(t.scale_inv)
        want = grouped.grouped_mxfp8_rows_bf16(data, scales, gs, rows_per_unit=1)
    call = jax.ffi.ffi_call("eqx_quant_grouped_mxfp8_dequantize_cuda",
                            jax.ShapeDtypeStruct(shape, jnp.bfloat16))
    with jax.default_device(CUDA):
        got = call(*(jax.device_put(a, CUDA) for a in (data, scales, gs)),
                   rows_per_unit=np.int64(1))
    assert_same_bytes(np.asarray(got), np.asarray(want), f"{shape} {len(sizes)} groups")
