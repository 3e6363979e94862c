"""eqx_quant's compiled kernels as the tests see them, through the package's own loader
(`eqx_quant._ops._ffi`): it loads `_kernels_cpu.so` / `_kernels_cuda.so` and registers each
op's FFI targets `eqx_quant_<op>_<platform>`. The tests never load a library themselves, so
they test the library (and the registration) that users get.
"""

import jax
import pytest

import eqx_quant as eqq
from eqx_quant._ops import _ffi

# The block-format ops whose CPU kernels make the full test matrices affordable.
BLOCK_KERNEL_OPS = ("mxfp8_quantize", "nvfp4_amax", "nvfp4_quantize")


def native_ops(platform: str) -> frozenset[str]:
    """The ops with a compiled kernel on `platform` ("cpu" or "cuda"), registered."""
    return _ffi.native_ops(platform)


def library_path(platform: str) -> str | None:
    """The path of the kernel library loaded for `platform`, or None."""
    return _ffi.library_paths().get(platform)


def has_kernels(platform: str, ops=()) -> bool:
    """Whether `platform`'s library was loaded and has every op of `ops`."""
    return platform in _ffi.native_platforms() and set(ops) <= native_ops(platform)


def ffi_target(op: str, platform: str = "cpu") -> str:
    """The FFI target name the loader registered for `op` on `platform`."""
    return f"eqx_quant_{op}_{platform}"


def missing_cpu_kernels(*ops: str) -> str | None:
    """None if the CPU library has the kernels of every op of `ops`, else why not (a skip
    reason; it must not mention the GPU platform: conftest.py fails such skips under
    EQX_QUANT_REQUIRE_CUDA=1)."""
    missing = [op for op in ops if op not in native_ops("cpu")]
    if not missing:
        return None
    path = library_path("cpu")
    if path is None:
        return "eqx_quant has no CPU kernel library (_kernels_cpu.so): `pip install -e .` builds it"
    return f"the CPU kernel library {path} has no kernel for {', '.join(missing)}: rebuild it"


def impls() -> list[str]:
    """Implementations to test on this machine: the reference always, the CPU kernels if built."""
    return ["reference"] + (["ffi"] if "cpu" in eqq.native_platforms() else [])


def fast_impl() -> str:
    """The CPU kernels when built (they compile in milliseconds), else the reference."""
    return "ffi" if has_kernels("cpu", BLOCK_KERNEL_OPS) else "reference"


@pytest.fixture(scope="module")
def on_cpu():
    """Runs a module's tests on the CPU device, also where a GPU is the default (for tests of
    the CPU kernels). Use with `pytestmark = pytest.mark.usefixtures("on_cpu")` after
    importing it."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield
