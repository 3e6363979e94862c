"""The FP8 block-scaling CUDA kernel (`eqx_quant_fp8_block_quantize_cuda`) against the CPU
kernel, byte for byte: every output (rowwise / colwise data, float32 scale_inv) for 1x128 and
128x128, both FP8 formats, f32 / f16 / bf16 inputs, power-of-two and plain scales, partial
tiles, several examples (n_batch) and special values.

The op still runs the pure-JAX reference on a GPU (`_ops/fp8_block_quantize.py`,
kernel_platforms): these tests call the FFI target directly, and once they pass on the H200
the op takes the kernel there."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from tests.support.bytes import assert_same_bytes
from tests.support.cuda import CUDA, requires_cuda

pytestmark = requires_cuda("fp8_block_quantize")

SHAPES = [((256, 512), 1), ((130, 300), 1), ((3, 5), 1), ((1000, 4096), 1), ((2, 3, 200), 2),
          ((4, 129, 257), 1)]


def _cuda_call(x, q, fa, n_batch=0):
    s = x.shape[n_batch:]
    r, c = int(np.prod(s[:fa])), int(np.prod(s[fa:]))
    batch = x.shape[:n_batch]
    grid = lambda a, b: (a if not q.use_2d else -(-a // 128), -(-b // 128))  # noqa: E731
    out = (
        jax.ShapeDtypeStruct(x.shape, jnp.dtype(q.q_dtype)),
        jax.ShapeDtypeStruct(batch + grid(r, c), jnp.float32),
        jax.ShapeDtypeStruct(batch + s[fa:] + s[:fa], jnp.dtype(q.q_dtype)),
        jax.ShapeDtypeStruct(batch + grid(c, r), jnp.float32),
    )
    call = jax.ffi.ffi_call("eqx_quant_fp8_block_quantize_cuda", out)
    with jax.default_device(CUDA):
        return call(jax.device_put(x, CUDA), n_batch=np.int64(n_batch),
                    flatten_axis=np.int64(fa), rowwise=True, colwise=True, use_2d=q.use_2d,
                    power_2_scales=q.power_2_scales, amax_epsilon=np.float32(q.amax_epsilon))


def _expected(x, q, fa):
    with jax.default_device(jax.devices("cpu")[0]):
        t = eqq.quantize(jnp.asarray(x), q, fa)
        return t.rowwise.data, t.rowwise.scale_inv, t.colwise.data, t.colwise.scale_inv


def _input(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * 4
    x.reshape(-1)[::7] *= 300
    return x.astype(dtype)


@pytest.mark.parametrize("block", ["1x128", "128x128"])
@pytest.mark.parametrize("q_dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("shape,fa", SHAPES, ids=str)
def test_kernel_matches_cpu_kernel(shape, fa, dtype, q_dtype, block):
    q = eqq.Float8BlockQuantizer(q_dtype=q_dtype, block=block, power_2_scales=fa == 1)
    x = _input(shape, dtype, seed=shape[0])
    got = _cuda_call(x, q, fa)
    for name, a, b in zip(("row", "row_scale", "col", "col_scale"), got, _expected(x, q, fa)):
        assert_same_bytes(np.asarray(a), np.asarray(b), f"{shape} {dtype} {block} {name}")


def test_batched_examples_and_special_values():
    q = eqq.Float8BlockQuantizer(amax_epsilon=1e-3)
    x = _input((3, 256, 384), jnp.bfloat16, seed=3).astype(np.float32)
    x[0, :, :128] = 0
    x[1, 5, 7] = np.nan
    x[1, 9, 200] = np.inf
    x[2, :, 128:256] = 1e-38
    x = x.astype(jnp.bfloat16)
    got = _cuda_call(x, q, 1, n_batch=1)
    with jax.default_device(jax.devices("cpu")[0]):
        t = jax.vmap(lambda e: eqq.quantize(e, q))(jnp.asarray(x))
    for name, a, b in zip(("row", "row_scale", "col", "col_scale"), got,
                          (t.rowwise.data, t.rowwise.scale_inv, t.colwise.data,
                           t.colwise.scale_inv)):
        assert_same_bytes(np.asarray(a), np.asarray(b), name)
