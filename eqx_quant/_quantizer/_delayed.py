"""Delayed scaling: the scale comes from a history of past amaxes (TE's
`DelayedScaleQuantizer.update`, `transformer_engine/jax/quantize/quantizer.py`)."""

import math
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped

from .. import reference
from .._core import QuantizeLayout, ScalingMode, validated_by
from ._base import AbstractTensorScaleQuantizer, check_fp8_dtype, check_layout, dtype_name


def _check_delayed_args(
    q_dtype, q_layout, amax_history_len, margin, amax_compute_algo, scale, amax_history
):
    name = "DelayedScaleQuantizer"
    check_fp8_dtype(name, dtype_name(q_dtype))
    check_layout(name, q_layout)
    for field, value in (("scale", scale), ("amax_history", amax_history)):
        if value is not None and (not isinstance(value, jax.Array) or value.dtype != jnp.float32):
            got = (f"{type(value).__name__} of dtype {value.dtype}" if hasattr(value, "dtype")
                   else f"a Python {type(value).__name__} ({value!r})")
            raise TypeError(
                f"{name}: {field} must be a float32 jax.Array, got {got}. "
                "Pass jnp.asarray(..., jnp.float32)."
            )
    if amax_history_len is None:
        amax_history_len = 1024 if amax_history is None else amax_history.shape[0]
    if (
        not isinstance(amax_history_len, int)
        or isinstance(amax_history_len, bool)
        or amax_history_len < 1
    ):
        raise ValueError(f"{name}: amax_history_len must be an int >= 1, got {amax_history_len!r}.")
    if (
        not isinstance(margin, int | float)
        or isinstance(margin, bool)
        or not math.isfinite(margin)
        or margin < 0
    ):
        raise ValueError(
            f"{name}: margin must be a finite float >= 0 (the scale is divided by 2^margin, "
            f"TE's headroom), got {margin!r}."
        )
    if amax_compute_algo not in ("max", "most_recent"):
        raise ValueError(
            f"{name}: amax_compute_algo must be 'max' or 'most_recent', got {amax_compute_algo!r}."
        )
    if scale is not None and scale.shape != (1,):
        raise ValueError(f"{name}: scale must have shape (1,), got {scale.shape}.")
    if amax_history is not None and amax_history.shape != (amax_history_len,):
        raise ValueError(
            f"{name}: amax_history must have shape ({amax_history_len},), got "
            f"{amax_history.shape}. amax_history_len must equal len(amax_history)."
        )


def holds_stack(quantizer) -> bool:
    """Whether a DelayedScaleQuantizer carries a stack of states (leading axes, e.g. one per
    layer built with jax.vmap) rather than one tensor's state."""
    return quantizer.scale.shape != (1,) or quantizer.amax_history.ndim != 1


def _check_update(self, amax) -> None:
    name = "DelayedScaleQuantizer.update"
    if holds_stack(self):
        raise ValueError(
            f"{name}: the quantizer holds a stack of states (scale of shape {self.scale.shape}), "
            "e.g. one per layer built with jax.vmap; call update inside jax.vmap or "
            "jax.lax.scan over the stack."
        )
    if not isinstance(amax, jax.Array) or amax.shape != (1,):
        got = (f"a {type(amax).__module__}.{type(amax).__name__} of shape "
               f"{getattr(amax, 'shape', None)}")
        raise ValueError(
            f"{name}: amax must be a jax.Array of shape (1,), got {got}. Pass the "
            "quantized tensor's .amax (t.amax)."
        )


class DelayedScaleQuantizer(AbstractTensorScaleQuantizer):
    """Per-tensor FP8 quantization with a scale computed from previous steps' amaxes.

    `quantize` uses `scale` as it is and reports the amax it observed (`t.amax`); fold that
    amax into the state with `update`, which returns a NEW quantizer (nothing mutates):

    ```python
    t = eqq.quantize(x, q)
    q = q.update(t.amax)
    ```

    **Arguments:**

    - `q_dtype`: `jnp.float8_e4m3fn` (default) or `jnp.float8_e5m2`.
    - `q_layout`: an `eqx_quant.QuantizeLayout` (default `ROWWISE_COLWISE`).
    - `amax_history_len`: length L of the amax history (default 1024, or the length of
      `amax_history` when that is given).
    - `margin`: the scale is `(fp8_max / amax) / 2^margin` (default 0).
    - `amax_compute_algo`: `"max"` (max over the history, default) or `"most_recent"`.
    - `scale`, `amax_history`: initial state (default: scale 1, zero history).
    """

    scale: Float[Array, "1"]
    amax_history: Float[Array, " history"]
    q_dtype: str = eqx.field(static=True)
    q_layout: QuantizeLayout = eqx.field(static=True)
    margin: float = eqx.field(static=True)
    amax_compute_algo: Literal["max", "most_recent"] = eqx.field(static=True)
    scaling_mode: ClassVar[ScalingMode] = ScalingMode.DELAYED_TENSOR_SCALING

    @validated_by(lambda self, **kw: _check_delayed_args(**kw))
    @jaxtyped(typechecker=beartype)
    def __init__(
        self,
        q_dtype=jnp.float8_e4m3fn,
        q_layout: QuantizeLayout = QuantizeLayout.ROWWISE_COLWISE,
        amax_history_len: int | None = None,
        margin: float | int = 0.0,
        amax_compute_algo: Literal["max", "most_recent"] = "max",
        scale: Float[Array, "1"] | None = None,
        amax_history: Float[Array, " history"] | None = None,
    ):
        self.q_dtype = dtype_name(q_dtype)
        self.q_layout = q_layout
        self.margin = float(margin)
        self.amax_compute_algo = amax_compute_algo
        self.scale = jnp.ones((1,), jnp.float32) if scale is None else scale
        if amax_history is None:
            amax_history = jnp.zeros((amax_history_len or 1024,), jnp.float32)
        self.amax_history = amax_history

    def __check_init__(self):
        check_fp8_dtype("DelayedScaleQuantizer", self.q_dtype)
        check_layout("DelayedScaleQuantizer", self.q_layout)

    @property
    def amax_history_len(self) -> int:
        """The length L of the amax history."""
        return self.amax_history.shape[-1]

    @property
    def needs_amax_first(self) -> bool:
        return False

    def scale_for(self, x_amax: Float[Array, "1"] | None) -> Float[Array, "1"]:
        del x_amax
        return self.scale

    @validated_by(_check_update)
    @jaxtyped(typechecker=beartype)
    def update(self, amax: Float[Array, "1"]) -> "DelayedScaleQuantizer":
        """Fold a new amax into the history and recompute the scale; returns a new quantizer.

        TE's order: `h[0] = amax`; `amax_for_scale = max(h)` (or `h[0]` for "most_recent");
        `scale = (fp8_max / amax_for_scale) / 2^margin`, keeping the previous scale when that
        amax is 0, NaN or Inf; then `h = roll(h, -1)` and `h[0] = 0`.

        Under `jax.lax.scan`, carry the quantizer and call `update` once per step; with gradient
        accumulation, combine the micro-steps' amaxes with `jnp.maximum` and update once, so no
        step's amax is lost.
        """
        history = self.amax_history.at[0].set(amax[0])
        chosen = (
            reference.max_propagate_nan(history) if self.amax_compute_algo == "max" else history[0]
        )
        scale = reference.compute_scale(chosen.reshape(1), self.q_dtype, self.margin, self.scale)
        history = jnp.roll(history, -1).at[0].set(0.0)
        return eqx.tree_at(lambda q: (q.scale, q.amax_history), self, (scale, history))
