"""IEEE-754 float32 arithmetic built from integer operations, identical on every backend.

Why: XLA on CPU runs with flush-to-zero and denormals-are-zero (a subnormal times anything is
0, and even `x > 0` is False for a subnormal x); XLA on GPU does not divide in IEEE float32
(1-2 ulp off for ~30% of quotients). TE's CUDA kernels are plain IEEE float32 (round to
nearest even, subnormals kept). For the pure-JAX reference to be bit-exact with them on every
backend, every float operation whose result we promise bit for bit is done here on the bit
patterns: `multiply`, `add`, `divide`, the saturating FP8 conversion and the amax.

The operations are `jax.jit` functions: a computation that uses one many times (a scale per
tensor in a whole training step) traces and lowers it once per operand shape.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, Float, Shaped, UInt8

_SIGN = 0x80000000
_MAG = 0x7FFFFFFF
_INF = 0x7F800000
_QNAN = 0x7FC00000


def _u32(v: int) -> Array:
    return jnp.uint32(v)


def bits(x: Float[Array, "..."]) -> Array:
    return lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.uint32)


def from_bits(b: Array) -> Float[Array, "..."]:
    return lax.bitcast_convert_type(b, jnp.float32)


def _unpack(mag: Array) -> tuple[Array, Array]:
    """(significand in [2^23, 2^24), unbiased exponent) of a finite nonzero magnitude."""
    biased = (mag >> 23).astype(jnp.int32)
    frac = mag & _u32(0x7FFFFF)
    sig = jnp.where(biased == 0, frac, frac | _u32(0x800000))
    exp = jnp.where(biased == 0, 1, biased) - 127
    shift = jnp.clip(lax.clz(sig).astype(jnp.int32) - 8, 0, 31)
    return sig << shift.astype(jnp.uint32), exp - shift


def _round_pack(exp: Array, sig26: Array, sticky: Array) -> Array:
    """Magnitude bits of `sig26 * 2^(exp-25)` (sig26 in [2^25, 2^26)), rounded to nearest even,
    with subnormal results and overflow to infinity."""
    drop = 2 + jnp.clip(-126 - exp, 0, 40)
    drop_u = jnp.minimum(drop, 31).astype(jnp.uint32)
    big = drop >= 32
    kept = jnp.where(big, _u32(0), sig26 >> drop_u)
    low = jnp.where(big, sig26, sig26 & ((_u32(1) << drop_u) - 1))
    half = jnp.where(big, _u32(0xFFFFFFFF), _u32(1) << (drop_u - 1))
    up = ((low > half) | ((low == half) & (sticky | ((kept & 1) == 1)))) & ~big
    kept = kept + up.astype(jnp.uint32)
    exp_field = jnp.clip(exp + 126, 0, 254).astype(jnp.uint32)
    mag = jnp.where(exp >= -126, (exp_field << 23) + kept, kept)
    return jnp.where((exp > 127) | (mag >= _u32(_INF)), _u32(_INF), mag)


def _classify(b: Array):
    mag = b & _u32(_MAG)
    return mag, mag > _u32(_INF), mag == _u32(_INF), mag == 0


def _operands(a: Array, b: Array):
    """Sign of the product/quotient and (nan, inf, zero, significand, exponent) of a and b."""
    ia, ib = bits(a), bits(b)
    unpacked = []
    for b_ in (ia, ib):
        mag, nan, inf, zero = _classify(b_)
        sig, exp = _unpack(mag)
        unpacked.append((nan, inf, zero, sig, exp))
    return (ia ^ ib) & _u32(_SIGN), unpacked[0], unpacked[1]


@jax.jit
def divide(a: Float[Array, "*s"], b: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """Correctly rounded float32 `a / b`: the 26-bit quotient of the significands by long
    division in four uint32 integer divisions (7 + 6 + 6 + 6 quotient bits after the leading
    one), then one rounding."""
    sign, (a_nan, a_inf, a_zero, sig_a, exp_a), (b_nan, b_inf, b_zero, sig_b, exp_b) = _operands(
        a, b
    )
    smaller = sig_a < sig_b
    rem = jnp.where(smaller, sig_a << 1, sig_a)  # in [sig_b, 2 sig_b) < 2^25 when finite
    exp = exp_a - exp_b - smaller.astype(jnp.int32)
    sig_b = jnp.where(sig_b == 0, _u32(1), sig_b)
    quot = jnp.zeros_like(rem)
    for chunk in (7, 6, 6, 6):  # rem << chunk stays below 2^32
        shifted = rem << _u32(chunk)
        quot = (quot << _u32(chunk)) | lax.div(shifted, sig_b)
        rem = lax.rem(shifted, sig_b)
    mag = _round_pack(exp, quot, rem != 0)
    mag = jnp.where(a_zero | b_inf, _u32(0), mag)
    mag = jnp.where(a_inf | b_zero, _u32(_INF), mag)
    out = mag | sign
    nan = a_nan | b_nan | (a_inf & b_inf) | (a_zero & b_zero)
    return from_bits(jnp.where(nan, _u32(_QNAN), out))


def _odd_and_exponent(divisor: float) -> tuple[int, int] | None:
    """`(odd, k)` with `divisor == odd * 2^k` for a positive float32 `divisor`; None for +inf
    (a `2^margin` past float32's range)."""
    value = np.float32(divisor)
    if not value > 0:
        raise ValueError(
            f"divide_by_constant: the divisor must be positive and finite, or +inf; got {divisor}"
        )
    if not np.isfinite(value):
        return None
    mantissa, exponent = np.frexp(np.float64(value))  # value = mantissa * 2^exponent, exactly
    odd, k = int(mantissa * 2**24), int(exponent) - 24
    while odd % 2 == 0:
        odd, k = odd // 2, k + 1
    return odd, k


@functools.partial(jax.jit, static_argnames="divisor")
def divide_by_constant(a: Float[Array, "*s"], divisor: float) -> Float[Array, "*s"]:
    """Correctly rounded float32 `a / divisor` for a constant positive `divisor`, bit-identical
    to `divide`. A divisor `odd * 2^k` with `odd < 64` (e.g. NVFP4's 2688 = 21 * 2^7) takes one
    uint32 division (the significand shifted to 32 bits has a quotient of 26 or more bits);
    any other (and +inf) goes through `divide`."""
    split = _odd_and_exponent(divisor)
    if split is None or split[0] >= 64:
        return divide(a, jnp.full_like(a, divisor, dtype=jnp.float32))
    odd, k = split
    b = bits(a)
    mag, nan, inf, zero = _classify(b)
    sig, exp = _unpack(mag)  # a = sig * 2^(exp - 23)
    numerator = sig << _u32(8)  # in [2^31, 2^32)
    quot, rem = lax.div(numerator, _u32(odd)), lax.rem(numerator, _u32(odd))
    # quot >= 2^31 / 63 > 2^25: drop its bits below the leading 26 into the sticky bit.
    drop = (32 - lax.clz(quot).astype(jnp.int32)) - 26
    drop_u = drop.astype(jnp.uint32)
    sig26 = quot >> drop_u
    sticky = ((quot & ((_u32(1) << drop_u) - 1)) != 0) | (rem != 0)
    # a / divisor = quot * 2^(exp - 31 - k) = sig26 * 2^((exp + drop - 6 - k) - 25)
    out = _round_pack(exp + drop - 6 - k, sig26, sticky)
    out = jnp.where(zero, _u32(0), jnp.where(inf, _u32(_INF), out))
    return from_bits(jnp.where(nan, _u32(_QNAN), out | (b & _u32(_SIGN))))


@jax.jit
def multiply(a: Float[Array, "*s"], b: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """Correctly rounded float32 `a * b`, subnormals included (24x24-bit product in 12-bit
    limbs)."""
    sign, (a_nan, a_inf, a_zero, sig_a, exp_a), (b_nan, b_inf, b_zero, sig_b, exp_b) = _operands(
        a, b
    )
    ah, al = sig_a >> 12, sig_a & _u32(0xFFF)
    bh, bl = sig_b >> 12, sig_b & _u32(0xFFF)
    mid = ah * bl + al * bh
    low = al * bl + ((mid & _u32(0xFFF)) << 12)
    lo24 = low & _u32(0xFFFFFF)
    hi24 = ah * bh + (mid >> 12) + (low >> 24)  # product = hi24 * 2^24 + lo24, in [2^46, 2^48)
    top = hi24 >= _u32(0x800000)
    # 26 leading bits of the product and a sticky bit for the rest.
    sig26 = jnp.where(top, (hi24 << 2) | (lo24 >> 22), (hi24 << 3) | (lo24 >> 21))
    sticky = jnp.where(top, (lo24 & _u32(0x3FFFFF)) != 0, (lo24 & _u32(0x1FFFFF)) != 0)
    exp = exp_a + exp_b + top.astype(jnp.int32)
    mag = _round_pack(exp, sig26, sticky)
    mag = jnp.where(a_zero | b_zero, _u32(0), mag)
    mag = jnp.where(a_inf | b_inf, _u32(_INF), mag)
    nan = a_nan | b_nan | (a_inf & b_zero) | (a_zero & b_inf)
    return from_bits(jnp.where(nan, _u32(_QNAN), mag | sign))


@jax.jit
def add(a: Float[Array, "*s"], b: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """Correctly rounded float32 `a + b`, subnormals included; NaN results are 0x7FC00000."""
    ia, ib = bits(a), bits(b)
    mag_a, a_nan, a_inf, _ = _classify(ia)
    mag_b, b_nan, b_inf, _ = _classify(ib)
    swap = mag_b > mag_a
    big = jnp.where(swap, ib, ia)
    small = jnp.where(swap, ia, ib)
    mag_big, mag_small = big & _u32(_MAG), small & _u32(_MAG)
    sig_big, exp_big = _unpack(mag_big)
    sig_small, exp_small = _unpack(mag_small)
    sig_small = jnp.where(mag_small == 0, _u32(0), sig_small)
    exp_small = jnp.where(mag_small == 0, exp_big, exp_small)
    # Three extra bits below the significands; the shifted-out rest folds into a sticky bit.
    m_big = sig_big << 3
    m_small = sig_small << 3
    d = jnp.clip(exp_big - exp_small, 0, 31).astype(jnp.uint32)
    far = (exp_big - exp_small) >= 27
    shifted = jnp.where(far, _u32(0), m_small >> d)
    lost = jnp.where(far, m_small, m_small & ((_u32(1) << d) - 1)) != 0
    m_small = shifted | lost.astype(jnp.uint32)
    same_sign = ((ia ^ ib) & _u32(_SIGN)) == 0
    total = jnp.where(same_sign, m_big + m_small, m_big - m_small)
    # Normalise so the leading one is bit 26 (value = total * 2^(exp-26)).
    lead = 31 - lax.clz(jnp.maximum(total, _u32(1))).astype(jnp.int32)
    shift = lead - 26
    right = jnp.maximum(shift, 0).astype(jnp.uint32)
    left = jnp.maximum(-shift, 0).astype(jnp.uint32)
    norm = jnp.where(shift > 0, (total >> right) | (total & 1), total << left)
    exp = exp_big + shift
    sig26 = norm >> 1
    sticky = (norm & 1) != 0
    mag = _round_pack(exp, sig26, sticky)
    mag = jnp.where(total == 0, _u32(0), mag)
    sign = jnp.where(total == 0, ia & ib & _u32(_SIGN), big & _u32(_SIGN))
    out = mag | sign
    out = jnp.where(a_inf, ia, jnp.where(b_inf, ib, out))
    nan = a_nan | b_nan | (a_inf & b_inf & ~same_sign)
    return from_bits(jnp.where(nan, _u32(_QNAN), out))


# (mantissa bits, minimum normal exponent, largest finite byte) of the FP8 formats.
FP8_FORMATS = {"float8_e4m3fn": (3, -6, 0x7E), "float8_e5m2": (2, -14, 0x7B)}
FP8_NAN_BYTE = 0x7F


@functools.partial(jax.jit, static_argnames=("mant", "emin", "max_code", "nan_code", "sign_bit"))
def encode_float_bits(
    y: Float[Array, "..."],
    mant: int,
    emin: int,
    max_code: int,
    nan_code: int,
    sign_bit: int,
    exp_offset: Array | None = None,
) -> Array:
    """Round-to-nearest-even code of float32 `y * 2^exp_offset` in a small binary format, as
    uint32 (the scaling by the power of two is exact: it is applied to the exponent).

    The format has `mant` explicit mantissa bits, minimum normal exponent `emin` (subnormals
    below it) and its codes are `(biased exponent << mant) | mantissa` with the sign at bit
    `sign_bit`. Magnitudes whose code would exceed `max_code` get `max_code`: pass the largest
    finite code to saturate (E2M1: 0x7) or the infinity code to overflow (f16: 0x7C00); +-inf
    get it too. NaN becomes `nan_code`; the sign of zero is kept.
    """
    b = bits(y)
    mag = b & _u32(_MAG)
    nan = mag > _u32(_INF)
    inf = mag == _u32(_INF)
    zero = mag == 0
    sig, exp = _unpack(mag)  # sig in [2^23, 2^24) for nonzero finite, exp unbiased
    if exp_offset is not None:
        exp = exp + exp_offset.astype(jnp.int32)
    drop = (23 - mant) + jnp.maximum(emin - exp, 0)
    drop_u = jnp.clip(drop, 1, 31).astype(jnp.uint32)
    gone = drop >= 26  # below half of the smallest subnormal: rounds to zero
    kept = jnp.where(gone, _u32(0), sig >> drop_u)
    low = sig & ((_u32(1) << drop_u) - 1)
    half = _u32(1) << (drop_u - 1)
    up = ((low > half) | ((low == half) & ((kept & 1) == 1))) & ~gone
    kept = kept + up.astype(jnp.uint32)
    # For normal results `kept` includes the implicit one, which adds the +1 of the bias.
    code = jnp.where(
        exp >= emin, (jnp.clip(exp - emin, 0, 1023).astype(jnp.uint32) << mant) + kept, kept
    )
    code = jnp.where(inf, _u32(max_code), jnp.minimum(code, _u32(max_code)))
    code = jnp.where(zero, _u32(0), code)
    code = code | ((b >> 31) << sign_bit)
    return jnp.where(nan, _u32(nan_code), code)


def to_fp8_bytes(y: Float[Array, "..."], q_dtype: str) -> UInt8[Array, "..."]:
    """Saturating round-to-nearest-even float32 -> FP8 bytes; NaN -> 0x7F; sign of zero kept."""
    mant, emin, max_byte = FP8_FORMATS[q_dtype]
    return encode_float_bits(y, mant, emin, max_byte, FP8_NAN_BYTE, 7).astype(jnp.uint8)


def max_abs(x: Shaped[Array, "..."]) -> Float[Array, ""]:
    """max |x| over all elements ignoring NaN (maxNum), 0 if none; exact for subnormals."""
    mag = bits(x.astype(jnp.float32)) & _u32(_MAG)
    mag = jnp.where(mag > _u32(_INF), _u32(0), mag)
    return from_bits(jnp.max(mag, initial=_u32(0)))


def max_propagate_nan(x: Float[Array, " n"]) -> Float[Array, ""]:
    """max of float32 values with NaN propagating (like jnp.max), exact for subnormals."""
    b = bits(x)
    key = jnp.where((b & _u32(_SIGN)) != 0, ~b, b | _u32(_SIGN))  # monotone float order
    best = jnp.max(key)
    out = jnp.where((best & _u32(_SIGN)) != 0, best & _u32(_MAG), ~best)
    return jnp.where(jnp.any(jnp.isnan(x)), jnp.float32(jnp.nan), from_bits(out))


def cast_canonical(y: Float[Array, "..."], dtype) -> Shaped[Array, "..."]:
    """`y.astype(dtype)` with NaN written as the dtype's positive quiet NaN on every backend.

    (XLA's float32 -> bfloat16/float16 conversion keeps NaN payloads on CPU but not on GPU.)
    """
    out = y.astype(dtype)
    return jnp.where(jnp.isnan(y), jnp.array(float("nan"), dtype), out)


def is_positive_finite(x: Float[Array, "..."]) -> Array:
    """`0 < x < inf`, decided on the bits (a subnormal amax counts as positive)."""
    b = bits(x)
    return (b > 0) & (b < _u32(_INF))
