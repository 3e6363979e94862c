"""Expert parallelism (`grouped_dense(..., expert_axis=...)`, `GroupedLinear`): the experts
split over a mesh axis, each device's rows its own experts' tokens. Forward and gradients
equal each device's own `grouped_dense` bit for bit, on Explicit and Auto meshes, and the
compiled step has no collective at all."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
import eqx_quant.nn as qnn
from tests.support.cases import random_input

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")

D, PER_DEVICE_GROUPS, PER_DEVICE_ROWS, K, N = 4, 2, 16, 64, 32
G, M = D * PER_DEVICE_GROUPS, D * PER_DEVICE_ROWS
# each device's experts' token counts; sums 14, 16, 3, 14 (<= 16 rows: the rest is padding)
LOCAL_SIZES = [[5, 9], [16, 0], [0, 3], [7, 7]]


def _recipes():
    cur = eqq.CurrentScaleQuantizer()
    delayed = eqq.DenseQuantizers(
        eqq.GroupedDelayedScaleQuantizer(G, amax_history_len=4),
        jax.vmap(lambda _: eqq.DelayedScaleQuantizer(amax_history_len=4))(jnp.arange(G)),
        eqq.GroupedDelayedScaleQuantizer(G, jnp.float8_e5m2, amax_history_len=4),
    )
    mx = eqq.BlockScaleQuantizer()
    return {
        "current": eqq.DenseQuantizers(cur, cur, eqq.CurrentScaleQuantizer(jnp.float8_e5m2)),
        "delayed": delayed,
        "mxfp8": eqq.DenseQuantizers(mx, mx, mx),
    }


@jax.jit
def _one_device(x, w, sizes, q):
    """One device's forward and gradients (one compilation for every device's shapes)."""

    def loss(x, w, q):
        return jnp.sum(eqq.grouped_dense(x, w, sizes, quantizers=q, check=False) ** 2)

    y = eqq.grouped_dense(x, w, sizes, quantizers=q, check=False)
    return y, *jax.grad(loss, argnums=(0, 1, 2))(x, w, q)


def _per_device(qs, x, w, sizes):
    """Each device's grouped_dense on its own rows and experts, concatenated."""
    ys, dxs, dws, states = [], [], [], []
    for d in range(D):
        rows = slice(d * PER_DEVICE_ROWS, (d + 1) * PER_DEVICE_ROWS)
        experts = slice(d * PER_DEVICE_GROUPS, (d + 1) * PER_DEVICE_GROUPS)
        q = jax.tree.map(lambda a: a[experts] if a.ndim and a.shape[0] == G else a, qs)
        y, dx, dw, nq = _one_device(x[rows], w[experts], sizes[experts], q)
        ys.append(y)
        dxs.append(dx)
        dws.append(dw)
        states.append(nq)
    joined = jax.tree.map(lambda *a: jnp.concatenate(a) if a[0].ndim else a[0], *states)
    return jnp.concatenate(ys), jnp.concatenate(dxs), jnp.concatenate(dws), joined


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=str)
@pytest.mark.parametrize("recipe", ["current", "delayed", "mxfp8"])
def test_grouped_dense_expert_parallel(recipe, axis_type):
    qs = _recipes()[recipe]
    x = jnp.asarray(random_input((M, K), jnp.float32, seed=61))
    w = jnp.asarray(random_input((G, K, N), jnp.float32, seed=62, scale=0.1))
    sizes = jnp.asarray(np.asarray(LOCAL_SIZES).reshape(-1), jnp.int32)
    want_y, want_dx, want_dw, want_state = _per_device(qs, x, w, sizes)

    def loss(x, w, qs):
        y = eqq.grouped_dense(x, w, sizes, quantizers=qs, expert_axis="ep")
        return jnp.sum(y ** 2)

    mesh = jax.make_mesh((D, 2), ("ep", "dp"), axis_types=(axis_type, axis_type))
    with jax.set_mesh(mesh):
        xs = jax.device_put(x, NamedSharding(mesh, P("ep")))
        ws = jax.device_put(w, NamedSharding(mesh, P("ep")))
        y = jax.jit(lambda x, w, qs: eqq.grouped_dense(
            x, w, sizes, quantizers=qs, expert_axis="ep"))(xs, ws, qs)
        step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
        dx, dw, state = step(xs, ws, qs)
        hlo = step.lower(xs, ws, qs).compile().as_text()
    np.testing.assert_array_equal(np.asarray(y), np.asarray(want_y))
    np.testing.assert_array_equal(np.asarray(dx), np.asarray(want_dx))
    np.testing.assert_array_equal(np.asarray(dw), np.asarray(want_dw))
    assert dx.sharding.spec[0] == "ep" and dw.sharding.spec[0] == "ep"
    for got, want in zip(jax.tree.leaves(state), jax.tree.leaves(want_state), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    collectives = re.findall(
        r"= (\S+) (all-gather|all-to-all|all-reduce|reduce-scatter|collective-permute)", hlo)
    assert not collectives, collectives


def test_grouped_linear_expert_parallel_and_bad_routing():
    layer = qnn.GroupedLinear(G, K, N, recipe=qnn.DelayedScaling(amax_history_len=4),
                              key=jax.random.key(0))
    x = jnp.asarray(random_input((M, K), jnp.float32, seed=63))
    sizes = jnp.asarray(np.asarray(LOCAL_SIZES).reshape(-1), jnp.int32)
    mesh = jax.make_mesh((D, 2), ("ep", "dp"), axis_types=(AxisType.Explicit,) * 2)

    def loss(model, x, sizes):
        return jnp.sum(model(x, sizes, expert_axis="ep") ** 2)

    with jax.set_mesh(mesh):
        xs = jax.device_put(x, NamedSharding(mesh, P("ep")))
        _, grads, model = eqx.filter_jit(qnn.value_and_grad(loss))(layer, xs, sizes)
        # device 1's experts get 17 tokens but it has 16 rows: an error (eager)
        too_many = sizes.at[2].set(17)
        with pytest.raises(ValueError, match=r"each device's group_sizes .* per-device sums "
                           r"\[14, 17, 3, 14\]"):
            loss(layer, xs, too_many)
    assert grads.weight.shape == (G, K, N)
    # every expert with tokens observed its own amax: histories advanced where sizes > 0
    observed = np.asarray(model.state.x.history_value())[:, -1]
    assert np.all((observed > 0) == (np.asarray(sizes) > 0)), observed
