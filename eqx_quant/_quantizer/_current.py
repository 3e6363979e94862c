"""Current scaling: the scale comes from the amax of the tensor being quantized."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .. import reference
from .._core import QuantizeLayout, ScalingMode
from ._base import AbstractTensorScaleQuantizer, check_fp8_dtype, check_layout, dtype_name


class CurrentScaleQuantizer(AbstractTensorScaleQuantizer):
    """Per-tensor FP8 quantization with the scale `fp8_max / amax(x)` of x itself.

    Stateless. Like TE, current scaling uses margin 0; an amax of 0 (or NaN/Inf) gives scale 1.

    **Arguments:**

    - `q_dtype`: `jnp.float8_e4m3fn` (default) or `jnp.float8_e5m2`.
    - `q_layout`: an `eqx_quant.QuantizeLayout` (default `ROWWISE_COLWISE`).

    !!! Example

        ```python
        q = eqq.CurrentScaleQuantizer(jnp.float8_e4m3fn, eqq.QuantizeLayout.ROWWISE)
        t = eqq.quantize(x, q)
        ```
    """

    q_dtype: str = eqx.field(static=True, converter=dtype_name, default="float8_e4m3fn")
    q_layout: QuantizeLayout = eqx.field(static=True, default=QuantizeLayout.ROWWISE_COLWISE)
    margin: ClassVar[float] = 0.0
    scaling_mode: ClassVar[ScalingMode] = ScalingMode.CURRENT_TENSOR_SCALING

    def __check_init__(self):
        check_fp8_dtype("CurrentScaleQuantizer", self.q_dtype)
        check_layout("CurrentScaleQuantizer", self.q_layout)

    @property
    def needs_amax_first(self) -> bool:
        return True

    def scale_fallback(self) -> Float[Array, "1"]:
        """The scale where the amax is 0, NaN or Inf (the quantize op's `scale` operand when
        it computes `scale_for(amax(x))` itself)."""
        return jnp.ones((1,), jnp.float32)

    def scale_for(self, x_amax: Float[Array, "1"] | None) -> Float[Array, "1"]:
        if x_amax is None:
            raise ValueError("CurrentScaleQuantizer.scale_for needs the amax of x.")
        fallback = jnp.broadcast_to(self.scale_fallback(), x_amax.shape)
        return reference.compute_scale(x_amax, self.q_dtype, 0.0, fallback)
