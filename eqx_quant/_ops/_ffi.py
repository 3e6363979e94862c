"""Load the compiled kernel libraries and register their FFI targets.

`_kernels_cpu.so` is always built; `_kernels_cuda.so` when nvcc was found at build time.
Each op `<name>` exports the handler symbols `<Name>Cpu` / `<Name>Cuda` (CamelCase of the
name), registered as the FFI targets `eqx_quant_<name>_cpu` (platform "cpu") and
`eqx_quant_<name>_cuda` (platform "CUDA").
"""

import ctypes
import functools
import importlib.util
import os

import jax

# Every op with a compiled kernel. Adding an op = adding its name here.
KERNEL_OPS = (
    "fp8_quantize",
    "fp8_block_quantize",
    "mxfp8_quantize",
    "nvfp4_amax",
    "nvfp4_quantize",
    "grouped_fp8_quantize",
    "grouped_mxfp8_quantize",
    "grouped_nvfp4_quantize",
    "grouped_fp8_block_quantize",
    "grouped_dbias",
    "group_sizes_check",
    "grouped_gemm",  # CUDA only, when built with CUTLASS
    "fp8_block_gemm",  # CUDA only, when built with CUTLASS
    "grouped_fp8_block_gemm",  # CUDA only, when built with CUTLASS
    "grouped_mxfp8_dequantize",
    "mxfp8_dequantize",
    "nvfp4_dequantize",
)

# The ops whose CUDA kernels are built on CUTLASS (absent from a build without its headers).
CUTLASS_OPS = ("grouped_gemm", "fp8_block_gemm", "grouped_fp8_block_gemm")

_LIBRARIES = {"cpu": ("_kernels_cpu", "Cpu", "cpu"), "cuda": ("_kernels_cuda", "Cuda", "CUDA")}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _library_path(module: str) -> str | None:
    # find_spec works for wheel, editable (redirect) and in-tree installs alike.
    spec = importlib.util.find_spec(f"eqx_quant.{module}")
    return spec.origin if spec is not None and spec.origin else None


@functools.cache
def _loaded() -> dict[str, tuple[str, frozenset[str]]]:
    """Load and register every library that was built; {platform: (path, ops it has)}."""
    found = {}
    for platform, (module, suffix, jax_platform) in _LIBRARIES.items():
        path = _library_path(module)
        if path is None or not os.path.exists(path):
            continue
        library = ctypes.cdll.LoadLibrary(path)
        ops = []
        for op in KERNEL_OPS:
            handler = getattr(library, f"{_camel(op)}{suffix}", None)
            if handler is None:
                continue
            jax.ffi.register_ffi_target(
                f"eqx_quant_{op}_{platform}", jax.ffi.pycapsule(handler), platform=jax_platform
            )
            ops.append(op)
        found[platform] = (path, frozenset(ops))
    return found


def native_platforms() -> frozenset[str]:
    """The platforms ("cpu", "cuda") for which compiled eqx_quant kernels are available."""
    return frozenset(_loaded())


def native_ops(platform: str) -> frozenset[str]:
    """The ops with a compiled kernel on `platform` ("cpu" or "cuda")."""
    entry = _loaded().get(platform)
    return entry[1] if entry else frozenset()


def library_paths() -> dict[str, str]:
    """{platform: path of the loaded kernel library}, for logs and bug reports."""
    return {platform: path for platform, (path, _) in _loaded().items()}


def require_kernels(platform: str, op: str) -> None:
    if op in native_ops(platform):
        return
    if op in CUTLASS_OPS and platform in _loaded():
        raise RuntimeError(
            f"eqx_quant: the CUDA kernel library {_loaded()[platform][0]} was built without "
            f"the CUTLASS GEMMs, which {op!r} runs on a GPU (as do grouped_gemm, grouped_wgrad "
            "and grouped_dense). Rebuild with CUTLASS's headers in the build environment (the "
            "nvidia-cutlass wheel, a build requirement, or EQX_QUANT_CUTLASS_INCLUDE_DIR); "
            "EQX_QUANT_CUTLASS=ON makes missing headers a build error (docs/gemm.md)."
        )
    if platform in _loaded():
        raise RuntimeError(
            f"eqx_quant: the {platform} kernel library {_loaded()[platform][0]} has no kernel "
            f"for {op!r} (this build predates it). Rebuild eqx_quant (`pip install -e .`), "
            "or pass impl='reference' to use the pure-JAX implementation."
        )
    if platform == "cpu":
        raise RuntimeError(
            f"eqx_quant: the CPU kernel library (_kernels_cpu.so) for {op!r} was not found. "
            "Reinstall eqx_quant (`pip install -e .` builds it), or pass impl='reference'."
        )
    raise RuntimeError(
        f"eqx_quant was built without CUDA kernels, so {op!r} cannot run with impl='ffi' or "
        "impl='auto' on a GPU. Rebuild with nvcc on PATH (EQX_QUANT_CUDA=ON pip install ...) "
        "or pass impl='reference' to use the pure-JAX implementation."
    )
