"""Grouped (MoE) quantization, byte for byte against the NumPy oracle `oracle_grouped`
(docs/grouped.md): full data / scale / amax buffers of both implementations, ragged group
sizes (empty, 1, 31, 33, 127, 129, one giant group, ...), every mode and layout, the
exactness contract against the dense `quantize`, weight-like and N-d inputs, special values,
dequantize, dbias, and invalid group sizes.

Run time: the group sizes are traced, so every pattern of one (shape, mode, layout, dtype)
reuses one compiled function: tests loop over patterns instead of parametrizing over them.
The pure-JAX reference compiles for seconds per configuration, so its tests use one shape
(REF_SHAPE) and one dtype / layout per mode (REFERENCE_CASES), shared by all of them.
`group_part` and `dequantize` compile per shape eagerly; they are exercised on a few cases.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import oracle as ot
import oracle_blocks as ob
import oracle_grouped as og
import pytest
from helpers import bytes_equal, f32_bits_equal

import eqx_quant as eqq


L = eqq.QuantizeLayout
DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16}
IMPLS = ["ffi", "reference"]
KEY = jax.random.key(77)

# G = 6 patterns over M = 321 rows: sizes 1/31/33/127/129, empty groups at the start, the end
# and in between, one giant group (first / middle / last), a random draw with zeros.
M = 321
PATTERNS = [
    [1, 31, 33, 127, 129, 0],
    [0, 129, 0, 127, 33, 32],
    [0, 0, 321, 0, 0, 0],
    [321, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 321],
    [57, 0, 98, 13, 0, 153],
    [64, 64, 64, 64, 64, 1],
    [1, 1, 1, 1, 1, 316],
]
G = 6
# Delayed scaling: distinct per-group scales (powers of two and not), some saturating.
DELAYED_SCALES = np.array(
    [0.5, 3.0, 16.0, 0.0625, 1000.0, 0.3, 7.0, 1.0, 2.5, 0.01, 64.0, 1.5, 9.0, 0.7, 4.0, 0.2],
    np.float32,
)

# name -> (q_dtype of the oracle, keyed)
MODES = {
    "current": (ob.E4M3, False),
    "delayed": (ob.E5M2, False),
    "mxfp8_e4m3": (ob.E4M3, False),
    "mxfp8_e5m2": (ob.E5M2, False),
    "nvfp4": (None, False),
    "nvfp4_2d": (None, False),
    "nvfp4_sr": (None, True),
}


def make_quantizer(name, layout, num_groups=G):
    if name == "current":
        return eqq.CurrentScaleQuantizer(jnp.float8_e4m3fn, layout)
    if name == "delayed":
        scale = jnp.asarray(DELAYED_SCALES[:num_groups])
        return eqq.GroupedDelayedScaleQuantizer(
            num_groups, jnp.float8_e5m2, layout, amax_history_len=4, scale=scale
        )
    if name == "mxfp8_e4m3":
        return eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, layout)
    if name == "mxfp8_e5m2":
        return eqq.BlockScaleQuantizer(jnp.float8_e5m2, layout)
    if name == "nvfp4":
        return eqq.NVFP4Quantizer(q_layout=layout)
    if name == "nvfp4_2d":
        return eqq.NVFP4Quantizer(q_layout=layout, use_2d=True)
    if name == "nvfp4_sr":
        return eqq.NVFP4Quantizer(q_layout=layout, stochastic_rounding=True)
    raise ValueError(name)


def make_input(shape, dtype, seed=0) -> np.ndarray:
    """Normal values with a per-leading-index magnitude 2^k (k in [-6, 6]), so that groups
    (and blocks) get distinct amaxes and scales. Within f16 range."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * 3.0
    mag = (2.0 ** rng.integers(-6, 7, shape[0])).astype(np.float32)
    x *= mag.reshape((-1,) + (1,) * (len(shape) - 1))
    return np.array(jnp.asarray(x, dtype))  # a writable copy


def group_keys(key, num_groups):
    """The key words of jax.random.fold_in(key, g) (the contract's per-group key)."""
    return np.stack(
        [np.asarray(jax.random.key_data(jax.random.fold_in(key, g))) for g in range(num_groups)]
    ).astype(np.uint32)


def expected(x, sizes, name, layout, fa=-1, key=KEY):
    """The oracle's parts of grouped_quantize(x, sizes, make_quantizer(name, layout), fa)."""
    xn = np.asarray(x)
    r, n, u = og.view_2d(xn.shape, fa)
    x2 = xn.reshape(r, n)
    row, col = layout.has_rowwise, layout.has_colwise
    q_dtype = MODES[name][0]
    g = len(sizes)
    if name == "current":
        return og.tensor_scaling(x2, sizes, u, q_dtype, row, col)
    if name == "delayed":
        return og.tensor_scaling(x2, sizes, u, q_dtype, row, col, DELAYED_SCALES[:g])
    if name.startswith("mxfp8"):
        return og.mxfp8(x2, sizes, u, q_dtype, row, col)
    keys = group_keys(key, g) if MODES[name][1] else None
    return og.nvfp4(x2, sizes, u, row, col, use_2d=name == "nvfp4_2d", keys=keys)


def run(x, sizes, name, layout, impl, fa=-1, check=True, num_groups=None):
    q = make_quantizer(name, layout, num_groups or (len(sizes) if sizes is not None else G))
    kw = {"key": KEY} if MODES[name][1] else {}
    gs = None if sizes is None else jnp.asarray(np.asarray(sizes, np.int32))
    return eqq.grouped_quantize(jnp.asarray(x), gs, q, fa, check=check, impl=impl, **kw)


def _u8(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a)).view(np.uint8)


def check_against_oracle(gt, o, name, shape, fa, sizes, what=""):
    """Every buffer of both parts, byte for byte, plus the documented shapes and dtypes."""
    r, n, _ = og.view_2d(shape, fa)
    tensor = name in ("current", "delayed")
    nv = name.startswith("nvfp4")
    g = len(sizes)
    assert tuple(gt.original_shape) == tuple(shape), what
    np.testing.assert_array_equal(np.asarray(gt.group_sizes), np.asarray(sizes, np.int32))
    for tag, part in (("row", gt.rowwise), ("col", gt.colwise)):
        w = f"{what} {name} {tag}"
        if o[tag] is None:
            assert part is None, w
            continue
        assert part is not None, w
        data = np.asarray(part.data)
        flat = tag == "col" and not name.startswith("mxfp8")
        assert data.shape == ((r * n,) if flat else tuple(shape)), f"{w}: data shape {data.shape}"
        if nv:
            assert data.dtype == ml_dtypes.float4_e2m1fn, w
        else:
            assert data.dtype == MODES[name][0], w
        bytes_equal(_u8(data).reshape(-1), o[tag].reshape(-1), f"{w} data")
        if tensor:
            f32_bits_equal(part.scale_inv, o["scale_inv"], f"{w} scale_inv")
            assert np.asarray(part.scale_inv).shape == (g,), w
        else:
            sdt = ml_dtypes.float8_e4m3fn if nv else ml_dtypes.float8_e8m0fnu
            assert np.asarray(part.scale_inv).dtype == sdt, w
            bytes_equal(_u8(part.scale_inv).reshape(-1), o[f"{tag}_scale"], f"{w} scale bytes")
        assert np.asarray(part.amax).dtype == np.float32, w
        f32_bits_equal(part.amax, o["amax"], f"{w} amax")
        np.testing.assert_array_equal(np.asarray(part.group_sizes), np.asarray(sizes, np.int32))


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
ALL_CASES = [(n, d) for n in ("current", "mxfp8_e4m3", "nvfp4") for d in DTYPES]
ALL_CASES += [("delayed", "f16"), ("mxfp8_e5m2", "f32"), ("nvfp4_2d", "bf16"), ("nvfp4_sr", "f16")]


@pytest.mark.parametrize("name,dtype", ALL_CASES)
def test_ffi_all_patterns_rowwise_colwise(name, dtype):
    """N = 72: not a multiple of 16 or 32 (partial blocks along N)."""
    shape = (M, 72)
    x = make_input(shape, DTYPES[dtype], seed=list(MODES).index(name) * 3 + len(dtype))
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


REF_SHAPE = (M, 40)
# mode -> (dtype, layout) of every test on REF_SHAPE (both implementations).
REFERENCE_CASES = {
    "current": ("f32", L.ROWWISE_COLWISE),
    "delayed": ("bf16", L.COLWISE),
    "mxfp8_e4m3": ("bf16", L.ROWWISE_COLWISE),
    "mxfp8_e5m2": ("f16", L.COLWISE),
    "nvfp4": ("f16", L.ROWWISE),
    "nvfp4_2d": ("f32", L.COLWISE),
    "nvfp4_sr": ("bf16", L.ROWWISE),
}
# The representative subset that also runs through the pure-JAX reference (the fp8, MXFP8
# and NVFP4 ops, each part, 1D / 2D, round-to-nearest / stochastic).
REF_MODES = ["current", "delayed", "mxfp8_e4m3", "nvfp4_2d", "nvfp4_sr"]


@pytest.mark.parametrize("name", REF_MODES)
def test_reference_matches_oracle(name):
    dtype, layout = REFERENCE_CASES[name]
    x = make_input(REF_SHAPE, DTYPES[dtype], seed=9)
    for sizes in (PATTERNS[0], PATTERNS[1], PATTERNS[4], PATTERNS[6]):
        gt = run(x, sizes, name, layout, "reference")
        o = expected(x, sizes, name, layout)
        check_against_oracle(gt, o, name, REF_SHAPE, -1, sizes, f"reference {sizes}")


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


def _dense_quantizer(name, gq, g):
    return gq.group(g) if name == "delayed" else gq


def _check_group_parts(gt, x2, sizes, name, layout, u=1):
    """group_part(g) / scale_inv_for_group(g) of every group against the dense quantize of
    the group's rows. The dense side uses the compiled kernels (milliseconds to compile),
    which equal the dense reference bit for bit (test_block_transforms, test_fp8_numerics)."""
    gq = make_quantizer(name, layout, len(sizes))
    start, rows = og.group_offsets(sizes, x2.shape[0], u)
    for g in range(len(sizes)):
        xg = jnp.asarray(x2[start[g] : start[g + 1]])
        kw = {"key": jax.random.fold_in(KEY, g)} if MODES[name][1] else {}
        dense = eqq.quantize(xg, _dense_quantizer(name, gq, g), 1, impl="ffi", **kw)
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
            bytes_equal(_u8(got.data), _u8(ref.data), f"{w} data")
            bytes_equal(_u8(got.scale_inv), _u8(ref.scale_inv), f"{w} scale_inv")
            f32_bits_equal(got.amax, ref.amax, f"{w} amax")
            assert (got.scaling_mode, got.data_layout) == (ref.scaling_mode, ref.data_layout), w
            if name not in ("current", "delayed"):
                bytes_equal(_u8(part.scale_inv_for_group(g)), _u8(ref.scale_inv), f"{w} unswizzled")


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


# --------------------------------------------------------------------------------------------
# Special values; NaN / Inf in one group must not leak into another


SPECIAL_SIZES = [37, 45, 0, 50, 189, 0]  # 321 rows, G = 6 (REF_SHAPE, as REFERENCE_CASES)
POISONED = 1
NP_DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _special_input(dtype, poison=True) -> np.ndarray:
    np_dtype = np.dtype(dtype)
    info = ml_dtypes.finfo(np_dtype)
    x = make_input(REF_SHAPE, jnp.float32, seed=51).astype(np.float32)
    # group 0 (rows 0..36): plain values and a zero block
    x[0:3] = 0.0
    # group 1 (rows 37..81): NaN and +-Inf inside
    if poison:
        x[40, 3], x[41, 30] = np.nan, -np.nan
        x[50, 5], x[60, 39] = np.inf, -np.inf
    # group 3 (rows 82..131): zeros and subnormals of the input dtype
    x[82:90] = 0.0
    x[90:100] = np.float32(info.smallest_subnormal) * np.arange(1, 41, dtype=np.float32)
    x[100:132] *= np.float32(info.tiny)
    # group 4 (rows 132..320): +-max of the input dtype
    x[132, :8] = float(info.max)
    x[133, 8:16] = -float(info.max)
    x[200, 20:40] = float(info.max)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np_dtype)


def _group_bytes(gt, tag, name, g, sizes, shape):
    """(data bytes, scale bytes, amax) of group g in one part, cut out of the grouped buffers
    with the oracle's geometry (the doc's offsets and regions)."""
    part = getattr(gt, tag)
    r, n, u = og.view_2d(shape, -1)
    start, _ = og.group_offsets(sizes, r, u)
    lo, hi = start[g], start[g + 1]
    data = _u8(part.data).reshape(-1)[lo * n : hi * n]  # N layout rows or flat T: same span
    if name in ("current", "delayed"):
        scale = _u8(np.asarray(part.scale_inv)[g : g + 1])
    else:
        block = ob.NV_BLOCK if name.startswith("nvfp4") else ob.MX_BLOCK
        off, size = og.scale_regions(sizes, r, u, n, block, tag == "colwise")[g]
        scale = _u8(part.scale_inv).reshape(-1)[off : off + size]
    return data, scale, np.asarray(part.amax)[g : g + 1]


def _check_special(name, dtype, layout, impl):
    x = _special_input(NP_DTYPES[dtype])
    clean = _special_input(NP_DTYPES[dtype], poison=False)
    gt = run(x, SPECIAL_SIZES, name, layout, impl)
    o = expected(x, SPECIAL_SIZES, name, layout)
    check_against_oracle(gt, o, name, x.shape, -1, SPECIAL_SIZES, f"special {dtype} {impl}")
    gc = run(clean, SPECIAL_SIZES, name, layout, impl)
    for tag in ("rowwise", "colwise"):
        if getattr(gt, tag) is None:
            continue
        for g in range(len(SPECIAL_SIZES)):
            if g == POISONED:
                continue
            w = f"{name} {tag}: group {g} affected by NaN/Inf in group {POISONED}"
            a = _group_bytes(gt, tag, name, g, SPECIAL_SIZES, x.shape)
            b = _group_bytes(gc, tag, name, g, SPECIAL_SIZES, x.shape)
            bytes_equal(a[0], b[0], f"{w} (data)")
            bytes_equal(a[1], b[1], f"{w} (scales)")
            f32_bits_equal(a[2], b[2], f"{w} (amax)")
    if name in ("current", "nvfp4"):  # the poisoned group's amax ignores NaN, sees the Inf
        assert np.asarray(gt.amax)[POISONED] == np.inf
        assert np.asarray(gc.amax)[POISONED] < np.inf


SPECIAL_CASES = [(n, d) for n in ("current", "nvfp4") for d in DTYPES]
SPECIAL_CASES += [("delayed", "f16"), ("mxfp8_e4m3", "f32"), ("mxfp8_e5m2", "bf16"),
                  ("nvfp4_2d", "f16"), ("nvfp4_sr", "f32")]


@pytest.mark.parametrize("name,dtype", SPECIAL_CASES)
def test_special_values_ffi(name, dtype):
    _check_special(name, dtype, L.ROWWISE_COLWISE, "ffi")


@pytest.mark.parametrize("name", REF_MODES)
def test_special_values_reference(name):
    dtype, layout = REFERENCE_CASES[name]
    _check_special(name, dtype, layout, "reference")


# --------------------------------------------------------------------------------------------
# dequantize


def _expected_dequantize(o, x, sizes, name, fa, rowwise):
    xn = np.asarray(x)
    r, n, u = og.view_2d(xn.shape, fa)
    if name in ("current", "delayed"):
        if rowwise:
            y = og.dequantize_tensor_rowwise(
                o["row"].view(MODES[name][0]), o["scale_inv"], sizes, u, xn.dtype
            )
        else:
            y = og.dequantize_tensor_colwise(
                o["col"].view(MODES[name][0]), o["scale_inv"], sizes, u, (r, n), xn.dtype
            )
    elif name.startswith("mxfp8"):
        y = og.dequantize_mxfp8(o, MODES[name][0], sizes, u, (r, n), xn.dtype, rowwise)
    else:
        y = og.dequantize_nvfp4(o, sizes, u, (r, n), xn.dtype, rowwise)
    return y.reshape(xn.shape)


def dequantized_equal(actual, expected_, what):
    """Bit-exact, except that a NaN matches any NaN (host NaN sign bits differ)."""
    a = np.asarray(actual)
    e = np.asarray(expected_)
    got, want = (a.shape, a.dtype), (e.shape, e.dtype)
    assert got == want, f"{what}: {got} vs {want}"
    af, ef = a.astype(np.float32), e.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(af), np.isnan(ef), err_msg=f"{what}: NaN positions")
    bytes_equal(np.where(np.isnan(af), 0, af), np.where(np.isnan(ef), 0, ef), what)


def test_dequantize_nd_and_weight_like():
    cases = [
        ((50, 3, 40), [7, 0, 30, 13], "mxfp8_e4m3", L.COLWISE),  # 32-row blocks across U = 3
        ((4, 40, 72), None, "nvfp4_2d", L.ROWWISE_COLWISE),
    ]
    for shape, sizes, name, layout in cases:
        x = make_input(shape, jnp.float32, seed=63)
        gt = run(x, sizes, name, layout, "ffi", num_groups=4)
        s = [1, 1, 1, 1] if sizes is None else sizes
        o = expected(x, s, name, layout)
        y = gt.dequantize()
        e = _expected_dequantize(o, x, s, name, -1, layout.has_rowwise)
        dequantized_equal(y, e, f"{name} {shape}")


# --------------------------------------------------------------------------------------------
# Invalid group sizes: clamped with check=False, an error with check=True; dequantize


BAD_SIZES = {
    "short": [50, 0, 100, 50, 0, 0],  # sum 200 < 321
    "long": [100, 150, 0, 200, 30, 5],  # sum 485 > 321: group 3 clamped, 4 and 5 empty
    "negative": [100, -20, 200, 21, 0, 20],  # -20 counts as 0; sum 321
    "huge": [2**31 - 1, 5, 0, 0, 0, 0],  # everything in group 0, no int32 overflow
}
# Each dequantize path once: tensor scaling rowwise (current) / colwise (delayed), MXFP8
# rowwise (mxfp8_e4m3, reference) / colwise (mxfp8_e5m2), NVFP4 rowwise (nvfp4_sr) / colwise
# (nvfp4_2d); the layouts are REFERENCE_CASES'.
BAD_CASES = [(n, "ffi") for n in ("current", "delayed", "mxfp8_e5m2", "nvfp4_2d", "nvfp4_sr")]
BAD_CASES += [(n, "reference") for n in ("current", "mxfp8_e4m3")]


@pytest.mark.parametrize("name,impl", BAD_CASES)
def test_sizes_clamped_without_check_and_dequantize(name, impl):
    """check=False: offsets clamped as documented, nothing out of bounds, rows past the sum
    zero in every buffer and in dequantize, and absent from amax and dbias. The valid
    patterns check dequantize (rowwise or colwise part, per REFERENCE_CASES' layout)."""
    dtype, layout = REFERENCE_CASES[name]
    x = make_input(REF_SHAPE, DTYPES[dtype], seed=81)
    x[-21:] = -3e4  # rows past a short sum: must change nothing
    cases = dict(valid0=PATTERNS[0], valid1=PATTERNS[1], **BAD_SIZES)
    for case, sizes in cases.items():
        gt = run(x, sizes, name, layout, impl, check=False)
        o = expected(x, sizes, name, layout)
        check_against_oracle(gt, o, name, REF_SHAPE, -1, sizes, f"{case} {impl}")
        y = np.asarray(gt.dequantize())
        e = _expected_dequantize(o, x, sizes, name, -1, layout.has_rowwise)
        dequantized_equal(y, e, f"{name} {impl} {case} dequantize")
        end = og.group_offsets(sizes, M)[0][-1]
        assert not _u8(y[end:]).any(), f"{case}: rows past the sum dequantize to non-zero"


def test_sizes_dbias_without_check():
    x = make_input(REF_SHAPE, jnp.bfloat16, seed=82)
    x[-21:] = -3e4
    for case, sizes in BAD_SIZES.items():
        gs = jnp.asarray(sizes, jnp.int32)
        db = eqq.grouped_dbias(jnp.asarray(x), gs, check=False, impl="ffi")
        e = og.grouped_dbias(x, sizes, 1, x.dtype)
        bytes_equal(np.asarray(db), e, f"{case} dbias")


CHECK_MESSAGE = r"group_sizes must be non-negative and sum to x.shape\[0\]"


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_sizes_raise_with_check(impl):
    """check=True (default): a run-time error. The reference reuses the compiled functions of
    test_reference_matches_oracle / test_grouped_dbias (same configuration)."""
    x = jnp.asarray(make_input(REF_SHAPE, jnp.bfloat16, seed=83))
    q = make_quantizer("mxfp8_e4m3", L.ROWWISE_COLWISE)
    for case, sizes in BAD_SIZES.items():
        gs = jnp.asarray(sizes, jnp.int32)
        with pytest.raises(Exception, match=CHECK_MESSAGE):
            jax.block_until_ready(eqq.grouped_quantize(x, gs, q, impl=impl))
        with pytest.raises(Exception, match=CHECK_MESSAGE):
            jax.block_until_ready(eqq.grouped_dbias(x, gs, impl=impl))
        if impl == "ffi":
            with pytest.raises(Exception, match=CHECK_MESSAGE):
                jax.block_until_ready(eqq.grouped_quantize_dbias(x, gs, q, impl=impl))
    if impl == "reference":
        return
    # Under jit too (the sizes are traced), and a valid vector passes the same function.
    f = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, q, impl=impl))
    with pytest.raises(Exception, match=CHECK_MESSAGE):
        jax.block_until_ready(f(x, jnp.asarray(BAD_SIZES["negative"], jnp.int32)))
    gt = f(x, jnp.asarray(PATTERNS[0], jnp.int32))
    o = expected(np.asarray(x), PATTERNS[0], "mxfp8_e4m3", L.ROWWISE_COLWISE)
    check_against_oracle(gt, o, "mxfp8_e4m3", REF_SHAPE, -1, PATTERNS[0], "jit check=True")


# --------------------------------------------------------------------------------------------
# dbias


DBIAS_SIZES = [0, 32, 33, 127, 129, 0]  # 321 rows; empty first and last
DBIAS_CASES = [(d, "ffi") for d in DTYPES] + [("bf16", "reference")]


@pytest.mark.parametrize("dtype,impl", DBIAS_CASES)
def test_grouped_dbias(dtype, impl):
    x = make_input(REF_SHAPE, DTYPES[dtype], seed=71)
    x[5:40:3] *= 64  # mixed magnitudes: the summation order shows in the low bits
    for sizes in (DBIAS_SIZES, PATTERNS[0], PATTERNS[4]):
        db = eqq.grouped_dbias(jnp.asarray(x), jnp.asarray(sizes, jnp.int32), impl=impl)
        e = og.grouped_dbias(x, sizes, 1, x.dtype)
        assert db.shape == (len(sizes), 40) and db.dtype == x.dtype
        bytes_equal(np.asarray(db), e, f"dbias {dtype} {impl} {sizes}")
        for g in range(len(sizes)):
            if sizes[g] == 0:  # +0, not -0
                assert not _u8(np.asarray(db)[g]).any(), f"empty group {g} is not +0"


def test_grouped_dbias_3d():
    """[M, A, B] -> [G, A, B]: each group sums its entries along axis 0."""
    shape = (60, 3, 24)
    x = make_input(shape, jnp.float32, seed=72)
    sizes = [10, 0, 49, 1]
    db = eqq.grouped_dbias(jnp.asarray(x), jnp.asarray(sizes, jnp.int32), impl="ffi")
    e = og.grouped_dbias(x.reshape(60, 72), sizes, 1, np.float32).reshape(4, 3, 24)
    assert db.shape == (4, 3, 24)
    bytes_equal(np.asarray(db), e, "dbias 3d")


# (The reference's dbias op is test_grouped_dbias's; its quantize ops are tested above.)
QDBIAS_CASES = [(n, "ffi") for n in ("current", "mxfp8_e4m3", "nvfp4_sr")]


@pytest.mark.parametrize("name,impl", QDBIAS_CASES)
def test_grouped_quantize_dbias(name, impl):
    dtype, layout = REFERENCE_CASES[name]
    x = make_input(REF_SHAPE, DTYPES[dtype], seed=73)
    q = make_quantizer(name, layout)
    kw = {"key": KEY} if MODES[name][1] else {}
    for sizes in (PATTERNS[3], PATTERNS[0]):
        gt, db = eqq.grouped_quantize_dbias(
            jnp.asarray(x), jnp.asarray(sizes, jnp.int32), q, impl=impl, **kw
        )
        o = expected(x, sizes, name, layout)
        check_against_oracle(gt, o, name, REF_SHAPE, -1, sizes, f"quantize_dbias {impl}")
        e = og.grouped_dbias(x, sizes, 1, x.dtype)
        assert db.shape == (G, 40) and db.dtype == x.dtype
        bytes_equal(np.asarray(db), e, f"{name} {impl} dbias")
    if name != "current":
        return
    # Equal to the dense quantize_dbias of each group's rows (sizes = PATTERNS[0]).
    start, _ = og.group_offsets(sizes, M)
    for g in range(G):
        xg = jnp.asarray(x[start[g] : start[g + 1]])
        kw = {"key": jax.random.fold_in(KEY, g)} if MODES[name][1] else {}
        _, dense_db = eqq.quantize_dbias(xg, _dense_quantizer(name, q, g), 1, impl="ffi", **kw)
        bytes_equal(np.asarray(db)[g], np.asarray(dense_db), f"{name} dense dbias group {g}")


def test_grouped_quantize_dbias_nd():
    """dbias of an N-d x: [G, *S[fa:]], the tree sum over the group's rows of the 2-D view."""
    shape, fa, sizes = (50, 3, 40), -1, [7, 0, 30, 13]
    x = make_input(shape, jnp.float32, seed=74)
    q = make_quantizer("mxfp8_e4m3", L.ROWWISE_COLWISE)
    gs = jnp.asarray(sizes, jnp.int32)
    gt, db = eqq.grouped_quantize_dbias(jnp.asarray(x), gs, q, fa, impl="ffi")
    e = og.grouped_dbias(x.reshape(150, 40), sizes, 3, np.float32)
    assert db.shape == (4, 40)
    bytes_equal(np.asarray(db), e, "nd dbias")
    check_against_oracle(
        gt, expected(x, sizes, "mxfp8_e4m3", L.ROWWISE_COLWISE, fa), "mxfp8_e4m3", shape, fa,
        sizes, "nd quantize_dbias",
    )


@pytest.mark.parametrize(
    "name,impl", [("mxfp8_e4m3", "ffi"), ("nvfp4_sr", "ffi"), ("delayed", "reference")]
)
def test_huge_sizes_times_rows_per_unit(name, impl):
    """size * U past int32 (U = 2): the offsets are computed without overflow (int64 in the
    kernels), clamped to the rows, with check=False."""
    shape, fa = (20, 2, 3, 16), 2
    x = make_input(shape, jnp.float32, seed=3)
    for sizes in ([3, 2**30 + 5, 7, 0], [2**31 - 1, 2**31 - 1, 0, 0], [5, -(2**31), 2**30, 1]):
        gt = run(x, sizes, name, L.ROWWISE_COLWISE, impl, fa=fa, check=False)
        o = expected(x, sizes, name, L.ROWWISE_COLWISE, fa=fa)
        check_against_oracle(gt, o, name, shape, fa, sizes, f"{impl} {sizes}")


@pytest.mark.parametrize("impl", IMPLS)
def test_check_catches_sizes_whose_int32_sum_wraps(impl):
    x = jnp.asarray(make_input(REF_SHAPE, jnp.bfloat16, seed=84))
    gs = jnp.asarray([2**31 - 1, 2**31 - 1, 323, 0, 0, 0], jnp.int32)
    q = make_quantizer("mxfp8_e4m3", L.ROWWISE_COLWISE)
    with pytest.raises(Exception, match=CHECK_MESSAGE):
        jax.block_until_ready(eqq.grouped_quantize(x, gs, q, impl=impl))
