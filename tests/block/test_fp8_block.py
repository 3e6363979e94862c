"""FP8 block scaling (1x128 / 128x128): the pure-JAX implementation against the independent
numpy oracle (tests/oracle/fp8_block.py), bit for bit, with partial blocks, every input
dtype, both FP8 formats, power-of-two and plain scales, the epsilon floor and the special
values; then dequantize, transforms, gemm, the mesh and bad input."""

import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
from tests.oracle import fp8_block as oracle
from tests.support.bytes import assert_same_bytes, f32_bits_equal
from tests.support.cases import every_then_cycled, product_with_one_in_turn, random_input
from tests.support.kernels import impls

IMPLS = impls()  # the CPU kernel (where built) and the pure-JAX reference

L = eqq.QuantizeLayout
DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16}
SHAPES = [((256, 256), 1), ((130, 300), 1), ((3, 5), 1), ((1, 128), 1), ((257, 129), 1),
          ((2, 3, 200), 2), ((4, 33, 40), 1)]


def _x(shape, dtype, seed=0, scale=4.0):
    return np.asarray(random_input(shape, dtype, seed=seed) * scale).astype(dtype)


def _check(x, q, fa, what="", impl="auto"):
    t = jax.jit(lambda x: eqq.quantize(x, q, fa, impl=impl))(jnp.asarray(x))
    want = oracle.quantize(np.asarray(x), np.dtype(q.q_dtype), fa, q.use_2d, q.power_2_scales,
                           q.amax_epsilon)
    if q.q_layout.has_rowwise:
        assert_same_bytes(t.rowwise.data, want["row"], f"{what} row")
        f32_bits_equal(t.rowwise.scale_inv, want["row_scale"], f"{what} row scales")
    if q.q_layout.has_colwise:
        assert_same_bytes(t.colwise.data, want["col"], f"{what} col")
        f32_bits_equal(t.colwise.scale_inv, want["col_scale"], f"{what} col scales")
    return t, want


# The two 2-D shapes meet every (dtype, block, impl); the edge shapes one in turn.
ORACLE_CASES = every_then_cycled(
    SHAPES[:2], SHAPES[2:], itertools.product(sorted(DTYPES), ["1x128", "128x128"], IMPLS)
)


@pytest.mark.parametrize("shape,fa,dtype,block,impl", ORACLE_CASES, ids=str)
def test_matches_oracle(shape, fa, dtype, block, impl):
    x = _x(shape, DTYPES[dtype], seed=len(shape) + shape[0])
    x.reshape(-1)[:: 7] *= 300  # magnitudes that differ between blocks
    _check(x, eqq.Float8BlockQuantizer(block=block), fa, f"{shape} {dtype} {block}", impl)


# Every (power_2, epsilon, block, impl), each FP8 format on half of them (each value of every
# option meets both formats).
SCALE_OPTION_CASES = product_with_one_in_turn(
    (jnp.float8_e4m3fn, jnp.float8_e5m2), [False, True], [0.0, 0.25], ["1x128", "128x128"], IMPLS
)


@pytest.mark.parametrize("power_2,epsilon,block,impl,q_dtype", SCALE_OPTION_CASES, ids=str)
def test_scale_options_match_oracle(q_dtype, power_2, epsilon, block, impl):
    x = _x((200, 260), jnp.bfloat16, seed=5, scale=0.5)
    x[:, 128:256] *= 1e-3  # blocks whose amax is below the epsilon
    q = eqq.Float8BlockQuantizer(q_dtype=q_dtype, block=block, power_2_scales=power_2,
                                 amax_epsilon=epsilon)
    t, _ = _check(x, q, 1, f"{q}", impl)
    if power_2:  # every scale_inv a power of two: mantissa bits clear
        bits = np.asarray(t.rowwise.scale_inv).view(np.uint32)
        assert not (bits & 0x7FFFFF).any()


def _special_input(dtype):
    x = np.zeros((128, 512), np.float32)
    x[:, 128:256] = 1e-40  # subnormal blocks: fp8_max / amax overflows
    x[:, 256:384] = np.linspace(-3.0e38, 3.0e38, 128 * 128).reshape(128, 128)  # near max
    x[:, 384:] = np.linspace(-2, 2, 128 * 128).reshape(128, 128)
    x[5, 390] = np.nan  # ignored by the amax, NaN in the output
    x[9, 400] = np.inf  # amax inf: scale 1 for its block
    x[11, 500] = -np.inf
    if dtype != jnp.float32:
        x[:, 256:384] = np.linspace(-6e4, 6e4, 128 * 128).reshape(128, 128)
        x[:, 128:256] = 1e-7 if dtype == jnp.float16 else 1e-38
    return x.astype(dtype)


# Every (dtype, block, impl); power-of-two scales in turn over them.
SPECIAL_CASES = product_with_one_in_turn(
    (True, False), sorted(DTYPES), ["1x128", "128x128"], IMPLS
)


@pytest.mark.parametrize("dtype,block,impl,power_2", SPECIAL_CASES, ids=str)
def test_special_values(dtype, block, power_2, impl):
    """Zero blocks (scale 1), subnormal blocks (the scale overflows to x's dtype's largest
    value), values near the dtype's max, NaN (ignored by the amax, NaN out), +-Inf (amax inf:
    scale 1, the block saturates)."""
    x = _special_input(DTYPES[dtype])
    q = eqq.Float8BlockQuantizer(block=block, power_2_scales=power_2)
    t, want = _check(x, q, 1, f"special {dtype} {block}", impl)
    row_scale_inv = np.asarray(t.rowwise.scale_inv)
    assert (row_scale_inv[:, 0] == 1).all(), "a zero block has scale 1"
    data = np.asarray(t.rowwise.data).astype(np.float32)
    assert np.isnan(data[5, 390])
    assert data[9, 400] == 448 and data[11, 500] == -448


def test_dequantize_matches_oracle():
    x = _x((130, 300), jnp.bfloat16, seed=9)
    for block in ("1x128", "128x128"):
        q = eqq.Float8BlockQuantizer(block=block)
        t, want = _check(x, q, 1, block)
        for dtype in (jnp.float32, jnp.bfloat16):
            got = t.rowwise.dequantize(dtype)
            expected = oracle.dequantize_2d(want["row"], want["row_scale"], q.use_2d,
                                            np.dtype(dtype))
            assert_same_bytes(got, expected, f"row {block} {dtype}")
            got = t.colwise.dequantize(dtype)
            expected = oracle.dequantize_2d(want["col"], want["col_scale"], q.use_2d,
                                            np.dtype(dtype)).T
            assert_same_bytes(got, expected, f"col {block} {dtype}")


def test_gemm_ready_scales():
    """cuBLASLt's layouts (TE's GEMM_READY): 1x128 transposed with the rows padded to 4,
    128x128 with the last dim padded to 4; unswizzle_scales inverts them."""
    x = jnp.asarray(_x((130, 300), jnp.bfloat16, seed=11))
    for block in ("1x128", "128x128"):
        t = eqq.quantize(x, eqq.Float8BlockQuantizer(block=block))
        for part in (t.rowwise, t.colwise):
            compact = np.asarray(part.scale_inv)
            ready = np.asarray(part.gemm_scale_inv())
            if block == "1x128":
                want = np.zeros((compact.shape[1], -(-compact.shape[0] // 4) * 4), np.float32)
                want[:, : compact.shape[0]] = compact.T
            else:
                want = np.zeros((compact.shape[0], -(-compact.shape[1] // 4) * 4), np.float32)
                want[:, : compact.shape[1]] = compact
            f32_bits_equal(ready, want, f"{block} colwise={part.is_colwise}")
            back = eqq.unswizzle_scales(jnp.asarray(ready), part)
            f32_bits_equal(back, compact, f"{block} round trip")


@pytest.mark.parametrize("impl", IMPLS)
def test_transforms_vmap_scan_grad(impl):
    x = jnp.asarray(_x((3, 64, 256), jnp.bfloat16, seed=13))
    q = eqq.Float8BlockQuantizer()
    batched = jax.vmap(lambda e: eqq.quantize(e, q, impl=impl))(x)
    for i in range(3):
        one = eqq.quantize(x[i], q, impl="reference")
        assert_same_bytes(batched.rowwise.data[i], one.rowwise.data, f"vmap row {i}")
        f32_bits_equal(batched.colwise.scale_inv[i], one.colwise.scale_inv, f"vmap col {i}")
        assert_same_bytes(jax.vmap(lambda t: t.dequantize())(batched)[i], one.dequantize(),
                          f"vmap dequantize {i}")

    def step(carry, e):
        return carry + eqq.quantize(e, q).dequantize(jnp.float32).sum(), None

    total, _ = jax.lax.scan(step, jnp.float32(0), x)
    expected = sum(float(eqq.quantize(x[i], q).dequantize(jnp.float32).sum()) for i in range(3))
    np.testing.assert_allclose(float(total), expected, rtol=1e-6)
    g = jax.grad(lambda x: (eqq.quantize(x, q).dequantize(jnp.float32) * 3).sum())(x)
    assert_same_bytes(g, jnp.full(x.shape, 3, jnp.bfloat16), "straight-through gradient")


def test_quantize_dbias():
    x = jnp.asarray(_x((256, 384), jnp.bfloat16, seed=17))
    t, dbias = eqq.quantize_dbias(x, eqq.Float8BlockQuantizer())
    _, fp8_dbias = eqq.quantize_dbias(x, eqq.CurrentScaleQuantizer())
    assert_same_bytes(dbias, fp8_dbias, "dbias: the canonical tree sum")
    assert_same_bytes(t.rowwise.data, eqq.quantize(x, eqq.Float8BlockQuantizer()).rowwise.data)


@pytest.mark.parametrize("lhs_block,rhs_block", [("1x128", "128x128"), ("1x128", "1x128"),
                                                 ("128x128", "1x128")])
def test_gemm_within_float32_bound(lhs_block, rhs_block):
    """The product of the dequantized operands (float32 values, float32 accumulation),
    against float64, within the float32 accumulation bound."""
    a = jnp.asarray(_x((96, 320), jnp.bfloat16, seed=19))
    b = jnp.asarray(_x((320, 72), jnp.bfloat16, seed=23))
    ta = eqq.quantize(a, eqq.Float8BlockQuantizer(block=lhs_block))
    tb = eqq.quantize(b, eqq.Float8BlockQuantizer(block=rhs_block))
    y = eqq.gemm(ta, tb, out_dtype=jnp.float32)
    da = np.asarray(ta.rowwise.dequantize(jnp.float32), np.float64)
    db = np.asarray(tb.colwise.dequantize(jnp.float32), np.float64)
    exact = da @ db
    bound = 320 * 2.0**-23 * (np.abs(da) @ np.abs(db)) + 1e-30
    assert (np.abs(np.asarray(y, np.float64) - exact) <= bound).all()
    with pytest.raises(ValueError, match=r"two FP8 block-scaled operands"):
        eqq.gemm(ta, eqq.quantize(b, eqq.BlockScaleQuantizer()))


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("axis_type", ["auto", "explicit"])
def test_sharded_jit_equals_one_device(axis_type):
    axis = jax.sharding.AxisType
    types = axis.Explicit if axis_type == "explicit" else axis.Auto
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(types, types))
    x = jnp.asarray(_x((256, 256), jnp.bfloat16, seed=29))
    q = eqq.Float8BlockQuantizer(block="128x128")
    f = jax.jit(lambda x: eqq.quantize(x, q))
    expected = f(x)
    grad = jax.jit(jax.grad(lambda x: eqq.quantize(x, q).dequantize(jnp.float32).sum()))
    with jax.set_mesh(mesh):
        xs = jax.device_put(x, NamedSharding(mesh, P("data", "model")))
        got = f(xs)
        g = grad(xs)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert_same_bytes(a, b, f"sharded {axis_type}")
    assert_same_bytes(g, jnp.ones(x.shape, jnp.bfloat16), "sharded gradient")


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_shard_map_with_gradient():
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jnp.asarray(_x((8 * 64, 256), jnp.bfloat16, seed=31))
    q = eqq.Float8BlockQuantizer()

    def local(xl):
        return eqq.quantize(xl, q).dequantize(jnp.float32) * 2

    sharded = jax.shard_map(local, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    got = jax.jit(sharded)(x)
    f32_bits_equal(got, local(x), "shard_map values (1x128 blocks stay within a row)")
    g = jax.jit(jax.grad(lambda x: sharded(x).sum()))(x)
    assert_same_bytes(g, jnp.full(x.shape, 2, jnp.bfloat16), "shard_map gradient")


def test_bad_input():
    with pytest.raises(ValueError, match=r"block must be '1x128' .* or '128x128' .*got '2x2'"):
        eqq.Float8BlockQuantizer(block="2x2")
    with pytest.raises(ValueError, match=r"amax_epsilon must be a finite float >= 0.*-1"):
        eqq.Float8BlockQuantizer(amax_epsilon=-1.0)
    with pytest.raises(TypeError, match=r"q_dtype must be jnp.float8_e4m3fn or .*float4"):
        eqq.Float8BlockQuantizer(q_dtype=ml_dtypes.float4_e2m1fn)
    with pytest.raises(TypeError, match=r"power_2_scales must be a bool"):
        eqq.Float8BlockQuantizer(power_2_scales=1)


def test_ffi_without_a_kernel_raises():
    """The GPU has no FP8 block kernel yet: impl='ffi' raises there, never a silent
    fallback (checked on the lowering for CUDA, which needs no GPU)."""
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    f = jax.jit(lambda x: eqq.quantize(x, eqq.Float8BlockQuantizer(), impl="ffi"))
    with pytest.raises(RuntimeError, match=r"impl='ffi' was requested for 'fp8_block_quantize' "
                                           r"on cuda, where it has no compiled kernel yet"):
        f.trace(x).lower(lowering_platforms=("cuda",))
