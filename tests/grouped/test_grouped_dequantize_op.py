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


def test_grouped_gemm_multiplies_the_ops_rows():
    """`grouped_gemm` of MXFP8 tokens takes their bfloat16 rows from this op (the CUDA kernel
    on a GPU), and gives the product of the grouped tensor's dequantized values."""
    x = jnp.asarray(random_input((96, 64), jnp.bfloat16, seed=4))
    w = jnp.asarray(random_input((3, 64, 32), jnp.bfloat16, seed=5))
    gs = jnp.asarray([40, 0, 50], jnp.int32)
    q = eqq.BlockScaleQuantizer()
    gx = eqq.grouped_quantize(x, gs, q, check=False)
    gw = jax.vmap(lambda e: eqq.quantize(e, q))(w)
    f = jax.jit(lambda a, b: eqq.grouped_gemm(a, b, out_dtype=jnp.float32))
    assert "eqx_quant_grouped_mxfp8_dequantize" in str(jax.make_jaxpr(f)(gx, gw))
    dx = gx.rowwise.dequantize(jnp.bfloat16)
    dw = jax.vmap(lambda t: t.colwise.dequantize(jnp.bfloat16))(gw)
    want = jax.lax.ragged_dot(dx, dw, gs, preferred_element_type=jnp.float32)
    if jax.default_backend() == "cpu":  # the same XLA ragged_dot
        assert_same_bytes(f(gx, gw), want, "grouped MXFP8 product")
    else:  # the CUTLASS grouped GEMM: its own order of the float32 sums
        bound = 64 * 2.0**-23 * jax.lax.ragged_dot(
            jnp.abs(dx), jnp.abs(dw), gs, preferred_element_type=jnp.float32)
        assert bool(jnp.all(jnp.abs(f(gx, gw) - want) <= 2 * bound)), "grouped MXFP8 product"
