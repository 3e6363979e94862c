"""jaxtyping dtype classes that jaxtyping does not ship."""

from jaxtyping import AbstractDtype


class HighPrecision(AbstractDtype):
    """The input dtypes quantize accepts: float32, float16, bfloat16."""

    dtypes = ["float32", "float16", "bfloat16"]


class FP8(AbstractDtype):
    """The FP8 payload dtypes: float8_e4m3fn, float8_e5m2."""

    dtypes = ["float8_e4m3fn", "float8_e5m2"]


class E8M0(AbstractDtype):
    """The MXFP8 block-scale dtype."""

    dtypes = ["float8_e8m0fnu"]


class FP4E2M1(AbstractDtype):
    """The NVFP4 payload dtype."""

    dtypes = ["float4_e2m1fn"]
