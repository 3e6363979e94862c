"""The CUTLASS grouped GEMM (csrc/gemm) on the GPU: `grouped_gemm`, `grouped_wgrad` and
`grouped_dense` run the `eqx_quant_grouped_gemm_cuda` custom call when K and N fit it, and
give each group's product of the oracle's values (float64) within the float32-sum bound;
rows of no group and groups of no rows are exactly 0. Group sizes off every 16-row boundary
send the FP8 weight gradient through its repacked copies.

Runs only where a CUDA device and eqx_quant's CUDA library (built with CUTLASS) are present.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from tests.support.cases import random_input
from tests.support.cuda import CUDA, requires_cuda
from tests.support.gemm import assert_product, assert_same_sums, oracle_values

pytestmark = requires_cuda()

M, K, N = 512, 128, 64
SIZES = [100, 0, 203, 77]  # off 16-row boundaries, an empty group, 132 rows past the sum
ALIGNED = [96, 0, 208, 64]
G = len(SIZES)
ROWCOL = eqq.QuantizeLayout.ROWWISE_COLWISE

RECIPES = {
    "current": (
        lambda: eqq.CurrentScaleQuantizer(q_layout=ROWCOL),
        lambda: eqq.CurrentScaleQuantizer(q_layout=ROWCOL),
        lambda: eqq.CurrentScaleQuantizer(q_dtype=jnp.float8_e5m2, q_layout=ROWCOL),
    ),
    "mxfp8": (
        lambda: eqq.BlockScaleQuantizer(q_layout=ROWCOL),
        lambda: eqq.BlockScaleQuantizer(q_layout=ROWCOL),
        lambda: eqq.BlockScaleQuantizer(q_dtype=jnp.float8_e5m2, q_layout=ROWCOL),
    ),
    "nvfp4": (
        lambda: eqq.NVFP4Quantizer(q_layout=ROWCOL),
        lambda: eqq.NVFP4Quantizer(q_layout=ROWCOL, use_2d=True),
        lambda: eqq.NVFP4Quantizer(q_layout=ROWCOL),
    ),
}


def _on_gpu(x):
    return jax.device_put(x, CUDA)


def _custom_calls(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


def _expert(part, g):
    return jax.tree.map(lambda a: a[g], part)


@pytest.mark.parametrize("sizes", [SIZES, ALIGNED], ids=["ragged", "aligned"])
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("out_dtype", [jnp.bfloat16, jnp.float32], ids=str)
def test_cuda_grouped_gemm_forward(recipe, sizes, out_dtype):
    qx, qw, _ = (make() for make in RECIPES[recipe])
    x = _on_gpu(jnp.asarray(random_input((M, K), jnp.bfloat16, seed=1)))
    w = _on_gpu(jnp.asarray(random_input((G, K, N), jnp.bfloat16, seed=2, scale=0.2)))
    s = _on_gpu(jnp.asarray(sizes, jnp.int32))
    gt = eqq.grouped_quantize(x, s, qx, check=False)
    wt = jax.vmap(lambda wi: eqq.quantize(wi, qw))(w)
    f = lambda gt, wt: eqq.grouped_gemm(gt, wt, out_dtype=out_dtype)  # noqa: E731
    assert "eqx_quant_grouped_gemm_cuda" in _custom_calls(f, gt, wt)
    y = jax.jit(f)(gt, wt)
    start = 0
    for g, count in enumerate(sizes):
        if count:
            a = oracle_values(gt.rowwise.group_part(g))
            b = oracle_values(_expert(wt.colwise, g))
            assert_product(y[start:start + count], a, b, ((1,), (0,)), f"{recipe} g={g}")
        start += count
    np.testing.assert_array_equal(np.asarray(y[start:].astype(jnp.float32)), 0.0)


@pytest.mark.parametrize("sizes", [SIZES, ALIGNED], ids=["ragged", "aligned"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_cuda_grouped_wgrad(recipe, sizes):
    qx, _, qg = (make() for make in RECIPES[recipe])
    x = _on_gpu(jnp.asarray(random_input((M, K), jnp.bfloat16, seed=3)))
    dy = _on_gpu(jnp.asarray(random_input((M, N), jnp.bfloat16, seed=4)))
    s = _on_gpu(jnp.asarray(sizes, jnp.int32))
    gx = eqq.grouped_quantize(x, s, qx, check=False)
    gd = eqq.grouped_quantize(dy, s, qg, check=False)
    f = lambda gx, gd: eqq.grouped_wgrad(gx, gd, out_dtype=jnp.float32, check=False)  # noqa: E731
    assert "eqx_quant_grouped_gemm_cuda" in _custom_calls(f, gx, gd)
    out = jax.jit(f)(gx, gd)
    assert out.shape == (G, K, N)
    for g, count in enumerate(sizes):
        if count:
            part = (lambda t: t.colwise if t.colwise is not None else t.rowwise)
            a = oracle_values(part(gx).group_part(g))
            c = oracle_values(part(gd).group_part(g))
            assert_product(out[g], a, c, ((0,), (0,)), f"{recipe} g={g}")
        else:
            np.testing.assert_array_equal(np.asarray(out[g]), 0.0)


@pytest.mark.parametrize("recipe", RECIPES)
def test_cuda_grouped_dense_forward_and_backward(recipe):
    # The whole layer (forward, input and weight gradients on the kernel) near the bf16
    # layer's values: within the formats' quantization error, never garbage.
    qs = eqq.DenseQuantizers(*(make() for make in RECIPES[recipe]))
    x = _on_gpu(jnp.asarray(random_input((M, K), jnp.bfloat16, seed=5)))
    w = _on_gpu(jnp.asarray(random_input((G, K, N), jnp.bfloat16, seed=6, scale=0.2)))
    s = _on_gpu(jnp.asarray(SIZES, jnp.int32))
    c = _on_gpu(jnp.asarray(random_input((M, N), jnp.float32, seed=9)))

    def loss(x, w, quantized):
        if quantized:
            y = eqq.grouped_dense(x, w, s, quantizers=qs, check=False)
        else:
            y = jax.lax.ragged_dot(x, w, s, preferred_element_type=jnp.float32)
        return jnp.sum(y.astype(jnp.float32) * c)

    step = lambda q: jax.jit(jax.grad(lambda x, w: loss(x, w, q), argnums=(0, 1)))  # noqa: E731
    assert "eqx_quant_grouped_gemm_cuda" in _custom_calls(
        jax.grad(lambda x, w: loss(x, w, True), argnums=(0, 1)), x, w)
    got, want = step(True)(x, w), step(False)(x, w)
    tol = {"current": 0.08, "mxfp8": 0.08, "nvfp4": 0.4}[recipe]
    for g, r in zip(got, want):
        g, r = (np.asarray(v.astype(jnp.float32), np.float64) for v in (g, r))
        assert np.all(np.isfinite(g))
        assert np.abs(g - r).max() <= tol * np.abs(r).max(), (recipe, np.abs(g - r).max())


def test_cuda_grouped_gemm_vmap_folds():
    qx, qw, _ = (make() for make in RECIPES["current"])
    x = jnp.asarray(random_input((2, M, K), jnp.bfloat16, seed=7))
    w = _on_gpu(jnp.asarray(random_input((G, K, N), jnp.bfloat16, seed=8, scale=0.2)))
    sizes = jnp.asarray([SIZES, SIZES[::-1]], jnp.int32)
    wt = jax.vmap(lambda wi: eqq.quantize(wi, qw))(w)

    def one(xi, si):
        return eqq.grouped_gemm(eqq.grouped_quantize(xi, si, qx, check=False), wt,
                                out_dtype=jnp.float32)

    loop = np.stack([np.asarray(one(_on_gpu(x[i]), _on_gpu(sizes[i]))) for i in range(2)])
    assert_same_sums(jax.jit(jax.vmap(one))(_on_gpu(x), _on_gpu(sizes)), loop, "vmap")


@pytest.mark.parametrize("tile,fast", [((128, 128), False), ((128, 128), True),
                                       ((256, 128), True)], ids=str)
def test_cuda_grouped_fp8_kernels_within_the_fp8_mma_bound(tile, fast):
    # Every FP8 forward kernel (promoted or fast accumulation; a tile that is not built falls
    # back to 128x128 with promoted sums) on long K, ragged groups longer than a tile, against
    # the float64 products of its FP8 operands times alpha.
    from eqx_quant._ops import GroupedGemmParams, grouped_gemm_op

    m, k, n = 3000, 1024, 384
    sizes = np.array([1100, 0, 1201, 500], np.int32)  # 199 rows past the groups
    rng = np.random.default_rng(11)
    a = jnp.asarray(rng.standard_normal((m, k)).astype(np.float32) * 4).astype(jnp.float8_e4m3fn)
    b = jnp.asarray(rng.standard_normal((G, n, k)).astype(np.float32)).astype(jnp.float8_e4m3fn)
    alpha = jnp.asarray([0.5, 2.0, 0.125, 1.0], jnp.float32)
    params = GroupedGemmParams("rows", True, m, k, n, "bfloat16", tile, fast, impl="ffi")
    f = jax.jit(lambda *v: grouped_gemm_op.bind(*v, params=params)[0])
    y = f(*(_on_gpu(v) for v in (a, b, jnp.asarray(sizes), alpha)))
    got = np.asarray(y.astype(jnp.float32), np.float64)
    a64 = np.asarray(a.astype(jnp.float32), np.float64)
    b64 = np.asarray(b.astype(jnp.float32), np.float64)
    start = 0
    for g, count in enumerate(sizes):
        rows = slice(start, start + count)
        exact = a64[rows] @ b64[g].T * float(alpha[g])
        bound = (np.abs(a64[rows]) @ np.abs(b64[g]).T * float(alpha[g]) * 2.0**-10
                 + np.abs(exact) * 2.0**-8 + 1e-30)
        worst = float(np.max(np.abs(got[rows] - exact) / bound, initial=0.0))
        assert worst <= 1.0, (tile, fast, g, worst)
        start += count
    np.testing.assert_array_equal(got[start:], 0.0)


@pytest.mark.parametrize("recipe", RECIPES)
def test_cuda_grouped_dense_bad_sizes_act_as_their_clamped_sizes(recipe):
    # Sizes the user got wrong (a negative one, a sum past M) with check=False: the grouped
    # ops clamp them as grouped_quantize does, so the kernels see only rows of x and slices
    # of w (compute-sanitizer's memcheck runs this test), and the forward pass and both
    # gradients are those of the clamped sizes, bit for bit.
    bad = jnp.asarray([300, -50, 400, 100], jnp.int32)
    clamped = jnp.asarray([300, 0, M - 300, 0], jnp.int32)
    qs = eqq.DenseQuantizers(*(make() for make in RECIPES[recipe]))
    x = _on_gpu(jnp.asarray(random_input((M, K), jnp.bfloat16, seed=12)))
    w = _on_gpu(jnp.asarray(random_input((G, K, N), jnp.bfloat16, seed=13, scale=0.2)))
    c = _on_gpu(jnp.asarray(random_input((M, N), jnp.float32, seed=14)))

    def loss(x, w, s):
        y = eqq.grouped_dense(x, w, s, quantizers=qs, check=False)
        return jnp.sum(y.astype(jnp.float32) * c), y

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
    assert "eqx_quant_grouped_gemm_cuda" in _custom_calls(step, x, w, _on_gpu(bad))
    (_, y_bad), grads_bad = step(x, w, _on_gpu(bad))
    (_, y_ok), grads_ok = step(x, w, _on_gpu(clamped))
    for got, want in zip((y_bad, *grads_bad), (y_ok, *grads_ok)):
        np.testing.assert_array_equal(np.asarray(got.astype(jnp.float32)),
                                      np.asarray(want.astype(jnp.float32)))
    for empty in (1, 3):  # the clamped sizes leave these experts no rows
        assert not np.asarray(grads_ok[1][empty].astype(jnp.float32)).any()
