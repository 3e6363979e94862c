"""Multi-process, through JAX's own runtime: 2 processes x 4 CPU devices on localhost
(`jax.distributed.initialize`, gloo collectives) run quantize, quantize_dbias,
grouped_quantize and two `dense` training steps on one 8-device mesh spanning both; the
quantized bytes, scales, dbias and the delayed-scaling state are bit-identical to one
process with 8 devices running the same script; the loss and the updated weights (float
all-reduces, summed in another order by gloo) agree to float32 rounding."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.support.paths import REPO

WORKER = REPO / "tests" / "sharding" / "multiprocess_worker.py"
TIMEOUT_S = 300
# The training step's loss and weight gradients are all-reduced float sums; everything else
# (quantized bytes, scales, dbias in its fixed tree order, the delayed state) is exact.
FLOAT_SUMS = {"loss", "w"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return env


def _check(proc: subprocess.Popen | subprocess.CompletedProcess, what: str) -> None:
    assert proc.returncode == 0, f"{what} exited with {proc.returncode}"


@pytest.mark.long
def test_two_processes_match_one(tmp_path):
    one = tmp_path / "one.npz"
    proc = subprocess.run([sys.executable, str(WORKER), "0", "1", "0", str(one)], env=_env(),
                          capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]

    two = tmp_path / "two.npz"
    port = _free_port()
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(i), "2", str(port), str(two)],
                         env=_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for i in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=TIMEOUT_S))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("the 2-process run timed out")
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-4000:]

    a, b = np.load(one), np.load(two)
    assert sorted(a.files) == sorted(b.files)
    for name in a.files:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        if name in FLOAT_SUMS:
            # All-reduced float32 sums: gloo adds the two processes' partial sums in another
            # order than one process's all-reduce, so these agree to float32 rounding.
            np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-7, err_msg=name)
        else:
            assert a[name].tobytes() == b[name].tobytes(), f"{name}: 1 and 2 processes differ"
