"""Test configuration: 8 fake CPU devices, strict promotion, optional CUDA requirement.

`EQX_QUANT_REQUIRE_CUDA=1` (set on the GPU machine) turns every skip whose reason mentions
CUDA into a failure, so a GPU run cannot silently test nothing.
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
        for marker in item.iter_markers():
            reason = str(marker.kwargs.get("reason", ""))
            active = marker.name == "skip" or (
                marker.name == "skipif" and marker.args and bool(marker.args[0])
            )
            if active and "cuda" in reason.lower():
                raise pytest.UsageError(
                    f"EQX_QUANT_REQUIRE_CUDA=1 but {item.nodeid} would be skipped: {reason}"
                )
