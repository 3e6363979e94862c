"""NVFP4's quantizer: E2M1 data, E4M3 block scales and a float32 global scale."""

from typing import ClassVar

import equinox as eqx

from .._core import QuantizeLayout, ScalingMode
from ._base import check_layout, dtype_name
from ._block import AbstractBlockQuantizer

DEFAULT_RHT_SIGN_MASK = 0xD7E8


class NVFP4Quantizer(AbstractBlockQuantizer):
    """NVFP4: E2M1 data, one E4M3 scale per 16 elements (or per 16x16 tile) and a float32
    global scale from the tensor's amax.

    **Arguments:**

    - `q_layout`: an `eqx_quant.QuantizeLayout` (default `ROWWISE_COLWISE`). The colwise
      part is stored transposed (`S[fa:] + S[:fa]`), as in TE.
    - `use_2d`: one scale per 16x16 tile (`NVFP4_2D_SCALING`, for weights): the colwise values
      are then the exact transpose of the rowwise ones.
    - `use_rht`: apply the 16-point random Hadamard transform to the colwise part before
      quantizing (1D only; needs the blocked axis to be a multiple of 16).
    - `stochastic_rounding`: round the E2M1 data stochastically; `quantize` then needs a `key`.
    - `rht_sign_mask`: the 16-bit sign vector of the RHT (bit i set = sign -1); TE's default.
    - `q_dtype`: only `jnp.float4_e2m1fn`.
    """

    q_layout: QuantizeLayout = eqx.field(static=True, default=QuantizeLayout.ROWWISE_COLWISE)
    use_2d: bool = eqx.field(static=True, default=False)
    use_rht: bool = eqx.field(static=True, default=False)
    stochastic_rounding: bool = eqx.field(static=True, default=False)
    rht_sign_mask: int = eqx.field(static=True, default=DEFAULT_RHT_SIGN_MASK)
    q_dtype: str = eqx.field(static=True, converter=dtype_name, default="float4_e2m1fn")
    block_size: ClassVar[int] = 16

    @property
    def scaling_mode(self) -> ScalingMode:  # type: ignore[override]
        return ScalingMode.NVFP4_2D_SCALING if self.use_2d else ScalingMode.NVFP4_1D_SCALING

    def __check_init__(self):
        name = "NVFP4Quantizer"
        if self.q_dtype != "float4_e2m1fn":
            raise TypeError(
                f"{name}: q_dtype must be jnp.float4_e2m1fn, got {self.q_dtype!r}. For FP8 "
                "block scaling use BlockScaleQuantizer; for per-tensor FP8 CurrentScaleQuantizer."
            )
        check_layout(name, self.q_layout)
        for field in ("use_2d", "use_rht", "stochastic_rounding"):
            if not isinstance(getattr(self, field), bool):
                raise TypeError(f"{name}: {field} must be a bool, got {getattr(self, field)!r}.")
        if self.use_rht and self.use_2d:
            raise ValueError(
                f"{name}: use_rht=True needs use_2d=False: the RHT is defined for 1D NVFP4 only "
                "(as in TE). Drop one of the two."
            )
        if self.use_rht and not self.q_layout.has_colwise:
            raise ValueError(
                f"{name}: use_rht=True applies to the colwise part only, but q_layout="
                f"{self.q_layout.name} has none. Use ROWWISE_COLWISE or COLWISE, or use_rht=False."
            )
        mask = self.rht_sign_mask
        if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask < 1 << 16:
            raise ValueError(f"{name}: rht_sign_mask must be a 16-bit int, got {mask!r}.")
