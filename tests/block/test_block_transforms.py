"""MXFP8 / NVFP4 under jit, vmap (per example), grad (straight-through), scan, sharded jit on
meshes of 1, 2, 4 and 8 fake devices, and shard_map. Results must be bit-identical to the
plain call; stochastic rounding included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.support.bytes import assert_same_bytes, u8
from tests.support.cases import every_then_cycled, random_input
from tests.support.kernels import fast_impl

LAYOUT = eqq.QuantizeLayout.ROWWISE_COLWISE
IMPL = fast_impl()

QUANTIZERS = {
    "mxfp8": lambda: eqq.BlockScaleQuantizer(),
    "nvfp4": lambda: eqq.NVFP4Quantizer(),
    "nvfp4_2d": lambda: eqq.NVFP4Quantizer(use_2d=True),
    "nvfp4_rht": lambda: eqq.NVFP4Quantizer(use_rht=True),
    "nvfp4_sr": lambda: eqq.NVFP4Quantizer(stochastic_rounding=True),
}


def _key_for(name):
    return {"key": jax.random.key(7)} if name.endswith("_sr") else {}


def assert_same(a, b, what=""):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b), what
    for i, (u, v) in enumerate(zip(leaves_a, leaves_b)):
        assert_same_bytes(u8(u), u8(v), f"{what} leaf {i}")


@pytest.mark.parametrize("name", list(QUANTIZERS))
def test_eager_jit_and_reference_agree(name):
    x = jnp.asarray(random_input((32, 48), jnp.bfloat16, seed=1))
    q, kw = QUANTIZERS[name](), _key_for(name)
    eager = eqq.quantize(x, q, impl=IMPL, **kw)
    jitted = jax.jit(lambda x: eqq.quantize(x, q, impl=IMPL, **kw))(x)
    assert_same(eager, jitted, "eager vs jit")
    if IMPL != "reference":
        assert_same(eager, eqq.quantize(x, q, impl="reference", **kw), "kernel vs reference")


@pytest.mark.parametrize("name", ["mxfp8", "nvfp4", "nvfp4_rht", "nvfp4_sr"])
def test_vmap_is_per_example(name):
    """Each example is its own tensor: own NVFP4 global amax, SR indices from 0."""
    scales = jnp.array([1.0, 50.0, 0.02], jnp.float32).reshape(3, 1, 1)
    xs = jnp.asarray(random_input((3, 16, 64), jnp.float32, seed=2)) * scales
    q, kw = QUANTIZERS[name](), _key_for(name)
    batched = jax.vmap(lambda x: eqq.quantize(x, q, impl=IMPL, **kw))(xs)
    for i in range(xs.shape[0]):
        one = eqq.quantize(xs[i], q, impl=IMPL, **kw)
        assert_same(jax.tree.map(lambda a: a[i], batched), one, f"example {i}")
    # The batched tensor dequantizes per example too.
    deq = batched.dequantize()
    for i in range(xs.shape[0]):
        assert_same_bytes(deq[i], eqq.quantize(xs[i], q, impl=IMPL, **kw).dequantize(), f"deq {i}")



# Every format on whole examples; the empty shapes one format each, in turn.
VMAP_REFERENCE_CASES = every_then_cycled(
    [((3, 16, 64),)], [((3, 0, 64),), ((3, 16, 0),), ((0, 16, 64),)], [(n,) for n in QUANTIZERS]
)


@pytest.mark.parametrize("shape,name", VMAP_REFERENCE_CASES, ids=str)
def test_vmap_reference_per_example(shape, name):
    """The pure-JAX reference under vmap equals its per-example calls and the kernel, for
    examples of zero elements too, and for NVFP4 without SR, whose key words are `(0,)`
    per example (both once raised ZeroDivisionError: the batch was flattened with -1)."""
    xs = jnp.asarray(random_input(shape, jnp.bfloat16, seed=5))
    q = QUANTIZERS[name]()
    sr = name.endswith("_sr")
    keys = jax.random.split(jax.random.key(3), shape[0])

    def run(impl):
        if sr:
            return jax.vmap(lambda x, k: eqq.quantize_dbias(x, q, key=k, impl=impl))(xs, keys)
        return jax.vmap(lambda x: eqq.quantize_dbias(x, q, impl=impl))(xs)

    batched = run("reference")
    for i in range(shape[0]):
        kw = {"key": keys[i]} if sr else {}
        one = eqq.quantize_dbias(xs[i], q, impl="reference", **kw)
        assert_same(jax.tree.map(lambda a: a[i], batched), one, f"example {i}")
    if IMPL != "reference":
        assert_same(batched, run(IMPL), "reference vs kernel")


@pytest.mark.parametrize("name", ["mxfp8", "nvfp4"])
def test_quantize_dbias_under_vmap_and_grad(name):
    """quantize_dbias of the block formats (MXFP8: from its own op; NVFP4: the FP8 op with no
    FP8 output): per example under vmap, eager == jit, and the bias cotangent reaches every row
    through grad."""
    xs = jnp.asarray(random_input((3, 64, 32), jnp.bfloat16, seed=9))
    q = QUANTIZERS[name]()
    f = jax.vmap(lambda x: eqq.quantize_dbias(x, q, impl=IMPL))
    tensor, dbias = f(xs)
    jitted = jax.jit(f)(xs)
    assert_same((tensor, dbias), jitted, "eager vs jit")
    for i in range(xs.shape[0]):
        t1, db1 = eqq.quantize_dbias(xs[i], q, impl=IMPL)
        assert_same(jax.tree.map(lambda a: a[i], tensor), t1, f"example {i}")
        assert_same_bytes(dbias[i], db1, f"dbias {i}")

    def loss(x):
        _, db = eqq.quantize_dbias(x, q, impl=IMPL)
        return jnp.sum(db.astype(jnp.float32) * jnp.arange(32.0))

    g = jax.grad(loss)(xs[0].astype(jnp.float32))
    np.testing.assert_array_equal(np.asarray(g), np.broadcast_to(np.arange(32.0), (64, 32)))

def test_vmap_over_keys_gives_independent_noise():
    x = jnp.full((16, 32), 0.3, jnp.float32) * jnp.arange(1, 33, dtype=jnp.float32).reshape(1, 32)
    q = eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.ROWWISE, stochastic_rounding=True)
    keys = jax.random.split(jax.random.key(0), 4)
    out = jax.vmap(lambda k: eqq.quantize(x, q, key=k, impl=IMPL))(keys)
    for i in range(4):
        assert_same(jax.tree.map(lambda a: a[i], out), eqq.quantize(x, q, key=keys[i], impl=IMPL))
    data = u8(out.rowwise.data)
    assert (data[0] != data[1]).any(), "different keys must give different rounding"


@pytest.mark.parametrize("name", list(QUANTIZERS))
@pytest.mark.parametrize("part", ["rowwise", "colwise"])
def test_grad_is_straight_through(name, part):
    x = jnp.asarray(random_input((32, 32), jnp.float32, seed=3))
    q, kw = QUANTIZERS[name](), _key_for(name)
    w = jnp.asarray(random_input((32, 32), jnp.float32, seed=4))

    def loss(x):
        t = eqq.quantize(x, q, impl=IMPL, **kw)
        return jnp.sum(getattr(t, part).dequantize() * w)

    np.testing.assert_array_equal(np.asarray(jax.grad(loss)(x)), np.asarray(w))


def test_scan_matches_loop():
    xs = jnp.asarray(random_input((3, 16, 32), jnp.bfloat16, seed=5))
    q = eqq.NVFP4Quantizer(stochastic_rounding=True)
    key = jax.random.key(9)

    def step(carry, x):
        k = jax.random.fold_in(key, carry)
        return carry + 1, eqq.quantize(x, q, key=k, impl=IMPL)

    _, scanned = jax.lax.scan(step, 0, xs)
    for i in range(3):
        one = eqq.quantize(xs[i], q, key=jax.random.fold_in(key, i), impl=IMPL)
        assert_same(jax.tree.map(lambda a: a[i], scanned), one, f"step {i}")


# --------------------------------------------------------------------------------------------
# Sharding


def _mesh(shape, names):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))


# (mesh shape, axis names, spec): meshes of 1, 2, 4 and 8 devices.
MESHES = [
    ((1,), ("x",), P("x", None)),
    ((2,), ("x",), P("x", None)),
    ((2,), ("x",), P(None, "x")),
    ((4,), ("x",), P(None, "x")),
    ((2, 2), ("x", "y"), P("x", "y")),
    ((8,), ("x",), P("x", None)),
    ((2, 4), ("x", "y"), P("x", "y")),
    ((2, 4), ("x", "y"), P(None, ("x", "y"))),
    ((4, 2), ("x", "y"), P("y", "x")),
]


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("name", list(QUANTIZERS))
@pytest.mark.parametrize("mesh_shape,names,spec", MESHES)
def test_sharded_jit_is_bit_identical(name, mesh_shape, names, spec):
    x = jnp.asarray(random_input((256, 512), jnp.bfloat16, seed=6))
    q, kw = QUANTIZERS[name](), _key_for(name)
    f = jax.jit(lambda x: eqq.quantize(x, q, impl=IMPL, **kw))
    expected = f(x)
    mesh = _mesh(mesh_shape, names)
    xs = jax.device_put(x, NamedSharding(mesh, spec))
    assert_same(f(xs), expected, f"{name} on {mesh_shape} {spec}")
    hlo = f.lower(xs).compile().as_text()
    assert "all-gather" not in hlo and "all-to-all" not in hlo
    if name.startswith("mxfp8"):
        assert "all-" not in hlo  # no collective at all: MXFP8 has no global quantity


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_sharded_blocks_never_split():
    """A shard that would split a block (48 rows over 8 devices = 6) is gathered instead:
    still bit-identical."""
    x = jnp.asarray(random_input((48, 64), jnp.float32, seed=7))
    q = eqq.BlockScaleQuantizer()
    f = jax.jit(lambda x: eqq.quantize(x, q, impl=IMPL))
    xs = jax.device_put(x, NamedSharding(_mesh((8,), ("x",)), P("x", None)))
    assert_same(f(xs), f(x))


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("name", ["mxfp8", "nvfp4", "nvfp4_rht"])
def test_shard_map_with_amax_axes_matches_global(name):
    x = jnp.asarray(random_input((64, 256), jnp.float32, seed=8))
    q = QUANTIZERS[name]()
    mesh = _mesh((4,), ("tp",))
    expected = eqq.quantize(x, q, impl=IMPL)

    def local(xl):
        t = eqq.quantize(xl, q, amax_axes=("tp",), impl=IMPL)
        return t.rowwise.data, t.rowwise.scale_inv, t.rowwise.amax

    data, scale, amax = jax.shard_map(
        local, mesh=mesh, in_specs=P(None, "tp"), out_specs=(P(None, "tp"), P(None, "tp"), P())
    )(x)
    assert_same_bytes(data, expected.rowwise.data)
    assert_same_bytes(scale, expected.rowwise.scale_inv)
    assert_same_bytes(amax, expected.rowwise.amax)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_shard_map_without_amax_axes_is_local():
    """Inside shard_map without amax_axes each device quantizes its block as a tensor."""
    x = jnp.asarray(random_input((32, 128), jnp.float32, seed=9)) * jnp.repeat(
        jnp.array([1.0, 100.0], jnp.float32), 64
    ).reshape(1, 128)
    q = eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.ROWWISE)
    mesh = _mesh((2,), ("tp",))
    data = jax.shard_map(
        lambda xl: eqq.quantize(xl, q, impl=IMPL).rowwise.data,
        mesh=mesh,
        in_specs=P(None, "tp"),
        out_specs=P(None, "tp"),
    )(x)
    for i in range(2):
        part = eqq.quantize(x[:, 64 * i : 64 * (i + 1)], q, impl=IMPL).rowwise.data
        assert_same_bytes(np.asarray(data)[:, 64 * i : 64 * (i + 1)], part, f"shard {i}")


@pytest.mark.parametrize("sr", [False, True])
def test_nvfp4_sr_operands_only_with_sr(sr):
    """Without stochastic rounding the NVFP4 op gets empty key and offset operands (not read;
    zero-filled ones cost an XLA kernel each on a GPU); with it, the key words and one offset
    per dim, also under vmap."""
    q = eqq.NVFP4Quantizer(q_layout=eqq.QuantizeLayout.ROWWISE, stochastic_rounding=sr)
    key = jax.random.key(1) if sr else None
    x = random_input((4, 32, 64), jnp.bfloat16, seed=3)
    f = jax.jit(jax.vmap(lambda x: eqq.quantize(x, q, key=key, impl="ffi")))
    hlo = f.lower(x).as_text()
    calls = [line for line in hlo.splitlines() if "eqx_quant_nvfp4_quantize" in line]
    assert len(calls) == 1, calls
    key_type, offset_type = ("4x2xui32", "2xi32") if sr else ("4x0xui32", "0xi32")
    assert f"tensor<{key_type}>, tensor<{offset_type}>) ->" in calls[0], calls[0]
