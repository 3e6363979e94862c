"""The grouped MXFP8 dequantize op (`eqx_quant_grouped_mxfp8_dequantize`, the grouped GEMM's
bfloat16 operand on Hopper) on its reference path: the bytes of
`GroupedScaledTensor.rowwise.dequantize(jnp.bfloat16)` (an independent path through the
grouped tensor's scale gather), for ragged and empty groups, rows past the last group, partial
blocks and both FP8 formats. The CUDA kernel has its own test
(tests/cuda/test_cuda_grouped_dequantize.py)."""

import jax
import jax.numpy as jnp
import pytest

import eqx_quant as eqq
from eqx_quant._ops import GroupedDequantizeParams, grouped_mxfp8_dequantize_op
from eqx_quant.reference import mxfp8
from tests.support.bytes import assert_same_bytes
from tests.support.cases import random_input

CASES = [((256, 96), [100, 0, 156]), ((130, 40), [7, 60, 0, 63]), ((64, 64), [10, 20]),
         ((96, 32), [96])]


@pytest.mark.parametrize("q_dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2])
@pytest.mark.parametrize("shape,sizes", CASES, ids=str)
def test_reference_matches_the_grouped_tensor(shape, sizes, q_dtype):
    x = jnp.asarray(random_input(shape, jnp.bfloat16, seed=shape[0]) * 5)
    q = eqq.BlockScaleQuantizer(q_dtype, eqq.QuantizeLayout.ROWWISE)
    gs = jnp.asarray(sizes, jnp.int32)
    t = eqq.grouped_quantize(x, gs, q, check=False).rowwise
    params = GroupedDequantizeParams(rows_per_unit=1, impl="auto")
    f = jax.jit(lambda d, s, g: grouped_mxfp8_dequantize_op.bind(d, s, g, params=params)[0])
    got = f(t.data, mxfp8.byte_view(t.scale_inv), gs)
    assert_same_bytes(got, t.dequantize(jnp.bfloat16), f"{shape} {sizes}")
