"""FP8 block scaling's quantizer: FP8 data, one float32 scale per 1x128 block or 128x128 tile
(the DeepSeek-V3 recipe; TE PyTorch's `Float8BlockQuantizer`)."""

import math
from typing import ClassVar

import equinox as eqx

from .._core import QuantizeLayout, ScalingMode
from ._base import FP8_DTYPES, check_layout, dtype_name
from ._block import AbstractBlockQuantizer

BLOCKS = ("1x128", "128x128")


class Float8BlockQuantizer(AbstractBlockQuantizer):
    """FP8 with one float32 scale per block: `"1x128"` (128 consecutive elements along the
    2-D view's rows; activations and gradients) or `"128x128"` (tiles; weights), as
    DeepSeek-V3 trained and TE PyTorch's `Float8BlockQuantizer` computes (bit for bit:
    docs/block_formats.md, "FP8 block scaling"). Hopper's tensor cores run it at FP8 speed.

    The colwise copy is stored transposed (`S[fa:] + S[:fa]`), its blocks running along its
    own rows, i.e. down the columns of x's 2-D view; with `"128x128"` it holds the rowwise
    values transposed.

    **Arguments:**

    - `q_dtype`: `jnp.float8_e4m3fn` (default) or `jnp.float8_e5m2`.
    - `block`: `"1x128"` (default, `FP8_BLOCK_1D_SCALING`) or `"128x128"`
      (`FP8_BLOCK_2D_SCALING`).
    - `power_2_scales`: round each scale down to a power of two (default True, TE's default).
    - `amax_epsilon`: a floor for each block's amax (default 0.0).
    - `q_layout`: an `eqx_quant.QuantizeLayout` (default `ROWWISE_COLWISE`).
    """

    q_dtype: str = eqx.field(static=True, converter=dtype_name, default="float8_e4m3fn")
    block: str = eqx.field(static=True, default="1x128")
    power_2_scales: bool = eqx.field(static=True, default=True)
    amax_epsilon: float = eqx.field(static=True, default=0.0)
    q_layout: QuantizeLayout = eqx.field(static=True, default=QuantizeLayout.ROWWISE_COLWISE)
    block_size: ClassVar[int] = 128

    @property
    def scaling_mode(self) -> ScalingMode:  # type: ignore[override]
        if self.block == "128x128":
            return ScalingMode.FP8_BLOCK_2D_SCALING
        return ScalingMode.FP8_BLOCK_1D_SCALING

    @property
    def use_2d(self) -> bool:
        return self.block == "128x128"

    def __check_init__(self):
        name = "Float8BlockQuantizer"
        if self.q_dtype not in FP8_DTYPES:
            raise TypeError(
                f"{name}: q_dtype must be jnp.float8_e4m3fn or jnp.float8_e5m2, got "
                f"{self.q_dtype!r}. For FP4 use NVFP4Quantizer."
            )
        if self.block not in BLOCKS:
            raise ValueError(
                f"{name}: block must be '1x128' (activations, gradients) or '128x128' "
                f"(weights), got {self.block!r}."
            )
        if not isinstance(self.power_2_scales, bool):
            raise TypeError(f"{name}: power_2_scales must be a bool, got {self.power_2_scales!r}.")
        eps = self.amax_epsilon
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not (
            math.isfinite(eps) and eps >= 0
        ):
            raise ValueError(
                f"{name}: amax_epsilon must be a finite float >= 0 (a floor for each block's "
                f"amax), got {eps!r}."
            )
        check_layout(name, self.q_layout)
