"""The dense NVFP4 dequantize CUDA kernel (`eqx_quant_nvfp4_dequantize_cuda`) against the
op's pure-JAX reference on the CPU, byte for byte: both output dtypes, several examples
(decode scales), odd sizes (packed codes across rows, the element-wise tail), subnormal
scale bytes; and `dequantize` / the exact values of `gemm` on a GPU, which run it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant._ops import Nvfp4DequantizeParams, nvfp4_dequantize_op
from tests.support.bytes import assert_same_bytes
from tests.support.cuda import CUDA, requires_cuda

pytestmark = requires_cuda("nvfp4_dequantize")

CASES = [((256, 512), 1), ((6, 100), 3), ((1, 17), 1), ((16384, 4096), 1), ((64, 48), 4),
         ((96, 64), 3), ((40, 32), 2)]


def _operands(shape, examples, seed):
    rows, cols = shape
    rng = np.random.default_rng(seed)
    codes = jnp.asarray(rng.integers(0, 16, size=shape, dtype=np.uint8))
    codes = jax.lax.bitcast_convert_type(codes.astype(jnp.uint4), jnp.float4_e2m1fn)
    scales = rng.integers(0, 0x7F, size=(rows, -(-cols // 16)), dtype=np.uint8)
    decode = rng.uniform(0.01, 3.0, size=(examples,)).astype(np.float32)
    decode[0] = 1.0
    return codes, jnp.asarray(scales), jnp.asarray(decode)


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("shape,examples", CASES, ids=str)
def test_kernel_matches_reference(shape, examples, out_dtype):
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        args = _operands(shape, examples, seed=shape[0] + examples)
        params = Nvfp4DequantizeParams(out_dtype, "reference")
        want = jax.jit(lambda *a: nvfp4_dequantize_op.bind(*a, params=params)[0])(*args)
    call = jax.ffi.ffi_call("eqx_quant_nvfp4_dequantize_cuda",
                            jax.ShapeDtypeStruct(shape, jnp.dtype(out_dtype)))
    got = jax.jit(call)(*jax.device_put(args, CUDA))
    assert_same_bytes(np.asarray(got), np.asarray(want), f"{shape} {examples} {out_dtype}")


def test_dequantize_on_the_gpu_runs_the_kernel():
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.standard_normal((96, 160)).astype(np.float32)).astype(jnp.bfloat16)
    q = eqq.NVFP4Quantizer()
    with jax.default_device(jax.devices("cpu")[0]):
        want = eqq.quantize(x, q).dequantize()
    t = eqq.quantize(jax.device_put(x, CUDA), q)
    f = jax.jit(lambda t: t.dequantize())
    assert "eqx_quant_nvfp4_dequantize_cuda" in f.lower(t).compile().as_text()
    assert_same_bytes(np.asarray(f(t)), np.asarray(want), "dequantize")
