"""`check_finite`: the opt-in check for non-finite inputs (docs/numerics.md, Special values).

The formats do not raise on NaN or Inf: per-tensor FP8 saturates, MXFP8 and NVFP4 carry them
into block scales or the global amax (one Inf can poison a whole block or tensor), as TE's
kernels do. Where that must not pass silently, check the input first."""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Shaped

from .._core import checked


def check_finite(x: Shaped[Array, "..."], name: str = "x") -> Shaped[Array, "..."]:
    """`x`, with a check that raises if any element is NaN or +-Inf.

    Eager (concrete `x`): a `ValueError` here, with the count and the first bad index. Under
    `jit`: a run-time error when the program runs (`eqx.error_if`; inside `shard_map` a host
    callback). Works under `vmap`, `grad` (the identity) and sharding.

    ```python
    t = eqq.quantize(eqq.check_finite(x, "activations"), q)
    ```
    """
    if not isinstance(x, jax.Array) or not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(
            f"check_finite: {name} must be a floating-point jax.Array, got "
            f"{type(x).__name__} of dtype {getattr(x, 'dtype', None)}."
        )
    message = (
        f"eqx_quant.check_finite: {name} holds NaN or Inf values, which the quantized formats "
        "turn into saturated values, NaN block scales or a poisoned global amax (see "
        "docs/numerics.md, Special values). Fix the input (e.g. a loss scale or clipping)."
    )
    if not isinstance(x, jax.core.Tracer):
        bad = ~np.isfinite(np.asarray(x, np.float32))
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{message} Found {int(bad.sum())}, the first at index {first}.")
        return x
    return checked(x, ~jnp.all(jnp.isfinite(x)), message)
