"""Grouped (MoE) quantization, byte for byte against the NumPy oracle `tests.oracle.grouped`
(docs/grouped.md): the oracle's own checks, full data / scale / amax buffers of both
implementations on ragged group sizes (empty, 1, 31, 33, 127, 129, one giant group, ...) in
every mode and layout, the exactness contract against the dense `quantize`, and weight-like
and N-d inputs. Cases and machinery: tests/support/grouped.py."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from tests.oracle import blocks as ob
from tests.oracle import fp8 as ot
from tests.oracle import grouped as og
from tests.support.bytes import assert_same_bytes, f32_bits_equal, u8
from tests.support.dtypes import X_DTYPES
from tests.support.grouped import (
    DELAYED_SCALES,
    KEY,
    MODES,
    PATTERNS,
    REF_MODES,
    REF_SHAPE,
    REFERENCE_CASES,
    G,
    L,
    M,
    check_against_oracle,
    dense_quantizer,
    expected,
    make_input,
    make_quantizer,
    run,
)

# --------------------------------------------------------------------------------------------
# Oracle self-checks (no eqx_quant involved)


def test_oracle_worst_case_length_formula():
    assert og.rowwise_scale_length(256, 1024, 8, 32) == 15360  # TE §2.4's example
    assert og.colwise_scale_length(256, 1024, 8, 32) == 15360
    for rows in range(0, 10):
        for groups in range(1, 4):
            for u in (1, 2, 3, 4):
                assert og.worst_case_units(rows, groups, u) == og.worst_case_units_brute(
                    rows, groups, u
                ), (rows, groups, u)


def test_oracle_swizzle_and_tree_sum():
    ii, jj = np.meshgrid(np.arange(384), np.arange(16), indexing="ij")
    np.testing.assert_array_equal(og.swizzle_offset(ii, jj, 16), ob.swizzle_offset(ii, jj, 16))
    # The offsets of a padded (P, Q) region are a permutation of range(P * Q).
    assert sorted(og.swizzle_offset(ii, jj, 16).reshape(-1)) == list(range(384 * 16))
    rng = np.random.default_rng(0)
    for r, c in [(1, 1), (130, 5), (256, 8), (3, 3)]:
        t = rng.integers(1, 255, (r, c)).astype(np.uint8)
        np.testing.assert_array_equal(og.swizzled_region(t), ob.swizzle_scales(t, True))
        np.testing.assert_array_equal(og.unswizzle_region(og.swizzled_region(t), 0, (r, c)), t)
    for n in [0, 1, 2, 3, 5, 7, 31, 33, 128, 129, 321]:
        v = (rng.standard_normal((n, 4)) * 10.0 ** rng.uniform(-6, 6, (n, 4))).astype(np.float32)
        f32_bits_equal(og.tree_sum_rows(v), ot.tree_sum(v, 0), f"tree n={n}")
    # The tree is not the sequential sum: (1e8 + 1) + (-1e8 + 1) = 0, while
    # ((1e8 + 1) - 1e8) + 1 = 1 in float32.
    v = np.array([[1e8], [1.0], [-1e8], [1.0]], np.float32)
    assert og.tree_sum_rows(v)[0] == 0.0
    assert v[:, 0].cumsum(dtype=np.float32)[-1] == 1.0


def test_oracle_offsets_clamp():
    s, r = og.group_offsets([3, -2, 10, 4], 8)
    np.testing.assert_array_equal(s, [0, 3, 3, 8, 8])
    np.testing.assert_array_equal(r, [3, 0, 5, 0])
    s, r = og.group_offsets([1, 2], 12, rows_per_unit=4)
    np.testing.assert_array_equal(s, [0, 4, 12])


def test_oracle_single_group_is_dense_swizzle():
    x = make_input((200, 72), jnp.float32, seed=1)
    o = og.mxfp8(x, [200], 1, ob.E4M3, True, True)
    rs, cs = ob.mxfp8_quantize_rowwise(x, ob.E4M3)[1], ob.mxfp8_quantize_colwise(x, ob.E4M3)[1]
    np.testing.assert_array_equal(o["row_scale"][: 256 * 4], ob.swizzle_scales(rs, True))
    np.testing.assert_array_equal(o["col_scale"][: 128 * 8], ob.swizzle_scales(cs, False))
    assert not o["row_scale"][256 * 4 :].any() and not o["col_scale"][128 * 8 :].any()


# --------------------------------------------------------------------------------------------
# Full buffers against the oracle


# Every mode on every pattern; all three input dtypes for one mode of each op family.
ALL_CASES = [(n, d) for n in ("current", "mxfp8_e4m3", "nvfp4") for d in X_DTYPES]
ALL_CASES += [("delayed", "f16"), ("mxfp8_e5m2", "f32"), ("nvfp4_2d", "bf16"), ("nvfp4_sr", "f16")]


@pytest.mark.parametrize("name,dtype", ALL_CASES)
def test_ffi_all_patterns_rowwise_colwise(name, dtype):
    """N = 72: not a multiple of 16 or 32 (partial blocks along N)."""
    shape = (M, 72)
    x = make_input(shape, X_DTYPES[dtype], seed=list(MODES).index(name) * 3 + len(dtype))
    for sizes in PATTERNS:
        gt = run(x, sizes, name, L.ROWWISE_COLWISE, "ffi")
        o = expected(x, sizes, name, L.ROWWISE_COLWISE)
        check_against_oracle(gt, o, name, shape, -1, sizes, f"ffi {dtype} {sizes}")


@pytest.mark.parametrize("layout", [L.ROWWISE, L.COLWISE], ids=lambda v: v.name)
@pytest.mark.parametrize("name", ["delayed", "mxfp8_e5m2", "nvfp4_2d", "nvfp4_sr"])
def test_ffi_single_layouts(name, layout):
    shape = (M, 48)  # a multiple of 16, not of 32
    x = make_input(shape, jnp.bfloat16, seed=5)
    for sizes in PATTERNS[:3] + PATTERNS[5:6]:
        gt = run(x, sizes, name, layout, "ffi")
        o = expected(x, sizes, name, layout)
        check_against_oracle(gt, o, name, shape, -1, sizes, f"ffi {layout.name} {sizes}")


@pytest.mark.parametrize("name", REF_MODES)
def test_reference_matches_oracle(name):
    dtype, layout = REFERENCE_CASES[name]
    x = make_input(REF_SHAPE, X_DTYPES[dtype], seed=9)
    for sizes in (PATTERNS[0], PATTERNS[1], PATTERNS[4], PATTERNS[6]):
        gt = run(x, sizes, name, layout, "reference")
        o = expected(x, sizes, name, layout)
        check_against_oracle(gt, o, name, REF_SHAPE, -1, sizes, f"reference {sizes}")


def test_reference_sr_both_parts_match_oracle():
    """NVFP4 SR through the reference with both parts (REFERENCE_CASES runs it rowwise
    only): each group's colwise bytes sit at the indices of its own T layout (N, rows_g)."""
    x = make_input(REF_SHAPE, X_DTYPES["f32"], seed=10)
    for sizes in (PATTERNS[0], PATTERNS[5]):  # rows_g of many residues mod 8
        gt = run(x, sizes, "nvfp4_sr", L.ROWWISE_COLWISE, "reference")
        o = expected(x, sizes, "nvfp4_sr", L.ROWWISE_COLWISE)
        check_against_oracle(gt, o, "nvfp4_sr", REF_SHAPE, -1, sizes, f"reference sr {sizes}")


def test_random_patterns_many_groups():
    """G = 13 random sizes with many zeros (one compiled function per mode)."""
    rng = np.random.default_rng(21)
    shape = (260, 33)
    x = make_input(shape, jnp.float32, seed=4)
    patterns = []
    for _ in range(3):
        cuts = np.sort(rng.integers(0, shape[0] + 1, 12))
        sizes = np.diff(np.concatenate([[0], cuts, [shape[0]]]))
        sizes[rng.random(13) < 0.3] = 0
        sizes[-1] += shape[0] - sizes.sum()
        patterns.append([int(s) for s in sizes])
    for name in ("delayed", "mxfp8_e5m2", "nvfp4_2d", "nvfp4_sr"):
        for sizes in patterns:
            gt = run(x, sizes, name, L.ROWWISE_COLWISE, "ffi")
            o = expected(x, sizes, name, L.ROWWISE_COLWISE)
            check_against_oracle(gt, o, name, shape, -1, sizes, f"G=13 {sizes}")


def test_under_jit_matches_oracle():
    """Group sizes known only on the device: one jitted function, several size vectors."""
    shape = (M, 40)
    x = make_input(shape, jnp.bfloat16, seed=8)
    q = make_quantizer("nvfp4", L.ROWWISE_COLWISE)
    f = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, impl="ffi"))
    for sizes in PATTERNS[:2]:
        gt = f(jnp.asarray(x), jnp.asarray(sizes, jnp.int32))
        o = expected(x, sizes, "nvfp4", L.ROWWISE_COLWISE)
        check_against_oracle(gt, o, "nvfp4", shape, -1, sizes, "jit")


# --------------------------------------------------------------------------------------------
# The exactness contract: every group equals the dense quantize of its rows


def _check_group_parts(gt, x2, sizes, name, layout, u=1):
    """group_part(g) / scale_inv_for_group(g) of every group against the dense quantize of
    the group's rows. The dense side uses the compiled kernels (milliseconds to compile),
    which equal the dense reference bit for bit (test_block_transforms, test_fp8_numerics)."""
    gq = make_quantizer(name, layout, len(sizes))
    start, rows = og.group_offsets(sizes, x2.shape[0], u)
    for g in range(len(sizes)):
        xg = jnp.asarray(x2[start[g] : start[g + 1]])
        kw = {"key": jax.random.fold_in(KEY, g)} if MODES[name][1] else {}
        dense = eqq.quantize(xg, dense_quantizer(name, gq, g), 1, impl="ffi", **kw)
        for tag in ("rowwise", "colwise"):
            part, ref = getattr(gt, tag), getattr(dense, tag)
            if ref is None:
                assert part is None
                continue
            got = part.group_part(g)
            w = f"{name} {tag} group {g} ({rows[g]} rows)"
            assert isinstance(got, eqq.ScaledTensor1x), w
            assert got.data.shape == ref.data.shape and got.data.dtype == ref.data.dtype, w
            assert got.scale_inv.shape == ref.scale_inv.shape, w
            assert_same_bytes(u8(got.data), u8(ref.data), f"{w} data")
            assert_same_bytes(u8(got.scale_inv), u8(ref.scale_inv), f"{w} scale_inv")
            f32_bits_equal(got.amax, ref.amax, f"{w} amax")
            assert (got.scaling_mode, got.data_layout) == (ref.scaling_mode, ref.data_layout), w
            if name not in ("current", "delayed"):
                assert_same_bytes(
                    u8(part.scale_inv_for_group(g)), u8(ref.scale_inv), f"{w} unswizzled"
                )


GP_SIZES = [33, 0, 129, 159]  # M = 321, G = 4


@pytest.mark.parametrize("name", ["delayed", "mxfp8_e4m3", "nvfp4_sr"])
def test_group_part_equals_dense_quantize(name):
    shape = (M, 72)
    x = make_input(shape, jnp.bfloat16, seed=31)
    gt = run(x, GP_SIZES, name, L.ROWWISE_COLWISE, "ffi")
    _check_group_parts(gt, x, GP_SIZES, name, L.ROWWISE_COLWISE)


def test_grouped_delayed_quantizer_group_and_update():
    gq = make_quantizer("delayed", L.ROWWISE_COLWISE)
    for g in range(G):
        q = gq.group(g)
        assert isinstance(q, eqq.DelayedScaleQuantizer)
        f32_bits_equal(q.scale, DELAYED_SCALES[g : g + 1])
    hist = np.abs(np.random.default_rng(3).standard_normal((G, 4))).astype(np.float32)
    gq = eqq.GroupedDelayedScaleQuantizer(
        G, jnp.float8_e5m2, amax_history_len=4, margin=1.0,
        scale=jnp.asarray(DELAYED_SCALES[:G]), amax_history=jnp.asarray(hist),
    )
    new_amax = np.array([0.0, 5.0, np.inf, np.nan, 1e-3, 100.0], np.float32)
    # (jitted: the eager update dispatches dozens of small ops, seconds on a loaded machine)
    nq = eqx.filter_jit(lambda q, a: q.update(a))(gq, jnp.asarray(new_amax))
    for g in range(G):
        h, s = ot.delayed_update(hist[g], DELAYED_SCALES[g : g + 1], new_amax[g], ob.E5M2, 1.0)
        f32_bits_equal(np.asarray(nq.scale).reshape(G, -1)[g], s, f"scale {g}")
        f32_bits_equal(np.asarray(nq.amax_history)[g], h, f"history {g}")


# --------------------------------------------------------------------------------------------
# Weight-like [G, K, N] and N-d inputs


@pytest.mark.parametrize("name", ["current", "mxfp8_e5m2", "nvfp4_2d", "nvfp4_sr"])
def test_weight_like_group_sizes_none(name):
    shape = (4, 40, 72)  # K = 40: partial 32-row blocks and 16-row tiles in every group
    x = make_input(shape, jnp.bfloat16, seed=41)
    gt = run(x, None, name, L.ROWWISE_COLWISE, "ffi", num_groups=4)
    sizes = [1, 1, 1, 1]
    o = expected(x, sizes, name, L.ROWWISE_COLWISE)
    check_against_oracle(gt, o, name, shape, -1, sizes, "weight")
    if name == "nvfp4_2d":
        _check_group_parts(gt, x.reshape(160, 72), sizes, name, L.ROWWISE_COLWISE, u=40)


# (shape, flatten_axis, sizes over axis 0)
ND_CASES = [
    ((50, 3, 40), -1, [7, 0, 30, 13]),  # U = 3, N = 40
    ((50, 3, 40), 1, [7, 0, 30, 13]),  # U = 1, N = 120
    ((20, 2, 3, 16), 2, [0, 17, 1, 2]),  # U = 2, N = 48
    ((20, 2, 3, 16), -3, [20, 0, 0, 0]),  # fa = 1
]


ND_PARAMS = [(n, *ND_CASES[0]) for n in ("delayed", "mxfp8_e4m3", "nvfp4_sr")]
ND_PARAMS += [("mxfp8_e4m3", *ND_CASES[1]), ("current", *ND_CASES[1])]
ND_PARAMS += [(n, *ND_CASES[2]) for n in ("delayed", "mxfp8_e5m2", "nvfp4_2d")]
ND_PARAMS += [("nvfp4_sr", *ND_CASES[3])]


@pytest.mark.parametrize("name,shape,fa,sizes", ND_PARAMS)
def test_nd_flatten_axis(name, shape, fa, sizes):
    x = make_input(shape, jnp.float32, seed=len(shape) + fa)
    gt = run(x, sizes, name, L.ROWWISE_COLWISE, "ffi", fa=fa)
    o = expected(x, sizes, name, L.ROWWISE_COLWISE, fa=fa)
    check_against_oracle(gt, o, name, shape, fa, sizes, f"nd {shape} fa={fa}")


def test_nd_flatten_axis_reference():
    shape, fa, sizes = ND_CASES[0]
    x = make_input(shape, jnp.float32, seed=2)
    gt = run(x, sizes, "mxfp8_e4m3", L.ROWWISE_COLWISE, "reference", fa=fa)
    o = expected(x, sizes, "mxfp8_e4m3", L.ROWWISE_COLWISE, fa=fa)
    check_against_oracle(gt, o, "mxfp8_e4m3", shape, fa, sizes, "nd reference")


def test_nd_group_part():
    """group_part of an N-d x is the group's rows of the 2-D view, (rows_g, N)."""
    shape, fa, sizes = ND_CASES[2]
    x = make_input(shape, jnp.float32, seed=3)
    gt = run(x, sizes, "nvfp4_sr", L.ROWWISE_COLWISE, "ffi", fa=fa)
    r, n, u = og.view_2d(shape, fa)
    _check_group_parts(gt, x.reshape(r, n), sizes, "nvfp4_sr", L.ROWWISE_COLWISE, u=u)


@pytest.mark.parametrize("masked", [True, False])
def test_group_amax_both_paths(monkeypatch, masked):
    """The per-group amax of current scaling and NVFP4: a max over a mask of each group's rows
    for small G x R, a segment max above; both NaN-ignoring, 0 for empty groups, rows past
    the sum ignored, exact for subnormals."""
    from eqx_quant.reference import grouped as grouped_ref

    monkeypatch.setattr(grouped_ref, "_MASKED_GROUP_MAX_PAIRS", 1 << 30 if masked else 0)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 24)).astype(np.float32)
    x[3, 5], x[17, 0], x[30, 2] = np.nan, -np.inf, 1e30  # row 30 is past the groups' sum
    x[20:26] = 1e-42 * rng.standard_normal((6, 24))  # a group of subnormals only
    sizes = np.array([10, 0, 10, 6, 3], np.int32)  # sum 29 of 40 rows
    got = jax.jit(lambda x, s: grouped_ref.group_amax(x, s, rows_per_unit=1))(x, sizes)
    want, start = [], 0
    for size in sizes:
        rows = np.abs(x[start : start + size])
        want.append(np.nanmax(rows) if size else 0.0)
        start += size
    f32_bits_equal(np.asarray(got), np.asarray(want, np.float32), "group amax")
