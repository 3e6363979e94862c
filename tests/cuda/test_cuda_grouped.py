"""The grouped (MoE) CUDA kernels (`eqx_quant_grouped_{fp8,mxfp8,nvfp4}_quantize_cuda`,
`eqx_quant_grouped_dbias_cuda`) against the CPU kernels, byte for byte.

Runs only where a CUDA device and eqx_quant's CUDA grouped kernels are present (otherwise
skipped with a reason that mentions CUDA, which `EQX_QUANT_REQUIRE_CUDA=1` turns into a
failure).

Every case runs `eqx_quant.grouped_quantize_dbias(x, group_sizes, quantizer, fa, impl="ffi")`
(or `grouped_quantize` / `grouped_dbias`) on the GPU and compares every output (rowwise /
colwise data, scale_inv, amax, dbias) with the same call on the CPU device, i.e. the CPU
kernels, which are bit-exact with the NumPy oracle (tests/grouped/test_grouped_numerics.py). If the
CPU library lacks the grouped kernels the expected bytes come from `impl="reference"` on the
CPU; without a CPU backend (`JAX_PLATFORMS=cuda`), from `impl="reference"` on the GPU. The
expected bytes of a case are computed once, for ROWWISE_COLWISE, and serve the GPU calls of
every layout (a part's bytes do not depend on the layout).

Group sizes are traced: each (mode, dtype, layout, shape) compiles once and loops over the
patterns (empty groups, 1, 31, 33, 127, 129 rows, one giant group, everything in the last
group, a sum below M, a negative size and a sum above M; check=False, so rows past the sum
are zero). Modes: current and (grouped) delayed tensor scaling (the flat T colwise layout,
per-group amax), MXFP8 e4m3 / e5m2, NVFP4 1D, 2D and stochastic rounding (per-group key,
indices local to the group: rowwise in its rows, colwise in its T layout). Also
rows_per_unit > 1, weight-like inputs, special values (NaN, inf, subnormals), vmap, a large
tensor (many CTAs, R*N = 2^26) and CUDA-graph replay.
"""

import functools
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from eqx_quant.reference.grouped import most_units
from tests.support.bytes import assert_same_bytes
from tests.support.cuda import (
    CUDA,
    assert_graph_replay_matches,
    expected_device_and_impl,
    outputs_of,
    requires_cuda,
    spread_random,
)
from tests.support.dtypes import X_DTYPES

OPS = ("grouped_fp8_quantize", "grouped_mxfp8_quantize", "grouped_nvfp4_quantize",
       "grouped_dbias")
pytestmark = requires_cuda(*OPS)

L = eqq.QuantizeLayout
LAYOUTS = (L.ROWWISE, L.COLWISE, L.ROWWISE_COLWISE)
# Rowwise alone runs its own MXFP8 kernel (RowOctetKernel), so the targeted tests check both.
ROW_AND_BOTH = (L.ROWWISE, L.ROWWISE_COLWISE)
MODES = ("current", "delayed", "mxfp8_e4m3", "mxfp8_e5m2", "nvfp4", "nvfp4_2d", "nvfp4_sr")
KEY = jax.random.key(77)
G = 6
M = 321
PATTERNS = [
    [1, 31, 33, 127, 129, 0],
    [0, 129, 0, 127, 33, 32],
    [0, 0, 321, 0, 0, 0],
    [0, 0, 0, 0, 0, 321],
    [321, 0, 0, 0, 0, 0],
    [64, 64, 64, 64, 64, 1],
    [1, 1, 1, 1, 1, 316],
    [10, 0, 50, 0, 0, 100],  # sum 160 < M: rows from 160 on belong to no group
    [-5, 40, 0, 300, 7, 3],  # a negative size counts as 0; the sum passes M: clamped
]
DELAYED_SCALES = np.array(
    [0.5, 3.0, 16.0, 0.0625, 1000.0, 0.3, 7.0, 1.0, 2.5, 0.01, 64.0, 1.5], np.float32
)


def _quantizer(mode, layout, groups):
    if mode == "current":
        return eqq.CurrentScaleQuantizer(jnp.float8_e4m3fn, layout)
    if mode == "delayed":
        return eqq.GroupedDelayedScaleQuantizer(
            groups, jnp.float8_e5m2, layout, amax_history_len=4,
            scale=jnp.asarray(DELAYED_SCALES[:groups]),
        )
    if mode.startswith("mxfp8"):
        q = jnp.float8_e4m3fn if mode.endswith("e4m3") else jnp.float8_e5m2
        return eqq.BlockScaleQuantizer(q, layout)
    return eqq.NVFP4Quantizer(
        q_layout=layout, use_2d=mode == "nvfp4_2d", stochastic_rounding=mode == "nvfp4_sr"
    )


@functools.cache
def _jitted(mode, layout, fa, impl, groups, vmapped=False, dbias=True):
    """jit of (x, group_sizes) -> (GroupedScaledTensor, dbias or None)."""

    def one(x, sizes):
        q = _quantizer(mode, layout, groups)
        kw = {"key": KEY} if mode == "nvfp4_sr" else {}
        if dbias:
            return eqq.grouped_quantize_dbias(x, sizes, q, fa, check=False, impl=impl, **kw)
        return eqq.grouped_quantize(x, sizes, q, fa, check=False, impl=impl, **kw), None

    return jax.jit(jax.vmap(one) if vmapped else one)


def _arrays(result):
    """{name: numpy array} of every output."""
    tensor, dbias = result
    out = {}
    for name in ("rowwise", "colwise"):
        part = getattr(tensor, name)
        if part is None:
            continue
        out[name] = np.asarray(part.data)
        out[name + ".scale_inv"] = np.asarray(part.scale_inv)
        out[name + ".amax"] = np.asarray(part.amax)
    if dbias is not None:
        out["dbias"] = np.asarray(dbias)
    return out


def _check(x_np, patterns, mode, fa=-1, layouts=LAYOUTS, vmapped=False, dbias=True):
    """GPU impl="ffi" == the expected bytes, for each pattern and layout."""
    groups = np.shape(patterns[0])[-1]
    device, impl = expected_device_and_impl(OPS, CUDA)
    x_ref = jax.device_put(x_np, device)
    x_gpu = jax.device_put(x_np, CUDA)
    for sizes in patterns:
        sizes = np.asarray(sizes, np.int32)
        with jax.default_device(device):
            want = _arrays(
                _jitted(mode, L.ROWWISE_COLWISE, fa, impl, groups, vmapped, dbias)(
                    x_ref, jax.device_put(sizes, device)
                )
            )
        for layout in layouts:
            with jax.default_device(CUDA):
                got = _arrays(
                    _jitted(mode, layout, fa, "ffi", groups, vmapped, dbias)(
                        x_gpu, jax.device_put(sizes, CUDA)
                    )
                )
            what = (
                f"x {x_np.dtype}{list(x_np.shape)} fa={fa} sizes={sizes.tolist()} {mode} "
                f"{layout.name} vmap={vmapped} (expected: {impl} on {device.platform})"
            )
            keys = outputs_of(want, layout)
            assert set(got) == keys, f"{what}: outputs {sorted(got)}"
            for key in sorted(got):
                assert_same_bytes(got[key], want[key], f"{what}: {key}")


@pytest.mark.parametrize("x_name", sorted(X_DTYPES))
@pytest.mark.parametrize("mode", MODES)
def test_modes_layouts_dtypes(mode, x_name):
    """(321, 200): partial MXFP8 / NVFP4 blocks and partial column tiles of every kernel."""
    x = spread_random((M, 200), X_DTYPES[x_name], seed=3)
    _check(x, PATTERNS, mode)


@pytest.mark.parametrize("mode", ["current", "mxfp8_e4m3", "nvfp4_2d", "nvfp4_sr"])
def test_rows_per_unit(mode):
    """x (107, 3, 40): fa=2 gives U = 3 rows per group-size unit (N = 40); fa=1 gives
    N = 120, U = 1."""
    x = spread_random((107, 3, 40), jnp.bfloat16, seed=4)
    patterns = [[1, 10, 11, 42, 43, 0], [0, 0, 107, 0, 0, 0], [35, 0, 0, 0, 0, 80],
                [5, 5, 5, 5, 5, 5]]
    _check(x, patterns, mode, fa=-1, layouts=ROW_AND_BOTH)
    _check(x, patterns, mode, fa=1, layouts=ROW_AND_BOTH)


@pytest.mark.parametrize("n", [45, 46])
def test_nvfp4_sr_colwise_octets(n):
    """Colwise SR: element (c, r) of group g's T layout (N, rows_g) has index c * rows_g + r,
    so one Threefry call serves 8 consecutive rows of a column when rows_g % 8 == 0 and the
    octets straddle two columns otherwise (group sizes of every residue mod 8, tiny groups
    of 1..6 rows); the last column tile is partial (N = 45, 46)."""
    x = spread_random((M, n), jnp.bfloat16, seed=14)
    octets = [[8, 16, 24, 40, 64, 169], [1, 2, 3, 4, 5, 6], [7, 15, 33, 57, 100, 109],
              [17, 26, 43, 60, 77, 98]]
    _check(x, PATTERNS[:3] + octets, "nvfp4_sr", layouts=ROW_AND_BOTH)


def _special_values():
    """(321, 96) f32 with NaN, +-inf, +-0, subnormals and huge values, also whole blocks."""
    rng = np.random.default_rng(7)
    sub = np.array([1, 2, 3, 0x7FFFFF, 0x400000, 0x123456], np.uint32).view(np.float32)
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, -448.0, 464.0, 57344.0, 61440.0, 6.0, 5.0,
         0.25, 0.75, 2.5, 3.5, 2.0**-9, 2.0**-126, 2.0**-127, 3.4e38, -3.4e38, 65504.0],
        np.float32,
    )
    x = rng.standard_normal((M, 96)).astype(np.float32)
    mask = rng.random((M, 96)) < 0.15
    x[mask] = rng.choice(np.concatenate([specials, sub]), size=int(mask.sum()))
    x[0:32, 0:32] = np.nan
    x[40:72, 32:64] = np.inf
    x[80:112, :] = rng.choice(sub, (32, 96))
    x[130, :] = -0.0
    x[200:260, 64:96] *= np.float32(2.0**-120)
    return x


@pytest.mark.parametrize("mode", MODES)
def test_special_values(mode):
    x = _special_values()
    patterns = [[1, 31, 33, 127, 129, 0], [0, 0, 321, 0, 0, 0], [64, 64, 64, 64, 64, 1]]
    _check(x, patterns, mode, layouts=ROW_AND_BOTH)
    with np.errstate(over="ignore", invalid="ignore"):
        _check(x.astype(jnp.bfloat16), patterns[:1], mode, layouts=ROW_AND_BOTH)


@pytest.mark.parametrize("mode", ["current", "mxfp8_e5m2", "nvfp4_sr"])
def test_vmap(mode):
    """A batch of independent grouped problems (per-example group sizes)."""
    x = spread_random((3, M, 72), jnp.bfloat16, seed=9)
    x[1] *= 100
    patterns = [np.array([PATTERNS[0], PATTERNS[3], PATTERNS[7]], np.int32),
                np.array([PATTERNS[8], PATTERNS[2], PATTERNS[5]], np.int32)]
    _check(x, patterns, mode, layouts=ROW_AND_BOTH, vmapped=True)


@pytest.mark.parametrize("mode", ["delayed", "mxfp8_e4m3", "nvfp4"])
def test_weight_like(mode):
    """group_sizes=None on [G, K, N]: one group per leading index."""
    x = spread_random((4, 40, 72), jnp.float32, seed=12)
    device, impl = expected_device_and_impl(OPS, CUDA)

    def run(impl_):
        def f(x):
            q = _quantizer(mode, L.ROWWISE_COLWISE, 4)
            return eqq.grouped_quantize(x, None, q, impl=impl_), None

        return jax.jit(f)

    with jax.default_device(device):
        want = _arrays(run(impl)(jax.device_put(x, device)))
    with jax.default_device(CUDA):
        got = _arrays(run("ffi")(jax.device_put(x, CUDA)))
    assert set(got) == set(want)
    for key in sorted(got):
        assert_same_bytes(got[key], want[key], f"weight-like {mode}: {key}")


@functools.cache
def _dbias_fn(impl, vmapped):
    def one(g, sizes):
        return eqq.grouped_dbias(g, sizes, check=False, impl=impl)

    return jax.jit(jax.vmap(one) if vmapped else one)


def _check_dbias(x, patterns, vmapped=False):
    device, impl = expected_device_and_impl(OPS, CUDA)
    x_ref = jax.device_put(x, device)
    x_gpu = jax.device_put(x, CUDA)
    for sizes in patterns:
        sizes = np.asarray(sizes, np.int32)
        with jax.default_device(device):
            want = np.asarray(_dbias_fn(impl, vmapped)(x_ref, jax.device_put(sizes, device)))
        with jax.default_device(CUDA):
            got = np.asarray(_dbias_fn("ffi", vmapped)(x_gpu, jax.device_put(sizes, CUDA)))
        assert_same_bytes(got, want, f"grouped_dbias x {x.dtype}{list(x.shape)} {sizes.tolist()}")


@pytest.mark.parametrize("x_name", sorted(X_DTYPES))
def test_grouped_dbias(x_name):
    """Canonical tree sums per group (rows of axis 0; N = 3 * 40 = 120: a partial 32-column
    tile), including special values (NaN sums are the canonical NaN) and empty groups."""
    x = spread_random((M, 3, 40), X_DTYPES[x_name], seed=13)
    x_flat = x.reshape(M, 120)
    x_flat[5, 7] = np.nan
    x_flat[200, 100] = np.inf
    x_flat[201, 100] = -np.inf
    x_flat[300, :] = -0.0
    _check_dbias(x, PATTERNS)
    # Large magnitudes: the tree order matters (a sequential sum would differ).
    y = (np.random.default_rng(1).standard_normal((M, 64)) * 1e6).astype(np.float32)
    y[::7] *= -1e3
    _check_dbias(y, PATTERNS[:3])


def test_grouped_dbias_vmap():
    x = spread_random((2, M, 40), jnp.float32, seed=14)
    patterns = [np.array([PATTERNS[0], PATTERNS[8]], np.int32)]
    _check_dbias(x, patterns, vmapped=True)


def test_large_many_ctas():
    """16384 x 4096 bf16 (2^26 elements) in 8 ragged groups: MXFP8 row + col, current
    scaling colwise (T layout) and dbias, thousands of CTAs."""
    x = spread_random((16384, 4096), jnp.bfloat16, seed=21)
    sizes = [[3000, 1, 0, 5000, 129, 4096, 33, 4125]]
    _check(x, sizes, "mxfp8_e4m3", layouts=ROW_AND_BOTH, dbias=False)
    _check(x, sizes, "current", layouts=(L.COLWISE,), dbias=True)
    _check(x, sizes, "nvfp4", layouts=ROW_AND_BOTH, dbias=False)
    _check(x, sizes, "nvfp4_sr", layouts=ROW_AND_BOTH, dbias=False)


@pytest.mark.parametrize("x_name", sorted(X_DTYPES))
def test_mxfp8_many_groups_wide_rows(x_name):
    """MXFP8 rowwise with 40 groups (more than one warp-wide step of the per-CTA group
    lookup), rows wider than one CTA's column chunk (1024 columns for 16-bit inputs, 512 for
    f32) and a last partial 128-column scale tile; sizes summing to less than M (rows of no
    group), or past it (clamped in the second step)."""
    m, n = 700, 1160
    x = spread_random((m, n), X_DTYPES[x_name], seed=31)
    rng = np.random.default_rng(5)
    ragged = rng.integers(0, 30, size=40)
    ragged[[3, 17, 33]] = 0
    past = ragged.copy()
    past[35] = 500  # the sizes pass M in the second step of 32 groups
    patterns = [ragged, past, np.full(40, 17)]  # 17 * 40 = 680 < 700
    _check(x, patterns, "mxfp8_e4m3", layouts=ROW_AND_BOTH, dbias=False)
    _check(x, patterns[:1], "mxfp8_e5m2", layouts=(L.ROWWISE,), dbias=False)


@pytest.mark.parametrize("mode", ["nvfp4", "nvfp4_sr"])
@pytest.mark.parametrize("x_name", sorted(X_DTYPES))
def test_nvfp4_rowwise_many_groups_wide_rows(x_name, mode):
    """NVFP4 rowwise alone runs its own kernel for 16-bit inputs with N % 16 == 0
    (RowOctetKernel: one tensor scale per group, whole scale sectors; with SR one Threefry
    call per 8 values of a row, on the octet of the group-local index): 40 groups (two steps
    of the per-CTA group lookup), a partial 2048-column chunk with a last partial 64-column
    scale tile (N = 1168), rows of no group and sizes clamped at M (rows of several chunks:
    test_large_many_ctas). f32 and the 2D mode take the tile kernel: the same bytes either
    way."""
    m, n = 700, 1168
    x = spread_random((m, n), X_DTYPES[x_name], seed=32)
    x[::9] *= np.float32(2.0**-10)  # per-group amaxes apart (f16: subnormals)
    rng = np.random.default_rng(6)
    ragged = rng.integers(0, 30, size=40)
    ragged[[0, 17, 39]] = 0
    past = ragged.copy()
    past[36] = 500
    patterns = [ragged, past, np.full(40, 17)]
    _check(x, patterns, mode, layouts=ROW_AND_BOTH, dbias=False)


@pytest.mark.parametrize("mode", ["nvfp4", "nvfp4_sr"])
def test_nvfp4_rowwise_batched_and_units(mode):
    """The rowwise NVFP4 kernel over a vmapped batch (per-example group sizes and amaxes;
    SR: the key of group g of every example is fold_in(key, g)) and with U = 3 rows per
    group-size unit (fa=2 of (107, 3, 48): N = 48)."""
    x = spread_random((3, M, 96), jnp.bfloat16, seed=33)
    x[1] *= 100
    x[2, 7, 5] = np.nan
    patterns = [np.array([PATTERNS[0], PATTERNS[3], PATTERNS[7]], np.int32),
                np.array([PATTERNS[8], PATTERNS[2], PATTERNS[5]], np.int32)]
    _check(x, patterns, mode, layouts=(L.ROWWISE,), vmapped=True, dbias=False)
    y = spread_random((107, 3, 48), jnp.float16, seed=34)
    units = [[1, 10, 11, 42, 43, 0], [35, 0, 0, 0, 0, 80], [5, 5, 5, 5, 5, 5]]
    _check(y, units, mode, fa=2, layouts=(L.ROWWISE,))


def _panel_cols(rows, groups, batch, short):
    """The smallest N = 512 k - short (a partial last chunk) for which GroupedPanelKernel
    takes a grouped NVFP4 problem: its rule (Nvfp4PanelsApply) asks for N >= 512 and a grid
    of at least one wave, i.e. worst-case 64-row units x 512-column chunks x batch >= 3 CTAs
    per SM."""
    units = most_units(rows, groups, 64)
    sms = getattr(CUDA, "core_count", 132)  # an H100 / H200 where JAX does not say
    chunks = max(2, -(-3 * sms // (units * batch)))
    return 512 * chunks - short


@pytest.mark.parametrize("mode", ["nvfp4", "nvfp4_sr"])
@pytest.mark.parametrize("x_name", ["bf16", "f16"])
def test_nvfp4_colwise_panels(x_name, mode):
    """NVFP4 with a colwise part, 16-bit inputs, N % 8 == 0 and a grid of at least one wave
    runs its own kernel (GroupedPanelKernel: 64-row units of 512 columns, each column's T-row
    segment stored from any nibble; the rowwise part in the same read when N % 16 == 0), so
    each case takes N from _panel_cols. 40 groups of every size residue mod 8 and mod 64
    (odd sizes: T rows that start mid-byte), a partial last chunk, rows of no group and sizes
    clamped at the rows; N % 16 == 8 (the colwise layout alone by the panels, both by the
    tile kernel); a vmapped batch with per-example sizes, a NaN and an inf; U = 3 rows per
    group-size unit. SR: a column block's 16 rows are a run of the group's T-layout indices
    n * rows_g + r, starting an octet only where rows_g % 8 == 0 (the other residues take
    one more Threefry call and shifted bytes)."""
    both = (L.COLWISE, L.ROWWISE_COLWISE)
    rng = np.random.default_rng(7)
    ragged = rng.integers(0, 40, size=40)
    ragged[[0, 11, 39]] = 0
    ragged[[1, 2, 3]] = [1, 63, 65]
    past = ragged.copy()
    past[30] = 500
    for short, patterns in ((32, [ragged, past, np.full(40, 17)]), (40, [ragged])):
        x = spread_random((700, _panel_cols(700, 40, 1, short)), X_DTYPES[x_name], seed=35)
        x[::7] *= np.float32(2.0**-9)
        _check(x, patterns, mode, layouts=both, dbias=False)
    b = spread_random((3, M, _panel_cols(M, G, 3, 48)), X_DTYPES[x_name], seed=36)
    b[1] *= np.float32(2.0**-6)  # a different amax per example (f16 has no room above)
    b[2, 9, 17] = np.nan
    b[0, 200, 3] = np.inf
    batched = [np.array([PATTERNS[0], PATTERNS[7], PATTERNS[8]], np.int32),
               np.array([PATTERNS[2], PATTERNS[6], PATTERNS[5]], np.int32)]
    _check(b, batched, mode, layouts=both, vmapped=True, dbias=False)
    y = spread_random((107, 3, _panel_cols(M, G, 1, 16)), X_DTYPES[x_name], seed=37)
    units = [[1, 10, 11, 42, 43, 0], [35, 0, 0, 0, 0, 80], [5, 5, 5, 5, 5, 5]]
    _check(y, units, mode, fa=2, layouts=both)


def _paired_panel_cols(rows, groups, short):
    """An N = 512 k - short, k odd, for which GroupedPanelKernel gives each CTA two 512-column
    chunks (the last CTA of each unit one): its launcher pairs the chunks where worst-case
    units x ceil(chunks / 2) >= two waves of 3 CTAs per SM."""
    units = most_units(rows, groups, 64)
    sms = getattr(CUDA, "core_count", 132)
    pairs = -(-6 * sms // units)
    return 512 * (2 * pairs + 1) - short


@pytest.mark.parametrize("mode", ["nvfp4", "nvfp4_sr"])
def test_nvfp4_panels_two_chunks_per_cta(mode):
    """GroupedPanelKernel with two chunks per CTA (a wide problem: the CTA's group lookup and
    encode table serve both; its staging slots are reused by the second chunk after a
    barrier): both layouts and the colwise one alone, 40 ragged groups with rows of no group,
    a partial last chunk, and the last CTA of each unit with one chunk."""
    rng = np.random.default_rng(8)
    ragged = rng.integers(0, 40, size=40)
    ragged[[0, 11, 39]] = 0
    ragged[[1, 2, 3]] = [1, 63, 65]
    x = spread_random((700, _paired_panel_cols(700, 40, 32)), jnp.bfloat16, seed=38)
    x[::5] *= np.float32(2.0**-7)
    _check(x, [ragged], mode, layouts=(L.COLWISE, L.ROWWISE_COLWISE), dbias=False)


_GRAPH_CODE = textwrap.dedent(
    """
    import hashlib
    import jax, jax.numpy as jnp, numpy as np
    import eqx_quant as eqq

    def run():
        rng = np.random.default_rng(1)
        x = jnp.asarray(rng.standard_normal((513, 384)) * 3, jnp.bfloat16)
        sizes = jnp.asarray([100, 0, 33, 260, 120], jnp.int32)  # sum 513
        L = eqq.QuantizeLayout.ROWWISE_COLWISE
        quantizers = [
            eqq.CurrentScaleQuantizer(jnp.float8_e4m3fn, L),
            eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, L),
            eqq.NVFP4Quantizer(q_layout=L, stochastic_rounding=True),
        ]
        key = jax.random.key(3)
        out = []
        for q in quantizers:
            kw = {"key": key} if isinstance(q, eqq.NVFP4Quantizer) else {}
            f = jax.jit(lambda x, s, q=q, kw=kw: eqq.grouped_quantize_dbias(
                jnp.sin(x) * 2, s, q, impl="ffi", **kw))
            for _ in range(3):  # the first run records the graph, later ones replay it
                out.append(f(x, sizes))
                out.append(f(x, sizes[::-1]))
        d = jax.jit(lambda x, s: eqq.grouped_dbias(x * 3, s, impl="ffi"))
        for _ in range(3):
            out.append(d(x, sizes))
        h = hashlib.sha256()
        for leaf in jax.tree.leaves(out):
            h.update(np.asarray(leaf).tobytes())
        return h.hexdigest()
    """
)


def test_cuda_graphs_give_the_same_bytes():
    """Under XLA command buffers with every op captured (--xla_gpu_graph_min_graph_size=1;
    the handlers are kCmdBufferCompatible, group offsets are computed on the device) the
    bytes equal those of this process, also when only the group sizes change."""
    assert_graph_replay_matches(_GRAPH_CODE, CUDA)
