"""The FP8 block-scaled GEMM op (`eqx_quant_fp8_block_gemm`) on its reference path (the CPU):
A (M, K) 1x128-scaled times B (N, K) with 128x128 tiles or 1x128 blocks, fed with the
quantized parts' payloads and their scales in the op's layout, within the float32
accumulation bound of the float64 product; rows of A sharded over 8 devices give the same
bytes. The CUDA kernel has its own test (tests/cuda/test_cuda_fp8_block_gemm.py)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from eqx_quant._ops.fp8_block_gemm import Fp8BlockGemmParams, fp8_block_gemm_op, gemm_scales
from tests.support.bytes import f32_bits_equal
from tests.support.cases import random_input


def _operands(m, k, n, b_tiles, seed=0):
    x = jnp.asarray(random_input((m, k), jnp.bfloat16, seed=seed) * 3)
    w = jnp.asarray(random_input((n, k), jnp.bfloat16, seed=seed + 1))
    a = eqq.quantize(x, eqq.Float8BlockQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)).rowwise
    block = "128x128" if b_tiles else "1x128"
    b = eqq.quantize(w, eqq.Float8BlockQuantizer(block=block,
                                                 q_layout=eqq.QuantizeLayout.ROWWISE)).rowwise
    return a, b


def _run(a, b, b_tiles, impl="auto"):
    params = Fp8BlockGemmParams(b_tiles=b_tiles, impl=impl)
    (out,) = fp8_block_gemm_op.bind(a.data, gemm_scales(a), b.data, gemm_scales(b),
                                    params=params)
    return out


@pytest.mark.parametrize("b_tiles", [True, False])
@pytest.mark.parametrize("shape", [(256, 384, 128), (130, 200, 72), (64, 128, 256)])
def test_within_the_float32_bound(shape, b_tiles):
    m, k, n = shape
    a, b = _operands(m, k, n, b_tiles, seed=m)
    out = np.asarray(jax.jit(lambda a, b: _run(a, b, b_tiles))(a, b), np.float64)
    da = np.asarray(a.dequantize(jnp.float32), np.float64)
    db = np.asarray(b.dequantize(jnp.float32), np.float64)
    exact = da @ db.T
    bound = k * 2.0**-23 * (np.abs(da) @ np.abs(db).T) + 1e-30
    assert out.shape == (m, n) and (np.abs(out - exact) <= bound).all()


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_rows_sharded_equal_one_device():
    a, b = _operands(256, 256, 128, True, seed=3)
    f = jax.jit(lambda a, b: _run(a, b, True))
    expected = f(a, b)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    with jax.set_mesh(mesh):
        got = f(_rows_sharded(a, mesh), b)
    f32_bits_equal(got, expected, "rows over 8 devices")


def _rows_sharded(part, mesh):
    """The part with its data's rows and its scales' matching dim sharded over "data"."""
    data = jax.device_put(part.data, NamedSharding(mesh, P("data", None)))
    scale = jax.device_put(part.scale_inv, NamedSharding(mesh, P("data", None)))
    return eqx.tree_at(lambda p: (p.data, p.scale_inv), part, (data, scale))
