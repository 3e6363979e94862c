"""`grouped_gemm` on FP8 block operands through the grouped FP8 block-scaled GEMM op
(`eqx_quant_grouped_fp8_block_gemm`): the whole wiring (the format's hook, the stored parts as
the op's operands, the group sizes, the out dtype), with the op forced to its reference on
the CPU (`forced_grouped_gemm(..., scaled_impl="reference")`). Against the float path that
`grouped_gemm` takes until the kernel is on and against a float64 product of the dequantized
operands, within the float32 accumulation bound: ragged groups with an empty one and rows
past the sum, 1x128 and 128x128 weights, forward and input gradient, bfloat16 and float32
out, under jit, vmap and grad. Also: which pairs qualify, that `grouped_gemm` leaves the op
out of its program until `KERNEL_BY_DEFAULT`, and that the CUDA lowering reaches the
kernel. The kernel itself: tests/cuda/test_cuda_grouped_fp8_block_gemm.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
import eqx_quant._ops.grouped_fp8_block_gemm as op_module
from eqx_quant._gemm._grouped import forced_grouped_gemm
from eqx_quant._ops import native_ops
from tests.support.cases import random_input

OP = "eqx_quant_grouped_fp8_block_gemm"
CUDA_TARGET = "eqx_quant_grouped_fp8_block_gemm_cuda"
SIZES = [0, 130, 1, 150, 7]  # an empty group, sizes off 128, 12 rows past the sum
M, K, N = 300, 384, 160  # N: a partial 128-tile of the weights


def operands(block, m=M, k=K, n=N, sizes=SIZES, q_dtype=jnp.float8_e4m3fn, seed=0):
    """Grouped tokens `(m, k)` and their gradient `(m, n)`, and G weights `(k, n)`, each
    quantized (1x128 tokens, `block` weights) without power-of-two scales (values with up to
    28 significant bits); rows of distinct magnitudes, so the scales differ by row."""
    rng = np.random.default_rng(seed)
    x = random_input((m, k), jnp.float32, seed=seed) * np.exp2(rng.integers(-4, 5, (m, 1)))
    x = x.astype(np.float32)
    dy = random_input((m, n), jnp.float32, seed=seed + 1)
    w = random_input((len(sizes), k, n), jnp.float32, seed=seed + 2, scale=0.1)
    s = jnp.asarray(sizes, jnp.int32)
    q = eqq.Float8BlockQuantizer(q_dtype, power_2_scales=False)
    qw = eqq.Float8BlockQuantizer(q_dtype, block=block, power_2_scales=False)
    gx = eqq.grouped_quantize(jnp.asarray(x), s, q, check=False)
    gdy = eqq.grouped_quantize(jnp.asarray(dy), s, q, check=False)
    wk = jax.vmap(lambda w: eqq.quantize(w, qw, 1))(jnp.asarray(w))
    return gx, gdy, wk


def group_rows(sizes, m):
    start = 0
    for g, size in enumerate(sizes):
        count = min(max(size, 0), m - start)
        yield g, slice(start, start + count)
        start += count


def assert_float32_bound(y, a, w, sizes, what):
    """y against the float64 product of the dequantized tokens `a (M, K)` and weights
    `w (G, K, N)` (NumPy), within the float32 bound: the K-long sums and each operand's
    rounding to float32 (2^-24 each), and a bfloat16 result's rounding. Returns the bound."""
    out = np.asarray(jnp.asarray(y).astype(jnp.float32), np.float64)
    exact, bound = np.zeros(out.shape), np.zeros(out.shape)
    k = a.shape[1]
    for g, rows in group_rows(sizes, a.shape[0]):
        exact[rows] = a[rows] @ w[g]
        bound[rows] = (k + 6) * 2.0**-24 * (np.abs(a[rows]) @ np.abs(w[g]))
    if y.dtype == jnp.bfloat16:
        bound += 2.0**-8 * (np.abs(exact) + bound)
    err = np.abs(out - exact)
    assert (err <= bound).all(), f"{what}: {float(np.max(err / (bound + 1e-300))):.3f}x bound"
    used = sum(r.stop - r.start for _, r in group_rows(sizes, a.shape[0]))
    np.testing.assert_array_equal(out[used:], 0.0)
    return bound


def dequantized_f64(part):
    """A part's dequantized float32 values in float64, per expert where stacked."""
    return np.asarray(jax.vmap(lambda t: t.dequantize())(part) if part.data.ndim == 3
                      else part.dequantize(), np.float64)


@pytest.mark.parametrize("out_dtype", [jnp.float32, jnp.bfloat16], ids=str)
@pytest.mark.parametrize("block", ["1x128", "128x128"])
def test_through_the_op_matches_the_float_path_and_float64(block, out_dtype):
    gx, gdy, wk = operands(block)

    @jax.jit  # one program (eagerly, each op would compile on its own)
    def run(gx, gdy, wk):  # (forward, dgrad) on the float path, then through the op
        return [(forced_grouped_gemm(gx, wk, out_dtype=out_dtype, scaled_impl=impl),
                 forced_grouped_gemm(gdy, wk, 1, out_dtype=out_dtype, scaled_impl=impl))
                for impl in (None, "reference")]

    on_floats, on_op = run(gx, gdy, wk)
    a, c = dequantized_f64(gx.rowwise), dequantized_f64(gdy.rowwise)
    w_col, w_row = dequantized_f64(wk.colwise), dequantized_f64(wk.rowwise)  # (G, K, N) both
    for what, lhs, w in (("forward", a, w_col), ("dgrad", c, np.swapaxes(w_row, 1, 2))):
        i = 0 if what == "forward" else 1
        y_float, y_op = on_floats[i], on_op[i]
        assert y_op.dtype == out_dtype and y_op.shape == y_float.shape
        bound = assert_float32_bound(y_op, lhs, w, SIZES, f"{block} {what} through the op")
        bound += assert_float32_bound(y_float, lhs, w, SIZES, f"{block} {what} float path")
        diff = np.abs(np.asarray(y_op.astype(jnp.float32), np.float64) -
                      np.asarray(y_float.astype(jnp.float32), np.float64))
        assert (diff <= bound).all(), f"{block} {what}: op vs float path"
    # The same values outside jit (the op runs on its own there).
    eager = forced_grouped_gemm(gx, wk, out_dtype=out_dtype, scaled_impl="reference")
    np.testing.assert_array_equal(np.asarray(eager.astype(jnp.float32)),
                                  np.asarray(on_op[0].astype(jnp.float32)))


def _jaxpr(fn, *args) -> str:
    return str(jax.make_jaxpr(fn)(*args))


def test_grouped_gemm_takes_the_op_only_once_its_kernel_is_on():
    """While the kernel waits for its GPU test, `grouped_gemm` multiplies the dequantized
    values (no op in its program, on any platform); forcing puts the op in."""
    on = op_module.kernel_runs_by_default("cuda")
    assert not op_module.kernel_runs_by_default("cpu")
    gx, gdy, wk = operands("128x128", m=64, k=128, n=32, sizes=[20, 0, 30])
    assert (OP in _jaxpr(lambda g, w: eqq.grouped_gemm(g, w), gx, wk)) == on
    assert (OP in _jaxpr(lambda g, w: eqq.grouped_gemm(g, w, 1), gdy, wk)) == on
    assert OP in _jaxpr(lambda g, w: forced_grouped_gemm(g, w, scaled_impl="reference"), gx, wk)
    assert OP in _jaxpr(lambda g, w: forced_grouped_gemm(g, w, 1, scaled_impl="ffi"), gdy, wk)


NOT_QUALIFYING = {  # the op's kernel takes neither: the float path runs, forced or not
    "e5m2": dict(q_dtype=jnp.float8_e5m2),
    "k_off_16": dict(k=200),  # the tokens' K
    "n_off_8_bf16": dict(n=36),  # the weights' N, for bfloat16 out
}


@pytest.mark.parametrize("case", NOT_QUALIFYING)
def test_pairs_the_op_does_not_take_keep_the_float_path(case):
    shape = dict(m=64, k=128, n=32, sizes=[20, 0, 30]) | NOT_QUALIFYING[case]
    gx, _, wk = operands("1x128", **shape)
    forced = lambda g, w: forced_grouped_gemm(g, w, out_dtype=jnp.bfloat16,
                                              scaled_impl="reference")
    assert OP not in _jaxpr(forced, gx, wk)
    np.testing.assert_array_equal(
        np.asarray(forced(gx, wk).astype(jnp.float32)),
        np.asarray(eqq.grouped_gemm(gx, wk, out_dtype=jnp.bfloat16).astype(jnp.float32)))
    if case == "n_off_8_bf16":  # N = 36 holds float32 rows (a multiple of 4)
        f32 = lambda g, w: forced_grouped_gemm(g, w, out_dtype=jnp.float32,
                                               scaled_impl="reference")
        assert OP in _jaxpr(f32, gx, wk)


def test_128x128_tokens_keep_the_float_path():
    """The op's A takes 1x128 blocks; 128x128 tokens are multiplied dequantized."""
    s = jnp.asarray([20, 0, 30], jnp.int32)
    q = eqq.Float8BlockQuantizer(block="128x128")
    gx = eqq.grouped_quantize(jnp.asarray(random_input((64, 128), jnp.float32)), s, q,
                              check=False)
    wk = jax.vmap(lambda w: eqq.quantize(w, q, 1))(
        jnp.asarray(random_input((3, 128, 32), jnp.float32, seed=1)))
    assert OP not in _jaxpr(lambda g, w: forced_grouped_gemm(g, w, scaled_impl="reference"),
                            gx, wk)


def test_grad_is_the_float_paths():
    """The backward pass stays the straight-through float one: the gradients through the
    op equal those through the float path, bit for bit, for tokens and weights."""
    sizes = jnp.asarray(SIZES, jnp.int32)
    q = eqq.Float8BlockQuantizer(power_2_scales=False)
    qw = eqq.Float8BlockQuantizer(block="128x128", power_2_scales=False)
    x = jnp.asarray(random_input((M, K), jnp.float32, seed=7))
    w = jnp.asarray(random_input((len(SIZES), K, N), jnp.float32, seed=8, scale=0.1))
    ct = jnp.asarray(random_input((M, N), jnp.float32, seed=9))

    def loss(x, w, impl):
        gx = eqq.grouped_quantize(x, sizes, q, check=False)
        wk = jax.vmap(lambda w: eqq.quantize(w, qw, 1))(w)
        y = forced_grouped_gemm(gx, wk, out_dtype=jnp.float32, scaled_impl=impl)
        return jnp.sum(y * ct)

    grads = {impl: jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(x, w, impl)
             for impl in (None, "reference")}
    for got, want, what in zip(grads["reference"], grads[None], ("x", "w")):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=what)
        assert np.abs(np.asarray(got)).max() > 0, what
    np.testing.assert_array_equal(np.asarray(grads["reference"][0][288:]), 0.0)
    np.testing.assert_array_equal(np.asarray(grads["reference"][1][0]), 0.0)  # empty group


def test_vmap_over_routing_problems():
    """Each example's own tokens and sizes, one set of weights: the op batches (its
    reference, example by example), each example equal to its own call."""
    sizes = ([30, 0, 50], [0, 96, 0])
    tokens = [operands("1x128", m=96, k=256, n=48, sizes=s, seed=i)[0]
              for i, s in enumerate(sizes)]
    wk = operands("1x128", m=96, k=256, n=48, sizes=sizes[0])[2]
    stacked = jax.tree.map(lambda *v: jnp.stack(v), *tokens)
    f = lambda g: forced_grouped_gemm(g, wk, out_dtype=jnp.float32,
                                      scaled_impl="reference")
    y = jax.jit(jax.vmap(f))(stacked)
    for i, gx in enumerate(tokens):
        one = f(gx)
        a, w = dequantized_f64(gx.rowwise), dequantized_f64(wk.colwise)
        assert_float32_bound(y[i], a, w, sizes[i], f"example {i}")
        np.testing.assert_allclose(np.asarray(y[i]), np.asarray(one), rtol=0,
                                   atol=2.0**-20 * float(np.abs(np.asarray(one)).max()))


def _assert_cuda_lowering_reaches_the_kernel(fn, *args):
    """fn's program lowered for CUDA (no GPU needed) calls the kernel; where this build has
    no CUDA kernel of the op, the kernel's lowering is reached and raises, naming the op."""
    lowered = jax.jit(fn).trace(*args)
    if "grouped_fp8_block_gemm" in native_ops("cuda"):
        assert CUDA_TARGET in lowered.lower(lowering_platforms=("cuda",)).as_text()
        return
    with pytest.raises(RuntimeError, match=r"'grouped_fp8_block_gemm'"):
        lowered.lower(lowering_platforms=("cuda",))


def test_forced_kernel_is_the_custom_call_on_cuda():
    gx, gdy, wk = operands("1x128", m=64, k=128, n=32, sizes=[20, 0, 30])
    forward = lambda g, w: forced_grouped_gemm(g, w, scaled_impl="ffi")
    dgrad = lambda g, w: forced_grouped_gemm(g, w, 1, scaled_impl="ffi")
    _assert_cuda_lowering_reaches_the_kernel(forward, gx, wk)
    _assert_cuda_lowering_reaches_the_kernel(dgrad, gdy, wk)


def test_kernel_by_default_is_the_one_switch(monkeypatch):
    """With `KERNEL_BY_DEFAULT` on (as after the GPU test), `grouped_gemm` lowers to the
    kernel for CUDA and to the float path, with its values, for the CPU. (The switch is
    patched for this test only; shapes no other test traces, so no cached trace is shared.)"""
    gx, _, wk = operands("128x128", m=72, k=144, n=40, sizes=[30, 0, 33])
    before = np.asarray(eqq.grouped_gemm(gx, wk, out_dtype=jnp.float32))
    monkeypatch.setattr(op_module, "KERNEL_BY_DEFAULT", True)
    assert op_module.kernel_runs_by_default("cuda")
    assert not op_module.kernel_runs_by_default("cpu")
    fn = lambda g, w: eqq.grouped_gemm(g, w, out_dtype=jnp.float32)
    assert OP in _jaxpr(fn, gx, wk)
    cpu = jax.jit(fn).trace(gx, wk).lower(lowering_platforms=("cpu",)).as_text()
    assert "grouped_fp8_block_gemm" not in cpu
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(gx, wk)), before)
    _assert_cuda_lowering_reaches_the_kernel(fn, gx, wk)
