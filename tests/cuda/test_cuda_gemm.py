"""The GEMMs on the GPU: per-tensor FP8 multiplies FP8 operands (cuBLASLt's FP8 GEMM, XLA's
custom call `__cublas$lt$matmul$f8`, or a Triton GEMM fusion whose dot takes the FP8 bytes:
XLA's autotuner picks), never widened copies, and every mode gives the product of the oracle's
values.

Runs only where a CUDA device and eqx_quant's CUDA library are present (otherwise skipped
with a reason that mentions CUDA, which `EQX_QUANT_REQUIRE_CUDA=1` turns into a failure).
cuBLASLt may accumulate FP8 products with fewer than float32's bits (Hopper's "fast
accumulation"), so the FP8 bound here is looser than the CPU tests' float32 bound.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from tests.support.cases import random_input
from tests.support.cuda import CUDA, requires_cuda
from tests.support.gemm import assert_product, oracle_values

pytestmark = requires_cuda()


def _on_gpu(*arrays):
    return [jax.device_put(a, CUDA) for a in arrays]


def _dot_operand_types(hlo: str) -> list[tuple[str, str]]:
    """The element types of the two operands of every dot in a compiled module's text. The
    text may name the operands only (`dot(%p0, %p1)`), so each computation's instructions
    are read first: `%name = type[dims]{layout} opcode(...)`."""
    found = []
    for body in re.split(r"\n\s*\n", hlo):  # computations are separated by blank lines
        types = dict(re.findall(r"%([\w.\-]+) = (\w+)\[", body))
        for lhs, rhs in re.findall(
            r"\bdot\((?:\w+\[[^\]]*\]\S* )?%([\w.\-]+), (?:\w+\[[^\]]*\]\S* )?%([\w.\-]+)\)",
            body,
        ):
            found.append((types.get(lhs, "?"), types.get(rhs, "?")))
    return found


def assert_fp8_gemm(hlo: str):
    """The module multiplies FP8 bytes: cuBLASLt's FP8 GEMM, or dots whose operands are all
    FP8 (a Triton GEMM fusion), and no dot of widened copies."""
    dots = _dot_operand_types(hlo)
    seen = [line.strip()[:200] for line in hlo.splitlines()
            if " dot(" in line or "custom_call_target=" in line]
    if "__cublas$lt$matmul$f8" in hlo:
        wide = [d for d in dots if not all(t.startswith("f8") for t in d)]
        assert not wide, ("a dot of widened operands beside cuBLASLt FP8", wide, seen)
        return
    assert dots, ("neither cuBLASLt FP8 nor a dot in the compiled module", seen)
    assert all(a.startswith("f8") and b.startswith("f8") for a, b in dots), (
        "XLA widened the FP8 operands before the GEMM", dots, seen)


@pytest.mark.parametrize("w_dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2])
def test_fp8_gemm_multiplies_fp8_operands(w_dtype):
    x, w = _on_gpu(
        jnp.asarray(random_input((256, 512), jnp.bfloat16, seed=1)),
        jnp.asarray(random_input((512, 384), jnp.bfloat16, seed=2)),
    )
    f = jax.jit(lambda xt, wt: eqq.gemm(xt, wt, out_dtype=jnp.float32))
    xt = eqq.quantize(x, eqq.CurrentScaleQuantizer())
    wt = eqq.quantize(w, eqq.CurrentScaleQuantizer(q_dtype=w_dtype))
    hlo = f.lower(xt, wt).compile().as_text()
    assert_fp8_gemm(hlo)
    y = np.asarray(f(xt, wt), np.float64)
    a, b = oracle_values(xt.rowwise), oracle_values(wt.colwise)
    ref = a @ b
    bound = (np.abs(a) @ np.abs(b)) * 2.0**-10
    assert np.all(np.abs(y - ref) <= bound), float(np.abs(y - ref).max())


@pytest.mark.parametrize("make", [eqq.BlockScaleQuantizer, eqq.NVFP4Quantizer])
def test_block_gemm_on_gpu(make):
    q = make()
    x, w = _on_gpu(
        jnp.asarray(random_input((128, 256), jnp.bfloat16, seed=3)),
        jnp.asarray(random_input((256, 64), jnp.bfloat16, seed=4)),
    )
    xt, wt = eqq.quantize(x, q), eqq.quantize(w, q)
    y = jax.jit(lambda xt, wt: eqq.gemm(xt, wt, out_dtype=jnp.float32))(xt, wt)
    # HIGHEST precision: float32 sums on the GPU too (no TF32)
    assert_product(y, oracle_values(xt.rowwise), oracle_values(wt.colwise), ((1,), (0,)))


def test_dense_grad_on_gpu():
    qs = eqq.DenseQuantizers(
        eqq.CurrentScaleQuantizer(), eqq.CurrentScaleQuantizer(),
        eqq.CurrentScaleQuantizer(q_dtype=jnp.float8_e5m2),
    )
    x, w, dy = _on_gpu(
        jnp.asarray(random_input((256, 512), jnp.bfloat16, seed=5)),
        jnp.asarray(random_input((512, 128), jnp.bfloat16, seed=6, scale=0.1)),
        jnp.asarray(random_input((256, 128), jnp.bfloat16, seed=7, scale=1e-2)),
    )
    def step(x, w, dy):
        return jax.vjp(lambda x, w: eqq.dense(x, w, quantizers=qs), x, w)[1](dy)

    dx, dw = jax.jit(step)(x, w, dy)
    cg = eqq.quantize(dy, qs.grad)
    cx, cw = eqq.quantize(x, qs.x), eqq.quantize(w, qs.kernel)
    for got, (a, b, dims) in (
        (dx, (oracle_values(cg.rowwise), oracle_values(cw.rowwise), ((1,), (1,)))),
        (dw, (oracle_values(cx.colwise), oracle_values(cg.colwise), ((0,), (0,)))),
    ):
        ref = np.tensordot(a, b, dims)
        bound = np.tensordot(np.abs(a), np.abs(b), dims) * 2.0**-10 + np.abs(ref) * 2.0**-8
        err = np.abs(np.asarray(got.astype(jnp.float32), np.float64) - ref)
        assert np.all(err <= bound), float(err.max())


@pytest.mark.parametrize("make", [eqq.CurrentScaleQuantizer, eqq.BlockScaleQuantizer])
def test_grouped_gemm_on_gpu(make):
    # K and N fit the CUTLASS grouped GEMM (tests/cuda/test_cuda_grouped_gemm.py has the
    # kernel's own cases); the values must be the oracle's.
    q = make()
    sizes = jnp.asarray([40, 0, 75, 33], jnp.int32)
    x, w = _on_gpu(
        jnp.asarray(random_input((160, 64), jnp.bfloat16, seed=8)),
        jnp.asarray(random_input((4, 64, 32), jnp.bfloat16, seed=9, scale=0.2)),
    )
    gt = eqq.grouped_quantize(x, sizes, q, check=False)
    wt = jax.vmap(lambda wi: eqq.quantize(wi, q))(w)
    y = np.asarray(jax.jit(lambda gt, wt: eqq.grouped_gemm(gt, wt, out_dtype=jnp.float32))(gt, wt))
    start = 0
    for g, count in enumerate([40, 0, 75, 33]):
        if count:
            a = oracle_values(gt.rowwise.group_part(g))
            b = oracle_values(jax.tree.map(lambda v: v[g], wt.colwise))
            assert_product(jnp.asarray(y[start : start + count]), a, b, ((1,), (0,)), f"g={g}")
        start += count
    np.testing.assert_array_equal(y[start:], 0.0)
