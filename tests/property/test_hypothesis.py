"""Property-based tests (hypothesis): `quantize`, `grouped_quantize`, `grouped_quantize_dbias`
and `grouped_dbias` on drawn shapes, dtypes, layouts, flatten axes, quantizers and group sizes,
byte for byte against the independent NumPy oracle (tests/oracle/).

Shapes are 2-D and 3-D with dims 1..96 (biased towards block edges 15/16/17, 31/32/33, ...),
at most 16384 elements. The draws respect the documented constraints only (docs/block_formats.md,
docs/grouped.md): a colwise or 2D block part needs flatten_axis >= 1, the RHT needs the blocked
axis % 16 == 0, grouped inputs need flatten_axis >= 1 and no RHT; `test_block_axis_rule` checks
that the first rule is enforced. Every distinct shape compiles, so the example counts are modest
and the draws are derandomized (deterministic in CI, no example database).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import eqx_quant as eqq
from tests.oracle import fp8 as ot
from tests.oracle import grouped as og
from tests.oracle import nd as ond
from tests.support import grouped as sg
from tests.support.bytes import assert_same_bytes, f32_bits_equal, u8
from tests.support.dtypes import X_DTYPES

L = eqq.QuantizeLayout
LAYOUTS = list(L)
MAX_ELEMENTS = 16384
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None)
# dequantize compiles a bit-level graph per shape (~0.5-1 s): fewer examples.
FEW = settings(max_examples=10, deadline=None, derandomize=True, database=None)

DIM = st.one_of(
    st.integers(1, 96), st.sampled_from([1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 95, 96])
)


@st.composite
def shapes(draw, ndims=(2, 3)):
    """A 2-D or 3-D shape, dims 1..96, at most MAX_ELEMENTS elements (the last drawn dim is
    bounded by the others, then the dims are put in a drawn order)."""
    ndim = draw(st.sampled_from(ndims))
    dims = [draw(DIM) for _ in range(ndim - 1)]
    cap = max(1, min(96, MAX_ELEMENTS // math.prod(dims)))
    dims.append(draw(st.integers(1, cap)))
    return tuple(draw(st.permutations(dims)))


def flatten_axes(draw, ndim, lowest):
    """flatten_axis resolving to [lowest, ndim - 1], written non-negative or negative."""
    fa = draw(st.integers(lowest, ndim - 1))
    return fa - ndim if draw(st.booleans()) else fa


SPECIALS = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 448.0, 464.0, 57344.0, 6.0, 1e-30, -1e4]


@st.composite
def inputs(draw):
    """(seed, log2 magnitude, number of special values) of an input; see make_x."""
    seed = draw(st.integers(0, 2**31 - 1))
    magnitude = draw(st.integers(-12, 12))
    n_special = draw(st.sampled_from([0, 0, 0, 1, 3]))  # mostly none
    return seed, magnitude, n_special


def make_x(shape, dtype, spec) -> np.ndarray:
    """Normal values times 2**magnitude (per-row magnitudes spread by 2**[-4, 4], so blocks
    get distinct scales), `n_special` of them replaced by zeros / NaN / Inf / FP8 edges; cast to
    dtype (overflow to inf is an input like any other)."""
    seed, mag, n_special = spec
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(2.0**mag)
    rows = (2.0 ** rng.integers(-4, 5, shape[:1])).astype(np.float32)
    x *= rows.reshape((-1,) + (1,) * (len(shape) - 1))
    flat = x.reshape(-1)
    for _ in range(n_special):
        flat[rng.integers(flat.size)] = SPECIALS[rng.integers(len(SPECIALS))]
    with np.errstate(over="ignore"):
        return np.array(jnp.asarray(x, dtype))


def dequantized_equal(actual, expected, what):
    """Same shape, dtype and bytes, except that any NaN matches any NaN (the oracle's NaN is
    the host's default NaN)."""
    a, e = np.asarray(actual), np.asarray(expected)
    got, want = (a.shape, a.dtype), (e.shape, e.dtype)
    assert got == want, f"{what}: {got} vs {want}"
    af, ef = a.astype(np.float32), e.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(af), np.isnan(ef), err_msg=f"{what}: NaN positions")
    assert_same_bytes(np.where(np.isnan(af), 0, af), np.where(np.isnan(ef), 0, ef), what)


def canonical_nan(v):
    """dbias NaNs are the dtype's positive quiet NaN (docs/grouped.md, "Ops"); the grouped
    oracle's sums keep the sign of a NaN input."""
    return np.where(np.isnan(v.astype(np.float32)), np.asarray(np.nan, v.dtype), v)


# --------------------------------------------------------------------------------------------
# Tensor scaling (current / delayed), every layout, flatten_axis 0 included


Q_DTYPES = [jnp.float8_e4m3fn, jnp.float8_e5m2]
# Delayed scales: log-uniform over 2**[-24, 24] (into FP8 subnormals and past the FP8 max),
# and edge values: 0 (scale_inv inf), a float32 subnormal, inf, near float32 max.
SCALES = st.one_of(
    st.builds(
        lambda e, m: float(np.float32(m * 2.0**e)), st.integers(-24, 24), st.floats(1.0, 2.0)
    ),
    st.sampled_from([1.0, 0.0, np.inf, 1e38, 2.0**-126, 1e-45, 448.0 / 3.0]),
)


@st.composite
def tensor_cases(draw):
    shape = draw(shapes())
    fa = flatten_axes(draw, len(shape), 0)
    scale = draw(st.one_of(st.none(), SCALES))  # None: current scaling
    return dict(
        shape=shape, fa=fa, dtype=draw(st.sampled_from(list(X_DTYPES.values()))),
        q_dtype=draw(st.sampled_from(Q_DTYPES)), layout=draw(st.sampled_from(LAYOUTS)),
        scale=scale, x=draw(inputs()),
    )


def tensor_quantizer(c):
    if c["scale"] is None:
        return eqq.CurrentScaleQuantizer(c["q_dtype"], c["layout"])
    s = jnp.asarray([c["scale"]], jnp.float32)
    return eqq.DelayedScaleQuantizer(c["q_dtype"], c["layout"], scale=s)


def tensor_expected(x, c):
    row, col = c["layout"].has_rowwise, c["layout"].has_colwise
    q = np.dtype(c["q_dtype"])
    if c["scale"] is None:
        return ot.current_scaling(x, q, c["fa"], row, col)
    return ot.quantize_tensor(x, np.array([c["scale"]], np.float32), q, c["fa"], row, col)


def check_tensor(t, o, c):
    shape, fa = c["shape"], c["fa"] % len(c["shape"])
    for tag, part in (("row", t.rowwise), ("col", t.colwise)):
        if o[tag] is None:
            assert part is None, tag
            continue
        assert part.data.dtype == c["q_dtype"], tag
        want_shape = shape if tag == "row" else shape[fa:] + shape[:fa]
        assert part.data.shape == want_shape, f"{tag}: {part.data.shape} != {want_shape}"
        assert_same_bytes(part.data, o[tag], f"{tag} data")
        f32_bits_equal(part.scale_inv, o["scale_inv"], f"{tag} scale_inv")
        f32_bits_equal(part.amax, o["amax"], f"{tag} amax")


def _tensor_example(scale, layout=L.ROWWISE_COLWISE):
    return dict(
        shape=(17, 3, 33), fa=-2, dtype=jnp.float32, q_dtype=jnp.float8_e4m3fn, layout=layout,
        scale=scale, x=(5, 0, 3),
    )


@SETTINGS
@given(c=tensor_cases())
@example(c=_tensor_example(0.0))
@example(c=_tensor_example(1e-45, L.COLWISE))
@example(c=_tensor_example(np.inf, L.ROWWISE))
def test_tensor_scaling_matches_oracle(c):
    x = make_x(c["shape"], c["dtype"], c["x"])
    t = eqq.quantize(jnp.asarray(x), tensor_quantizer(c), c["fa"])
    check_tensor(t, tensor_expected(x, c), c)
    assert t.scaling_mode is (
        eqq.ScalingMode.CURRENT_TENSOR_SCALING if c["scale"] is None
        else eqq.ScalingMode.DELAYED_TENSOR_SCALING
    )


# --------------------------------------------------------------------------------------------
# Block formats: MXFP8 (e4m3 / e5m2), NVFP4 (1D, 2D, RHT, stochastic rounding)


BLOCK_KINDS = ["mxfp8_e4m3", "mxfp8_e5m2", "nvfp4", "nvfp4_2d", "nvfp4_rht", "nvfp4_sr"]


def block_quantizer(kind, layout):
    if kind.startswith("mxfp8"):
        q_dtype = jnp.float8_e4m3fn if kind == "mxfp8_e4m3" else jnp.float8_e5m2
        return eqq.BlockScaleQuantizer(q_dtype, layout)
    return eqq.NVFP4Quantizer(
        q_layout=layout, use_2d=kind == "nvfp4_2d", use_rht=kind == "nvfp4_rht",
        stochastic_rounding=kind == "nvfp4_sr",
    )


@st.composite
def block_cases(draw, kinds=tuple(BLOCK_KINDS)):
    kind = draw(st.sampled_from(kinds))
    # The RHT runs on the colwise part only: a rowwise-only RHT quantizer is refused.
    layouts = [L.COLWISE, L.ROWWISE_COLWISE] if kind == "nvfp4_rht" else LAYOUTS
    layout = draw(st.sampled_from(layouts))
    shape = list(draw(shapes()))
    needs_axis = layout.has_colwise or kind == "nvfp4_2d"  # docs/block_formats.md
    fa = flatten_axes(draw, len(shape), 1 if needs_axis else 0)
    if kind == "nvfp4_rht":  # the blocked axis K = S[fa-1] must be a multiple of 16
        k = fa % len(shape) - 1
        shape[k] = 16 * draw(st.integers(1, max(1, min(6, shape[k] // 16))))
    return dict(
        kind=kind, layout=layout, shape=tuple(shape), fa=fa,
        dtype=draw(st.sampled_from(list(X_DTYPES.values()))), x=draw(inputs()),
        key=draw(st.integers(0, 2**31 - 1)),
    )


def block_expected(x, c, q):
    row, col = c["layout"].has_rowwise, c["layout"].has_colwise
    if c["kind"].startswith("mxfp8"):
        return ond.mxfp8_quantize_nd(x, np.dtype(q.q_dtype), c["fa"], rowwise=row, colwise=col)
    words = None
    if c["kind"] == "nvfp4_sr":
        words = np.asarray(jax.random.key_data(jax.random.key(c["key"])))
    return ond.nvfp4_quantize_nd(
        x, c["fa"], rowwise=row, colwise=col, use_2d=q.use_2d, use_rht=q.use_rht and col,
        key=words,
    )


def check_block(t, o, c, q):
    mx = c["kind"].startswith("mxfp8")
    data_dtype = np.dtype(q.q_dtype)
    scale_dtype = jnp.float8_e8m0fnu if mx else jnp.float8_e4m3fn
    for tag, part in (("row", t.rowwise), ("col", t.colwise)):
        if o[tag] is None:
            assert part is None, tag
            continue
        assert part.data.dtype == data_dtype and part.scale_inv.dtype == scale_dtype, tag
        assert part.data.shape == o[tag].shape, f"{tag}: {part.data.shape} != {o[tag].shape}"
        assert_same_bytes(u8(part.data), u8(o[tag]), f"{tag} data")
        assert_same_bytes(u8(part.scale_inv), o[f"{tag}_scale"], f"{tag} scales")
        if not mx:
            f32_bits_equal(part.amax, o[f"{tag}_amax"], f"{tag} amax")


def quantize_block(x, c):
    q = block_quantizer(c["kind"], c["layout"])
    kw = {"key": jax.random.key(c["key"])} if c["kind"] == "nvfp4_sr" else {}
    return q, eqq.quantize(jnp.asarray(x), q, c["fa"], **kw)


@SETTINGS
@given(c=block_cases(kinds=("mxfp8_e4m3", "mxfp8_e5m2")))
def test_mxfp8_matches_oracle(c):
    x = make_x(c["shape"], c["dtype"], c["x"])
    q, t = quantize_block(x, c)
    check_block(t, block_expected(x, c, q), c, q)


@SETTINGS
@given(c=block_cases(kinds=("nvfp4", "nvfp4_2d", "nvfp4_rht", "nvfp4_sr")))
def test_nvfp4_matches_oracle(c):
    x = make_x(c["shape"], c["dtype"], c["x"])
    q, t = quantize_block(x, c)
    check_block(t, block_expected(x, c, q), c, q)


@FEW
@given(c=st.one_of(tensor_cases(), block_cases()))
def test_dequantize_matches_oracle(c):
    """Each part's dequantize: x's shape and dtype, the oracle's values."""
    x = make_x(c["shape"], c["dtype"], c["x"])
    fa = c["fa"]
    if "kind" not in c:
        t = eqq.quantize(jnp.asarray(x), tensor_quantizer(c), fa)
        o = tensor_expected(x, c)
        n = fa % x.ndim
        m = math.prod(x.shape[:n])
        for tag, part in (("row", t.rowwise), ("col", t.colwise)):
            if part is None:
                continue
            y = ot.dequantize_tensor(o[tag], o["scale_inv"], x.dtype)
            if tag == "col":
                y = y.reshape(-1, m).T.reshape(x.shape)
            dequantized_equal(part.dequantize(), y, f"{tag} dequantize")
        return
    q, t = quantize_block(x, c)
    o = block_expected(x, c, q)
    for tag, part in (("row", t.rowwise), ("col", t.colwise)):
        if part is None:
            continue
        if c["kind"].startswith("mxfp8"):
            y = ond.mxfp8_dequantize_nd(
                o[tag], o[f"{tag}_scale"], x.dtype, fa, rowwise=tag == "row"
            )
        else:
            y = ond.nvfp4_dequantize_nd(
                o[tag], o[f"{tag}_scale"], o[f"{tag}_amax"], x.dtype, x.shape, fa,
                rowwise=tag == "row", use_rht=q.use_rht and tag == "col",
            )
        dequantized_equal(part.dequantize(), y, f"{c['kind']} {tag} dequantize")


@SETTINGS
@given(
    shape=shapes(),
    kind=st.sampled_from(["mxfp8_e4m3", "nvfp4", "nvfp4_2d"]),
    layout=st.sampled_from([L.COLWISE, L.ROWWISE_COLWISE, L.ROWWISE]),
)
def test_block_axis_rule(shape, kind, layout):
    """A colwise or 2D block part with flatten_axis resolving to 0 is refused (the rule the
    other draws respect); a rowwise 1D one is quantized."""
    q = block_quantizer(kind, layout)
    x = jnp.ones(shape, jnp.float32)
    if layout.has_colwise or kind == "nvfp4_2d":
        with pytest.raises(ValueError, match=r"flatten_axis resolves to 0 .*flatten_axis >= 1"):
            eqq.quantize(x, q, -len(shape))
    else:
        t = eqq.quantize(x, q, -len(shape))
        assert t.rowwise.data.shape == shape and t.colwise is None


# --------------------------------------------------------------------------------------------
# Grouped: random non-negative group sizes summing to S[0] (zeros included)


GROUPED_TENSOR = ["current", "delayed"]  # delayed: GroupedDelayedScaleQuantizer
GROUPED_BLOCK = ["mxfp8_e4m3", "mxfp8_e5m2", "nvfp4", "nvfp4_2d", "nvfp4_sr"]
assert set(GROUPED_TENSOR + GROUPED_BLOCK) == set(sg.MODES)


@st.composite
def group_sizes(draw, rows):
    """G in 1..6 non-negative sizes summing to `rows`: the gaps between sorted cut points
    (repeated cut points and cuts at 0 / rows give empty groups)."""
    g = draw(st.integers(1, 6))
    cuts = sorted(draw(st.lists(st.integers(0, rows), min_size=g - 1, max_size=g - 1)))
    return [int(v) for v in np.diff([0, *cuts, rows])]


@st.composite
def grouped_cases(draw, names):
    shape = draw(shapes())
    fa = flatten_axes(draw, len(shape), 1)  # grouped inputs need flatten_axis >= 1
    return dict(
        name=draw(st.sampled_from(names)), layout=draw(st.sampled_from(LAYOUTS)),
        shape=shape, fa=fa, sizes=draw(group_sizes(shape[0])),
        dtype=draw(st.sampled_from(list(X_DTYPES.values()))), x=draw(inputs()),
        with_dbias=draw(st.booleans()),
    )


@SETTINGS
@given(c=grouped_cases(GROUPED_TENSOR))
def test_grouped_tensor_scaling_matches_oracle(c):
    check_grouped_case(c)


@SETTINGS
@given(c=grouped_cases(GROUPED_BLOCK))
def test_grouped_block_scaling_matches_oracle(c):
    check_grouped_case(c)


def check_grouped_case(c):
    """grouped_quantize (or grouped_quantize_dbias, then also its dbias [G, *S[fa:]])."""
    x = make_x(c["shape"], c["dtype"], c["x"])
    name, sizes, fa = c["name"], c["sizes"], c["fa"]
    assert sum(sizes) == x.shape[0] and min(sizes) >= 0
    q = sg.make_quantizer(name, c["layout"], len(sizes))
    kw = {"key": sg.KEY} if sg.MODES[name][1] else {}  # the oracle's key
    gs = jnp.asarray(sizes, jnp.int32)
    if c["with_dbias"]:
        gt, db = eqq.grouped_quantize_dbias(jnp.asarray(x), gs, q, fa, **kw)
    else:
        gt = eqq.grouped_quantize(jnp.asarray(x), gs, q, fa, **kw)
    o = sg.expected(x, sizes, name, c["layout"], fa)
    sg.check_against_oracle(gt, o, name, x.shape, fa, sizes, f"{c['shape']} fa={fa} {sizes}")
    if c["with_dbias"]:
        r, n, u = og.view_2d(x.shape, fa)
        want = canonical_nan(og.grouped_dbias(x.reshape(r, n), sizes, u, x.dtype))
        want = want.reshape((len(sizes),) + x.shape[fa % x.ndim :])
        assert_same_bytes(np.asarray(db), want, "dbias")


@SETTINGS
@given(shape=shapes(), data=st.data())
def test_grouped_dbias_matches_oracle(shape, data):
    """grouped_dbias(grad [M, ...]) -> [G, ...]: each group's tree sum along axis 0."""
    sizes = data.draw(group_sizes(shape[0]), label="sizes")
    dtype = data.draw(st.sampled_from(list(X_DTYPES.values())), label="dtype")
    x = make_x(shape, dtype, data.draw(inputs(), label="x"))
    db = eqq.grouped_dbias(jnp.asarray(x), jnp.asarray(sizes, jnp.int32))
    want = canonical_nan(og.grouped_dbias(x.reshape(shape[0], -1), sizes, 1, x.dtype))
    assert_same_bytes(np.asarray(db), want.reshape((len(sizes),) + shape[1:]), "dbias")
