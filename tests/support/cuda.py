"""Shared pieces of the GPU tests (tests/cuda/): the device, the `requires_cuda` marker,
where the expected bytes come from, test inputs and the CUDA-graph replay check."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.support.kernels import has_kernels, library_path


def cuda_devices() -> list:
    """The CUDA devices (none without a GPU, or with a JAX without CUDA support)."""
    try:
        return jax.devices("cuda")
    except RuntimeError:
        return []


def cuda_device():
    """The first CUDA device, or None."""
    devices = cuda_devices()
    return devices[0] if devices else None


CUDA = cuda_device()


def requires_cuda(*ops: str):
    """The skip marker of the GPU tests: they need a CUDA device and eqx_quant's CUDA library
    with the kernels of `ops` (any kernels if none are named). The reason says "CUDA", so
    conftest.py turns the skip into a failure under EQX_QUANT_REQUIRE_CUDA=1."""
    kernels = f"CUDA kernels of {', '.join(ops)}" if ops else "CUDA kernels"
    return pytest.mark.skipif(
        CUDA is None or not has_kernels("cuda", ops),
        reason=f"needs a CUDA device and eqx_quant's {kernels} "
        f"(device: {CUDA}, CUDA library: {library_path('cuda')})",
    )


def expected_device_and_impl(ops, cuda=CUDA):
    """(device, impl) that computes the expected bytes: the CPU kernels of `ops` when built,
    else the pure-JAX reference (on the CPU, or on `cuda` when JAX has no CPU device)."""
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:
        return cuda, "reference"
    return cpu, "ffi" if has_kernels("cpu", ops) else "reference"


def outputs_of(names, layout):
    """The output names (`rowwise...`, `colwise...`, others) a layout produces."""
    return {
        k
        for k in names
        if (layout.has_rowwise or not k.startswith("rowwise"))
        and (layout.has_colwise or not k.startswith("colwise"))
    }


def spread_random(shape, dtype, seed=0, scale=3.0):
    """Normal values with a per-row spread of magnitudes (different block scales)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(scale)
    if x.size:
        x *= np.exp2(rng.integers(-12, 12, size=shape[:-1] + (1,))).astype(np.float32)
    return np.array(jnp.asarray(x, dtype))  # a writable copy


def assert_graph_replay_matches(graph_code: str, cuda) -> None:
    """`graph_code` defines `run() -> digest`. Under XLA command buffers with every op
    captured (--xla_gpu_graph_min_graph_size=1) in a subprocess, its digest must equal that of
    this process, whose small computations are not captured (default minimum graph size)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_graph_min_graph_size=1").strip()
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    proc = subprocess.run(
        [sys.executable, "-c", graph_code + "\nprint('DIGEST', run())\n"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("DIGEST")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    namespace = {}
    exec(graph_code, namespace)
    with jax.default_device(cuda):
        plain = namespace["run"]()
    assert lines[-1].split()[1] == plain
