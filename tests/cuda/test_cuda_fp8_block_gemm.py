"""The FP8 block-scaled GEMM kernel (`eqx_quant_fp8_block_gemm_cuda`, CUTLASS's Hopper
blockwise-scaled FP8 GEMM) within the FP8 tensor-core bound of the float64 product of the
dequantized operands (`tests/cuda/test_cuda_gemm.py`'s: Hopper's FP8 MMA sums the products
of each 128-long K block with fewer bits than float32 before CUTLASS promotes them, measured
up to 1.2x the float32 accumulation bound): 128x128-tiled and 1x128-blocked B, partial K
blocks, M not a multiple of the tile, float32 and bfloat16 out; and `eqx_quant.gemm` of E4M3 FP8
block operands on a GPU, which runs
it (every lhs x rhs block combination, the weight gradient's colwise x colwise included)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant._ops.fp8_block_gemm import Fp8BlockGemmParams, fp8_block_gemm_op, gemm_scales
from tests.support.cuda import CUDA, requires_cuda

pytestmark = requires_cuda("fp8_block_gemm")

FP8_MMA_BOUND = 2.0**-10  # relative to |a| @ |b|, as for cuBLASLt's FP8 GEMM


def _parts(m, k, n, b_tiles, seed):
    rng = np.random.default_rng(seed)
    x = jnp.asarray((rng.standard_normal((m, k)) * 3).astype(np.float32)).astype(jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((n, k)).astype(np.float32)).astype(jnp.bfloat16)
    with jax.default_device(jax.devices("cpu")[0]):
        row = eqq.QuantizeLayout.ROWWISE
        a = eqq.quantize(x, eqq.Float8BlockQuantizer(q_layout=row)).rowwise
        block = "128x128" if b_tiles else "1x128"
        b = eqq.quantize(w, eqq.Float8BlockQuantizer(block=block, q_layout=row)).rowwise
    return a, b


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("b_tiles", [True, False])
@pytest.mark.parametrize("shape", [(256, 512, 256), (200, 384, 128), (4096, 4096, 4096),
                                   (1000, 1040, 520)])
def test_kernel_within_the_fp8_mma_bound(shape, b_tiles, out_dtype):
    m, k, n = shape
    a, b = _parts(m, k, n, b_tiles, seed=m + k)
    args = [jax.device_put(v, CUDA) for v in (a.data, gemm_scales(a), b.data, gemm_scales(b))]
    params = Fp8BlockGemmParams(b_tiles=b_tiles, impl="ffi", out_dtype=out_dtype)
    f = jax.jit(lambda *v: fp8_block_gemm_op.bind(*v, params=params)[0])
    y = f(*args)
    assert y.dtype == jnp.dtype(out_dtype)
    out = np.asarray(y.astype(jnp.float32), np.float64)
    da = np.asarray(a.dequantize(jnp.float32), np.float64)
    db = np.asarray(b.dequantize(jnp.float32), np.float64)
    exact = da @ db.T
    # bfloat16 out: one more rounding of the float32 result
    rounding = float(jnp.finfo(jnp.dtype(out_dtype)).eps) * np.abs(exact)
    bound = FP8_MMA_BOUND * (np.abs(da) @ np.abs(db).T) + rounding + 1e-30
    worst = float(np.max(np.abs(out - exact) / bound))
    assert worst <= 1.0, f"error {worst:.3f} x the bound"


@pytest.mark.parametrize("lhs_block,rhs_block", [("1x128", "128x128"), ("1x128", "1x128"),
                                                 ("128x128", "1x128"),
                                                 ("128x128", "128x128")])
def test_gemm_runs_the_kernel_within_the_bound(lhs_block, rhs_block):
    rng = np.random.default_rng(7)
    x = jnp.asarray(rng.standard_normal((384, 512)).astype(np.float32)).astype(jnp.bfloat16)
    w = jnp.asarray(rng.standard_normal((512, 256)).astype(np.float32)).astype(jnp.bfloat16)
    with jax.default_device(CUDA):
        tx = eqq.quantize(jax.device_put(x, CUDA), eqq.Float8BlockQuantizer(block=lhs_block))
        tw = eqq.quantize(jax.device_put(w, CUDA), eqq.Float8BlockQuantizer(block=rhs_block))
        f = jax.jit(lambda a, b: eqq.gemm(a, b, out_dtype=jnp.float32))
        hlo = f.lower(tx, tw).compile().as_text()
        y = np.asarray(f(tx, tw), np.float64)
        f16 = jax.jit(lambda a, b: eqq.gemm(a, b, out_dtype=jnp.bfloat16))
        y16 = np.asarray(f16(tx, tw).astype(jnp.float32), np.float64)
        da = np.asarray(tx.rowwise.dequantize(jnp.float32), np.float64)
        db = np.asarray(tw.colwise.dequantize(jnp.float32), np.float64)
    assert "eqx_quant_fp8_block_gemm_cuda" in hlo
    exact = da @ db
    bound = FP8_MMA_BOUND * (np.abs(da) @ np.abs(db)) + 1e-30
    worst = float(np.max(np.abs(y - exact) / bound))
    assert worst <= 1.0, f"{lhs_block} x {rhs_block}: {worst:.3f} x the bound"
    rounding = float(jnp.finfo(jnp.bfloat16).eps) * np.abs(exact)
    worst16 = float(np.max(np.abs(y16 - exact) / (bound + rounding)))
    assert worst16 <= 1.0, f"{lhs_block} x {rhs_block}, bfloat16 out: {worst16:.3f} x the bound"
