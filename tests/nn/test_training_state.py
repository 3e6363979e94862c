"""eqx_quant.nn's training step: the delayed-scaling state (stored as bits), its update rule
under `value_and_grad` and `accumulate`, what plain differentiation does, optimizers,
serialisation, and stacks of layers under `jax.lax.scan`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from eqx_quant import nn as qnn
from tests.support.cases import random_input

E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def _x(shape=(16, 64), seed=1, scale=1.0):
    return jnp.asarray(random_input(shape, jnp.float32, seed=seed, scale=scale))


def _delayed(in_f=64, out_f=32, seed=0, **kw):
    kw.setdefault("amax_history_len", 4)
    return qnn.Linear(in_f, out_f, recipe=qnn.DelayedScaling(**kw), key=jax.random.key(seed))


def _sq_loss(m, x):
    return jnp.sum(m(x) ** 2)


def _bits_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and la
    return all(x.dtype == y.dtype and np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(la, lb))


class Two(eqx.Module):
    a: qnn.Linear
    b: qnn.Linear


# --- the state -------------------------------------------------------------------------------


def test_initial_state_is_bits_of_one_and_zeros():
    layer = _delayed(amax_history_len=6)
    assert isinstance(layer.state, qnn.ScalingState)
    for role in ("x", "kernel", "grad"):
        s = getattr(layer.state, role)
        assert isinstance(s, qnn.DelayedState) and s.observed is None
        assert s.scale.dtype == jnp.uint32 and s.amax_history.dtype == jnp.uint32
        assert s.scale.shape == (1,) and s.amax_history.shape == (6,)
        assert int(s.scale[0]) == 0x3F800000  # the bits of 1.0f
        assert s.scale_value().dtype == jnp.float32 and float(s.scale_value()[0]) == 1.0
        np.testing.assert_array_equal(np.asarray(s.history_value()), np.zeros(6, np.float32))
    for recipe in (qnn.CurrentScaling(), qnn.MXFP8BlockScaling(), qnn.NVFP4BlockScaling()):
        assert qnn.Linear(64, 32, recipe=recipe, key=jax.random.key(0)).state is None


@pytest.mark.parametrize("fp8_format, grad_max", [("hybrid", E5M2_MAX), ("e4m3", E4M3_MAX)])
def test_one_step_records_amaxes_and_sets_scales(fp8_format, grad_max):
    layer = _delayed(fp8_format=fp8_format)
    x = _x((2, 8, 64), scale=3.0)
    loss, grads, nxt = qnn.value_and_grad(_sq_loss)(layer, x)
    np.testing.assert_allclose(float(loss), float(_sq_loss(layer, x)), rtol=0)
    amax_x = float(jnp.max(jnp.abs(x)))  # over the whole batch
    amax_k = float(jnp.max(jnp.abs(layer.weight)))
    y = layer(x)
    amax_g = float(jnp.max(jnp.abs(2 * y)))  # d loss / dy = 2y
    for role, amax, top in (("x", amax_x, E4M3_MAX), ("kernel", amax_k, E4M3_MAX),
                            ("grad", amax_g, grad_max)):
        s = getattr(nxt.state, role)
        h = np.asarray(s.history_value())
        np.testing.assert_array_equal(h[:-1], 0)
        if role == "grad":
            np.testing.assert_allclose(h[-1], amax, rtol=1e-6)
        else:
            assert h[-1] == np.float32(amax)
        np.testing.assert_allclose(float(s.scale_value()[0]), top / h[-1], rtol=1e-6)
    # parameters are unchanged by value_and_grad; only the state moved
    np.testing.assert_array_equal(np.asarray(nxt.weight), np.asarray(layer.weight))
    assert not _bits_equal(nxt.state, layer.state)


def test_margin_divides_the_scale():
    x = _x(scale=2.0)
    _, _, n0 = qnn.value_and_grad(_sq_loss)(_delayed(margin=0.0), x)
    _, _, n2 = qnn.value_and_grad(_sq_loss)(_delayed(margin=2.0), x)
    s0, s2 = float(n0.state.x.scale_value()[0]), float(n2.state.x.scale_value()[0])
    np.testing.assert_allclose(s0, E4M3_MAX / float(jnp.max(jnp.abs(x))), rtol=1e-6)
    np.testing.assert_allclose(s2, s0 / 4, rtol=1e-6)


@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_history_rolls_and_compute_algo(algo):
    layer = _delayed(amax_compute_algo=algo)
    big, small = _x(scale=10.0), _x(seed=2, scale=0.5)
    step = qnn.value_and_grad(_sq_loss)
    _, _, m1 = step(layer, big)
    _, _, m2 = step(m1, small)
    a1, a2 = float(jnp.max(jnp.abs(big))), float(jnp.max(jnp.abs(small)))
    np.testing.assert_array_equal(np.asarray(m2.state.x.history_value()),
                                  np.asarray([0, 0, a1, a2], np.float32))
    want = E4M3_MAX / (a1 if algo == "max" else a2)
    np.testing.assert_allclose(float(m2.state.x.scale_value()[0]), want, rtol=1e-6)


def _te_update(history, amax, margin=0.0, top=E4M3_MAX, scale=1.0):
    """TE's delayed-scaling update, in NumPy float32: (next scale, next history)."""
    h = history.copy()
    h[0] = amax
    m = h.max()
    if np.isfinite(m) and m > 0:
        scale = np.float32(np.float32(top) / m) / np.float32(2.0 ** margin)
    h = np.roll(h, -1)
    h[0] = 0
    return np.float32(scale), h


def test_history_window_follows_te_rule():
    """Five steps through a history of length 3: the big first amax leaves the window."""
    layer = _delayed(amax_history_len=3)
    step = qnn.value_and_grad(_sq_loss)
    xs = [_x(scale=8.0), _x(seed=2), _x(seed=3, scale=0.5), _x(seed=4), _x(seed=5, scale=0.25)]
    m, scale, hist = layer, np.float32(1.0), np.zeros(3, np.float32)
    scales = []
    for x in xs:
        m = step(m, x)[2]
        scale, hist = _te_update(hist, np.float32(jnp.max(jnp.abs(x))), scale=scale)
        scales.append(float(scale))
        np.testing.assert_array_equal(np.asarray(m.state.x.history_value()), hist)
        np.testing.assert_allclose(float(m.state.x.scale_value()[0]), scale, rtol=1e-6)
    a = [float(jnp.max(jnp.abs(x))) for x in xs]
    # the first amax set the scale for the first three steps only
    np.testing.assert_allclose(scales[:3], E4M3_MAX / a[0], rtol=1e-6)
    np.testing.assert_allclose(scales[3], E4M3_MAX / max(a[1:4]), rtol=1e-6)


def test_zero_amax_keeps_previous_scale():
    layer = _delayed()
    _, _, m = qnn.value_and_grad(_sq_loss)(layer, jnp.zeros((16, 64), jnp.float32))
    assert float(m.state.x.scale_value()[0]) == 1.0
    np.testing.assert_array_equal(np.asarray(m.state.x.history_value()), 0)
    # the kernel still advanced (its amax is not 0)
    assert float(m.state.kernel.history_value()[-1]) == float(jnp.max(jnp.abs(layer.weight)))


# --- differentiating it otherwise ------------------------------------------------------------


def test_plain_differentiation_of_delayed_layer_raises():
    layer = _delayed()
    x = _x()
    with pytest.raises(ValueError, match="eqx_quant.nn.value_and_grad"):
        eqx.filter_grad(_sq_loss)(layer, x)
    with pytest.raises(ValueError, match="eqx_quant.nn.value_and_grad"):
        jax.grad(lambda x: jnp.sum(layer(x)))(x)
    params, rest = qnn.partition(layer)
    with pytest.raises(ValueError, match="eqx_quant.nn.value_and_grad"):
        # at trace time: nothing is run
        jax.jit(jax.grad(lambda p: _sq_loss(eqx.combine(p, rest), x))).trace(params)
    # the forward pass alone is fine
    assert layer(x).shape == (16, 32)


@pytest.mark.parametrize("recipe", [qnn.CurrentScaling(), qnn.MXFP8BlockScaling()])
def test_stateless_recipes_work_with_filter_grad(recipe):
    layer = qnn.Linear(64, 32, recipe=recipe, key=jax.random.key(0))
    x = _x()
    loss, grads = eqx.filter_value_and_grad(_sq_loss)(layer, x)
    loss2, grads2, nxt = qnn.value_and_grad(_sq_loss)(layer, x)
    assert float(loss) == float(loss2)
    assert _bits_equal(grads, grads2)
    assert nxt.state is None
    assert float(jnp.max(jnp.abs(grads.weight))) > 0


def test_layer_called_twice_raises_at_run_time():
    layer = _delayed(64, 64)
    x = _x()
    fn = qnn.value_and_grad(lambda m, x: jnp.sum(m(m(x))))
    with pytest.raises((eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError),
                       match="called more than once"):
        jax.block_until_ready(eqx.filter_jit(fn)(layer, x))
    # two different layers are fine
    two = Two(_delayed(64, 64, seed=1), _delayed(64, 64, seed=2))
    _, _, nxt = qnn.value_and_grad(lambda m, x: jnp.sum(m.b(m.a(x))))(two, x)
    assert float(nxt.a.state.x.history_value()[-1]) == float(jnp.max(jnp.abs(x)))


def test_one_called_twice_check_per_step():
    """The check that no layer was called twice is one run-time check for the whole model,
    not one per layer and operand: on a GPU each check is a conditional whose predicate the
    host waits for. The second layer, called twice, still trips it."""
    two = Two(_delayed(64, 64, seed=1), _delayed(64, 64, seed=2))
    x = _x()
    dyn, static = eqx.partition(two, eqx.is_array)

    def run(dyn, x, b_twice):
        def loss(m, x):
            y = m.b(m.a(x))
            return jnp.sum(m.b(y) if b_twice else y)

        return qnn.value_and_grad(loss)(eqx.combine(dyn, static), x)

    text = jax.jit(run, static_argnums=2).lower(dyn, x, False).as_text()
    assert text.count("call @branched_error_if") == 1
    with pytest.raises((eqx.EquinoxRuntimeError, jax.errors.JaxRuntimeError),
                       match="called more than once"):
        jax.block_until_ready(jax.jit(run, static_argnums=2)(dyn, x, True))


def test_unreached_and_stopped_layers_keep_their_state():
    two = Two(_delayed(seed=1), _delayed(seed=2))
    x = _x()
    step = qnn.value_and_grad(lambda m, x: jnp.sum(m.a(x) ** 2))
    _, grads, nxt = step(two, x)
    assert _bits_equal(nxt.b.state, two.b.state)
    assert not _bits_equal(nxt.a.state, two.a.state)
    np.testing.assert_array_equal(np.asarray(grads.b.weight), 0)

    stopped = qnn.value_and_grad(
        lambda m, x: jnp.sum(m.a(x) ** 2) + jnp.sum(jax.lax.stop_gradient(m.b(x)))
    )
    _, _, nxt2 = stopped(two, x)
    assert _bits_equal(nxt2.b.state, two.b.state)
    assert _bits_equal(nxt2.a.state, nxt.a.state)


def test_value_and_grad_has_aux_and_grads_skip_state():
    layer = _delayed()
    x = _x()
    (loss, aux), grads, nxt = qnn.value_and_grad(
        lambda m, x: (_sq_loss(m, x), m(x)[0]), has_aux=True
    )(layer, x)
    np.testing.assert_array_equal(np.asarray(aux), np.asarray(layer(x)[0]))
    assert float(loss) == float(_sq_loss(layer, x))
    assert jax.tree.leaves(grads.state) == []
    assert grads.weight.shape == layer.weight.shape and grads.bias.shape == layer.bias.shape
    assert nxt.state.x.observed is None  # receivers are removed again


# --- accumulate ------------------------------------------------------------------------------


def test_accumulate_takes_max_amax_and_mean_grads():
    layer = _delayed()
    x0, x1 = _x(seed=1, scale=1.0), _x(seed=2, scale=5.0)
    t = jnp.stack([_x((16, 32), seed=3), _x((16, 32), seed=4)])

    def loss_fn(m, x, t):
        return jnp.mean((m(x) - t) ** 2)

    loss, grads, nxt = qnn.accumulate(loss_fn)(layer, jnp.stack([x0, x1]), t)
    step = qnn.value_and_grad(loss_fn)
    l0, g0, _ = step(layer, x0, t[0])
    l1, g1, _ = step(layer, x1, t[1])
    np.testing.assert_allclose(float(loss), (float(l0) + float(l1)) / 2, rtol=1e-6)
    for g, a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(g0), jax.tree.leaves(g1),
                       strict=True):
        np.testing.assert_allclose(np.asarray(g), (np.asarray(a) + np.asarray(b)) / 2, rtol=1e-5,
                                   atol=1e-7)
    h = np.asarray(nxt.state.x.history_value())
    amaxes = (float(jnp.max(jnp.abs(x0))), float(jnp.max(jnp.abs(x1))))
    assert amaxes[1] > amaxes[0]
    assert h[-1] == np.float32(max(amaxes))
    np.testing.assert_array_equal(h[:-1], 0)  # advanced once, not twice
    np.testing.assert_allclose(float(nxt.state.x.scale_value()[0]), E4M3_MAX / max(amaxes),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="same leading microbatch axis"):
        qnn.accumulate(loss_fn)(layer, jnp.stack([x0, x1]), t[:1])


# --- partition, casts, optimizers, serialisation ---------------------------------------------


def test_partition_puts_state_in_rest():
    layer = _delayed()
    params, rest = qnn.partition(layer)
    assert params.weight is layer.weight and params.bias is layer.bias
    assert jax.tree.leaves(params.state) == []
    assert rest.weight is None and rest.state.x.scale.dtype == jnp.uint32
    assert len(jax.tree.leaves(rest)) == 6  # scale and history of three operands
    assert _bits_equal(eqx.combine(params, rest), layer)


def test_bfloat16_cast_leaves_state_bits():
    layer = qnn.value_and_grad(_sq_loss)(_delayed(), _x())[2]
    cast = jax.tree.map(lambda a: a.astype(jnp.bfloat16) if eqx.is_inexact_array(a) else a, layer)
    assert cast.weight.dtype == jnp.bfloat16
    assert _bits_equal(cast.state, layer.state)
    # and the cast layer still runs, with the carried scales
    y = cast(_x().astype(jnp.bfloat16))
    assert y.dtype == jnp.bfloat16 and y.shape == (16, 32)


def _model(key=0):
    k1, k2 = jax.random.split(jax.random.key(key))
    return Two(qnn.Linear(64, 32, recipe=qnn.DelayedScaling(amax_history_len=4), key=k1),
               qnn.Linear(32, 8, recipe=qnn.DelayedScaling(amax_history_len=4), key=k2))


def _loss(m, x, t):
    return jnp.mean((m.b(jax.nn.relu(m.a(x))) - t) ** 2)


_OPTIM = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2, weight_decay=0.1))


@eqx.filter_jit
def _train_step(model, opt_state, x, t):
    loss, grads, model = qnn.value_and_grad(_loss)(model, x, t)
    # optax mixes Python floats with its int32 step count: not allowed by the strict promotion
    # of this test suite
    with jax.numpy_dtype_promotion("standard"):
        params = eqx.filter(model, eqx.is_inexact_array)
        updates, opt_state = _OPTIM.update(grads, opt_state, params)
    return eqx.apply_updates(model, updates), opt_state, loss


def _batches(n):
    return [(_x((16, 64), seed=10 + i, scale=1.0 + i), _x((16, 8), seed=20 + i)) for i in range(n)]


def test_serialise_and_resume_is_bit_identical(tmp_path):
    batches = _batches(4)
    model = _model()
    opt_state = _OPTIM.init(eqx.filter(model, eqx.is_inexact_array))
    straight = (model, opt_state)
    for x, t in batches:
        straight = _train_step(*straight, x, t)[:2]

    half = (model, opt_state)
    for x, t in batches[:2]:
        half = _train_step(*half, x, t)[:2]
    path = tmp_path / "ckpt.eqx"
    eqx.tree_serialise_leaves(path, half)
    fresh = _model(key=1)  # other values, same structure
    like = (fresh, _OPTIM.init(eqx.filter(fresh, eqx.is_inexact_array)))
    resumed = eqx.tree_deserialise_leaves(path, like)
    assert _bits_equal(resumed, half)
    assert resumed[0].a.state.x.scale.dtype == jnp.uint32
    for x, t in batches[2:]:
        resumed = _train_step(*resumed, x, t)[:2]
    assert _bits_equal(resumed, straight)
    # the state did move over the four steps: after TE's roll, slot 0 is always 0 and the
    # last three amaxes follow it
    np.testing.assert_array_equal(
        np.asarray(straight[0].a.state.x.history_value()),
        np.asarray([0.0] + [float(jnp.max(jnp.abs(x))) for x, _ in batches[1:]], np.float32),
    )


def test_optimizer_sees_parameters_only():
    model = _model()
    x, t = _batches(1)[0]
    _, grads, nxt = qnn.value_and_grad(_loss)(model, x, t)
    leaves = jax.tree.leaves(grads)
    assert len(leaves) == 4  # two weights, two biases
    want = np.sqrt(sum(float(jnp.sum(g.astype(jnp.float32) ** 2))
                       for g in (grads.a.weight, grads.a.bias, grads.b.weight, grads.b.bias)))
    np.testing.assert_allclose(float(optax.tree.norm(grads)), want, rtol=1e-6)
    optim = optax.adamw(1e-2, weight_decay=0.5)
    opt_state = optim.init(eqx.filter(nxt, eqx.is_inexact_array))
    with jax.numpy_dtype_promotion("standard"):  # optax's float ** int32 step count
        updates, _ = optim.update(grads, opt_state, eqx.filter(nxt, eqx.is_inexact_array))
    stepped = eqx.apply_updates(nxt, updates)
    assert _bits_equal(stepped.a.state, nxt.a.state) and _bits_equal(stepped.b.state, nxt.b.state)
    assert not np.array_equal(np.asarray(stepped.a.weight), np.asarray(nxt.a.weight))


# --- stacks of layers ------------------------------------------------------------------------


def test_scan_over_stacked_layers_advances_each_state():
    keys = jax.random.split(jax.random.key(0), 3)
    stack = eqx.filter_vmap(
        lambda k: qnn.Linear(32, 32, recipe=qnn.DelayedScaling(amax_history_len=4), key=k)
    )(keys)
    assert stack.weight.shape == (3, 32, 32) and stack.state.x.history_value().shape == (3, 4)

    def loss_fn(stack, x):
        params, static = eqx.partition(stack, eqx.is_array)

        def body(h, p):
            return jnp.tanh(eqx.combine(p, static)(h)) * 3.0, None

        h, _ = jax.lax.scan(body, x, params)
        return jnp.sum(h ** 2)

    x = _x((16, 32), scale=2.0)
    loss, grads, nxt = eqx.filter_jit(qnn.value_and_grad(loss_fn))(stack, x)
    hx = np.asarray(nxt.state.x.history_value())
    assert hx.shape == (3, 4)
    np.testing.assert_array_equal(hx[:, :-1], 0)
    assert np.all(hx[:, -1] > 0) and len(set(hx[:, -1].tolist())) == 3
    assert hx[0, -1] == float(jnp.max(jnp.abs(x)))
    assert np.all(np.asarray(nxt.state.grad.history_value())[:, -1] > 0)
    # the same as the layers one after another
    layers = [jax.tree.map(lambda a: a[i], stack) for i in range(3)]

    def unrolled(layers, x):
        h = x
        for layer in layers:
            h = jnp.tanh(layer(h)) * 3.0
        return jnp.sum(h ** 2)

    loss2, grads2, nxt2 = qnn.value_and_grad(unrolled)(layers, x)
    np.testing.assert_allclose(float(loss), float(loss2), rtol=1e-5)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(nxt.state.x.history_value()[i]),
                                   np.asarray(nxt2[i].state.x.history_value()), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(grads.weight[i]), np.asarray(grads2[i].weight),
                                   rtol=1e-4, atol=1e-6)


def test_layers_sharing_a_recipe_advance_together_as_each_would_alone():
    """`value_and_grad` advances all layers of one recipe in one batched update: a model
    mixing two delayed recipes (history lengths 3 and 5), a stack of 2 layers and a layer the
    loss never reaches gives, per layer and operand, TE's rule applied to that layer alone."""
    short, long_ = qnn.DelayedScaling(amax_history_len=3), qnn.DelayedScaling(amax_history_len=5)
    keys = jax.random.split(jax.random.key(3), 2)
    model = {
        "a": qnn.Linear(64, 32, recipe=short, key=jax.random.key(0)),
        "b": qnn.Linear(32, 32, recipe=long_, key=jax.random.key(1)),
        "stack": eqx.filter_vmap(lambda k: qnn.Linear(32, 32, recipe=short, key=k))(keys),
        "unused": qnn.Linear(64, 32, recipe=short, key=jax.random.key(2)),
        "plain": qnn.Linear(32, 8, recipe=qnn.CurrentScaling(), key=jax.random.key(4)),
    }

    def layer(stack, i):
        return jax.tree.map(lambda a: a[i], stack)

    def loss_fn(m, x):
        h = m["b"](m["a"](x))
        h = layer(m["stack"], 1)(layer(m["stack"], 0)(h) * 2.0)
        return jnp.sum(m["plain"](h) ** 2)

    step = eqx.filter_jit(qnn.value_and_grad(loss_fn))
    xs = [_x(scale=4.0), _x(seed=7, scale=0.5)]
    for x in xs:
        # the amaxes each operand sees, from the same forward pass in float32
        h0 = model["a"](x)
        h1 = model["b"](h0)
        h2 = layer(model["stack"], 0)(h1) * 2.0
        inputs = {"a": x, "b": h0, "stack0": h1, "stack1": h2}
        _, _, nxt = step(model, x)
        for name, seen in inputs.items():
            stacked = name.startswith("stack")
            old = layer(model["stack"], int(name[-1])) if stacked else model[name]
            new = layer(nxt["stack"], int(name[-1])) if stacked else nxt[name]
            hist = np.asarray(old.state.x.history_value())
            want_scale, want_hist = _te_update(
                hist, np.float32(jnp.max(jnp.abs(seen))), scale=old.state.x.scale_value()[0]
            )
            np.testing.assert_allclose(np.asarray(new.state.x.history_value()), want_hist,
                                       rtol=1e-5)
            np.testing.assert_allclose(float(new.state.x.scale_value()[0]), want_scale,
                                       rtol=1e-5)
            w_scale, w_hist = _te_update(
                np.asarray(old.state.kernel.history_value()),
                np.float32(jnp.max(jnp.abs(old.weight))),
                scale=old.state.kernel.scale_value()[0],
            )
            np.testing.assert_array_equal(np.asarray(new.state.kernel.history_value()), w_hist)
            np.testing.assert_allclose(float(new.state.kernel.scale_value()[0]), w_scale,
                                       rtol=1e-6)
            assert np.asarray(new.state.grad.history_value())[-1] > 0
        assert _bits_equal(nxt["unused"].state, model["unused"].state)
        assert nxt["plain"].state is None
        model = nxt
