"""The dtype tables of the tests: one name per dtype, used in test ids."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np

# Input dtypes of the quantize ops.
X_DTYPES = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16}
# The same as NumPy dtypes (ml_dtypes for bfloat16), for the oracle's side.
NP_X_DTYPES = {name: np.dtype(dtype) for name, dtype in X_DTYPES.items()}
# FP8 output dtypes.
Q_DTYPES = {"e4m3": jnp.float8_e4m3fn, "e5m2": jnp.float8_e5m2}
NP_Q_DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
