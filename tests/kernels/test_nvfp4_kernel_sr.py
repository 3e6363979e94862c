"""Bit-exact tests of the NVFP4 CPU kernels: stochastic rounding (counter-based random bytes
at global indices: rowwise in x, colwise in the T layout) and operand validation. Method and
helpers: test_nvfp4_kernel.py, tests/support/nvfp4_kernel.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.support.nvfp4_kernel import (  # noqa: F401 (fixtures)
    AMAX_TARGET,
    MASK,
    OUT_DTYPES,
    QUANTIZE_TARGET,
    check_quantize,
    chunked_cores,
    col_sr_bytes,
    example_amaxes,
    example_rht_amaxes,
    finite_amax,
    kernel_quantize,
    kernels,
    make_inputs,
    rht_ok,
    row_sr_bytes,
)

# ---------------------------------------------------------------------------------------------
# Tests: stochastic rounding


# (local shape, fa, offset, global shape)
SR_CASES = [
    ((32, 64), -1, (32, 128), (128, 256)),
    ((2, 64, 32), -1, (1, 64, 0), (4, 256, 32)),
    ((3, 32, 40), -2, (5, 0, 40), (8, 32, 80)),
    ((7, 13), -1, (3, 19), (10, 40)),
    ((16, 48), -1, (0, 0), (16, 48)),
    ((16, 1100), -1, (16, 5), (64, 2048)),
    # colwise octets misaligned with the blocks (K offset 2) and cut by the edge (K = 40)
    ((40, 33), -1, (2, 4), (64, 64)),
    # K = 13 of 21 rows: the colwise octets straddle T rows
    ((13, 24), -1, (3, 5), (21, 40)),
    ((2, 13, 3, 16), -2, (1, 3, 0, 16), (3, 21, 3, 48)),
    # indices over 2^35 - 41 ..: the octet counter's low word wraps inside a rowwise block
    # (row 15) and inside a colwise block (T row 15)
    ((2, 64), -1, (14, 2**31 - 41), (16, 2**31)),
    ((64, 2), -1, (2**31 - 41, 14), (2**31, 16)),
]


@pytest.mark.parametrize("mode", ["1d", "2d", "rht", "rowwise_only"])
@pytest.mark.parametrize(
    "shape,fa,offset,global_shape", SR_CASES, ids=[str(c[0]) for c in SR_CASES]
)
def test_stochastic_rounding(shape, fa, offset, global_shape, mode):
    if mode == "rht" and not rht_ok(shape, fa):
        pytest.skip("RHT needs K % 16 == 0")
    dtype = jnp.bfloat16 if mode == "2d" else jnp.float32
    x = make_inputs(shape, dtype, seed=21)
    amax = example_amaxes(x)
    use_rht = mode == "rht"
    col_amax = example_rht_amaxes(x, fa) if use_rht else amax
    keys = np.array([[0, 0], [123, 456], [0xDEADBEEF, 0x01234567]], np.uint32)
    check_quantize(x, amax, col_amax, n_batch=1, fa=fa, use_2d=mode == "2d", use_rht=use_rht,
                   colwise=mode != "rowwise_only", keys=keys,
                   offset=np.array(offset, np.int32), global_shape=global_shape)


@pytest.mark.parametrize("above", [False, True], ids=["at", "above"])
def test_stochastic_rounding_exact_threshold(above):
    """Elements whose fraction is exactly (r + 1/2) / 256 for their own random byte r round
    down (`(r + 1/2) * 2^-8 < frac` is false); 2^-19 above it they round up. amax_g = 2688
    and a 6 in every block make the multiplier 1, so y = x = (2r + 1) * 2^-10 (+ 2^-20):
    exact, frac(y / 0.5) = (r + 1/2) / 256 (+ 2^-19). Rowwise r is the byte of the x index,
    colwise that of the T-layout index."""
    shape, key = (16, 32), np.array([7, 9], np.uint32)
    zero = np.zeros(2, np.int32)
    for rowwise in (True, False):
        if rowwise:
            r = row_sr_bytes(shape, key, zero, shape)
        else:
            r = col_sr_bytes(shape, 1, key, zero, shape).T  # T layout (32, 16) back to x's
        x = (2 * r.astype(np.float64) + 1) * 2.0**-10 + (2.0**-20 if above else 0.0)
        x = x.astype(np.float32) * np.resize(np.float32([1, -1, -1, 1, 1]), shape)
        if rowwise:
            x[:, ::16] = 6.0
        else:
            x[0, :] = 6.0
        g = np.float32([2688.0])
        out = check_quantize(x[None], g, g, n_batch=1, rowwise=rowwise, colwise=not rowwise,
                             keys=key[None])
        codes = out[0][0] if rowwise else out[2][0].T
        assert ((codes & 7) == np.where(x == 6.0, 7, int(above))).all()
        assert ((codes & 8) == np.where(x < 0, 8, 0)).all()


@pytest.mark.parametrize(
    "global_shape,offset",
    [((70000, 70000), (69000, 1000)), ((70000, 70000), (1000, 69000)),
     ((300000, 300000), (299000, 298000))],
)
def test_stochastic_rounding_large_index(global_shape, offset):
    """Global linear indices above 2^32 (the index's high word; rowwise for offset (69000,
    1000), colwise for (1000, 69000)) and above 2^35 (the high word of the octet counter, both
    parts)."""
    shape = (16, 32)
    x = make_inputs(shape, jnp.float16, seed=4)
    amax = example_amaxes(x)
    keys = np.array([[1, 2], [3, 4], [5, 6]], np.uint32)
    check_quantize(x, amax, amax, n_batch=1, keys=keys, offset=np.array(offset, np.int32),
                   global_shape=global_shape)


@pytest.mark.parametrize(
    "shape,global_shape,offset",
    [((6, 48), (16, 2**31 + 1), (3, -21)), ((48, 6), (2**31 + 1, 16), (-21, 3))],
    ids=["rowwise", "colwise"],
)
def test_stochastic_rounding_last_dim_wrap(shape, global_shape, offset):
    """The index term uint32(s + offset) of the last dim of the part's layout wraps inside a
    block (offset -21; rowwise: x's L, colwise: the T layout's K): the run's indices drop by
    2^32 - 1 there, so its octets come from the exact indices, not from the first one. The
    row stride 2^31 + 1 (1 mod 8) puts the rows' first indices at six different positions of
    an octet."""
    x = make_inputs(shape, jnp.float32, seed=5)
    amax = example_amaxes(x)
    keys = np.array([[9, 8], [0xFFFFFFFF, 1], [2, 0x80000000]], np.uint32)
    check_quantize(x, amax, amax, n_batch=1, keys=keys, offset=np.array(offset, np.int32),
                   global_shape=global_shape)


def test_stochastic_rounding_changes_with_key_and_stream():
    x = make_inputs((32, 64), jnp.float32, seed=8)[0]
    amax = finite_amax(x)
    outs = [kernel_quantize(x, amax, amax, sr=True, key=np.array(k, np.uint32))
            for k in ([1, 2], [1, 3])]
    assert (outs[0][0] != outs[1][0]).any()
    # the colwise part draws other bytes than the rowwise part for the same element
    assert (outs[0][0] != outs[0][2].T).any()
    rn = kernel_quantize(x, amax, amax)
    assert (outs[0][0] != rn[0]).any() and (outs[0][1] == rn[1]).all()


def test_round_to_nearest_reads_no_key_or_offset():
    """Without SR the key words and the index offset are not read: empty operands (what
    `quantize` passes) give the bytes of zero-filled ones, and so do other words."""
    x = make_inputs((32, 64), jnp.float32, seed=9)  # 3 examples
    amax = example_amaxes(x)
    zero = kernel_quantize(x, amax, amax, n_batch=1)
    empty = kernel_quantize(x, amax, amax, n_batch=1, key=np.zeros((3, 0), np.uint32),
                            offset=np.zeros((0,), np.int32))
    other = kernel_quantize(x, amax, amax, n_batch=1, key=np.full((3, 2), 7, np.uint32),
                            offset=np.array([3, 5], np.int32))
    for a, b, c in zip(zero, empty, other):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert zero[0].size > 0 and zero[2].size > 0


# ---------------------------------------------------------------------------------------------
# Tests: operand validation


def _quantize_error(**overrides):
    x = np.ones((32, 64), np.float32)
    args = dict(
        x=x, amax=np.ones((1,), np.float32), col_amax=np.ones((1,), np.float32),
        key=np.zeros((2,), np.uint32), offset=np.zeros((2,), np.int32),
    )
    attrs = dict(
        n_batch=np.int64(0), block_axis=np.int64(0), rowwise=True, colwise=True, use_2d=False,
        use_rht=False, rht_sign_mask=np.int64(MASK), stochastic_rounding=False,
        global_shape=np.array([32, 64], np.int64),
    )
    shapes = {"row": (32, 64), "row_scale": (32, 4), "col": (64, 32), "col_scale": (64, 2)}
    dtypes = dict(zip(shapes, OUT_DTYPES))
    for name, value in overrides.items():
        if name in args:
            args[name] = value
        elif name in attrs:
            attrs[name] = value
        elif name.endswith("_dtype"):
            dtypes[name[: -len("_dtype")]] = value
        else:
            shapes[name] = value
    call = jax.ffi.ffi_call(
        QUANTIZE_TARGET,
        tuple(jax.ShapeDtypeStruct(shapes[k], dtypes[k]) for k in shapes),
        vmap_method=None,
    )
    with pytest.raises(Exception) as info:
        jax.block_until_ready(call(*args.values(), **attrs))
    return str(info.value)


@pytest.mark.parametrize(
    "overrides,words",
    [
        (dict(x=np.ones((32, 64), np.int32)), ["x", "s32", "f32, f16 or bf16"]),
        (dict(row=(32, 63)), ["row", "[32,63]", "[32,64]"]),
        (dict(row_scale=(32, 3)), ["row_scale", "[32,4]"]),
        (dict(col=(32, 64)), ["col", "[64,32]"]),
        (dict(col_scale=(64, 1)), ["col_scale", "[64,2]"]),
        (dict(row_dtype=jnp.uint8), ["row", "u8", "f4e2m1fn"]),
        (dict(row_scale_dtype=jnp.uint8), ["row_scale", "u8", "f8e4m3fn"]),
        (dict(col_dtype=jnp.float8_e4m3fn), ["col", "f8e4m3fn", "f4e2m1fn"]),
        (dict(col_scale_dtype=jnp.uint8), ["col_scale", "u8", "f8e4m3fn"]),
        (dict(amax=np.ones((2,), np.float32)), ["amax", "[1]"]),
        (dict(col_amax=np.ones((1,), np.int32)), ["col_amax", "s32", "f32"]),
        (dict(key=np.zeros((2,), np.int32)), ["key", "s32", "u32"]),
        (dict(offset=np.zeros((3,), np.int32)), ["offset", "[2]"]),
        # Empty key / offset only without stochastic rounding.
        (dict(key=np.zeros((0,), np.uint32), stochastic_rounding=True), ["key", "[0]", "[2]"]),
        (dict(offset=np.zeros((0,), np.int32), stochastic_rounding=True),
         ["offset", "[0]", "[2]"]),
        (dict(key=np.zeros((1,), np.uint32)), ["key", "[1]", "B + (0,) without"]),
        (dict(block_axis=np.int64(1)), ["block_axis=1", "[0, 0]"]),
        (dict(block_axis=np.int64(-1)), ["block_axis=-1", "colwise=true"]),
        (dict(n_batch=np.int64(2)), ["n_batch=2"]),
        (dict(rowwise=False, colwise=False), ["rowwise and colwise"]),
        (dict(use_rht=True, use_2d=True), ["use_rht", "use_2d"]),
        (dict(rht_sign_mask=np.int64(1 << 16)), ["rht_sign_mask=65536"]),
        (dict(global_shape=np.array([32], np.int64)), ["global_shape", "expected 2"]),
    ],
)
def test_quantize_errors(overrides, words):
    message = _quantize_error(**overrides)
    assert "eqx_quant_nvfp4_quantize: " in message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_quantize_error_rht_needs_k_multiple_of_16():
    x = np.ones((8, 64), np.float32)
    message = _quantize_error(
        x=x, use_rht=True, row=(8, 64), row_scale=(8, 4), col=(64, 8), col_scale=(64, 1),
        global_shape=np.array([8, 64], np.int64),
    )
    assert "eqx_quant_nvfp4_quantize: " in message and "multiple of 16" in message


def test_amax_errors():
    x = np.ones((8, 64), np.float32)
    for kwargs, shapes, words in [
        (dict(with_rht=True, block_axis=np.int64(0)), ((1,), (1,)), ["multiple of 16"]),
        (dict(with_rht=True, block_axis=np.int64(-1)), ((1,), (1,)), ["block_axis=-1"]),
        (dict(with_rht=False, block_axis=np.int64(-1)), ((1,), (1,)), ["rht_amax", "[0]"]),
        (dict(with_rht=False, block_axis=np.int64(-1)), ((2,), (0,)), ["amax", "[1]"]),
    ]:
        call = jax.ffi.ffi_call(
            AMAX_TARGET, tuple(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes),
            vmap_method=None,
        )
        with pytest.raises(Exception) as info:
            jax.block_until_ready(
                call(x, n_batch=np.int64(0), rht_sign_mask=np.int64(MASK), **kwargs)
            )
        message = str(info.value)
        assert "eqx_quant_nvfp4_amax: " in message
        for word in words:
            assert word in message, f"{word!r} not in {message!r}"
