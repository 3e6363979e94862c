"""`dense` and `grouped_dense`, forward and gradient, on Explicit and Auto meshes for data
parallelism, column- and row-parallel (tensor-parallel) weights and FSDP-style sharded
weights, against the same computation unsharded (8 fake CPU devices). The delayed-scaling
next state must be the unsharded one: the amaxes are reduced with a max over the mesh, never
summed. The quantized values are identical; the products may sum their float32 partial
products in another order, so they are compared to a float32 rounding bound."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.support.cases import random_input

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")


def _delayed(dtype=jnp.float8_e4m3fn, scale=1.0):
    return eqq.DelayedScaleQuantizer(dtype, amax_history_len=4,
                                     scale=jnp.asarray([scale], jnp.float32))


RECIPES = {
    "delayed": lambda: eqq.DenseQuantizers(_delayed(scale=64.0), _delayed(scale=256.0),
                                           _delayed(jnp.float8_e5m2, 2.0**14)),
    "current": lambda: eqq.DenseQuantizers(eqq.CurrentScaleQuantizer(),
                                           eqq.CurrentScaleQuantizer(),
                                           eqq.CurrentScaleQuantizer(jnp.float8_e5m2)),
    "mxfp8": lambda: eqq.DenseQuantizers(eqq.BlockScaleQuantizer(), eqq.BlockScaleQuantizer(),
                                         eqq.BlockScaleQuantizer()),
    "nvfp4": lambda: eqq.DenseQuantizers(eqq.NVFP4Quantizer(), eqq.NVFP4Quantizer(use_2d=True),
                                         eqq.NVFP4Quantizer()),
}
# (x spec, kernel spec, out_sharding): x (tokens, K) @ kernel (K, N)
LAYOUTS = {
    "data": (P("data", None), P(None, None), None),
    "column": (P("data", None), P(None, "model"), None),
    "row": (P("data", "model"), P("model", None), P("data", None)),
    "fsdp": (P(("data", "model"), None), P("data", None), P(("data", "model"), None)),
}


def _mesh(axis_type):
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(axis_type, axis_type))


def _inputs():
    x = jnp.asarray(random_input((128, 64), jnp.float32, seed=31))
    kernel = jnp.asarray(random_input((64, 64), jnp.float32, seed=32, scale=0.2))
    bias = jnp.asarray(random_input((64,), jnp.float32, seed=33))
    return x, kernel, bias


def _loss(x, kernel, bias, qs, out_sharding=None):
    y = eqq.dense(x, kernel, bias, quantizers=qs, out_sharding=out_sharding)
    return jnp.sum(y * jnp.cos(y))


def _close(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.max(np.abs(want))), 1e-30)
    np.testing.assert_allclose(got, want, atol=1e-5 * scale, rtol=1e-5, err_msg=what)


# One compilation per recipe (per test process) for the unsharded side.
_unsharded_value_and_grad = jax.jit(jax.value_and_grad(_loss, argnums=(0, 1, 2, 3)))


# Every recipe in every layout; FSDP (both mesh axes on x and the kernel) under both axis
# types, the other layouts under one, Explicit and Auto in turn over the recipes.
DENSE_CASES = [
    (recipe, layout, axis_type)
    for r, recipe in enumerate(sorted(RECIPES))
    for l, layout in enumerate(sorted(LAYOUTS))
    for axis_type in (
        (AxisType.Explicit, AxisType.Auto) if layout == "fsdp"
        else ((AxisType.Explicit, AxisType.Auto)[(r + l) % 2],)
    )
]


@pytest.mark.parametrize("recipe,layout,axis_type", DENSE_CASES, ids=str)
def test_dense_forward_and_gradient_match_unsharded(recipe, layout, axis_type):
    qs = RECIPES[recipe]()
    x, kernel, bias = _inputs()
    x_spec, k_spec, out = LAYOUTS[layout]
    want_loss, want = _unsharded_value_and_grad(x, kernel, bias, qs)
    mesh = _mesh(axis_type)
    xs = jax.device_put(x, NamedSharding(mesh, x_spec))
    ks = jax.device_put(kernel, NamedSharding(mesh, k_spec))
    bs = jax.device_put(bias, NamedSharding(mesh, P()))
    out_sharding = None if out is None or axis_type == AxisType.Auto else out
    with jax.set_mesh(mesh):
        f = jax.jit(jax.value_and_grad(
            lambda *a: _loss(*a, out_sharding=out_sharding), argnums=(0, 1, 2, 3)))
        got_loss, got = f(xs, ks, bs, qs)
    _close(got_loss, want_loss, "loss")
    for name, g, w in zip(("dx", "dkernel", "dbias"), got[:3], want[:3]):
        _close(g, w, name)
    # The next delayed state is the unsharded one, bit for bit (amaxes are exact maxima).
    for g, w in zip(jax.tree.leaves(got[3]), jax.tree.leaves(want[3]), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    if axis_type == AxisType.Explicit:
        assert got[0].sharding.spec == NamedSharding(mesh, x_spec).spec
        assert got[1].sharding.spec == NamedSharding(mesh, k_spec).spec


def _shard_map_grad(mesh, specs, fn, args, out_specs):
    placed = [jax.tree.map(lambda a, s=s: jax.device_put(a, NamedSharding(mesh, s)), a)
              for a, s in zip(args, specs)]
    f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=out_specs))
    return f(*placed)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("mesh_shape", [(8,), (4, 2)], ids=str)
def test_dense_gradient_inside_shard_map(recipe, mesh_shape):
    """Data parallelism by hand: x split over every mesh axis, weights replicated; check_vma
    stays on. Gradients and the next state equal the unsharded ones."""
    qs = RECIPES[recipe]()
    x, kernel, bias = _inputs()
    names = ("data",) if len(mesh_shape) == 1 else ("data", "model")
    mesh = jax.make_mesh(mesh_shape, names, axis_types=(AxisType.Explicit,) * len(names))

    def local(x, kernel, bias, qs):
        def loss(x, kernel, bias, qs):
            y = eqq.dense(x, kernel, bias, quantizers=qs, amax_axes=names)
            return jnp.sum(y * jnp.cos(y))

        return jax.grad(loss, argnums=(0, 1, 2, 3))(x, kernel, bias, qs)

    x_spec = P(names, None)
    got = _shard_map_grad(mesh, (x_spec, P(), P(), P()), local, (x, kernel, bias, qs),
                          (x_spec, P(), P(), P()))
    if recipe in ("mxfp8", "nvfp4"):
        # Block formats quantize each device's rows on their own (no shared amax for MXFP8;
        # NVFP4's global amax is shared through amax_axes): the reference is per shard.
        return
    want = jax.jit(jax.grad(_loss, argnums=(0, 1, 2, 3)))(x, kernel, bias, qs)
    for name, g, w in zip(("dx", "dkernel", "dbias"), got[:3], want[:3]):
        _close(g, w, name)
    for g, w in zip(jax.tree.leaves(got[3]), jax.tree.leaves(want[3]), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("mode", ["current", "mxfp8"])
def test_quantize_and_gemm_gradients_inside_shard_map(mode):
    q = eqq.CurrentScaleQuantizer() if mode == "current" else eqq.BlockScaleQuantizer()
    x, kernel, _ = _inputs()
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))

    def loss(x, w, axes):
        t, db = eqq.quantize_dbias(x, q, amax_axes=axes)
        y = eqq.gemm(t, eqq.quantize(w, q))
        return jnp.sum(y ** 2) + jnp.sum(db)

    def local(x, w):
        return jax.grad(loss, argnums=(0, 1))(x, w, ("data",))

    got = _shard_map_grad(mesh, (P("data"), P()), local, (x, kernel), (P("data"), P()))
    if mode == "current":
        want = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(x, kernel, ())
        for name, g, w in zip(("dx", "dw"), got, want):
            _close(g, w, name)
    else:  # per-row blocks of 32 columns: each device's blocks are the unsharded ones
        want = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(x, kernel, ())
        _close(got[0], want[0], "dx")


def test_grouped_dense_gradient_explicit_and_shard_map():
    """Data-parallel experts on Explicit axes (the tokens split, the experts replicated), and
    the same inside shard_map with each device routing its own tokens."""
    e4m3 = eqq.CurrentScaleQuantizer()
    qs = eqq.DenseQuantizers(e4m3, e4m3, e4m3)
    groups = 4
    x = jnp.asarray(random_input((128, 64), jnp.float32, seed=41))
    kernel = jnp.asarray(random_input((groups, 64, 32), jnp.float32, seed=42, scale=0.2))
    sizes = jnp.asarray([40, 0, 50, 38], jnp.int32)

    def loss(x, kernel):
        y = eqq.grouped_dense(x, kernel, sizes, quantizers=qs)
        return jnp.sum(y * jnp.cos(y))

    want = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, kernel)
    mesh = _mesh(AxisType.Explicit)
    xs = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    ks = jax.device_put(kernel, NamedSharding(mesh, P()))
    with jax.set_mesh(mesh):
        got = jax.jit(jax.grad(loss, argnums=(0, 1)))(xs, ks)
    for name, g, w in zip(("dx", "dkernel"), got, want):
        _close(g, w, name)

    # shard_map: device d holds rows [16d, 16d + 16) with its own group sizes; the loss is
    # linear in y (fixed weights t per row), so dy does not depend on the scales
    mesh8 = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    local_sizes = jnp.tile(jnp.asarray([5, 0, 7, 4], jnp.int32), 8)
    t = jnp.asarray(random_input((128, 32), jnp.float32, seed=43))

    def linear_loss(x, kernel, sizes, t, check):
        return jnp.sum(eqq.grouped_dense(x, kernel, sizes, quantizers=qs, check=check) * t)

    def local(x, kernel, sizes, t):
        return jax.grad(linear_loss, argnums=(0, 1))(x, kernel, sizes, t, False)

    dx, dk = _shard_map_grad(mesh8, (P("data"), P(), P("data"), P("data")), local,
                             (x, kernel, local_sizes, t), (P("data"), P()))
    # the reference: the same routing as one call (group g's rows gathered from every device)
    rows = np.arange(128).reshape(8, 16)
    local_groups = np.repeat(np.arange(4), [5, 0, 7, 4])
    order = np.concatenate([rows[d][local_groups == g] for g in range(4) for d in range(8)])
    global_sizes = jnp.asarray([40, 0, 56, 32], jnp.int32)
    ref_dx, ref_dk = jax.jit(jax.grad(linear_loss, argnums=(0, 1)), static_argnums=4)(
        x[order], kernel, global_sizes, t[order], True)
    # Each device's current scaling uses its own amax, so the two differ by FP8 rounding:
    # every product term |x| |dy| carries at most 2 * 2^-4 relative error (E4M3, both
    # operands) in each computation.
    xs_abs, t_abs = np.abs(np.asarray(x[order], np.float64)), np.abs(np.asarray(t[order]))
    bounds, start = [], 0
    for size in (40, 0, 56, 32):
        bounds.append(xs_abs[start:start + size].T @ t_abs[start:start + size])
        start += size
    bound = 2 * 2 * 2.0**-4 * np.stack(bounds)
    assert np.all(np.abs(np.asarray(dk, np.float64) - np.asarray(ref_dk)) <= bound + 1e-4)
    # dx rows: each device's tokens against its experts, bounded likewise over the N columns
    k_abs = np.abs(np.asarray(kernel, np.float64))
    row_group = np.repeat(np.arange(4), [40, 0, 56, 32])
    dx_bound = 2 * 2 * 2.0**-4 * np.einsum("mn,mkn->mk", t_abs, k_abs[row_group])
    got_dx = np.asarray(dx, np.float64)[order]
    assert np.all(np.abs(got_dx - np.asarray(ref_dx)) <= dx_bound + 1e-4)


# The collectives of one forward + backward step of a (1024, 512) @ (512, 256) dense layer
# on a (4, 2) mesh, per layout, current scaling: a u32 all-reduce is one tensor's amax (x, the
# kernel when it is split, dy), the float32 ones are the partial products that the layout
# splits (data: dkernel over the batch; column: dx over N and dkernel over the batch; row:
# y over K and dkernel over the batch). FSDP gathers only the weights.
EXPECTED_COLLECTIVES = {
    "data": {("all-reduce", "u32[1]"): 2, ("all-reduce", "f32[512,256]"): 1},
    "column": {("all-reduce", "u32[1]"): 3, ("all-reduce", "f32[256,512]"): 1,
               ("all-reduce", "f32[512,128]"): 1},
    "row": {("all-reduce", "u32[1]"): 3, ("all-reduce", "f32[256,256]"): 2},
}


def _collectives(hlo: str) -> dict:
    import collections
    import re

    found = collections.Counter()
    pattern = r"= (\S+) (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
    for m in re.finditer(pattern + r"(-start)?\(", hlo):
        found[(m.group(2), m.group(1).split("{")[0])] += 1
    return dict(found)


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=str)
@pytest.mark.parametrize("layout", ["data", "column", "row", "fsdp"])
def test_dense_step_collectives(layout, axis_type):
    qs = RECIPES["current"]()
    x_spec, k_spec, out = LAYOUTS[layout]
    mesh = _mesh(axis_type)
    xs = jax.device_put(jnp.ones((1024, 512)), NamedSharding(mesh, x_spec))
    ks = jax.device_put(jnp.ones((512, 256)), NamedSharding(mesh, k_spec))
    out_sharding = out if axis_type == AxisType.Explicit else None
    with jax.set_mesh(mesh):
        f = jax.jit(jax.grad(lambda x, w: jnp.sum(
            eqq.dense(x, w, quantizers=qs, out_sharding=out_sharding) ** 2), argnums=(0, 1)))
        found = _collectives(f.lower(xs, ks).compile().as_text())
    if layout in EXPECTED_COLLECTIVES:
        assert found == EXPECTED_COLLECTIVES[layout], found
        return
    # FSDP: the weights (and only they) are all-gathered, in their two orientations
    gathers = {shape for (kind, shape) in found if kind == "all-gather"}
    assert gathers == {"f32[512,256]", "f32[256,512]"}, found
    assert found[("all-reduce", "u32[1]")] == 3, found
