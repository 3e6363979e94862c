"""The reference's integer float32 divisions (`ieee.divide`, `ieee.divide_by_constant`)
against NumPy's IEEE float32 quotient on the host, bit for bit: random bit patterns, subnormal
and tiny dividends, IEEE specials (NaN results are the quiet NaN 0x7FC00000), and divisors
that take the one-division path (odd part < 64) or fall back to `divide`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqx_quant.reference import ieee

SPECIALS = np.array([0, 1, 2, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000,
                     0x7F800001, 0x80000000, 0x80000001, 0xFF800000, 0x3F800000], np.uint32)


def _dividends(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    random = rng.integers(0, 2**32, size=100_000, dtype=np.uint64).astype(np.uint32)
    tiny = rng.integers(0, 0x01000000, size=20_000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([SPECIALS, random, tiny, tiny | 0x80000000]).view(np.float32)


def _numpy_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        q = (a / b).astype(np.float32)
    return np.where(np.isnan(q), np.uint32(0x7FC00000), q.view(np.uint32))


@pytest.mark.parametrize("divisor", [2688.0, 3.0, 448.0, 0.75, 2.0**-130, 1.0, 1.4142135])
def test_divide_by_constant_is_ieee(divisor):
    a = _dividends(seed=int(divisor * 1000) % 97)
    got = jax.jit(lambda a: ieee.divide_by_constant(a, divisor))(jnp.asarray(a))
    want = _numpy_bits(a, np.float32(divisor))
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), want)


def test_divide_is_ieee():
    a = _dividends(seed=1)
    b = np.roll(_dividends(seed=2), 5)
    got = jax.jit(ieee.divide)(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32), _numpy_bits(a, b))


def test_divide_by_constant_rejects_a_bad_divisor():
    with pytest.raises(ValueError, match="positive and finite"):
        ieee.divide_by_constant(jnp.ones(2), 0.0)
