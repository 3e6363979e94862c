"""`dense`: forward, dgrad, wgrad and dbias against float64 NumPy products of the oracle's
dequantized values; the quantizers' cotangent is their next state; transforms; errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.oracle import fp8 as oracle
from tests.support.cases import random_input
from tests.support.gemm import (
    DENSE_RECIPES as RECIPES,
)
from tests.support.gemm import (
    assert_product,
    assert_same_sums,
    delayed_quantizer,
    oracle_values,
    sum_error,
)


def _key(qs):
    return jax.random.key(7) if getattr(qs.grad, "stochastic_rounding", False) else None


def _sub_key(key, i):
    return None if key is None else jax.random.fold_in(key, i)


def _inputs(x_shape=(4, 32, 64), k_shape=(64, 48), dtype=jnp.bfloat16):
    x = jnp.asarray(random_input(x_shape, dtype, seed=1))
    kernel = jnp.asarray(random_input(k_shape, dtype, seed=2, scale=0.25))
    bias = jnp.asarray(random_input(k_shape[1:], dtype, seed=3))
    dy = jnp.asarray(random_input(x_shape[:-1] + k_shape[1:], dtype, seed=4, scale=1e-3))
    return x, kernel, bias, dy


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("recipe", RECIPES)
def test_dense_forward_and_backward(recipe, with_bias):
    qs = RECIPES[recipe]()
    key = _key(qs)
    x, kernel, bias, dy = _inputs()
    b = bias if with_bias else None

    def f(x, kernel, b, qs):
        return eqq.dense(x, kernel, b, quantizers=qs, key=key)

    y, pullback = jax.vjp(f, x, kernel, b, qs)
    dx, dk, db, next_qs = pullback(dy)

    # What the layer must have read: our quantize (tested bit-exactly elsewhere) of each operand.
    cx = eqq.quantize(x, qs.x, 2)
    ck = eqq.quantize(kernel, qs.kernel, 1)
    cg = eqq.quantize(dy, qs.grad, 2, key=_sub_key(key, 2))
    fwd = np.tensordot(oracle_values(cx.rowwise), oracle_values(ck.colwise), ((2,), (0,)))
    if with_bias:
        fwd = fwd + np.asarray(bias, np.float64)
    assert y.dtype == x.dtype and y.shape == (4, 32, 48)
    got = np.asarray(y.astype(jnp.float32), np.float64)
    bound = np.tensordot(
        np.abs(oracle_values(cx.rowwise)), np.abs(oracle_values(ck.colwise)), ((2,), (0,))
    ) * sum_error(x.shape[-1]) + np.abs(fwd) * 2.0**-8 + 1e-30
    assert np.all(np.abs(got - fwd) <= bound), float(np.abs(got - fwd).max())
    # dgrad over N (rowwise copies), wgrad over the tokens (colwise copies), in the inputs' dtypes
    assert dx.dtype == x.dtype and dk.dtype == kernel.dtype
    assert_product(dx, oracle_values(cg.rowwise), oracle_values(ck.rowwise), ((2,), (1,)), "dx")
    assert_product(
        dk, oracle_values(cx.colwise), oracle_values(cg.colwise), ((0, 1), (0, 1)), "dk"
    )
    if with_bias:
        # dbias: quantize_dbias's sum, the float32 pairwise tree over the token rows
        want = oracle.dbias_cast(np.asarray(dy), 2)  # in dy's dtype (bfloat16)
        assert db.dtype == bias.dtype
        np.testing.assert_array_equal(
            np.asarray(db.astype(jnp.float32)), want.astype(np.float32)
        )
    else:
        assert db is None
    # The quantizers' cotangent is their next state.
    for role, observed in (("x", x), ("kernel", kernel), ("grad", dy)):
        q, nq = getattr(qs, role), getattr(next_qs, role)
        if isinstance(q, eqq.DelayedScaleQuantizer):
            amax = oracle.amax(np.asarray(observed, np.float32))
            h, s = oracle.delayed_update(
                np.asarray(q.amax_history), np.asarray(q.scale), amax, q.q_dtype, q.margin
            )
            np.testing.assert_array_equal(np.asarray(nq.amax_history), h)
            np.testing.assert_array_equal(np.asarray(nq.scale), s)
        else:
            assert jax.tree.leaves(nq) == []


def test_dense_n_d_contracting_and_f32():
    qs = RECIPES["current"]()
    x = jnp.asarray(random_input((6, 4, 8), jnp.float32, seed=5))
    kernel = jnp.asarray(random_input((4, 8, 3, 2), jnp.float32, seed=6))
    y, pullback = jax.vjp(
        lambda x, k: eqq.dense(x, k, quantizers=qs, contracting_dims=((1, 2), (0, 1))), x, kernel
    )
    assert y.shape == (6, 3, 2)
    cx, ck = eqq.quantize(x, qs.x, 1), eqq.quantize(kernel, qs.kernel, 2)
    assert_product(y, oracle_values(cx.rowwise), oracle_values(ck.colwise), ((1, 2), (0, 1)))
    dy = jnp.asarray(random_input((6, 3, 2), jnp.float32, seed=7))
    dx, dk = pullback(dy)
    cg = eqq.quantize(dy, qs.grad, 1)
    assert dx.shape == x.shape and dk.shape == kernel.shape
    assert_product(dx, oracle_values(cg.rowwise), oracle_values(ck.rowwise), ((1, 2), (2, 3)))
    assert_product(dk, oracle_values(cx.colwise), oracle_values(cg.colwise), ((0,), (0,)))


def test_dense_jit_matches_eager():
    qs = RECIPES["delayed_hybrid"]()
    x, kernel, bias, dy = _inputs()

    def step(x, kernel, bias, qs):
        y, pullback = jax.vjp(lambda *a: eqq.dense(*a[:3], quantizers=a[3]), x, kernel, bias, qs)
        return y, pullback(dy)

    eager = step(x, kernel, bias, qs)
    jitted = jax.jit(step)(x, kernel, bias, qs)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
        assert_same_sums(b, a, "jit")


def test_dense_delayed_scales_follow_amax_over_steps():
    # Three steps with grad w.r.t. the quantizers: their history holds each step's amax.
    qs = RECIPES["delayed_hybrid"]()
    x, kernel, bias, _ = _inputs()

    @jax.jit
    def step(x, qs):
        def loss(x, qs):
            return jnp.sum(eqq.dense(x, kernel, bias, quantizers=qs).astype(jnp.float32))

        return jax.grad(loss, argnums=1)(x, qs)

    for i in range(3):
        qs = step(x * (i + 1), qs)
    amax = float(oracle.amax(np.asarray(x, np.float32))[0])
    history = np.asarray(qs.x.amax_history)
    np.testing.assert_allclose(history, [0, amax, 2 * amax, 3 * amax], rtol=1e-2)
    # scale = 448 / max(history); the x amax of step 3 (3x) is in the history that made it
    np.testing.assert_allclose(float(qs.x.scale[0]), 448.0 / (3 * amax), rtol=1e-2)


def test_dense_vmap_stateless_matches_loop():
    qs = RECIPES["mxfp8"]()
    x, kernel, bias, _ = _inputs()
    f = lambda xi: eqq.dense(xi, kernel, bias, quantizers=qs)  # noqa: E731
    loop = jnp.stack([f(x[i]) for i in range(4)])
    assert_same_sums(jax.vmap(f)(x), loop, "vmap")


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("recipe", ["current", "mxfp8"])
def test_dense_sharded_jit(recipe):
    qs = RECIPES[recipe]()
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    x, kernel, bias, dy = _inputs(x_shape=(8, 32, 64))

    def step(x, kernel, bias, dy):
        y, pullback = jax.vjp(lambda *a: eqq.dense(*a, quantizers=qs), x, kernel, bias)
        return y, pullback(dy)

    f = jax.jit(step)
    want = f(x, kernel, bias, dy)
    batch = NamedSharding(mesh, P("x"))
    got = f(jax.device_put(x, batch), kernel, bias, jax.device_put(dy, batch))
    # The same quantized values: y and dx up to the order of the float32 sums; dk and dbias
    # sum over the sharded tokens (an all-reduce), so within a looser bound.
    assert_same_sums(got[0], want[0], "y")
    assert_same_sums(got[1][0], want[1][0], "dx")
    np.testing.assert_allclose(
        np.asarray(got[1][1], np.float32), np.asarray(want[1][1], np.float32), rtol=2e-2, atol=1e-3
    )
    assert got[0].sharding.spec[0] == "x"
    if recipe == "mxfp8":  # no tensor amax and rows kept local: the forward has no collective
        fwd = jax.jit(lambda x: eqq.dense(x, kernel, bias, quantizers=qs))
        assert "all-" not in fwd.lower(jax.device_put(x, batch)).compile().as_text()


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_dense_shard_map_with_global_amax():
    # Inside shard_map, amax_axes makes every device use the tensor's global amax, so the
    # local layer equals the global one row for row.
    qs = RECIPES["current"]()
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    x, kernel, bias, _ = _inputs(x_shape=(8, 32, 64))

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("x"), P(), P()), out_specs=P("x"))
    def local(x, kernel, bias):
        return eqq.dense(x, kernel, bias, quantizers=qs, amax_axes=("x",))

    want = eqq.dense(x, kernel, bias, quantizers=qs)
    assert_same_sums(local(x, kernel, bias), want, "shard_map")


# ---------------------------------------------------------------------------------------------
# errors


def _error(match, err=ValueError, **overrides):
    qs = RECIPES["mxfp8"]()
    args = dict(x=jnp.ones((4, 64)), kernel=jnp.ones((64, 32)), bias=None, quantizers=qs)
    args.update(overrides)
    with pytest.raises(err, match=match):
        eqq.dense(args.pop("x"), args.pop("kernel"), args.pop("bias"), **args)


def test_dense_errors():
    _error("contracting_dims .* must be x's trailing n dims", contracting_dims=((0,), (0,)))
    _error("pair .* of int sequences", TypeError, contracting_dims=(-1, 0))
    _error(r"x's contracted dims \(64,\) differ from kernel's \(32,\)", kernel=jnp.ones((32, 64)))
    _error("at least one batch dim", x=jnp.ones((64,)))
    _error(r"bias must have the kernel's output shape \(32,\), got \(64,\)", bias=jnp.ones(64))
    _error("x must be a float32, float16 or bfloat16 jax.Array", TypeError,
           x=jnp.ones((4, 64), jnp.int32))
    _error("quantizers must be an eqx_quant.DenseQuantizers", TypeError,
           quantizers=eqq.CurrentScaleQuantizer())
    rowwise = eqq.BlockScaleQuantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    _error(r"quantizers.kernel\): BlockScaleQuantizer has q_layout=ROWWISE",
           quantizers=eqq.DenseQuantizers(rowwise.__class__(), rowwise, eqq.BlockScaleQuantizer()))
    sr = eqq.NVFP4Quantizer(stochastic_rounding=True)
    nv = eqq.NVFP4Quantizer()
    _error("quantizers.grad rounds stochastically .* pass key",
           quantizers=eqq.DenseQuantizers(nv, nv, sr))
    _error("no quantizer rounds stochastically", key=jax.random.key(0))
    rht = eqq.NVFP4Quantizer(use_rht=True)
    _error(r"quantizers.x\): NVFP4Quantizer\(use_rht=True\) .* not a multiple of 16",
           x=jnp.ones((4, 64)), quantizers=eqq.DenseQuantizers(rht, nv, nv))
    stack = jax.vmap(lambda _: delayed_quantizer())(jnp.arange(3))
    _error(r"quantizers.grad\): the DelayedScaleQuantizer holds a stack",
           quantizers=eqq.DenseQuantizers(delayed_quantizer(), delayed_quantizer(), stack))
    _error("amax_axes names the axis 'tp', which is not bound", amax_axes=("tp",))


def test_dense_gradients_take_each_inputs_dtype():
    # x bfloat16, kernel and bias float32: dx bfloat16, dkernel and dbias float32; dbias of
    # a gradient of ones is the token count, exactly.
    qs = RECIPES["current"]()
    x = jnp.asarray(random_input((4, 8, 32), jnp.bfloat16, seed=8))
    kernel = jnp.asarray(random_input((32, 16), jnp.float32, seed=9))
    bias = jnp.zeros((16,), jnp.float32)

    def loss(x, kernel, bias):
        return jnp.sum(eqq.dense(x, kernel, bias, quantizers=qs).astype(jnp.float32))

    dx, dk, db = jax.grad(loss, argnums=(0, 1, 2))(x, kernel, bias)
    assert (dx.dtype, dk.dtype, db.dtype) == (jnp.bfloat16, jnp.float32, jnp.float32)
    np.testing.assert_array_equal(np.asarray(db), np.full(16, 32.0, np.float32))


def test_dense_in_scan_over_layers_and_under_checkpoint():
    # A stack of layers run by lax.scan, each with its own delayed quantizers (a vmap-built
    # stack): the quantizers' cotangent is each layer's next state, as layer by layer.
    layers, width = 3, 64
    kernels = jnp.asarray(random_input((layers, width, width), jnp.float32, seed=10, scale=0.1))
    one = lambda _: eqq.DenseQuantizers(  # noqa: E731
        delayed_quantizer(), delayed_quantizer(), delayed_quantizer(jnp.float8_e5m2)
    )
    stack = jax.vmap(one)(jnp.arange(layers))
    x = jnp.asarray(random_input((16, width), jnp.float32, seed=11))

    def layer(h, params):
        kernel, qs = params
        return jnp.tanh(eqq.dense(h, kernel, quantizers=qs)), None

    def scanned(kernels, stack):
        return jnp.sum(jax.lax.scan(jax.checkpoint(layer), x, (kernels, stack))[0])

    def looped(kernels, stack):
        h = x
        for i in range(layers):
            h, _ = layer(h, jax.tree.map(lambda a: a[i], (kernels, stack)))
        return jnp.sum(h)

    dk, next_stack = jax.jit(jax.grad(scanned, argnums=(0, 1)))(kernels, stack)
    dk_loop, next_loop = jax.grad(looped, argnums=(0, 1))(kernels, stack)
    assert_same_sums(dk, dk_loop, "dkernels")
    # The amaxes of later layers' inputs and gradients come out of GEMMs, whose sums the two
    # programs may order differently: equal states up to float32 rounding.
    for got, want in zip(jax.tree.leaves(next_stack), jax.tree.leaves(next_loop), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)
    # every layer's history now holds its observed amaxes (x of layer 0 is the input's)
    amax_x0 = float(oracle.amax(np.asarray(x))[0])
    assert float(next_stack.x.amax_history[0, -1]) == amax_x0
    assert np.all(np.asarray(next_stack.grad.amax_history[:, -1]) > 0)
