"""The CUDA kernels against the pure-JAX reference run on the CPU, byte for byte.

Runs only where a CUDA device and eqx_quant's CUDA library are present (otherwise skipped
with a reason that mentions CUDA, which `EQX_QUANT_REQUIRE_CUDA=1` turns into a failure).
Every case runs `eqx_quant.quantize` / `quantize_dbias` with `impl="ffi"` on the GPU and the
same call with `impl="reference"` on the CPU device, and compares the bytes of every output
(row and col data, scale_inv, amax, dbias). The reference of a case is computed once, for
the ROWWISE_COLWISE layout with dbias, and serves the GPU calls of every layout with and
without dbias (the FP8 bytes do not depend on those choices), which keeps the CPU compile
time of the suite small. If the process has no CPU backend (`JAX_PLATFORMS=cuda`), the
reference runs on the GPU instead (it is integer arithmetic, exact on every backend).
"""

import functools
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import eqx_quant as eqq
from tests.oracle import fp8 as oracle
from tests.support.bytes import assert_same_bytes
from tests.support.cuda import CUDA, assert_graph_replay_matches, requires_cuda
from tests.support.dtypes import Q_DTYPES, X_DTYPES

pytestmark = requires_cuda()

LAYOUTS = (
    eqq.QuantizeLayout.ROWWISE,
    eqq.QuantizeLayout.COLWISE,
    eqq.QuantizeLayout.ROWWISE_COLWISE,
)


def _reference_device():
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:
        return CUDA


def _quantizer(kind, q_dtype, layout, scale):
    if kind == "current":
        return eqq.CurrentScaleQuantizer(q_dtype, layout)
    return eqq.DelayedScaleQuantizer(q_dtype, layout, scale=jnp.asarray([scale], jnp.float32))


@functools.cache
def _jitted(flatten_axis, with_dbias, impl, vmapped):
    def one(x, quantizer):
        if with_dbias:
            return eqq.quantize_dbias(x, quantizer, flatten_axis, impl=impl)
        return eqq.quantize(x, quantizer, flatten_axis, impl=impl), None

    return jax.jit(jax.vmap(one, in_axes=(0, None)) if vmapped else one)


def _call(x, quantizer, flatten_axis, with_dbias, impl, vmapped):
    return _jitted(flatten_axis, with_dbias, impl, vmapped)(x, quantizer)


def _arrays(result):
    """{name: numpy array} of every output of a quantize(_dbias) call."""
    tensor, dbias = result
    out = {}
    for name in ("rowwise", "colwise"):
        part = getattr(tensor, name)
        if part is not None:
            out[name] = np.asarray(part.data)
            out[name + ".scale_inv"] = np.asarray(part.scale_inv)
            out[name + ".amax"] = np.asarray(part.amax)
    if dbias is not None:
        out["dbias"] = np.asarray(dbias)
    return out


ALL_COMBOS = tuple((layout, d) for layout in LAYOUTS for d in (False, True))


def _check(x_np, q_name, flatten_axis=-1, kind="current", scales=(1.0,), vmapped=False,
           combos=ALL_COMBOS):
    """GPU impl="ffi" == reference on the CPU, for each (layout, with_dbias) in `combos`."""
    q_dtype = Q_DTYPES[q_name]
    ref_device = _reference_device()
    x_ref = jax.device_put(x_np, ref_device)
    x_gpu = jax.device_put(x_np, CUDA)
    for scale in scales:
        full = eqq.QuantizeLayout.ROWWISE_COLWISE
        with jax.default_device(ref_device):
            q_ref = _quantizer(kind, q_dtype, full, scale)
            want = _arrays(_call(x_ref, q_ref, flatten_axis, True, "reference", vmapped))
        for layout, with_dbias in combos:
            with jax.default_device(CUDA):
                q_gpu = _quantizer(kind, q_dtype, layout, scale)
                got = _arrays(_call(x_gpu, q_gpu, flatten_axis, with_dbias, "ffi", vmapped))
            what = (
                f"x {x_np.dtype}{list(x_np.shape)} fa={flatten_axis} {q_name} {kind} "
                f"scale={scale} {layout.name} dbias={with_dbias} vmap={vmapped}"
            )
            expected_keys = {k for k in want if with_dbias or k != "dbias"}
            if not layout.has_rowwise:
                expected_keys -= {k for k in expected_keys if k.startswith("rowwise")}
            if not layout.has_colwise:
                expected_keys -= {k for k in expected_keys if k.startswith("colwise")}
            assert set(got) == expected_keys, f"{what}: outputs {sorted(got)}"
            for key in got:
                assert_same_bytes(got[key], want[key], f"{what}: {key}")


def _random(shape, dtype, seed=0, scale=3.0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * scale
    return np.array(jnp.asarray(x, dtype))  # a writable copy


# (shape, flatten_axis, x dtype, q dtype): odd sizes, tails of every kind, zero sizes, deep
# dbias trees (8192 rows: 64 nodes of 128 rows, shared-memory stack levels), nested reduced
# axes, and shapes whose few dbias nodes are split over a cluster of blocks.
SHAPES = [
    ((37, 1001), -1, "bf16", "e4m3"),
    ((37, 1001), -1, "f32", "e5m2"),
    ((1, 7), -1, "f16", "e4m3"),
    ((7, 1), -1, "bf16", "e5m2"),
    ((7, 13), -1, "f32", "e4m3"),
    ((13,), -1, "bf16", "e4m3"),
    ((3, 5, 7), -2, "f16", "e5m2"),
    ((3, 5, 7), -3, "f32", "e4m3"),
    ((0, 5), -1, "bf16", "e4m3"),
    ((5, 0), -1, "f32", "e4m3"),
    ((2, 0, 3), -1, "f16", "e4m3"),
    ((256, 520), -1, "bf16", "e4m3"),
    ((1000, 48), -1, "f32", "e4m3"),
    ((8192, 64), -1, "bf16", "e5m2"),
    ((64, 2, 32), -2, "f16", "e4m3"),
    ((4, 96, 80), 2, "f32", "e4m3"),
    ((2, 512, 64), 2, "bf16", "e4m3"),
    ((400, 1040), -1, "bf16", "e4m3"),  # CastTransposeKernel: partial 128x128 tiles
    ((144, 260), -1, "f32", "e5m2"),
    ((96, 40), -1, "bf16", "e4m3"),  # 32 dbias nodes (each split 2..64 finishes on the GPU)
]


# Each kernel variant once per shape (CastRowwiseKernel; WalkKernel with the transposed
# output alone, with dbias and the rowwise output, with both and the rowwise output), plus
# one of the two remaining combinations in turn.
SHAPE_COMBOS = (
    (eqq.QuantizeLayout.ROWWISE, False),
    (eqq.QuantizeLayout.COLWISE, False),
    (eqq.QuantizeLayout.ROWWISE, True),
    (eqq.QuantizeLayout.ROWWISE_COLWISE, True),
)
EXTRA_COMBOS = ((eqq.QuantizeLayout.ROWWISE_COLWISE, False), (eqq.QuantizeLayout.COLWISE, True))
PATTERN_COMBOS = (
    (eqq.QuantizeLayout.ROWWISE, False),
    (eqq.QuantizeLayout.ROWWISE_COLWISE, False),
    (eqq.QuantizeLayout.ROWWISE_COLWISE, True),
)


@pytest.mark.parametrize(
    "shape,flatten_axis,x_name,q_name", SHAPES, ids=[f"{s}-{fa}-{x}-{q}" for s, fa, x, q in SHAPES]
)
def test_shapes_match_reference(shape, flatten_axis, x_name, q_name):
    x = _random(shape, X_DTYPES[x_name], seed=len(shape) * 1000 + sum(shape))
    # Current scaling runs amax, scale and cast in the kernels; delayed reports the kernel's amax.
    index = SHAPES.index((shape, flatten_axis, x_name, q_name))
    kind = "delayed" if index % 2 else "current"
    combos = SHAPE_COMBOS + (EXTRA_COMBOS[index % 2],)
    _check(x, q_name, flatten_axis, kind=kind, scales=(37.0,), combos=combos)


@pytest.mark.parametrize("q_name", ["e4m3", "e5m2"])
def test_all_bf16_patterns(q_name):
    """Every bf16 bit pattern (NaNs, infinities, subnormals, both zeros) at several scales."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
    x = bits.view(ml_dtypes.bfloat16)
    scales = (1.0, 3.75, 2.0**-20, 1e30, 0.0, float("inf"), float("nan"), -0.5)
    _check(x, q_name, kind="delayed", scales=scales, combos=PATTERN_COMBOS)


@pytest.mark.parametrize("q_name", ["e4m3", "e5m2"])
def test_all_f16_patterns(q_name):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(512, 128)
    x = bits.view(np.float16)
    _check(x, q_name, kind="delayed", scales=(1.0, 1e-3, 300.0), combos=PATTERN_COMBOS)


def test_f32_special_values():
    """Zeros, infinities, NaNs of both signs, f32 subnormals, values at the FP8 limits and
    at rounding ties, in f32 (so dbias keeps every bit)."""
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.17e-38, -3e-39,
         448.0, -448.0, 464.0, 480.0, 57344.0, 61440.0, -61441.0, 2.0**-9, 2.0**-10,
         3 * 2.0**-11, 1.0625, 1.1875, 240.0, 232.0, 3.4e38, -3.4e38],
        np.float32,
    )
    rng = np.random.default_rng(7)
    x = rng.choice(specials, size=(48, 40)).astype(np.float32)
    x[::5] = rng.standard_normal((10, 40)).astype(np.float32)
    bits = x.view(np.uint32)
    bits[7, :8] = [0x7F800001, 0xFF800001, 0x7FC00001, 0xFFFFFFFF, 1, 0x80000001, 0x007FFFFF, 0]
    for q_name in ("e4m3", "e5m2"):
        _check(x, q_name, kind="delayed", scales=(1.0, 2.0**-7, 1e-38, -3.0))
    # Only f32 subnormals, zeros and NaNs: the amax must keep subnormals (no FTZ) and
    # ignore NaN; a huge scale lifts the products into the FP8 range.
    tiny = rng.integers(0, 1 << 23, size=(33, 70)).astype(np.uint32)
    tiny[::4] |= np.uint32(0x80000000)
    tiny[5, 5] = 0x7FC00000
    tiny[6, :3] = [0, 0x80000000, 0xFFC00000]
    _check(tiny.view(np.float32), "e4m3", kind="delayed", scales=(1.0, 2.0**127))


def test_vmap_batches_match_reference():
    """n_batch > 0: each example has its own amax, scale, rows and dbias."""
    x = _random((3, 37, 100), jnp.bfloat16, seed=3)
    x[1] *= 100  # a different amax per example
    _check(x, "e4m3", vmapped=True)
    _check(x, "e4m3", kind="delayed", scales=(2.5,), vmapped=True)
    x32 = _random((2, 4, 64, 24), jnp.float32, seed=4)
    _check(x32, "e5m2", flatten_axis=2, vmapped=True,
           combos=((eqq.QuantizeLayout.ROWWISE_COLWISE, True),))


def test_vmap_transpose_tiles_span_examples():
    """CastTransposeKernel with more tiles than resident blocks: a block's tiles belong to
    different examples, each with its own amax and scale."""
    x = _random((1100, 16, 128), jnp.bfloat16, seed=5)  # 1100 tiles > 132 SMs x 8 blocks
    gains = np.array([1, 50, 0.01, 3, 7, 1, 0.5, 200, 2, 1e-3, 9], np.float32)
    x *= np.resize(gains, 1100)[:, None, None].astype(x.dtype)
    combos = ((eqq.QuantizeLayout.ROWWISE_COLWISE, False), (eqq.QuantizeLayout.COLWISE, False))
    _check(x, "e4m3", vmapped=True, combos=combos)
    _check(x, "e5m2", kind="delayed", scales=(2.5,), vmapped=True, combos=combos)


@pytest.mark.parametrize(
    "shape,x_name", [((3, 256, 384), "bf16"), ((3, 384, 512), "bf16"), ((3, 128, 256), "f32")]
)
def test_vmap_transpose_whole_tiles(shape, x_name):
    """CastTransposeTileKernel on whole tiles (128 x 128 for 384 columns, 128 x 256 for 256 or
    512), one block each on a (column tiles, row tiles, examples) grid: three examples, each with
    its own amax and scale (current scaling of a batch: the scale from the amax kernel's result,
    scale_inv written by each example's first tile)."""
    x = _random(shape, X_DTYPES[x_name], seed=6)
    x *= np.array([1, 300, 1e-3], np.float32)[:, None, None].astype(x.dtype)
    combos = ((eqq.QuantizeLayout.ROWWISE_COLWISE, False), (eqq.QuantizeLayout.COLWISE, False))
    _check(x, "e4m3", vmapped=True, combos=combos)
    _check(x, "e5m2", kind="delayed", scales=(2.5,), vmapped=True, combos=combos)


ROWWISE_ONLY = ((eqq.QuantizeLayout.ROWWISE, False),)
# With the transposed copy: one cooperative launch too where rows % 16 == 0 (else the amax
# kernel, then the walk).
TRANSPOSED = ((eqq.QuantizeLayout.ROWWISE_COLWISE, False), (eqq.QuantizeLayout.COLWISE, False))
TWO_PASS = ((eqq.QuantizeLayout.ROWWISE, True), (eqq.QuantizeLayout.ROWWISE_COLWISE, False))


@pytest.mark.parametrize(
    "shape,x_name,where",
    [
        # Rowwise: 64 KiB tiles (every block keeps 3 in shared memory, re-reads the rest) ...
        ((4096, 4096), "bf16", "last"),
        ((2304, 1024), "f32", "middle"),  # ... 144 tiles: 12 blocks with two
        # ... or 16 KiB tiles where 64 KiB ones would leave over half the SMs idle: 516
        # tiles (3 kept, one re-read), 17 tiles, one tile of one vector.
        ((2048, 1032), "f32", "first"),
        ((513, 1024), "f16", "middle"),
        ((1, 8), "bf16", "last"),
        # Transposed with two 128-row sub-tiles per SM: the ring of DbiasCurrentCastKernel
        # without the sums (8 sub-tiles per block: one held in registers across the grid
        # sync, the ring's 3, 4 re-read; a partial last slab of one vector; f32: 2-3 per
        # block, none held, a partial slab of 8 vectors) ...
        ((4096, 8200), "f16", "first"),
        ((4096, 1056), "f32", "last"),
        # ... 600 sub-tiles, 4-5 per block: at 5 one held, at 4 none held and one re-read
        # from x (a partial last slab of 31 vectors) ...
        ((5120, 1916), "f32", "middle"),
        # ... else whole tiles of 128 x 256, of 128 x 128, fewer tiles than blocks.
        ((1024, 2048), "f16", "middle"),
        ((640, 384), "bf16", "first"),
        ((384, 256), "f32", "last"),
    ],
)
def test_current_scaling_in_one_launch(shape, x_name, where):
    """Current scaling of one example runs as one cooperative launch (amax, grid sync, scale,
    cast; with the transposed copy too); the largest |x| sits in the first, a middle or the
    last block's range, so a block that casts before the grid-wide amax is final would
    show."""
    x = _random(shape, X_DTYPES[x_name], seed=sum(shape))
    flat = x.reshape(-1)
    position = {"first": 3, "middle": flat.size // 2 + 5, "last": flat.size - 2}[where]
    flat[position] = 1000.0
    _check(x, "e4m3", combos=ROWWISE_ONLY + TRANSPOSED)
    _check(x, "e5m2", combos=ROWWISE_ONLY + TWO_PASS)


DBIAS_ROWWISE = ((eqq.QuantizeLayout.ROWWISE, True),)
DBIAS_TRANSPOSED = (
    (eqq.QuantizeLayout.ROWWISE_COLWISE, True),
    (eqq.QuantizeLayout.COLWISE, True),
)


@pytest.mark.parametrize(
    "shape,x_name,where",
    [
        ((8192, 520), "bf16", "last"),  # nodes of 128 rows; a partial last slab of columns
        ((4096, 1024), "f16", "middle"),  # 64-row nodes: 2 per 128-row sub-tile
        ((1024, 1032), "f32", "first"),  # 16-row nodes, f32 slabs of 128 columns
        ((512, 40), "f32", "last"),  # 8-row nodes
        ((2048, 24), "bf16", "middle"),  # 32-row nodes
        ((256, 64), "bf16", "first"),  # 4-row nodes: one warp's rows each
        ((32768, 72), "bf16", "last"),  # 512-row nodes: 4 sub-tiles merged per node
        # 2048-row nodes: 16 sub-tiles, 4 counter levels (transposed: 16 sub-tiles per block,
        # one held in registers across the grid sync, 12 re-read)
        ((131072, 8), "f32", "middle"),
        ((8192, 1288), "bf16", "middle"),  # 2-3 sub-tiles per block (odd: a lone last step)
        ((8192, 1240), "f32", "last"),  # 4-5 per block: held at 5, at 4 none held
        ((128, 16), "f16", "last"),  # split 64 of 2 rows: not this kernel (the two-pass path)
    ],
)
def test_dbias_current_scaling_in_one_launch(shape, x_name, where):
    """dbias + current scaling of one example runs as one cooperative launch (node sums and
    amax in one read, grid sync, node 0 finished, cast; rowwise, transposed through a staging
    tile, or both); the largest |x| sits where a block that casts early would show, and the
    node sums must equal the CPU reference's bit for bit (every node, not only node 0)."""
    x = _random(shape, X_DTYPES[x_name], seed=sum(shape) + 11)
    flat = x.reshape(-1)
    position = {"first": 3, "middle": flat.size // 2 + 5, "last": flat.size - 2}[where]
    flat[position] = 1000.0
    _check(x, "e4m3", combos=DBIAS_ROWWISE + DBIAS_TRANSPOSED)
    x[shape[0] // 3, : shape[1] // 2] = np.nan  # NaN nodes stay canonical NaN
    x[shape[0] - 1, -1] = np.inf
    _check(x, "e5m2", combos=DBIAS_ROWWISE + DBIAS_TRANSPOSED)


@pytest.mark.parametrize("colwise", [False, True])
@pytest.mark.parametrize("rows", [256, 4096, 16384])
def test_dbias_current_scaling_node_sums(rows, colwise):
    """Every dbias node of the one-launch kernel (the inner primitive's split, not only the
    finished node 0) equals the oracle's tree sum of its chunk of rows, node 0 the whole
    axis' tree, bit for bit; nodes of 4, 64 and 256 rows; with and without the transposed
    copy."""
    from eqx_quant._ops.fp8_quantize import Fp8QuantizeParams, fp8_quantize_op

    x = _random((rows, 264), jnp.float32, seed=rows)
    x[rows // 2 + 1, 7] = np.nan  # a later node: reaches node 0 as the canonical NaN
    params = Fp8QuantizeParams(
        q_dtype="float8_e4m3fn", flatten_axis=1, rowwise=True, colwise=colwise,
        with_dbias=True, impl="ffi", scale_from_amax=True, dbias_split=64,
    )
    with jax.default_device(CUDA):
        *_, dbias, _ = fp8_quantize_op.bind_inner(
            jax.device_put(x, CUDA), jnp.ones((1,), jnp.float32), params=params
        )
    want = np.stack([oracle.tree_sum(chunk, 0) for chunk in x.reshape(64, rows // 64, 264)])
    want[0] = oracle.tree_sum(x, 0)
    want = np.where(np.isnan(want), np.float32(np.nan), want)  # canonical 0x7FC00000
    assert_same_bytes(np.asarray(dbias), want, "dbias nodes")


@pytest.mark.parametrize("case", ["zeros", "nan", "inf", "subnormal", "unaligned"])
def test_current_scaling_edge_values(case):
    """amax 0 or NaN-only -> the fallback scale 1; an Inf amax -> scale 1; an f32-subnormal
    amax -> an infinite scale; 37x1001 (not whole vectors) takes the amax-kernel path."""
    rng = np.random.default_rng(5)
    if case == "unaligned":
        x = _random((37, 1001), jnp.bfloat16, seed=9)
    else:
        x = rng.standard_normal((256, 512)).astype(np.float32)
        if case == "zeros":
            x[:] = 0.0
            x[3, :7] = -0.0
        elif case == "nan":
            x[:] = np.nan
        elif case == "inf":
            x[200, 17] = np.inf
        else:
            x = (rng.integers(0, 1 << 20, size=x.shape).astype(np.uint32)).view(np.float32)
    _check(x, "e4m3", combos=ROWWISE_ONLY + TWO_PASS)
    _check(x[None].repeat(3, 0), "e4m3", vmapped=True, combos=ROWWISE_ONLY)


def test_repeated_calls_reset_amax():
    """The amax output is zeroed by every call: a small tensor after a large one."""
    for layout in (eqq.QuantizeLayout.ROWWISE_COLWISE, eqq.QuantizeLayout.ROWWISE):
        with jax.default_device(CUDA):
            q = eqq.DelayedScaleQuantizer(jnp.float8_e4m3fn, layout)
        fn = jax.jit(lambda x, q=q: eqq.quantize(x, q, impl="ffi"))
        for factor in (1000.0, 1.0, 1000.0, 0.5):
            x = jax.device_put(_random((64, 256), jnp.bfloat16) * np.float32(factor), CUDA)
            x = x.astype(jnp.bfloat16)
            t = fn(x)
            part = t.rowwise if t.rowwise is not None else t.colwise
            want = np.max(np.abs(np.asarray(x, np.float32)))
            assert np.asarray(part.amax)[0] == want
            first = [np.asarray(a) for a in jax.tree.leaves(t)]
            again = [np.asarray(a) for a in jax.tree.leaves(fn(x))]
            for a, b in zip(first, again):
                assert_same_bytes(a, b, "repeated call")


def test_hardware_fp8_convert_equals_fp8_format():
    """`cvt.rn.satfinite.{e4m3,e5m2}x2.f32` == fp8_format.h's FloatToFp8 on all 2^32 f32
    inputs (each paired with its negation), NaN -> 0x7F and the sign of zero included."""
    import ctypes

    library = ctypes.CDLL(eqq.library_paths()["cuda"])
    mismatches = ctypes.c_ulonglong(0)
    first = ctypes.c_uint(0)
    jax.block_until_ready(jax.device_put(np.zeros(1, np.float32), CUDA))  # context is up
    error = library.EqxQuantCudaFp8ConvertSelfTest(ctypes.byref(mismatches), ctypes.byref(first))
    assert error == 0, f"CUDA error {error}"
    assert mismatches.value == 0, (
        f"{mismatches.value} f32 inputs convert differently; first bits {first.value:#010x}"
    )


_GRAPH_CODE = textwrap.dedent(
    """
    import hashlib
    import jax, jax.numpy as jnp, numpy as np
    import eqx_quant as eqq

    def run():
        x = jnp.asarray(np.random.default_rng(1).standard_normal((512, 384)) * 3, jnp.bfloat16)
        out = []
        for layout in (eqq.QuantizeLayout.ROWWISE, eqq.QuantizeLayout.ROWWISE_COLWISE):
            q = eqq.CurrentScaleQuantizer(jnp.float8_e4m3fn, layout)
            f = jax.jit(lambda x: eqq.quantize_dbias(jnp.sin(x) * 2, q, impl="ffi"))
            g = jax.jit(lambda x: eqq.quantize(x + 1, q, impl="ffi"))
            for _ in range(3):  # the first run records the graph, later ones replay it
                out.append(f(x))
                out.append(g(x))
        h = hashlib.sha256()
        for leaf in jax.tree.leaves(out):
            h.update(np.asarray(leaf).tobytes())
        return h.hexdigest()
    """
)


def test_cuda_graphs_give_the_same_bytes():
    """Under XLA command buffers with every op captured (--xla_gpu_graph_min_graph_size=1;
    the handler is kCmdBufferCompatible) the results equal those of this process, whose small
    computations are not captured (default minimum graph size)."""
    assert_graph_replay_matches(_GRAPH_CODE, CUDA)
