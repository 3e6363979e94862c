"""The grouped FP8 block-scaled GEMM kernel (`eqx_quant_grouped_fp8_block_gemm_cuda`:
CUTLASS's Hopper pointer-array grouped GEMM with blockwise scaling, its group arguments and
scale layouts filled on the device) against the float64 oracle and the op's reference, within
the FP8 tensor-core bound (Hopper's FP8 MMA sums each 128-long K block with fewer bits than
float32 before the scales are applied: 2^-10 of the sum of absolute products, as in
tests/cuda/test_cuda_fp8_block_gemm.py): 8 ragged groups with empty ones at a realistic size,
small odd shapes (K not a multiple of 128, N not a multiple of 128, one row), sizes past M and
negative sizes (clamped), no rows in any group; both B scale granularities, bfloat16 and
float32 out. Rows of no group are exactly 0, whatever they hold.

`grouped_gemm` on FP8 block operands (1x128 tokens, 1x128 or 128x128 experts) through the
kernel, forward and input gradient, against its float32 path within the same bound.

`impl="auto"` does not take the kernel until this test has passed on the H200
(`KERNEL_BY_DEFAULT` in eqx_quant/_ops/grouped_fp8_block_gemm.py), nor does `grouped_gemm`;
the tests ask for it with `impl="ffi"` (`forced_grouped_gemm(..., scaled_impl="ffi")`).
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant._gemm._grouped import forced_grouped_gemm
from eqx_quant._ops.grouped_fp8_block_gemm import grouped_fp8_block_gemm, kernel_runs_by_default
from tests.gemm import test_grouped_gemm_fp8_block as wiring
from tests.gemm.test_grouped_fp8_block_gemm_op import clamp, operands, oracle
from tests.support.cuda import CUDA, requires_cuda

pytestmark = requires_cuda("grouped_fp8_block_gemm")

CUDA_TARGET = "eqx_quant_grouped_fp8_block_gemm_cuda"
FP8_MMA_BOUND = 2.0**-10  # relative to the sum of |scaled products|, as for cuBLASLt's FP8

CASES = {
    # (M, K, N, sizes)
    "moe_8": (4096, 1024, 2048, [700, 0, 1311, 129, 1, 513, 1000, 300]),  # 142 rows past
    "odd": (37, 144, 24, [5, 0, 17, 3]),
    "one_row": (1, 16, 8, [1]),
    "k_partial_n_partial": (300, 208, 136, [0, 0, 300]),
    "past_m": (300, 256, 64, [200, 200, 7]),  # clamped to [200, 100, 0]
    "negative": (128, 384, 32, [-3, 64, 0, 64]),
    "no_rows": (64, 128, 16, [0, 0, 0]),
}


def _on_gpu(args):
    return [jax.device_put(jnp.asarray(v), CUDA) for v in args]


def _run(args, out_dtype, impl="ffi"):
    f = jax.jit(lambda *v: grouped_fp8_block_gemm(*v, out_dtype=out_dtype, impl=impl))
    return f(*_on_gpu(args))


def _assert_fp8_bound(y, args, what):
    exact, magnitude = oracle(*args)
    kb = args[1].shape[1]
    bound = (FP8_MMA_BOUND + (kb + 4) * 2.0**-24) * magnitude
    if y.dtype == jnp.bfloat16:
        bound += 2.0**-8 * (np.abs(exact) + bound)
    out = np.asarray(y.astype(jnp.float32), np.float64)
    err = np.abs(out - exact)
    worst = float(np.max(err / (bound + 1e-300))) if err.size else 0.0
    assert (err <= bound).all(), f"{what}: {worst:.3f} x the FP8 tensor-core bound"
    return exact, bound


@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32], ids=str)
@pytest.mark.parametrize("b_tiles", [True, False], ids=["tiles", "rows"])
@pytest.mark.parametrize("case", CASES)
def test_kernel_within_the_fp8_mma_bound(case, b_tiles, out_dtype):
    m, k, n, sizes = CASES[case]
    args = operands(m, k, n, sizes, b_tiles, seed=m + k + n)
    f = jax.jit(lambda *v: grouped_fp8_block_gemm(*v, out_dtype=out_dtype, impl="ffi"))
    gpu_args = _on_gpu(args)
    assert "eqx_quant_grouped_fp8_block_gemm_cuda" in f.lower(*gpu_args).compile().as_text()
    y = f(*gpu_args)
    assert y.shape == (m, n) and y.dtype == out_dtype
    _, bound = _assert_fp8_bound(y, args, case)
    used = sum(clamp(sizes, m))
    np.testing.assert_array_equal(np.asarray(y[used:].astype(jnp.float32)), 0.0)
    # The reference (the op's other lowering, on the GPU) within the same distance.
    ref = _run(args, out_dtype, impl="reference")
    diff = np.abs(np.asarray(y.astype(jnp.float32), np.float64) -
                  np.asarray(ref.astype(jnp.float32), np.float64))
    assert (diff <= 2 * bound).all(), f"{case}: kernel vs reference"
    # The same bytes on a second call (no state carried between calls).
    np.testing.assert_array_equal(np.asarray(f(*gpu_args)), np.asarray(y))


def test_rows_of_no_group_are_zero_whatever_they_hold():
    m, k, n, sizes = 256, 256, 64, [100, 0, 60]
    a, a_scale, b, b_scale, s = operands(m, k, n, sizes, True, seed=9)
    a, a_scale = a.copy(), a_scale.copy()
    a[160:] = np.uint8(0x7F).view(ml_dtypes.float8_e4m3fn)  # NaN payloads past the groups
    a_scale[160:] = np.inf
    y = np.asarray(_run((a, a_scale, b, b_scale, s), jnp.float32))
    np.testing.assert_array_equal(y[160:], 0.0)
    assert np.isfinite(y[:160]).all()


def test_auto_does_not_take_the_kernel_yet():
    args = _on_gpu(operands(128, 128, 16, [64, 64], True))
    f = jax.jit(lambda *v: grouped_fp8_block_gemm(*v))
    assert "eqx_quant_grouped_fp8_block_gemm_cuda" not in f.lower(*args).compile().as_text()


GEMM_SIZES = [300, 0, 611, 129, 1, 513, 300, 100]  # 94 rows past the sum


@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32], ids=str)
@pytest.mark.parametrize("block", ["1x128", "128x128"])
def test_grouped_gemm_through_the_kernel(block, out_dtype):
    """`grouped_gemm`'s forward and input-gradient products with the kernel forced on: its
    custom call in the compiled program, within the FP8 tensor-core bound of the float64
    product of the dequantized operands, and of the float32 path (what `grouped_gemm` runs
    until `KERNEL_BY_DEFAULT`)."""
    m, k, n = 2048, 1024, 512
    gx, gdy, wk = jax.device_put(
        wiring.operands(block, m=m, k=k, n=n, sizes=GEMM_SIZES, seed=4), CUDA)
    dq = wiring.dequantized_f64
    a, c = dq(gx.rowwise), dq(gdy.rowwise)
    w_col, w_row = dq(wk.colwise), dq(wk.rowwise)  # (G, K, N) both
    for what, lhs, contracting, values, w in (("forward", gx, 0, a, w_col),
                                              ("dgrad", gdy, 1, c, np.swapaxes(w_row, 1, 2))):
        def fn(lhs, wk, impl, contracting=contracting):
            return forced_grouped_gemm(lhs, wk, contracting, out_dtype=out_dtype,
                                       scaled_impl=impl)

        kernel = jax.jit(lambda lhs, wk, fn=fn: fn(lhs, wk, "ffi"))
        assert CUDA_TARGET in kernel.lower(lhs, wk).compile().as_text(), what
        y = kernel(lhs, wk)
        y_float = jax.jit(lambda lhs, wk, fn=fn: fn(lhs, wk, None))(lhs, wk)
        # Unforced, grouped_gemm takes the kernel exactly when it runs by default.
        default = jax.jit(lambda lhs, wk, c=contracting: eqq.grouped_gemm(lhs, wk, c))
        taken = CUDA_TARGET in default.lower(lhs, wk).compile().as_text()
        assert taken == kernel_runs_by_default("cuda"), what
        out = np.asarray(y.astype(jnp.float32), np.float64)
        ref = np.asarray(y_float.astype(jnp.float32), np.float64)
        exact, bound = np.zeros(out.shape), np.zeros(out.shape)
        for g, rows in wiring.group_rows(GEMM_SIZES, m):
            exact[rows] = values[rows] @ w[g]
            magnitude = np.abs(values[rows]) @ np.abs(w[g])
            bound[rows] = (FP8_MMA_BOUND + (values.shape[1] + 6) * 2.0**-24) * magnitude
        if out_dtype == jnp.bfloat16:
            bound += 2.0**-8 * (np.abs(exact) + bound)
        err = np.abs(out - exact)
        worst = float(np.max(err / (bound + 1e-300)))
        assert (err <= bound).all(), f"{block} {what}: {worst:.3f}x the FP8 bound"
        assert (np.abs(out - ref) <= 2 * bound).all(), f"{block} {what}: kernel vs float path"
        np.testing.assert_array_equal(out[sum(GEMM_SIZES):], 0.0)
