"""Bad input to the grouped (MoE) API raises at trace time with a message that names the
argument and the fix (docs/grouped.md)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq
from tests.support.bytes import u8

L = eqq.QuantizeLayout
X = jnp.ones((64, 48), jnp.float32)
SIZES = jnp.asarray([10, 0, 54], jnp.int32)
MX = eqq.BlockScaleQuantizer()


@pytest.mark.parametrize("fn", ["grouped_quantize", "grouped_quantize_dbias"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.uint8, jnp.int16])
def test_group_sizes_dtype(fn, dtype):
    message = r"group_sizes must have dtype int32, got " + jnp.dtype(dtype).name
    with pytest.raises(TypeError, match=message):
        getattr(eqq, fn)(X, SIZES.astype(dtype), MX)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.uint8])
def test_group_sizes_dtype_dbias(dtype):
    with pytest.raises(TypeError, match=r"grouped_dbias: group_sizes must have dtype int32"):
        eqq.grouped_dbias(X, SIZES.astype(dtype))


@pytest.mark.parametrize(
    "sizes",
    [jnp.asarray([[32, 32]], jnp.int32), jnp.asarray(64, jnp.int32), jnp.zeros((0,), jnp.int32)],
    ids=["2d", "scalar", "empty"],
)
def test_group_sizes_shape(sizes):
    with pytest.raises(ValueError, match=r"group_sizes must be 1-D with one entry per group"):
        eqq.grouped_quantize(X, sizes, MX)
    with pytest.raises(ValueError, match=r"grouped_dbias: group_sizes must be 1-D"):
        eqq.grouped_dbias(X, sizes)


@pytest.mark.parametrize("sizes", [np.array([32, 32], np.int32), [32, 32]], ids=["numpy", "list"])
def test_group_sizes_not_a_jax_array(sizes):
    with pytest.raises(TypeError, match=r"group_sizes must be a jax.Array of int32.*jnp.asarray"):
        eqq.grouped_quantize(X, sizes, MX)


def test_x_rank_1():
    with pytest.raises(ValueError, match=r"grouped_quantize: x must have rank >= 2.*shape \(64,\)"):
        eqq.grouped_quantize(jnp.ones((64,), jnp.float32), SIZES, eqq.CurrentScaleQuantizer())
    with pytest.raises(ValueError, match=r"grouped_dbias: grad must have rank >= 2"):
        eqq.grouped_dbias(jnp.ones((64,), jnp.float32), SIZES)


def test_x_dtype():
    with pytest.raises(TypeError, match=r"x must be float32, float16 or bfloat16"):
        eqq.grouped_quantize(X.astype(jnp.int32), SIZES, MX)
    with pytest.raises(TypeError, match=r"grouped_dbias: grad must be float32, float16 or bf"):
        eqq.grouped_dbias(X.astype(jnp.float8_e4m3fn), SIZES)


def test_nvfp4_rht_refused():
    q = eqq.NVFP4Quantizer(use_rht=True)
    message = r"use_rht=True\) is not supported for grouped inputs.*use_rht=False"
    with pytest.raises(ValueError, match=message):
        eqq.grouped_quantize(X, SIZES, q)
    with pytest.raises(ValueError, match=r"not supported for grouped inputs"):
        eqq.grouped_quantize_dbias(X, SIZES, q)


def test_plain_delayed_quantizer_refused():
    with pytest.raises(TypeError, match=r"GroupedDelayedScaleQuantizer\(num_groups=3"):
        eqq.grouped_quantize(X, SIZES, eqq.DelayedScaleQuantizer())


def test_grouped_delayed_num_groups_mismatch():
    gq = eqq.GroupedDelayedScaleQuantizer(4)
    with pytest.raises(ValueError, match=r"has 4 groups but group_sizes has 3 entries.*=3"):
        eqq.grouped_quantize(X, SIZES, gq)
    w = jnp.ones((5, 8, 16), jnp.float32)  # weight-like: G = 5
    with pytest.raises(ValueError, match=r"has 4 groups but group_sizes has 5 entries"):
        eqq.grouped_quantize(w, None, gq)


def test_grouped_delayed_constructor_and_update():
    with pytest.raises(ValueError, match=r"num_groups must be an int >= 1"):
        eqq.GroupedDelayedScaleQuantizer(0)
    with pytest.raises(ValueError, match=r"scale must be a float32 array of shape \(num_groups,\)"):
        eqq.GroupedDelayedScaleQuantizer(3, scale=jnp.ones((2,), jnp.float32))
    with pytest.raises(ValueError, match=r"amax_history must be a float32 array of shape"):
        eqq.GroupedDelayedScaleQuantizer(3, amax_history=jnp.zeros((2, 8), jnp.float32))
    gq = eqq.GroupedDelayedScaleQuantizer(3, amax_history_len=8)
    with pytest.raises(ValueError, match=r"amax must have shape \(3,\)"):
        gq.update(jnp.ones((4,), jnp.float32))


def test_group_sizes_none_needs_rank_3():
    with pytest.raises(ValueError, match=r"group_sizes=None means one group per leading index"):
        eqq.grouped_quantize(X, None, MX)


@pytest.mark.parametrize("fa,shape", [(0, (64, 48)), (-3, (8, 8, 48)), (0, (8, 8, 48))])
def test_flatten_axis_zero(fa, shape):
    x = jnp.ones(shape, jnp.float32)
    sizes = jnp.asarray([4, 4] if shape[0] == 8 else [32, 32], jnp.int32)
    for q in (MX, eqq.CurrentScaleQuantizer(q_layout=L.ROWWISE)):
        with pytest.raises(ValueError, match=r"flatten_axis"):
            eqq.grouped_quantize(x, sizes, q, fa)


def test_flatten_axis_zero_message():
    q = eqq.CurrentScaleQuantizer(q_layout=L.ROWWISE)
    with pytest.raises(ValueError, match=r"flatten_axis resolves to 0.*must be >= 1"):
        eqq.grouped_quantize(X, SIZES, q, 0)


def test_flatten_axis_out_of_range():
    with pytest.raises(ValueError, match=r"flatten_axis=2 is out of range"):
        eqq.grouped_quantize(X, SIZES, MX, 2)


def test_key_rules():
    sr = eqq.NVFP4Quantizer(stochastic_rounding=True)
    with pytest.raises(ValueError, match=r"needs random bits: pass key="):
        eqq.grouped_quantize(X, SIZES, sr)
    with pytest.raises(ValueError, match=r"key was given but BlockScaleQuantizer does not use"):
        eqq.grouped_quantize(X, SIZES, MX, key=jax.random.key(0))


def test_impl_name():
    with pytest.raises(ValueError, match=r"impl must be 'auto', 'ffi' or 'reference'"):
        eqq.grouped_quantize(X, SIZES, MX, impl="cuda")
    with pytest.raises(ValueError, match=r"grouped_dbias: impl must be"):
        eqq.grouped_dbias(X, SIZES, impl="cuda")


def test_group_part_needs_concrete_sizes_and_valid_index():
    gt = eqq.grouped_quantize(X, SIZES, eqq.CurrentScaleQuantizer())
    with pytest.raises(ValueError, match=r"group_part: g must be an int in \[0, 3\), got 3"):
        gt.rowwise.group_part(3)
    with pytest.raises(ValueError, match=r"group_part: g must be an int in \[0, 3\), got -1"):
        gt.rowwise.group_part(-1)
    with pytest.raises(ValueError, match=r"scale_inv_for_group: g must be an int in \[0, 3\)"):
        gt.scale_inv_for_group(True)

    def inside(t):
        return t.rowwise.group_part(0).data

    with pytest.raises(ValueError, match=r"needs concrete group sizes"):
        jax.jit(inside)(gt)


def test_grad_not_an_array():
    with pytest.raises(TypeError, match=r"grouped_dbias: grad must be a jax.Array, got ndarray"):
        eqq.grouped_dbias(np.ones((64, 48), np.float32), SIZES)
    with pytest.raises(
        ValueError, match=r"grouped_dbias: grad must have rank >= 2 .*shape \(64,\)"
    ):
        eqq.grouped_dbias(jnp.ones((64,), jnp.float32), SIZES)


def test_grouped_delayed_group_index():
    q = eqq.GroupedDelayedScaleQuantizer(3, amax_history_len=2)
    for g in (3, -1, 1.0):
        with pytest.raises(ValueError, match=r"group: g must be an int in \[0, 3\), got"):
            q.group(g)
    assert q.group(2).amax_history_len == 2 and q.amax_history_len == 2


def test_stacked_grouped_delayed_quantizer():
    """A stack of grouped states (one per layer) is refused outside vmap and works inside."""
    scales = jnp.asarray([[1.0, 2.0, 4.0], [0.5, 8.0, 16.0]], jnp.float32)
    stacked = jax.vmap(
        lambda s: eqq.GroupedDelayedScaleQuantizer(3, amax_history_len=2, scale=s)
    )(scales)
    with pytest.raises(ValueError, match=r"holds a stack of states \(scale of shape \(2, 3\)\)"):
        eqq.grouped_quantize(X, SIZES, stacked)
    data = jax.vmap(lambda q: eqq.grouped_quantize(X, SIZES, q).rowwise.data)(stacked)
    for layer in range(2):
        one = eqq.GroupedDelayedScaleQuantizer(3, amax_history_len=2, scale=scales[layer])
        expected = eqq.grouped_quantize(X, SIZES, one).rowwise.data
        np.testing.assert_array_equal(u8(data[layer]), u8(expected))


# --------------------------------------------------------------------------------------------
# Run-time group sizes under jit: on the CPU and the GPU the check is a kernel whose message
# XLA puts on the first line of the error (docs/grouped.md, "Checks").

_ON_CPU = pytest.mark.skipif(
    jax.default_backend() not in ("cpu", "gpu"),
    reason="the check kernels are for CPU and CUDA; elsewhere eqx.error_if checks",
)
_SIZES_WORDS = r"group_sizes must be non-negative and sum to {}\.shape\[0\] = 64, got "
_Q = eqq.CurrentScaleQuantizer()


def _jit_sizes_cases():
    def quantize(s):
        return jax.jit(lambda x, s: eqq.grouped_quantize(x, s, _Q))(X, s)

    def quantize_dbias(s):
        return jax.jit(lambda x, s: eqq.grouped_quantize_dbias(x, s, MX))(X, s)

    def dbias(s):
        return jax.jit(eqq.grouped_dbias)(X, s)

    def vmapped(s):
        xs = jnp.stack([X, X])
        return jax.jit(jax.vmap(lambda x, s: eqq.grouped_quantize(x, s, MX)))(xs, s)

    many = [1] * 40  # 40 entries summing to 40: listed cut in the middle
    sizes = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
    return [
        (lambda: quantize(sizes([10, 5])), "grouped_quantize", "x", r"\[10, 5\] \(sum 15\)\. "),
        (lambda: quantize(sizes([70, -6])), "grouped_quantize", "x", r"\[70, -6\] \(sum 64\)\. "),
        (lambda: quantize_dbias(sizes([65])), "grouped_quantize_dbias", "dx", r"\[65\] \(sum 65\)"),
        (lambda: dbias(sizes([1, 2])), "grouped_dbias", "grad", r"\[1, 2\] \(sum 3\)\. "),
        (lambda: dbias(sizes(many)), "grouped_dbias", "grad",
         r"\[1, 1, 1, 1, 1, 1, 1, 1, \.\.\., 1, 1, 1, 1, 1, 1, 1, 1\] \(sum 40\)\. "),
        (lambda: vmapped(sizes([[64, 0], [60, 3]])), "grouped_quantize", "x",
         r"\[60, 3\] \(sum 63\) in example 1 of the batch\. "),
    ]


@_ON_CPU
@pytest.mark.parametrize("index", range(6))
def test_jit_group_size_error_says_what_and_how_on_its_first_line(index):
    run, fn, operand, got = _jit_sizes_cases()[index]
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(run())
    first = str(info.value).splitlines()[0]
    want = (rf"^INVALID_ARGUMENT: eqx_quant\.{fn}: {_SIZES_WORDS.format(operand)}{got}.*"
            r"pass check=False to allow that\.$")
    assert re.match(want, first), first


@_ON_CPU
def test_jit_group_size_check_passes_good_sizes_and_is_skipped_without_check():
    f = jax.jit(lambda x, s, check: eqq.grouped_dbias(x, s, check=check), static_argnums=2)
    good = f(X, SIZES, True)
    np.testing.assert_array_equal(np.asarray(good), np.asarray(eqq.grouped_dbias(X, SIZES)))
    short = f(X, jnp.asarray([10, 0, 4], jnp.int32), False)  # rows 14.. belong to no group
    want = np.stack([np.asarray(X[:10]).sum(0), np.zeros(48), np.asarray(X[10:14]).sum(0)])
    np.testing.assert_array_equal(np.asarray(short, np.float32), want)
