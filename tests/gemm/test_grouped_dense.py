"""`grouped_dense` (the MoE expert layer): forward, dgrad, wgrad and dbias per group against
float64 NumPy products of the oracle's values; the quantizers' next state; transforms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.oracle import fp8 as oracle
from tests.support.cases import random_input
from tests.support.gemm import (
    DENSE_RECIPES,
    assert_product,
    assert_same_sums,
    oracle_values,
    sum_error,
)

M, K, N = 128, 64, 32
SIZES = [30, 0, 58, 40]
G = len(SIZES)


def _delayed_recipe():
    experts = jax.vmap(lambda _: eqq.DelayedScaleQuantizer(amax_history_len=4))(jnp.arange(G))
    return eqq.DenseQuantizers(
        eqq.GroupedDelayedScaleQuantizer(num_groups=G, amax_history_len=4),
        experts,
        eqq.GroupedDelayedScaleQuantizer(num_groups=G, q_dtype=jnp.float8_e5m2,
                                         amax_history_len=4),
    )


RECIPES = {
    "delayed": _delayed_recipe,
    "current": DENSE_RECIPES["current"],  # E4M3 forward, E5M2 gradients
    "mxfp8": DENSE_RECIPES["mxfp8"],
    "nvfp4_sr": lambda: eqq.DenseQuantizers(
        eqq.NVFP4Quantizer(), eqq.NVFP4Quantizer(use_2d=True),
        eqq.NVFP4Quantizer(stochastic_rounding=True),
    ),
}


def _inputs():
    x = jnp.asarray(random_input((M, K), jnp.bfloat16, seed=1))
    kernel = jnp.asarray(random_input((G, K, N), jnp.bfloat16, seed=2, scale=0.2))
    bias = jnp.asarray(random_input((G, N), jnp.bfloat16, seed=3))
    dy = jnp.asarray(random_input((M, N), jnp.bfloat16, seed=4, scale=1e-3))
    return x, kernel, jnp.asarray(SIZES, jnp.int32), bias, dy


def _key(qs):
    return jax.random.key(5) if getattr(qs.grad, "stochastic_rounding", False) else None


def _copy(t, colwise):
    part = t.colwise if colwise else t.rowwise
    return part if part is not None else t.rowwise


@pytest.mark.parametrize("recipe", RECIPES)
def test_grouped_dense_forward_and_backward(recipe):
    qs = RECIPES[recipe]()
    key = _key(qs)
    x, kernel, sizes, bias, dy = _inputs()

    def f(x, kernel, bias, qs):
        return eqq.grouped_dense(x, kernel, sizes, bias, quantizers=qs, key=key, check=False)

    @jax.jit
    def forward_and_backward(x, kernel, bias, qs):
        y, pullback = jax.vjp(f, x, kernel, bias, qs)
        return y, pullback(dy)

    y, (dx, dk, db, next_qs) = forward_and_backward(x, kernel, bias, qs)

    # What the layer must have read: our quantize ops (bit-exact elsewhere) of each operand.
    gx = eqq.grouped_quantize(x, sizes, qs.x, check=False)
    wk = jax.vmap(lambda w, q: eqq.quantize(w, q, 1),
                  in_axes=(0, 0 if recipe == "delayed" else None))(kernel, qs.kernel)
    grad_key = None if key is None else jax.random.fold_in(key, 2)
    gg = eqq.grouped_quantize(dy, sizes, qs.grad, key=grad_key, check=False)
    start = 0
    for g, count in enumerate(SIZES):
        rows = slice(start, start + count)
        w_col = oracle_values(jax.tree.map(lambda a: a[g], _copy(wk, True)))
        w_row = oracle_values(jax.tree.map(lambda a: a[g], _copy(wk, False)))
        if count:
            a = oracle_values(_copy(gx, False).group_part(g))
            fwd = a @ w_col + np.asarray(bias[g], np.float64)
            got = np.asarray(y[rows].astype(jnp.float32), np.float64)
            bound = (np.abs(a) @ np.abs(w_col)) * sum_error(K) + np.abs(fwd) * 2.0**-8
            assert np.all(np.abs(got - fwd) <= bound), (recipe, g)
            d = oracle_values(_copy(gg, False).group_part(g))
            assert_product(dx[rows], d, w_row, ((1,), (1,)), f"dx g={g}")
        if count:
            a_col = oracle_values(_copy(gx, True).group_part(g))
            d_col = oracle_values(_copy(gg, True).group_part(g))
            assert_product(dk[g], a_col, d_col, ((0,), (0,)), f"dk g={g}")
        else:  # an expert that got no tokens gets no weight gradient
            np.testing.assert_array_equal(np.asarray(dk[g].astype(jnp.float32)), 0.0)
        want_db = oracle.dbias_cast(np.asarray(dy[rows]), 1) if count else np.zeros(N)
        np.testing.assert_array_equal(np.asarray(db[g].astype(jnp.float32)),
                                      np.asarray(want_db, np.float32))
        start += count
    np.testing.assert_array_equal(np.asarray(y[start:].astype(jnp.float32)), 0.0)
    if recipe == "delayed":
        xs = np.asarray(x, np.float32)
        start = 0
        for g, count in enumerate(SIZES):
            amax = oracle.amax(xs[start : start + count]) if count else np.zeros(1, np.float32)
            assert float(next_qs.x.amax_history[g, -1]) == float(amax[0]), g
            kamax = oracle.amax(np.asarray(kernel[g], np.float32))
            assert float(next_qs.kernel.amax_history[g, -1]) == float(kamax[0]), g
            start += count
        # each scale is what update gives for the amax observed (448 / amax, or the previous
        # scale for an empty group)
        for q, nq in ((qs.x, next_qs.x), (qs.grad, next_qs.grad)):
            want = q.update(nq.amax_history[:, -1]).scale
            np.testing.assert_array_equal(np.asarray(nq.scale), np.asarray(want))
    else:
        assert jax.tree.leaves(next_qs) == []


def test_grouped_dense_jit():
    qs = RECIPES["mxfp8"]()
    x, kernel, sizes, bias, _ = _inputs()
    f = lambda x, s: eqq.grouped_dense(x, kernel, s, bias, quantizers=qs)  # noqa: E731
    assert_same_sums(jax.jit(f)(x, sizes), f(x, sizes), "jit")


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_grouped_dense_shard_map():
    qs = RECIPES["mxfp8"]()
    _, kernel, _, bias, _ = _inputs()
    f = lambda x, s: eqq.grouped_dense(x, kernel, s, bias, quantizers=qs)  # noqa: E731
    # Data-parallel MoE: each device routes its own tokens through the replicated experts.
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    xs = jnp.asarray(random_input((8, 64, K), jnp.float32, seed=6))
    ss = jnp.asarray(np.random.default_rng(7).multinomial(64, [0.25] * 4, size=8), jnp.int32)

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"))
    def local(x, s):
        return f(x[0], s[0])[None]

    want = jnp.stack([f(xs[i], ss[i]) for i in range(8)])
    assert_same_sums(local(xs, ss), want, "shard_map")


def test_grouped_dense_errors():
    qs = RECIPES["mxfp8"]()
    x, kernel, sizes, bias, _ = _inputs()

    def call(**kw):
        args = dict(x=x, kernel=kernel, group_sizes=sizes, bias=bias, quantizers=qs)
        args.update(kw)
        return eqq.grouped_dense(args.pop("x"), args.pop("kernel"), args.pop("group_sizes"),
                                 args.pop("bias"), **args)

    with pytest.raises(ValueError, match=r"x must be \(tokens, K\) and kernel \(G, K, N\)"):
        call(kernel=kernel[:, :32])
    with pytest.raises(ValueError, match="kernel holds 3 experts but group_sizes has 4"):
        call(kernel=kernel[:3], bias=None)
    with pytest.raises(ValueError, match=r"bias must be \(G, N\)"):
        call(bias=bias[0])
    single = eqq.DelayedScaleQuantizer()
    per_group = eqq.GroupedDelayedScaleQuantizer(num_groups=G)
    with pytest.raises(ValueError, match=r"one state per expert \(scale of shape \(4, 1\)\)"):
        call(quantizers=eqq.DenseQuantizers(per_group, single, per_group))
    with pytest.raises(TypeError, match="a DelayedScaleQuantizer holds one scale"):
        call(quantizers=eqq.DenseQuantizers(single, qs.kernel, qs.grad))
    grouped = eqq.GroupedDelayedScaleQuantizer(num_groups=G)
    with pytest.raises(TypeError, match="each expert's weight is quantized on its own"):
        call(quantizers=eqq.DenseQuantizers(qs.x, grouped, qs.grad))
    with pytest.raises(TypeError, match="group_sizes must have dtype int32"):
        call(group_sizes=sizes.astype(jnp.float32))
    sr = eqq.NVFP4Quantizer(stochastic_rounding=True)
    nv = eqq.NVFP4Quantizer()
    needs_key = r"quantizers.grad\): NVFP4Quantizer\(stochastic_rounding=True\) needs"
    with pytest.raises(ValueError, match=needs_key):
        call(quantizers=eqq.DenseQuantizers(nv, nv, sr))
    with pytest.raises(ValueError, match="quantizers.kernel rounds stochastically"):
        call(quantizers=eqq.DenseQuantizers(nv, sr, nv))
