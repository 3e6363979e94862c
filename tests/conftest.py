"""Test configuration: 8 fake CPU devices, strict promotion, optional CUDA requirement.

`EQX_QUANT_REQUIRE_CUDA=1` (set on the GPU machine) turns "no CUDA" skips into failures.
"""

import os

import jax
import pytest


jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("EQX_QUANT_REQUIRE_CUDA") != "1":
        return
    for item in items:
        for marker in item.iter_markers("skip"):
            raise pytest.UsageError(f"{item.nodeid} is skipped ({marker.kwargs}) but CUDA is required")
