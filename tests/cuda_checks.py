"""Shared pieces of the GPU tests (tests/test_cuda*.py): where the expected bytes come from,
the byte comparison, test inputs and the CUDA-graph replay check."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

from eqx_quant._ops import _ffi


def expected_device_and_impl(ops, cuda):
    """(device, impl) that computes the expected bytes: the CPU kernels of `ops` when built,
    else the pure-JAX reference (on the CPU, or on `cuda` when JAX has no CPU device)."""
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:
        return cuda, "reference"
    return cpu, "ffi" if all(op in _ffi.native_ops("cpu") for op in ops) else "reference"


def _bytes(a):
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def assert_same_bytes(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    g, w = _bytes(got), _bytes(want)
    bad = np.flatnonzero(g != w)
    if bad.size:
        item = bad[0] // max(got.dtype.itemsize, 1)
        index = np.unravel_index(item, got.shape) if got.ndim else ()
        raise AssertionError(
            f"{what}: {bad.size} of {g.size} bytes differ; first at element {index}: "
            f"got {got.reshape(-1)[item]!r} ({g[bad[0]]:#04x}), "
            f"want {want.reshape(-1)[item]!r} ({w[bad[0]]:#04x})"
        )


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
