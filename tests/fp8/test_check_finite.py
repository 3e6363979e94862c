"""`check_finite`, the opt-in check for non-finite inputs: eager ValueError with the count
and first index, a run-time error under jit, the identity otherwise (values and gradient)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_quant as eqq


@pytest.mark.parametrize("bad", [jnp.nan, jnp.inf, -jnp.inf])
def test_eager_error_names_count_and_index(bad):
    x = jnp.ones((4, 8), jnp.bfloat16).at[2, 3].set(bad).at[3, 0].set(bad)
    with pytest.raises(ValueError, match=r"check_finite: acts holds NaN or Inf .* Found 2, "
                       r"the first at index \(2, 3\)"):
        eqq.check_finite(x, "acts")


def test_under_jit_raises_at_run_time_and_passes_finite_values():
    f = jax.jit(lambda x: eqq.quantize(eqq.check_finite(x), eqq.CurrentScaleQuantizer()))
    ok = jnp.asarray(np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8))
    np.testing.assert_array_equal(
        np.asarray(f(ok).dequantize()),
        np.asarray(eqq.quantize(ok, eqq.CurrentScaleQuantizer()).dequantize()),
    )
    with pytest.raises(Exception, match="holds NaN or Inf values"):
        jax.block_until_ready(f(ok.at[1, 1].set(jnp.inf)))


def test_identity_gradient_and_vmap():
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    np.testing.assert_array_equal(
        np.asarray(jax.grad(lambda x: jnp.sum(eqq.check_finite(x) * 2.0))(x)),
        np.full((2, 3), 2.0, np.float32),
    )
    np.testing.assert_array_equal(np.asarray(jax.vmap(eqq.check_finite)(x)), np.asarray(x))


def test_rejects_integer_input():
    with pytest.raises(TypeError, match="check_finite: x must be a floating-point jax.Array"):
        eqq.check_finite(jnp.ones(3, jnp.int32))
