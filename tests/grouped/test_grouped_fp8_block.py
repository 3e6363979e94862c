"""Grouped FP8 block scaling (`Float8BlockQuantizer`, 1x128 and 128x128; docs/grouped.md,
"FP8 block scaling"): every buffer against the dense NumPy oracle (`tests/oracle/fp8_block.py`)
on each group's rows, assembled into the documented layout; dequantize, `group_part`,
`scale_inv_for_group`; jit, vmap, grad, scan, sharded jit (Auto and Explicit axes),
shard_map; the expert GEMMs, `grouped_dense` and `GroupedLinear` against float64 products."""

import equinox as eqx
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq
import eqx_quant.nn as qnn
from tests.oracle import fp8_block as ofb
from tests.oracle import grouped as og
from tests.support.bytes import assert_same_bytes, u8
from tests.support.cases import random_input
from tests.support.gemm import assert_product, sum_error

F32 = np.float32
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
BLOCKS = ("1x128", "128x128")
SIZES = (0, 130, 1, 256, 7)  # sum 394: an empty group, sizes off 128, 6 rows past the sum
M, N = 400, 300  # N = 2 * 128 + 44: a partial block along the columns too


def _special_input(dtype, seed=0) -> np.ndarray:
    """Rows of distinct magnitudes, plus zeros, subnormals, +-max, NaN and +-Inf inside groups
    and NaN past the sum (which must not matter)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, N)).astype(F32) * 3
    x *= (2.0 ** rng.integers(-6, 7, M)).astype(F32)[:, None]
    info = ml_dtypes.finfo(dtype)
    tiny = F32(info.smallest_subnormal)
    x[1] = 0.0  # an all-zero row: all-zero rowwise blocks
    x[2, :128] = tiny * rng.integers(1, 8, 128)  # a block of subnormals: the scale overflows
    x[3, 0], x[3, 1] = F32(info.max), -F32(info.max)
    x[4, 7], x[4, 8], x[5, 9] = np.nan, np.inf, -np.inf
    x[130] = tiny * 3  # group 2 (one row): subnormals only
    x[131:260, 256:] = 0.0  # group 3: all-zero colwise blocks (and a zero partial tile)
    x[200, 100] = -0.0
    x[394:] = np.nan  # past the sum
    return np.asarray(jnp.asarray(x, dtype))


def oracle_layout(x2d, sizes, q_dtype, use_2d, power_2, eps, rows_per_unit=1):
    """The four buffers of the doc's layout, from the dense oracle on each group's rows."""
    r, n = x2d.shape
    starts, counts = og.group_offsets(sizes, r, rows_per_unit)
    units = og.worst_case_units(r, len(sizes), ofb.BLOCK)
    nb = og.cdiv(n, ofb.BLOCK)
    row = np.zeros((r, n), np.uint8)
    col = np.zeros((r * n,), np.uint8)
    if use_2d:
        row_s, col_s = np.zeros((units, nb), F32), np.zeros((nb, units), F32)
    else:  # rows past the sum: what the dense op gives an all-zero block
        zero_block = ofb.quantize_2d(np.zeros((1, n), x2d.dtype), q_dtype, False, power_2, eps)[1]
        row_s, col_s = np.repeat(zero_block, r, axis=0), np.zeros((n, units), F32)
    u = 0
    for start, count in zip(starts[:-1], counts):
        xg = x2d[start : start + count]
        k = og.cdiv(count, ofb.BLOCK)
        data, scale = ofb.quantize_2d(xg, q_dtype, use_2d, power_2, eps)
        row[start : start + count] = u8(data).reshape(count, n)
        if use_2d:
            data_t = data.T
            row_s[u : u + k], col_s[:, u : u + k] = scale, scale.T
        else:
            data_t, scale_t = ofb.quantize_2d(np.ascontiguousarray(xg.T), q_dtype, False,
                                              power_2, eps)
            row_s[start : start + count], col_s[:, u : u + k] = scale, scale_t
        col[start * n : (start + count) * n] = u8(np.ascontiguousarray(data_t)).reshape(-1)
        u += k
    return row, row_s, col, col_s


def _check_layout(t, x, sizes, q, what, rows_per_unit=1):
    x2d = np.asarray(x).reshape(-1, np.asarray(x).shape[-1])
    row, row_s, col, col_s = oracle_layout(x2d, sizes, q.q_dtype, q.use_2d, q.power_2_scales,
                                           q.amax_epsilon, rows_per_unit)
    assert_same_bytes(u8(t.rowwise.data).reshape(row.shape), row, f"{what} rowwise data")
    assert_same_bytes(t.rowwise.scale_inv, row_s, f"{what} rowwise scale_inv")
    assert_same_bytes(u8(t.colwise.data), col, f"{what} colwise data")
    assert_same_bytes(t.colwise.scale_inv, col_s, f"{what} colwise scale_inv")
    for part in (t.rowwise, t.colwise):
        assert part.data.dtype == jnp.dtype(q.q_dtype) and part.scale_inv.dtype == jnp.float32
        assert_same_bytes(part.amax, np.zeros(len(sizes), F32), f"{what} amax")


CASES = [  # (block, x dtype, q_dtype, power_2_scales, amax_epsilon)
    (block, *case)
    for block in BLOCKS
    for case in ((jnp.bfloat16, E4M3, True, 0.0), (jnp.float32, E5M2, False, 0.0))
] + [("1x128", jnp.float32, E4M3, False, 1e-3)]


@pytest.mark.parametrize("block,dtype,q_dtype,power_2,eps", CASES)
def test_every_buffer_matches_the_dense_oracle_per_group(block, dtype, q_dtype, power_2, eps):
    x = _special_input(dtype)
    q = eqq.Float8BlockQuantizer(q_dtype, block, power_2, eps)
    sizes = jnp.asarray(SIZES, jnp.int32)
    t = eqq.grouped_quantize(jnp.asarray(x), sizes, q, check=False)
    what = f"{block} {jnp.dtype(dtype).name} {jnp.dtype(q_dtype).name} p2={power_2} eps={eps}"
    _check_layout(t, x, SIZES, q, what)

    # Each group is the dense op on its rows: group_part, scale_inv_for_group, dequantize.
    starts, counts = og.group_offsets(SIZES, M)
    full = np.asarray(t.dequantize())
    full_col = np.asarray(t.colwise.dequantize())
    assert full.dtype == np.dtype(dtype) and full.shape == x.shape
    use_2d = block == "128x128"
    for g, (start, count) in enumerate(zip(starts[:-1], counts)):
        xg = x[start : start + count]
        o = ofb.quantize(xg, q_dtype, 1, use_2d, power_2, eps)
        for name, part, key in (("rowwise", t.rowwise, "row"), ("colwise", t.colwise, "col")):
            dense = part.group_part(g)
            assert_same_bytes(u8(dense.data), u8(o[key]), f"{what} group {g} {name} data")
            assert_same_bytes(dense.scale_inv, o[f"{key}_scale"], f"{what} group {g} {name} s")
            assert_same_bytes(part.scale_inv_for_group(g), o[f"{key}_scale"], f"{what} {g}")
            assert dense.scaling_mode == q.scaling_mode and dense.is_colwise == (key == "col")
        want = ofb.dequantize_2d(o["row"], o["row_scale"], use_2d, np.dtype(dtype))
        assert_same_bytes(full[start : start + count], want, f"{what} group {g} dequantize")
        want_col = ofb.dequantize_2d(o["col"], o["col_scale"], use_2d, np.dtype(dtype)).T
        assert_same_bytes(full_col[start : start + count], want_col, f"{what} group {g} col dq")
    assert_same_bytes(full[starts[-1]:], np.zeros((M - starts[-1], N), dtype), "past the sum")
    assert_same_bytes(full_col[starts[-1]:], np.zeros((M - starts[-1], N), dtype), "past (col)")
    assert_same_bytes(t.scale_inv_for_group(3), t.rowwise.scale_inv_for_group(3), "pair")


def test_dequantize_round_trip_is_within_half_an_fp8_step():
    x = jnp.asarray(random_input((M, N), jnp.float32, seed=3))
    t = eqq.grouped_quantize(x, jnp.asarray(SIZES, jnp.int32), eqq.Float8BlockQuantizer(),
                             check=False)
    y, xn = np.asarray(t.dequantize(jnp.float32)), np.asarray(x)
    # E4M3 keeps 4 significant bits: |error| <= 2^-4 |x|, or half its smallest subnormal
    # (2^-9) times the block's scale_inv near 0.
    inside = slice(0, sum(SIZES))
    step = np.repeat(np.asarray(t.rowwise.scale_inv), 128, axis=1)[:, :N] * 2.0**-10
    bound = 2.0**-4 * np.abs(xn[inside]) + step[inside]
    assert np.all(np.abs(y[inside] - xn[inside]) <= bound)
    assert y.dtype == np.float32 and np.all(y[sum(SIZES):] == 0)


@pytest.mark.parametrize("block", BLOCKS)
def test_one_layout_and_rank_3_tokens(block):
    """ROWWISE or COLWISE alone gives that part of ROWWISE_COLWISE; `[M, 2, N]` tokens
    (rows_per_unit 2: group g has 2 * sizes[g] rows of the 2-D view)."""
    x = jnp.asarray(random_input((200, 2, 128), jnp.bfloat16, seed=4))
    sizes = jnp.asarray([70, 0, 129, 1], jnp.int32)
    both = eqq.grouped_quantize(x, sizes, eqq.Float8BlockQuantizer(block=block))
    _check_layout(both, x.reshape(400, 128), [140, 0, 258, 2],
                  eqq.Float8BlockQuantizer(block=block), f"rank 3 {block}")
    for layout in (eqq.QuantizeLayout.ROWWISE, eqq.QuantizeLayout.COLWISE):
        q = eqq.Float8BlockQuantizer(block=block, q_layout=layout)
        one = eqq.grouped_quantize(x, sizes, q)
        name = "rowwise" if layout == eqq.QuantizeLayout.ROWWISE else "colwise"
        other = "colwise" if name == "rowwise" else "rowwise"
        assert getattr(one, other) is None
        for a, b in zip(jax.tree.leaves(getattr(one, name)), jax.tree.leaves(getattr(both, name))):
            assert_same_bytes(u8(a), u8(b), f"{block} {name} alone")


def test_weight_like_input_is_one_dense_quantize_per_group():
    """`group_sizes=None` on `[G, K, N]`: each group is a dense `(K, N)` matrix, so 128x128
    tiles give the parts `jax.vmap(quantize)`'s values."""
    w = jnp.asarray(random_input((3, 200, 136), jnp.float32, seed=5))
    q = eqq.Float8BlockQuantizer(block="128x128")
    t = eqq.grouped_quantize(w, None, q)
    dense = jax.vmap(lambda a: eqq.quantize(a, q, 1))(w)
    for g in range(3):
        for name in ("rowwise", "colwise"):
            got = getattr(t, name).group_part(g)
            want = jax.tree.map(lambda a, g=g: a[g], getattr(dense, name))
            assert_same_bytes(u8(got.data), u8(want.data), f"{name} {g} data")
            assert_same_bytes(got.scale_inv, want.scale_inv, f"{name} {g} scales")
    assert_same_bytes(t.dequantize(), jax.vmap(lambda d: d.dequantize())(dense), "dequantize")


def test_dbias_is_the_canonical_grouped_dbias():
    x = jnp.asarray(random_input((M, N), jnp.bfloat16, seed=6))
    sizes = jnp.asarray(SIZES, jnp.int32)
    t, db = eqq.grouped_quantize_dbias(x, sizes, eqq.Float8BlockQuantizer(), check=False)
    assert_same_bytes(db, eqq.grouped_dbias(x, sizes, check=False), "dbias")
    _, db_mx = eqq.grouped_quantize_dbias(x, sizes, eqq.BlockScaleQuantizer(), check=False)
    assert_same_bytes(db, db_mx, "dbias as MXFP8's")
    assert_same_bytes(t.rowwise.data, eqq.grouped_quantize(
        x, sizes, eqq.Float8BlockQuantizer(), check=False).rowwise.data, "tensor")


def test_bad_input():
    """Bad sizes are refused as for every format; impl='ffi' is refused where no kernel serves
    (CUDA, checked on the lowering, which needs no GPU), never a silent fallback."""
    x = jnp.asarray(random_input((256, 128), jnp.float32, seed=7))
    sizes = jnp.asarray([100, 156], jnp.int32)
    q = eqq.Float8BlockQuantizer()
    with pytest.raises(ValueError, match=r"group_sizes must be non-negative and sum to "
                                         r"x.shape\[0\] = 256, got \[100, 100\]"):
        eqq.grouped_quantize(x, jnp.asarray([100, 100], jnp.int32), q)
    f = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, impl="ffi", check=False))
    with pytest.raises(RuntimeError, match=r"impl='ffi' was requested for "
                                           r"'grouped_fp8_block_quantize' on cuda, where it "
                                           r"has no compiled kernel yet"):
        f.trace(x, sizes).lower(lowering_platforms=("cuda",))


KERNEL_CASES = [  # (block, x dtype, q_dtype, power_2_scales, amax_epsilon, sizes, rows)
    ("1x128", jnp.bfloat16, E4M3, False, 0.0, SIZES, M),
    ("128x128", jnp.float16, E5M2, True, 0.0, SIZES, M),
    ("1x128", jnp.float32, E4M3, True, 1e-3, (400, 0, 0), M),  # one group: the dense op
    ("128x128", jnp.float32, E4M3, False, 2.5, (3, 500, 2), M),  # clamped past R
    ("1x128", jnp.bfloat16, E5M2, False, 0.0, (0, 0), M),  # no rows in any group
    ("128x128", jnp.bfloat16, E4M3, False, 0.0, (0, 0, 0), 0),  # no rows at all
]


@pytest.mark.parametrize("block,dtype,q_dtype,power_2,eps,sizes,rows", KERNEL_CASES)
def test_cpu_kernel_is_bit_exact_with_the_reference(block, dtype, q_dtype, power_2, eps, sizes,
                                                    rows):
    """The CPU kernel (impl='ffi') against the pure-JAX composition (impl='reference'): every
    buffer, each layout alone and both, eager and under vmap (the kernel's batch dim)."""
    x = jnp.asarray(_special_input(dtype)[:rows])
    gs = jnp.asarray(sizes, jnp.int32)
    what = f"{block} {jnp.dtype(dtype).name} {jnp.dtype(q_dtype).name} sizes={sizes} R={rows}"
    # Each layout alone on the main sizes; both at once on every case.
    layouts = [eqq.QuantizeLayout.ROWWISE_COLWISE]
    if sizes == SIZES:
        layouts += [eqq.QuantizeLayout.ROWWISE, eqq.QuantizeLayout.COLWISE]
    for layout in layouts:
        q = eqq.Float8BlockQuantizer(q_dtype, block, power_2, eps, q_layout=layout)
        run = {impl: jax.jit(lambda x, s, impl=impl: eqq.grouped_quantize(
            x, s, q, impl=impl, check=False)) for impl in ("ffi", "reference")}
        _same(run["ffi"](x, gs), run["reference"](x, gs), f"{what} {layout}")
        hlo = {impl: f.lower(x, gs).as_text() for impl, f in run.items()}
        assert "eqx_quant_grouped_fp8_block_quantize_cpu" in hlo["ffi"]
        assert "eqx_quant_grouped_fp8_block_quantize_cpu" not in hlo["reference"]
    if rows == 0:
        return
    xs = jnp.stack([x, x[::-1] * 3])
    per = jnp.stack([gs, jnp.roll(gs, 1)])
    q = eqq.Float8BlockQuantizer(q_dtype, block, power_2, eps)
    batched = {impl: jax.jit(jax.vmap(lambda x, s, impl=impl: eqq.grouped_quantize(
        x, s, q, impl=impl, check=False)))(xs, per) for impl in ("ffi", "reference")}
    _same(batched["ffi"], batched["reference"], f"{what} vmap")


# ---- transforms ------------------------------------------------------------------------------

T_SIZES = (0, 130, 1, 182, 7)  # sum 320


def _t_inputs(seed=0, dtype=jnp.bfloat16):
    return (jnp.asarray(random_input((320, 256), dtype, seed=seed)),
            jnp.asarray(T_SIZES, jnp.int32))


def _same(a, b, what):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb), what
    for i, (u, v) in enumerate(zip(la, lb)):
        assert_same_bytes(u8(u), u8(v), f"{what} leaf {i}")


@pytest.mark.parametrize("block,transform", [("1x128", "vmap"), ("128x128", "scan")])
def test_jit_vmap_and_scan_equal_the_eager_call(block, transform):
    """jit, and vmap over independent problems (own x, own sizes) or scan over steps."""
    q = eqq.Float8BlockQuantizer(block=block)
    x, sizes = _t_inputs()
    xs = jnp.stack([x, _t_inputs(1)[0], _t_inputs(2)[0]])
    per = jnp.asarray([T_SIZES, T_SIZES[::-1], (320, 0, 0, 0, 0)], jnp.int32)
    eager = [eqq.grouped_quantize(xs[i], per[i], q) for i in range(3)]
    if transform == "vmap":  # the pure-JAX composition equals the kernel "auto" runs
        jitted = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, impl="reference"))
        _same(jitted(x, sizes), eager[0], "jit")
        batched = jax.jit(jax.vmap(lambda x, s: eqq.grouped_quantize(x, s, q)))(xs, per)
    else:
        def step(carry, inputs):
            return carry, eqq.grouped_quantize(*inputs, q)

        batched = jax.jit(lambda xs, per: jax.lax.scan(step, 0, (xs, per))[1])(xs, per)
    dq = jax.jit(jax.vmap(lambda t: t.dequantize()))(batched)
    for i in range(3):
        _same(jax.tree.map(lambda a, i=i: a[i], batched), eager[i], f"{transform} example {i}")
        assert_same_bytes(dq[i], eager[i].dequantize(), f"{transform} dequantize {i}")


@pytest.mark.parametrize("block", BLOCKS)
def test_grad_is_straight_through(block):
    x, _ = _t_inputs(dtype=jnp.float32)
    sizes = jnp.asarray([0, 130, 1, 150, 7], jnp.int32)  # 12 rows past the sum
    q = eqq.Float8BlockQuantizer(block=block)
    w = jnp.asarray(random_input(x.shape, jnp.float32, seed=5))
    want = np.asarray(w).copy()
    want[288:] = 0
    for part in ("rowwise", "colwise"):
        def loss(x, part=part):
            t = eqq.grouped_quantize(x, sizes, q, check=False)
            return jnp.sum(getattr(t, part).dequantize() * w)

        assert_same_bytes(jax.jit(jax.grad(loss))(x), want, f"{block} {part} grad")


def _mesh(shape, names, axis_type):
    if jax.device_count() < int(np.prod(shape)):
        pytest.skip(f"needs {int(np.prod(shape))} (fake) devices")
    return jax.make_mesh(shape, names, axis_types=(axis_type,) * len(shape))


def test_sharded_jit_auto_and_explicit_axes_are_bit_identical():
    """The partition keeps each example's rows and columns whole (the scale matrices span
    the tensor), 1x128 and 128x128 alike; the result is the unsharded one."""
    q = eqq.Float8BlockQuantizer()
    x, sizes = _t_inputs()
    f = jax.jit(lambda x, s: eqq.grouped_quantize_dbias(x, s, q))
    expected = f(x, sizes)
    mesh = _mesh((2, 4), ("a", "b"), AxisType.Auto)
    _same(f(jax.device_put(x, NamedSharding(mesh, P("a", "b"))), sizes), expected, "auto axes")

    mesh = _mesh((4, 2), ("data", "model"), AxisType.Explicit)

    def loss(x, s):
        t, db = eqq.grouped_quantize_dbias(x, s, q)
        y = t.dequantize().astype(jnp.float32) * jnp.arange(256, dtype=jnp.float32)[None, :]
        return jnp.sum(y) + jnp.sum(db.astype(jnp.float32))

    with jax.set_mesh(mesh):
        xs = jax.device_put(x, NamedSharding(mesh, P("data", "model")))
        got = f(xs, sizes)
        dequantized = jax.jit(lambda t: t[0].dequantize())(got)
        grad = jax.jit(jax.grad(loss))(xs, sizes)
    _same(got, expected, "explicit")
    assert_same_bytes(dequantized, expected[0].dequantize(), "explicit dequantize")
    assert jax.typeof(grad).sharding.spec == P("data", "model")
    want = np.tile(np.arange(256, dtype=F32) + 1, (320, 1)).astype(jnp.bfloat16)
    assert_same_bytes(np.asarray(grad), want, "explicit straight-through grad")


def test_shard_map_expert_parallel_with_grad():
    """Each of 4 devices quantizes its own tokens with its local group sizes (two experts
    each); forward and straight-through gradient equal the per-device call."""
    mesh = _mesh((4,), ("ep",), AxisType.Auto)
    q = eqq.Float8BlockQuantizer()
    local_sizes = np.asarray([[10, 150], [0, 160], [129, 31], [160, 0]], np.int32)
    x = jnp.asarray(random_input((4 * 160, 256), jnp.float32, seed=3))
    w = jnp.asarray(random_input((4 * 160, 256), jnp.float32, seed=4))
    sizes = jnp.asarray(local_sizes.reshape(-1))

    def local(x, s):
        t = eqq.grouped_quantize(x, s, q)
        return t.rowwise.data, t.rowwise.scale_inv, t.colwise.data, t.colwise.scale_inv

    def local_loss(x, s, w):
        t = eqq.grouped_quantize(x, s, q)
        return jnp.sum(t.colwise.dequantize() * w)

    specs = dict(mesh=mesh, in_specs=(P("ep"), P("ep")), out_specs=P("ep"))
    out = jax.jit(jax.shard_map(local, **specs))(x, sizes)
    grad_fn = jax.shard_map(jax.grad(local_loss), mesh=mesh, in_specs=(P("ep"),) * 3,
                            out_specs=P("ep"))
    grad = jax.jit(grad_fn)(x, sizes, w)
    for d in range(4):
        rows = slice(160 * d, 160 * (d + 1))
        want = local(x[rows], jnp.asarray(local_sizes[d]))
        for i, (got, exp) in enumerate(zip(out, want)):
            n = exp.shape[0]
            assert_same_bytes(u8(got[n * d : n * (d + 1)]), u8(exp), f"device {d} output {i}")
    assert_same_bytes(grad, w, "shard_map straight-through grad")


# ---- GEMMs and layers ------------------------------------------------------------------------

G_SIZES = [0, 130, 1, 150, 7]  # 12 rows past the sum
GM, GK, GN = 300, 256, 160


def _groups(sizes=G_SIZES):
    starts, counts = og.group_offsets(sizes, GM)
    return [(g, slice(s, s + c)) for g, (s, c) in enumerate(zip(starts[:-1], counts))]


def _f64(a):
    return np.asarray(a, np.float64)


def test_grouped_gemm_and_wgrad_values():
    """1x128 weights here (the layer test below has 128x128 ones)."""
    x = jnp.asarray(random_input((GM, GK), jnp.float32, seed=11))
    dy = jnp.asarray(random_input((GM, GN), jnp.float32, seed=12))
    w = jnp.asarray(random_input((5, GK, GN), jnp.float32, seed=13, scale=0.1))
    sizes = jnp.asarray(G_SIZES, jnp.int32)
    q = eqq.Float8BlockQuantizer(power_2_scales=False)  # values bfloat16 cannot hold
    qw = eqq.Float8BlockQuantizer(power_2_scales=False)

    @jax.jit  # one program (eagerly, each op would compile on its own)
    def run(x, dy, w):
        gx = eqq.grouped_quantize(x, sizes, q, check=False)
        gdy = eqq.grouped_quantize(dy, sizes, q, check=False)
        wk = jax.vmap(lambda w: eqq.quantize(w, qw, 1))(w)
        products = (eqq.grouped_gemm(gx, wk, out_dtype=jnp.float32),
                    eqq.grouped_gemm(gdy, wk, rhs_contracting=1),
                    eqq.grouped_wgrad(gx, gdy, out_dtype=jnp.float32, check=False))
        values = (gx.rowwise.dequantize(), gdy.rowwise.dequantize(), gx.colwise.dequantize(),
                  gdy.colwise.dequantize(),
                  jax.vmap(lambda t: t.dequantize())(wk.colwise),  # blocks along K
                  jax.vmap(lambda t: t.dequantize())(wk.rowwise))  # blocks along N
        return products, values

    (y, dx, dk), values = run(x, dy, w)
    a, c, a_col, c_col, wk_col, wk_row = (_f64(v) for v in values)
    for g, rows in _groups():
        assert_product(y[rows], a[rows], wk_col[g], ((1,), (0,)), f"forward group {g}")
        assert_product(dx[rows], c[rows], wk_row[g], ((1,), (1,)), f"dgrad group {g}")
        assert_product(dk[g], a_col[rows], c_col[rows], ((0,), (0,)), f"wgrad group {g}")
    assert np.all(np.asarray(y)[288:] == 0) and np.all(np.asarray(dx)[288:] == 0)
    assert_same_bytes(dk[0], np.zeros((GK, GN), F32), "empty group's wgrad")


def test_grouped_dense_and_grouped_linear_forward_and_gradients():
    recipe = qnn.Float8BlockScaling(power_2_scales=False)
    layer = qnn.GroupedLinear(5, GK, GN, dtype=jnp.float32, recipe=recipe, key=jax.random.key(2))
    x = jnp.asarray(random_input((GM, GK), jnp.float32, seed=21))
    ct = jnp.asarray(random_input((GM, GN), jnp.float32, seed=22))
    layer_sizes = [0, 130, 1, 162, 7]  # the layer checks that they sum to the tokens
    sizes = jnp.asarray(layer_sizes, jnp.int32)
    qs = recipe.grouped_quantizers(None, 5)
    assert qs.x.block == qs.grad.block == "1x128" and qs.kernel.block == "128x128"


    @eqx.filter_jit  # one program (eagerly, each op would compile on its own)
    def run(layer, x):
        y, vjp = jax.vjp(lambda m, x: m(x, sizes), layer, x)
        y_dense = eqq.grouped_dense(x, layer.weight, sizes, layer.bias, quantizers=qs)
        # The operands every GEMM reads, quantized as the layer does.
        gx = eqq.grouped_quantize(x, sizes, qs.x)
        gdy = eqq.grouped_quantize(ct, sizes, qs.grad)
        wk = jax.vmap(lambda w: eqq.quantize(w, qs.kernel, 1))(layer.weight)
        values = (gx.rowwise.dequantize(), gx.colwise.dequantize(), gdy.rowwise.dequantize(),
                  gdy.colwise.dequantize(),
                  jax.vmap(lambda t: t.dequantize())(wk.rowwise))  # 128x128: copies alike
        return y, y_dense, vjp(ct), values, eqq.grouped_dbias(ct, sizes)

    y, y_dense, (g_layer, g_x), values, want_db = run(layer, x)
    assert_same_bytes(y, y_dense, "GroupedLinear = grouped_dense")
    a, a_col, c, c_col, wv = (_f64(v) for v in values)
    bias = _f64(layer.bias)
    for g, rows in _groups(layer_sizes):
        # float32 sums of K products, then one rounding of the bias' addition.
        ref = a[rows] @ wv[g]
        bound = sum_error(GK) * (np.abs(a[rows]) @ np.abs(wv[g]))
        bound += 2.0**-24 * (np.abs(ref) + np.abs(bias[g]))
        assert np.all(np.abs(_f64(y[rows]) - (ref + bias[g])) <= bound), f"y group {g}"
        assert_product(g_x[rows], c[rows], wv[g], ((1,), (1,)), f"dx group {g}")
        assert_product(g_layer.weight[g], a_col[rows], c_col[rows], ((0,), (0,)), f"dw {g}")
        assert_same_bytes(g_layer.bias[g], want_db[g], f"dbias group {g}")
    assert_same_bytes(g_layer.weight[0], np.zeros((GK, GN), F32), "empty expert's grad")
