"""The dense MXFP8 dequantize CUDA kernel (`eqx_quant_mxfp8_dequantize_cuda`) against the
op's pure-JAX reference on the CPU, byte for byte: rowwise and colwise views, both FP8
formats, bfloat16 and float32 values, partial blocks, odd sizes (the kernel's element-wise
tail), NaN payloads, NaN and tiny scales (subnormal products); and `dequantize` / `gemm` of
MXFP8 tensors on a GPU, which run it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant._ops import Mxfp8DequantizeParams, mxfp8_dequantize_op
from tests.support.bytes import assert_same_bytes
from tests.support.cuda import CUDA, requires_cuda

pytestmark = requires_cuda("mxfp8_dequantize")

VIEWS = [(256, 512, 1), (3, 100, 7), (1, 33, 1), (8, 64, 96), (16384, 4096, 1), (5, 40, 1),
         (2, 70, 48), (1, 4096, 2048)]


def _operands(view, q_dtype, seed):
    a, length, b = view
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=view, dtype=np.uint8)
    scales = rng.integers(100, 150, size=(a, -(-length // 32), b), dtype=np.uint8)
    flat = scales.reshape(-1)
    flat[:: 97] = 0xFF  # NaN scales
    flat[1:: 89] = 0  # 2^-127: subnormal products
    flat[2:: 83] = 3
    data_q = jax.lax.bitcast_convert_type(jnp.asarray(data), q_dtype)
    return data_q, jnp.asarray(scales)


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("q_dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2])
@pytest.mark.parametrize("view", VIEWS, ids=str)
def test_kernel_matches_reference(view, q_dtype, out_dtype):
    data, scales = _operands(view, q_dtype, seed=sum(view))
    params = Mxfp8DequantizeParams(out_dtype, "reference")
    with jax.default_device(jax.devices("cpu")[0]):
        want = jax.jit(lambda d, s: mxfp8_dequantize_op.bind(d, s, params=params)[0])(
            *jax.device_put((data, scales), jax.devices("cpu")[0]))
    call = jax.ffi.ffi_call("eqx_quant_mxfp8_dequantize_cuda",
                            jax.ShapeDtypeStruct(view, jnp.dtype(out_dtype)))
    got = jax.jit(call)(jax.device_put(data, CUDA), jax.device_put(scales, CUDA))
    assert_same_bytes(np.asarray(got), np.asarray(want), f"{view} {q_dtype} {out_dtype}")


@pytest.mark.parametrize("layout", [eqq.QuantizeLayout.ROWWISE, eqq.QuantizeLayout.COLWISE])
def test_dequantize_on_the_gpu_runs_the_kernel(layout):
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.standard_normal((2, 96, 160)).astype(np.float32)).astype(jnp.bfloat16)
    q = eqq.BlockScaleQuantizer(q_layout=layout)
    with jax.default_device(jax.devices("cpu")[0]):
        want = eqq.quantize(x, q, flatten_axis=2).dequantize()
    t = eqq.quantize(jax.device_put(x, CUDA), q, flatten_axis=2)
    f = jax.jit(lambda t: t.dequantize())
    assert "eqx_quant_mxfp8_dequantize_cuda" in f.lower(t).compile().as_text()
    assert_same_bytes(np.asarray(f(t)), np.asarray(want), str(layout))
