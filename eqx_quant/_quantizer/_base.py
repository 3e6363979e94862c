"""The abstract quantizer: format, layout and (for tensor scaling) how the scale is found."""

import abc

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from equinox import AbstractClassVar, AbstractVar
from jaxtyping import Array, Float

from .._core import QuantizeLayout, ScalingMode

FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")


def dtype_name(q_dtype) -> str:
    """Normalise `jnp.float8_e4m3fn`, `np.dtype(...)` or a string to the dtype's name."""
    try:
        return np.dtype(q_dtype).name
    except TypeError:
        return str(q_dtype)


def check_fp8_dtype(cls_name: str, q_dtype: str) -> None:
    if q_dtype not in FP8_DTYPES:
        raise TypeError(
            f"{cls_name}: q_dtype must be jnp.float8_e4m3fn or jnp.float8_e5m2 for per-tensor "
            f"FP8 scaling, got {q_dtype!r}. For FP4 use NVFP4Quantizer; for block-scaled FP8 use "
            "BlockScaleQuantizer."
        )


def check_layout(cls_name: str, q_layout) -> None:
    if not isinstance(q_layout, QuantizeLayout):
        raise TypeError(
            f"{cls_name}: q_layout must be an eqx_quant.QuantizeLayout (e.g. "
            f"QuantizeLayout.ROWWISE_COLWISE), got {q_layout!r}."
        )


class AbstractQuantizer(eqx.Module):
    """A description of how to quantize: the payload dtype, the layouts, the scaling mode."""

    q_dtype: AbstractVar[str]
    q_layout: AbstractVar[QuantizeLayout]
    scaling_mode: AbstractClassVar[ScalingMode]


class AbstractTensorScaleQuantizer(AbstractQuantizer):
    """Per-tensor FP8 scaling: one float32 scale for the whole tensor."""

    margin: AbstractVar[float]

    @abc.abstractmethod
    def scale_for(
        self, x_amax: Float[Array, "1"] | None
    ) -> Float[Array, "1"]:
        """The scale to quantize with, given the amax of x (None if the quantizer does not
        need it: delayed scaling uses the scale computed from its history)."""

    @property
    @abc.abstractmethod
    def needs_amax_first(self) -> bool:
        """Whether `scale_for` needs the amax of the tensor being quantized."""

    @property
    def fp8_max(self) -> float:
        return float(jnp.finfo(self.q_dtype).max)
