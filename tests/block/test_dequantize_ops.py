"""The dense MXFP8 and NVFP4 dequantize ops (`eqx_quant_mxfp8_dequantize`,
`eqx_quant_nvfp4_dequantize`: the exact bfloat16 operands of a GEMM on Hopper) on their
reference path: `dequantize` to bfloat16 / float32 goes through them, with the bytes of the
blocked reference functions they wrap, rowwise and colwise, N-D, vmapped and sharded; other
dtypes and RHT parts keep the plain path. The CUDA kernels have their own tests
(tests/cuda/test_cuda_{mxfp8,nvfp4}_dequantize.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from eqx_quant.reference import blocks_nd, mxfp8, nvfp4
from tests.support.bytes import assert_same_bytes
from tests.support.cases import random_input

X = jnp.asarray(random_input((2, 48, 80), jnp.bfloat16, seed=3))


def _jaxpr(fn, *args) -> str:
    return str(jax.make_jaxpr(fn)(*args))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
@pytest.mark.parametrize("layout", [eqq.QuantizeLayout.ROWWISE, eqq.QuantizeLayout.COLWISE])
def test_mxfp8_dequantize_through_the_op(layout, dtype):
    t = eqq.quantize(X, eqq.BlockScaleQuantizer(q_layout=layout), flatten_axis=2)
    part = t.rowwise if t.rowwise is not None else t.colwise
    f = jax.jit(lambda p: p.dequantize(dtype))
    assert ("eqx_quant_mxfp8_dequantize" in _jaxpr(f, part)) == (dtype != "float16")
    axis = 1 if part.is_colwise else 2  # colwise blocks run down axis fa - 1
    want = blocks_nd.mxfp8_dequantize(part.data, mxfp8.byte_view(part.scale_inv), axis, dtype)
    assert_same_bytes(f(part), want, f"{layout} {dtype}")
    stacked = jax.vmap(lambda x: eqq.quantize(x, eqq.BlockScaleQuantizer(q_layout=layout)))(X)
    got = jax.jit(jax.vmap(lambda t: t.dequantize(dtype)))(stacked)
    for i in range(2):
        one = eqq.quantize(X[i], eqq.BlockScaleQuantizer(q_layout=layout)).dequantize(dtype)
        assert_same_bytes(got[i], one, f"vmap {i}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_nvfp4_dequantize_through_the_op(dtype):
    t = eqq.quantize(X, eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.ROWWISE), flatten_axis=2)
    part = t.rowwise
    f = jax.jit(lambda p: p.dequantize(dtype))
    assert "eqx_quant_nvfp4_dequantize" in _jaxpr(f, part)
    want = blocks_nd.nvfp4_dequantize(nvfp4.e2m1_codes(part.data), mxfp8.byte_view(part.scale_inv),
                                      part.amax.reshape(()), dtype, None)
    assert_same_bytes(f(part), want, dtype)
    xs = jnp.stack([X[0], X[1] * 40])  # two examples, two global scales
    q = eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    got = jax.jit(jax.vmap(lambda x: eqq.quantize(x, q).dequantize(dtype)))(xs)
    for i in range(2):
        assert_same_bytes(got[i], eqq.quantize(xs[i], q).dequantize(dtype), f"vmap {i}")


def test_nvfp4_rht_parts_keep_the_plain_path():
    t = eqq.quantize(X[0], eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.COLWISE, use_rht=True))
    f = jax.jit(lambda p: p.dequantize(jnp.bfloat16))
    assert "eqx_quant_nvfp4_dequantize" not in _jaxpr(f, t.colwise)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("quantizer", [eqq.BlockScaleQuantizer(), eqq.NVFP4Quantizer()],
                         ids=["mxfp8", "nvfp4"])
def test_sharded_rows_equal_one_device(quantizer):
    x = jnp.asarray(random_input((256, 64), jnp.bfloat16, seed=9))
    f = jax.jit(lambda x: eqq.quantize(x, quantizer).dequantize(jnp.bfloat16))
    want = f(x)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Explicit,))
    with jax.set_mesh(mesh):
        got = f(jax.device_put(x, NamedSharding(mesh, P("data"))))
    assert_same_bytes(np.asarray(got), np.asarray(want), "rows over 8 devices")
