"""The grouped FP8 block-scaled GEMM op (`eqx_quant_grouped_fp8_block_gemm`) on its reference
path (the CPU): E4M3 payloads and float32 block scales drawn directly (no quantizer), against
an independent float64 NumPy oracle within the float32 accumulation bound, on ragged groups
with empty groups, rows past the sum, sizes past M and negative sizes (clamped), K not a
multiple of 128 and N not a multiple of 128; both B scale granularities, bfloat16 and float32
out; jit, vmap, sharded jit on 8 CPU devices, and the errors of bad inputs. The CUDA kernel
has its own test (tests/cuda/test_cuda_grouped_fp8_block_gemm.py)."""

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from eqx_quant._ops.grouped_fp8_block_gemm import KERNEL_BY_DEFAULT, grouped_fp8_block_gemm
from tests.support.cases import product_with_one_in_turn

BLOCK = 128


def operands(m, k, n, sizes, b_tiles, seed=0):
    """Random E4M3 payloads (no NaN) and positive float32 scales spanning a few binades."""
    rng = np.random.default_rng(seed)
    g = len(sizes)
    kb, nb = -(-k // BLOCK), -(-n // BLOCK)

    def payload(shape):
        bits = rng.integers(0, 256, size=shape, dtype=np.uint8)
        bits[(bits & 0x7F) == 0x7F] = 0x3C  # no NaN: 1.5 instead
        return bits.view(ml_dtypes.float8_e4m3fn)

    def scales(shape):
        return (rng.uniform(0.5, 1.0, shape) * np.exp2(rng.integers(-6, 6, shape))).astype(
            np.float32)

    a, b = payload((m, k)), payload((g, n, k))
    a_scale = scales((m, kb))
    b_scale = scales((g, nb if b_tiles else n, kb))
    return a, a_scale, b, b_scale, np.asarray(sizes, np.int32)


def clamp(sizes, m):
    """docs/grouped.md's clamping, on the host: negative sizes count as 0, groups end at m."""
    counts, start = [], 0
    for s in sizes:
        c = min(max(int(s), 0), m - start)
        counts.append(c)
        start += c
    return counts


def oracle(a, a_scale, b, b_scale, sizes):
    """(exact, magnitude): the float64 product and the same sum over absolute values (the
    scale of the float32 rounding errors), per row of each group; 0 rows elsewhere."""
    m, k = a.shape
    g, n, _ = b.shape
    kb = a_scale.shape[1]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact, magnitude = np.zeros((m, n)), np.zeros((m, n))
    start = 0
    for group, count in enumerate(clamp(sizes, m)):
        rows = slice(start, start + count)
        tiles = b_scale.shape[1] == -(-n // BLOCK)  # (n <= 1: the two layouts agree)
        b_rows_scale = np.repeat(b_scale[group], BLOCK, 0)[:n] if tiles else b_scale[group]
        for j in range(kb):
            cols = slice(j * BLOCK, min((j + 1) * BLOCK, k))
            scale = a_scale[rows, j][:, None].astype(np.float64) * b_rows_scale[None, :, j]
            x, w = a64[rows, cols], b64[group][:, cols]
            exact[rows] += scale * (x @ w.T)
            magnitude[rows] += np.abs(scale) * (np.abs(x) @ np.abs(w).T)
        start += count
    return exact, magnitude


def assert_within_bound(y, a, a_scale, b, b_scale, sizes, what=""):
    """Within the float32 accumulation bound: each 128-long partial sum (at most 128 terms),
    the product of the two scales and its product with the partial sum, and the sum over the
    K blocks each round once; a bfloat16 result once more."""
    exact, magnitude = oracle(a, a_scale, b, b_scale, sizes)
    k, kb = a.shape[1], a_scale.shape[1]
    out = np.asarray(jnp.asarray(y).astype(jnp.float32), np.float64)
    bound = (min(k, BLOCK) + kb + 4) * 2.0**-24 * magnitude
    if y.dtype == jnp.bfloat16:
        bound += 2.0**-8 * (np.abs(exact) + bound)
    err = np.abs(out - exact)
    assert (err <= bound).all(), f"{what}: {float(np.max(err / (bound + 1e-300))):.3f}x bound"
    return exact


CASES = {
    # (M, K, N, sizes): an empty group and 96 rows past the sum, K with a partial block
    "ragged": (300, 208, 48, [70, 0, 101, 33, 0]),
    "k_blocks": (256, 384, 136, [0, 128, 64, 50]),
    "k_below_block": (40, 64, 16, [5, 0, 0, 9]),
    "past_m": (64, 144, 32, [40, 40, 40]),  # clamped to [40, 24, 0]
    "negative": (50, 128, 24, [-5, 30, 7]),  # the -5 counts as 0
    "one_group": (33, 272, 264, [33]),
}


# Every case with both B scale granularities, the output dtype in turn.
BOUND_CASES = product_with_one_in_turn((jnp.float32, jnp.bfloat16), list(CASES), (True, False))


@pytest.mark.parametrize("case,b_tiles,out_dtype", BOUND_CASES, ids=str)
def test_reference_within_the_float32_bound(case, b_tiles, out_dtype):
    m, k, n, sizes = CASES[case]
    args = operands(m, k, n, sizes, b_tiles, seed=m + k)
    f = jax.jit(lambda *v: grouped_fp8_block_gemm(*v, out_dtype=out_dtype))
    y = f(*args)
    assert y.shape == (m, n) and y.dtype == out_dtype
    assert_within_bound(y, *args, what=case)
    used = sum(clamp(sizes, m))
    np.testing.assert_array_equal(np.asarray(y[used:].astype(jnp.float32)), 0.0)
    eager = grouped_fp8_block_gemm(*args, out_dtype=out_dtype, impl="reference")
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(y))


def test_rows_of_no_group_are_zero_whatever_they_hold():
    m, k, n, sizes = 64, 256, 32, [10, 0, 20]
    a, a_scale, b, b_scale, s = operands(m, k, n, sizes, True, seed=3)
    a = a.copy()
    a[30:] = np.uint8(0x7F).view(ml_dtypes.float8_e4m3fn)  # NaN payloads past the groups
    a_scale = a_scale.copy()
    a_scale[30:] = np.inf
    y = np.asarray(grouped_fp8_block_gemm(a, a_scale, b, b_scale, s, out_dtype=jnp.float32))
    np.testing.assert_array_equal(y[30:], 0.0)
    assert np.isfinite(y[:30]).all()


def test_no_groups_and_no_k():
    a, a_scale, b, b_scale, _ = operands(16, 128, 16, [4], True)
    y = grouped_fp8_block_gemm(a, a_scale, b[:0], b_scale[:0], np.zeros((0,), np.int32))
    np.testing.assert_array_equal(np.asarray(y.astype(jnp.float32)), 0.0)
    a, a_scale, b, b_scale, s = operands(16, 0, 16, [4, 12], True)
    y = grouped_fp8_block_gemm(a, a_scale, b, b_scale, s, out_dtype=jnp.float32)
    assert y.shape == (16, 16)
    np.testing.assert_array_equal(np.asarray(y), 0.0)


def test_vmap_runs_each_problem():
    m, k, n = 96, 160, 24
    sizes = [[30, 0, 50], [0, 96, 0]]
    problems = [operands(m, k, n, s, True, seed=10 + i) for i, s in enumerate(sizes)]
    stacked = [np.stack(parts) for parts in zip(*problems)]
    f = jax.jit(jax.vmap(lambda *v: grouped_fp8_block_gemm(*v, out_dtype=jnp.float32)))
    y = f(*stacked)
    for i, args in enumerate(problems):
        loop = grouped_fp8_block_gemm(*args, out_dtype=jnp.float32)
        np.testing.assert_array_equal(np.asarray(y[i]), np.asarray(loop))
    # a weight shared by the examples (unbatched b and b_scale)
    a2, as2, _, _, s2 = stacked
    shared = jax.vmap(lambda a, s_a, s: grouped_fp8_block_gemm(
        a, s_a, problems[0][2], problems[0][3], s, out_dtype=jnp.float32))(a2, as2, s2)
    assert_within_bound(shared[1], a2[1], as2[1], problems[0][2], problems[0][3], s2[1], "vmap")


def test_auto_is_the_reference_until_the_kernel_is_verified():
    """impl="auto" lowers to the reference for CUDA too (no custom call) while the kernel
    waits for its GPU test; the op is in the trace either way."""
    assert not KERNEL_BY_DEFAULT
    args = operands(64, 128, 16, [20, 30], True)
    fn = lambda *v: grouped_fp8_block_gemm(*v)  # noqa: E731
    assert "eqx_quant_grouped_fp8_block_gemm" in str(jax.make_jaxpr(fn)(*args))
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "eqx_quant_grouped_fp8_block_gemm_cuda" not in text
    assert "ragged_dot" in text


def test_ffi_off_cuda_is_an_error():
    args = operands(64, 128, 16, [20, 30], True)
    with pytest.raises(RuntimeError, match="impl='ffi'.*grouped_fp8_block_gemm.*cpu"):
        jax.jit(lambda *v: grouped_fp8_block_gemm(*v, impl="ffi"))(*args)


M, K, N, G = 256, 1024, 256, 8  # K in one 128-block per device
SIZES = [40, 0, 31, 57, 16, 9, 48, 23]  # 32 rows past the last group

LAYOUTS = {  # a, a_scale, b, b_scale
    "data": (P("x", None), P("x", None), P(None, None, None), P(None, None, None)),
    "experts": (P(None, None), P(None, None), P("x", None, None), P("x", None, None)),
    "columns": (P(None, None), P(None, None), P(None, "x", None), P(None, "x", None)),
    "rows_k": (P(None, "x"), P(None, "x"), P(None, None, "x"), P(None, None, "x")),
    "data_and_experts": (P("d", None), P("d", None), P("e", None, None), P("e", None, None)),
}


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
@pytest.mark.parametrize("layout", LAYOUTS)
def test_sharded_jit(layout):
    """Each layout gives the unsharded values within the bound (the K split and the experts'
    psum add float32 partial sums in another order) without gathering the weights."""
    b_tiles = layout != "columns"  # 1x128 blocks: N split into shards of 32 rows
    args = operands(M, K, N, SIZES, b_tiles, seed=5)
    f = jax.jit(lambda *v: grouped_fp8_block_gemm(*v, out_dtype=jnp.float32))
    want = np.asarray(f(*args))
    shape, names = ((2, 4), ("d", "e")) if layout == "data_and_experts" else ((8,), ("x",))
    mesh = jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape))
    specs = LAYOUTS[layout] + (P(None),)
    sharded = [jax.device_put(v, NamedSharding(mesh, s)) for v, s in zip(args, specs)]
    got = np.asarray(f(*sharded))
    assert_within_bound(got, *args, what=layout)
    _, magnitude = oracle(*args)
    np.testing.assert_allclose(got, want, rtol=0, atol=2.0**-18 * magnitude.max())
    hlo = f.lower(*sharded).compile().as_text()
    gathered = re.findall(r"all-gather[^\n]*f8e4m3fn\[(\d+),(\d+),(\d+)\]", hlo)
    assert not gathered, f"{layout}: the weights were gathered: {gathered}"


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake) devices")
def test_shard_map_and_explicit_axes():
    """Inside shard_map each device multiplies its rows with its rows' group sizes; under
    sharded jit with Explicit axes the result keeps the rows' sharding. Both give the values
    of one device (each row's sums are the same sums)."""
    sizes = [40, 0, 31, 57, 16, 9, 48, 23]
    args = operands(256, 256, 64, sizes, True, seed=2)
    want = np.asarray(grouped_fp8_block_gemm(*args, out_dtype=jnp.float32))
    ends = np.cumsum(sizes)
    starts = ends - sizes
    rows = 32
    local_sizes = np.concatenate([
        np.clip(np.minimum(ends, rows * (d + 1)) - np.maximum(starts, rows * d), 0, None)
        for d in range(8)]).astype(np.int32)
    auto = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    f = jax.jit(jax.shard_map(
        lambda a, a_s, b, b_s, s: grouped_fp8_block_gemm(a, a_s, b, b_s, s,
                                                         out_dtype=jnp.float32),
        mesh=auto, in_specs=(P("x"), P("x"), P(), P(), P("x")), out_specs=P("x")))
    np.testing.assert_array_equal(np.asarray(f(*args[:4], local_sizes)), want)
    explicit = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(explicit):
        rows_sharded = NamedSharding(explicit, P("x"))
        a, a_s = (jax.device_put(v, rows_sharded) for v in args[:2])
        y = jax.jit(lambda *v: grouped_fp8_block_gemm(*v, out_dtype=jnp.float32))(
            a, a_s, *args[2:])
    assert y.sharding.spec == P("x", None)
    np.testing.assert_allclose(np.asarray(y), want, rtol=0,
                               atol=2.0**-18 * float(np.abs(want).max()))


def _bad(**changes):
    a, a_scale, b, b_scale, s = operands(32, 128, 16, [10, 22], True)
    args = dict(a=a, a_scale=a_scale, b=b, b_scale=b_scale, group_sizes=s)
    args.update(changes)
    kwargs = {k: args.pop(k) for k in ("out_dtype", "impl") if k in args}
    return lambda: grouped_fp8_block_gemm(*args.values(), **kwargs)


_P = operands(32, 200, 12, [10, 22], True)
BAD = [
    ("a-bf16", _bad(a=jnp.ones((32, 128), jnp.bfloat16)), TypeError,
     r"grouped_fp8_block_gemm: a must be float8_e4m3fn, got bfloat16\. Quantize"),
    ("b-rank", _bad(b=np.zeros((16, 128), ml_dtypes.float8_e4m3fn)), ValueError,
     r"b must have rank 3, got shape \(16, 128\)"),
    ("b-k", _bad(b=np.zeros((2, 16, 64), ml_dtypes.float8_e4m3fn)), ValueError,
     r"b must be \(G, N, K\) with a's K = 128, got shape \(2, 16, 64\)"),
    ("a_scale-shape", _bad(a_scale=np.ones((1, 32), np.float32)), ValueError,
     r"a_scale must be float32 \(M, ceil\(K/128\)\) = \(32, 1\), got float32 \(1, 32\)"),
    ("b_scale-shape", _bad(b_scale=np.ones((2, 1, 2), np.float32)), ValueError,
     r"b_scale must be float32 \(G, ceil\(N/128\), ceil\(K/128\)\) = \(2, 1, 1\) .* or "
     r"\(G, N, ceil\(K/128\)\) = \(2, 16, 1\)"),
    ("sizes-float", _bad(group_sizes=np.ones((2,), np.float32)), TypeError,
     r"group_sizes must be an integer array \(int32\), got float32"),
    ("sizes-shape", _bad(group_sizes=np.ones((3,), np.int32)), ValueError,
     r"group_sizes must have shape \(G,\) = \(2,\) \(one size per weight of b\), got \(3,\)"),
    ("out-f16", _bad(out_dtype=jnp.float16), ValueError,
     r"out_dtype must be bfloat16 or float32, got float16"),
    ("impl", _bad(impl="cuda"), ValueError,
     r"impl must be one of \('auto', 'ffi', 'reference'\), got 'cuda'"),
    ("k-16", lambda: grouped_fp8_block_gemm(*_P), ValueError,
     r"K = a\.shape\[1\] must be a multiple of 16 .* got 200\. Pad a, b and their scales along "
     r"K with zeros to a multiple of 16, or pass impl='reference'"),
    ("n-8", _bad(b=np.zeros((2, 12, 128), ml_dtypes.float8_e4m3fn)), ValueError,
     r"N = b\.shape\[1\] must be a multiple of 8 for bfloat16 out .* got 12\. Pad b's N"),
]


@pytest.mark.parametrize("fn,error,pattern", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_inputs(fn, error, pattern):
    with pytest.raises(error, match=pattern):
        fn()


def test_reference_takes_any_k_and_n():
    args = _P
    y = grouped_fp8_block_gemm(*args, impl="reference", out_dtype=jnp.float32)
    assert_within_bound(y, *args, what="K = 200, N = 12")
