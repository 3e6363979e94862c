"""Grouped quantization under jit, vmap (independent grouped problems), grad (straight-through),
scan, sharded jit on meshes of 2, 4 and 8 fake devices (the ragged rows never split, no
collective) and shard_map expert parallelism. Results must be bit-identical to the plain call."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.support.bytes import assert_same_bytes, u8
from tests.support.cases import random_input
from tests.support.kernels import has_kernels

GROUPED_OPS = ("grouped_fp8_quantize", "grouped_mxfp8_quantize", "grouped_nvfp4_quantize",
               "grouped_dbias")
IMPL = "ffi" if has_kernels("cpu", GROUPED_OPS) else "reference"
LAYOUT = eqq.QuantizeLayout.ROWWISE_COLWISE
SIZES = (0, 31, 33, 1, 95, 0, 96)  # sum 256

QUANTIZERS = {
    "current": lambda: eqq.CurrentScaleQuantizer(),
    "delayed": lambda: eqq.GroupedDelayedScaleQuantizer(
        len(SIZES), scale=jnp.asarray([1, 2, 4, 8, 0.5, 0.25, 16], jnp.float32)
    ),
    "mxfp8": lambda: eqq.BlockScaleQuantizer(),
    "nvfp4": lambda: eqq.NVFP4Quantizer(),
    "nvfp4_2d_sr": lambda: eqq.NVFP4Quantizer(use_2d=True, stochastic_rounding=True),
}


def _key_for(name):
    return {"key": jax.random.key(11)} if name.endswith("_sr") else {}


def _inputs(seed=0, m=256, n=64, dtype=jnp.bfloat16):
    x = jnp.asarray(random_input((m, n), dtype, seed=seed))
    return x, jnp.asarray(SIZES, jnp.int32)


def assert_same(a, b, what=""):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b), what
    for i, (u, v) in enumerate(zip(leaves_a, leaves_b)):
        assert_same_bytes(u8(u), u8(v), f"{what} leaf {i}")


@pytest.mark.parametrize("name", list(QUANTIZERS))
def test_eager_jit_and_reference_agree(name):
    x, sizes = _inputs()
    q = QUANTIZERS[name]()
    eager = eqq.grouped_quantize_dbias(x, sizes, q, impl=IMPL, **_key_for(name))
    jitted = jax.jit(
        lambda x, s, q: eqq.grouped_quantize_dbias(x, s, q, impl=IMPL, **_key_for(name))
    )(x, sizes, q)
    ref = eqq.grouped_quantize_dbias(x, sizes, q, impl="reference", **_key_for(name))
    assert_same(eager, jitted, f"{name} eager vs jit")
    assert_same(eager, ref, f"{name} {IMPL} vs reference")


@pytest.mark.skipif(IMPL != "ffi", reason="the kernel library has no grouped ops")
@pytest.mark.parametrize("name", ["nvfp4", "nvfp4_2d_sr"])
def test_nvfp4_keys_only_with_sr(name):
    """Without stochastic rounding the grouped NVFP4 op gets empty (G, 0) keys (not read;
    zero-filled ones cost an XLA kernel on a GPU); with it, two words per group."""
    x, sizes = _inputs()
    q = QUANTIZERS[name]()
    f = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, impl=IMPL, **_key_for(name)))
    calls = [line for line in f.lower(x, sizes).as_text().splitlines()
             if "nvfp4_quantize" in line and "custom_call" in line]
    assert len(calls) == 1, calls
    keys = "7x2xui32" if name.endswith("_sr") else "7x0xui32"
    assert f"tensor<{keys}>" in calls[0], calls[0]


@pytest.mark.parametrize("impl", sorted({IMPL, "reference"}))
@pytest.mark.parametrize("name", ["current", "mxfp8", "nvfp4"])
def test_vmap_is_per_problem(name, impl):
    """vmap over a batch of independent grouped problems (own x and own sizes each). The
    reference too: its batched NVFP4 call without stochastic rounding has empty (B, G, 0)
    keys."""
    q = QUANTIZERS[name]()
    xs = jnp.stack([_inputs(seed=s)[0] for s in range(3)])
    sizes = jnp.asarray([SIZES, SIZES[::-1], (256, 0, 0, 0, 0, 0, 0)], jnp.int32)
    batched = jax.vmap(lambda x, s: eqq.grouped_quantize_dbias(x, s, q, impl=impl))(xs, sizes)
    for i in range(3):
        one = eqq.grouped_quantize_dbias(xs[i], sizes[i], q, impl=IMPL)
        assert_same(jax.tree.map(lambda a: a[i], batched), one, f"{name} example {i}")
    dq = jax.vmap(lambda t: t.dequantize())(batched[0])
    assert_same_bytes(np.asarray(dq[1]), np.asarray(
        eqq.grouped_quantize(xs[1], sizes[1], q, impl=IMPL).dequantize()), "batched dequantize")


@pytest.mark.parametrize("name", list(QUANTIZERS))
@pytest.mark.parametrize("part", ["rowwise", "colwise"])
def test_grad_is_straight_through(name, part):
    x, sizes = _inputs(dtype=jnp.float32)
    q = QUANTIZERS[name]()
    w = jnp.asarray(random_input(x.shape, jnp.float32, seed=5))

    def loss(x):
        t = eqq.grouped_quantize(x, sizes, q, impl=IMPL, **_key_for(name))
        return jnp.sum(getattr(t, part).dequantize() * w)

    assert_same_bytes(np.asarray(jax.grad(loss)(x)), np.asarray(w), f"{name} {part} grad")


def test_grad_through_dbias_counts_each_row_once():
    x, sizes = _inputs(dtype=jnp.float32)
    w = jnp.asarray(random_input((len(SIZES), x.shape[1]), jnp.float32, seed=9))
    gid = np.repeat(np.arange(len(SIZES)), SIZES)
    g = jax.grad(lambda x: jnp.sum(eqq.grouped_dbias(x, sizes, impl=IMPL) * w))(x)
    assert_same_bytes(np.asarray(g), np.asarray(w)[gid], "dbias grad")


def test_grad_is_zero_on_rows_past_the_sum():
    x, _ = _inputs(dtype=jnp.float32)
    sizes = jnp.asarray([10, 20], jnp.int32)
    loss = lambda x: jnp.sum(  # noqa: E731
        eqq.grouped_quantize(x, sizes, eqq.BlockScaleQuantizer(), check=False, impl=IMPL)
        .rowwise.dequantize()
    )
    g = np.asarray(jax.grad(loss)(x))
    assert (g[:30] == 1).all() and (g[30:] == 0).all()


def test_scan_carries_grouped_delayed_state():
    x, sizes = _inputs()
    q0 = QUANTIZERS["delayed"]()

    def step(q, xi):
        t = eqq.grouped_quantize(xi, sizes, q, impl=IMPL)
        return q.update(t.amax), t.rowwise.data

    xs = jnp.stack([x, 2 * x, 0.5 * x])
    q_scan, data_scan = jax.lax.scan(step, q0, xs)
    q = q0
    for i in range(3):
        q, data = step(q, xs[i])
        assert_same_bytes(np.asarray(data_scan[i]), np.asarray(data), f"step {i}")
    assert_same_bytes(np.asarray(q_scan.scale), np.asarray(q.scale), "scale")
    # Each group's state equals the dense quantizer's after the same updates.
    dense = q0.group(4)
    starts = np.concatenate([[0], np.cumsum(SIZES)[:-1]])
    for i in range(3):
        rows = xs[i][starts[4] : starts[4] + SIZES[4]]
        dense = dense.update(eqq.quantize(rows, dense, impl=IMPL).amax)
    assert_same_bytes(np.asarray(q.group(4).scale), np.asarray(dense.scale), "group 4 state")


def _mesh(shape, names):
    needed = int(np.prod(shape))
    if jax.device_count() < needed:  # e.g. one GPU: tests/cuda/test_cuda_multi_gpu.py covers GPUs
        pytest.skip(f"needs {needed} (fake) devices")
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


SPECS = [((2,), ("x",), P("x", None)), ((4,), ("x",), P(None, "x")),
         ((2, 4), ("a", "b"), P("a", "b")), ((8,), ("x",), P("x", None))]


@pytest.mark.parametrize("name", ["current", "mxfp8", "nvfp4_2d_sr"])
@pytest.mark.parametrize("mesh_shape,names,spec", SPECS)
def test_sharded_jit_is_bit_identical(name, mesh_shape, names, spec):
    x, sizes = _inputs()
    q = QUANTIZERS[name]()
    f = jax.jit(lambda x, s: eqq.grouped_quantize_dbias(x, s, q, impl=IMPL, **_key_for(name)))
    expected = f(x, sizes)
    mesh = _mesh(mesh_shape, names)
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    assert_same(f(xs, sizes), expected, f"{name} on {mesh_shape} {spec}")


def test_grouped_dbias_keeps_column_sharding_without_collectives():
    x, sizes = _inputs()
    mesh = _mesh((8,), ("x",))
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "x")))
    f = jax.jit(lambda x, s: eqq.grouped_dbias(x, s, check=False, impl=IMPL))
    hlo = f.lower(xs, sizes).compile().as_text()
    assert "all-" not in hlo and "collective-permute" not in hlo
    out = f(xs, sizes)
    assert out.sharding.spec == P(None, "x")
    assert_same_bytes(np.asarray(out), np.asarray(f(x, sizes)), "sharded dbias")


def test_vmapped_batch_sharding_needs_no_collective():
    """A batch of grouped problems sharded over its batch axis: each device quantizes its own
    problems, nothing moves."""
    q = eqq.BlockScaleQuantizer()
    xs = jnp.stack([_inputs(seed=s)[0] for s in range(8)])
    sizes = jnp.broadcast_to(jnp.asarray(SIZES, jnp.int32), (8, len(SIZES)))
    mesh = _mesh((8,), ("x",))
    xs_sh = jax.device_put(xs, NamedSharding(mesh, P("x", None, None)))
    s_sh = jax.device_put(sizes, NamedSharding(mesh, P("x", None)))
    f = jax.jit(jax.vmap(lambda x, s: eqq.grouped_quantize(x, s, q, check=False, impl=IMPL)))
    hlo = f.lower(xs_sh, s_sh).compile().as_text()
    assert "all-" not in hlo
    assert_same(f(xs_sh, s_sh), f(xs, sizes), "batch-sharded")


@pytest.mark.parametrize("impl", sorted({IMPL, "reference"}))
@pytest.mark.parametrize("name", ["current", "mxfp8", "nvfp4"])
def test_shard_map_expert_parallel(name, impl):
    """Expert parallelism: each of 4 devices owns 2 experts and the tokens routed to them; it
    quantizes them with its local group sizes, equal to the per-device call."""
    mesh = _mesh((4,), ("ep",))
    q = QUANTIZERS[name]()
    local_sizes = np.asarray([[10, 54], [0, 64], [33, 31], [64, 0]], np.int32)
    x = jnp.asarray(random_input((4 * 64, 48), jnp.bfloat16, seed=3))
    sizes = jnp.asarray(local_sizes.reshape(-1))

    def local(x, s):
        t = eqq.grouped_quantize(x, s, q, impl=impl)
        return t.rowwise.data, t.rowwise.scale_inv, t.colwise.data, t.dequantize()

    out = jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(P("ep"), P("ep")), out_specs=P("ep"))
    )(x, sizes)
    local_jit = jax.jit(local)  # one compilation for the four devices' calls
    for d in range(4):
        rows = slice(64 * d, 64 * (d + 1))
        want = local_jit(x[rows], jnp.asarray(local_sizes[d]))
        for i, (got, exp) in enumerate(zip(out, want)):
            n = exp.shape[0]
            assert_same_bytes(u8(got[n * d : n * (d + 1)]), u8(exp), f"device {d} output {i}")
