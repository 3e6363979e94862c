"""Test configuration: 8 fake CPU devices, strict promotion, optional CUDA requirement.

`EQX_QUANT_REQUIRE_CUDA=1` (set on the GPU machine) turns every skip whose reason mentions
CUDA into a failure, so a GPU run cannot silently test nothing. `--shard=i/n` keeps every n-th
collected test from the i-th on (`.ci/gpu_sanitize` runs shards side by side, one process each).
Tests marked `long` run first.
"""

import os

import jax
import pytest

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_addoption(parser):
    parser.addoption(
        "--shard", default="0/1", help="i/n: run only the collected tests i, i + n, i + 2n, ..."
    )


def _keep_shard(config, items):
    text = config.getoption("--shard")
    try:
        index, count = (int(v) for v in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard must be i/n with integers, got {text!r}") from None
    if not 0 <= index < count:
        raise pytest.UsageError(f"--shard={text}: need 0 <= i < n")
    if count == 1:
        return
    dropped = [item for j, item in enumerate(items) if j % count != index]
    items[:] = [item for j, item in enumerate(items) if j % count == index]
    config.hook.pytest_deselected(items=dropped)


def _long_first(items):
    """The tests marked `long` (tens of seconds each) first, each group in collection order:
    pytest-xdist hands tests out in order, and one of them started last would keep a single
    worker busy after the others have finished."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_collection_modifyitems(config, items):
    _long_first(items)
    _keep_shard(config, items)
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
