"""MXFP8's quantizer: FP8 data, one E8M0 scale per 32 elements."""

from typing import ClassVar

import equinox as eqx

from .._core import QuantizeLayout, ScalingMode
from ._base import FP8_DTYPES, check_layout, dtype_name
from ._block import AbstractBlockQuantizer


class BlockScaleQuantizer(AbstractBlockQuantizer):
    """MXFP8: FP8 data with one E8M0 (power of two) scale per 32 consecutive elements.

    Rowwise blocks run along the last axis; colwise blocks along axis `flatten_axis - 1`
    (data not transposed). Numerics bit-exact with TE's MXFP8 kernels.

    **Arguments:**

    - `q_dtype`: `jnp.float8_e4m3fn` (default) or `jnp.float8_e5m2`.
    - `q_layout`: an `eqx_quant.QuantizeLayout` (default `ROWWISE_COLWISE`).
    """

    q_dtype: str = eqx.field(static=True, converter=dtype_name, default="float8_e4m3fn")
    q_layout: QuantizeLayout = eqx.field(static=True, default=QuantizeLayout.ROWWISE_COLWISE)
    scaling_mode: ClassVar[ScalingMode] = ScalingMode.MXFP8_1D_SCALING
    block_size: ClassVar[int] = 32

    def __check_init__(self):
        if self.q_dtype not in FP8_DTYPES:
            raise TypeError(
                f"BlockScaleQuantizer: q_dtype must be jnp.float8_e4m3fn or jnp.float8_e5m2 "
                f"(MXFP8), got {self.q_dtype!r}. For FP4 use NVFP4Quantizer."
            )
        check_layout("BlockScaleQuantizer", self.q_layout)
