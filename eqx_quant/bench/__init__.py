"""Benchmark of eqx_quant's FP8 quantize kernels against hand-written jnp versions.

Usage::

    python -m eqx_quant.bench [--sizes 1024 4096 8192 16384x4096] [--reps 7] [--json out.json]
    python -m eqx_quant.bench --gemms [--gemm-sizes 4096 8192 16384x4096x4096] [--reps 7]

The second form times eqx_quant's GEMMs and layers (`gemm`, `dense`, `grouped_gemm`) against
the same products in bf16, in TFLOP/s (`eqx_quant/bench/_gemm.py` says what each row times).

For every shape (bf16, 2-D, flatten_axis=-1) and op it times our op (`jax.jit` of
`eqx_quant.quantize` / `quantize_dbias` with `impl="ffi"`, i.e. the CUDA kernel on a GPU and
the CPU kernel on a CPU) and a hand-written jnp version of the same op, jitted by XLA, in the
same run, and measures the device-to-device copy bandwidth of this run. The ops:

- `delayed_row`: FP8 delayed scaling (scale given), rowwise cast + amax;
- `delayed_rowcol`: the same plus the transposed copy;
- `current_row`: FP8 current scaling (amax, scale = 448/amax, cast);
- `current_rowcol`: the same plus the transposed copy;
- `dbias_current_row`: dbias (sum over rows, cast to bf16) + current scaling, rowwise;
- `dbias_current_rowcol`: the same plus the transposed copy;
- `mxfp8_row`: MXFP8 (e4m3, 1x32 blocks, E8M0 scales), rowwise;
- `mxfp8_rowcol`: the same plus the colwise (32x1 blocks, not transposed) copy, in one op.
- `mxfp8_dbias_row`: `mxfp8_row` plus dbias (sum over rows, cast to bf16): `quantize_dbias`
  with MXFP8 (one op: on the GPU the rowwise blocks are written in the dbias' one read of x);
- `mxfp8_dbias_rowcol`: `mxfp8_rowcol` plus dbias (the MXFP8 kernel, then the dbias sums: two
  reads of x);
- `nvfp4_row`: NVFP4 1D rowwise (global amax pass + E4M3 block scales + E2M1 cast);
- `nvfp4_rht_rowcol`: NVFP4 rowwise plus the RHT'd, transposed colwise copy (two amaxes);
- `nvfp4_sr_row`: NVFP4 1D rowwise with stochastic rounding (counter-based Threefry bits);
- `nvfp4_rht_sr_rowcol`: `nvfp4_rht_rowcol` with stochastic rounding in both copies (how
  NVFP4 training recipes quantize gradients).
- `nvfp4_2d_rowcol`: NVFP4 with one scale per 16x16 tile (how NVFP4 recipes quantize
  weights), rowwise plus the transposed colwise copy (the exact transpose of the rowwise codes).
- `grouped_mxfp8_row`, `grouped_mxfp8_rowcol`, `grouped_nvfp4_row`, `grouped_nvfp4_rowcol`,
  `grouped_nvfp4_sr_row`, `grouped_nvfp4_sr_rowcol`, `grouped_dbias`: the M rows in 8 ragged
  groups (`eqx_quant/bench/_grouped.py`), per-group swizzled scales, blocks aligned to each
  group's start (NVFP4: one amax per group; `_sr_`: stochastic rounding, a key per group).

Timing, on a GPU (CUDA events, device time): `_kernels_cuda.so` also holds tiny FFI targets
(the bench events library in `csrc/`): `eqx_quant_bench_event_cuda` records a CUDA event of a fixed
pool on XLA's stream, and ctypes entry points read the elapsed time between two events;
`eqx_quant/bench/_timing.py` registers them itself. One jitted function times R ops (R <= 32,
fewer when R outputs would pass 4 GiB), unrolled: op r of call c consumes input buffer
(c x R + r) % K, K >= 3 distinct buffers passed in as jit arguments whose total exceeds
192 MB, so the 60 MiB L2 of an H200 cannot serve the inputs (and no slicing happens inside
the function). Op r lies between events 2r and 2r+1, ordered by data dependence alone. A
one-element token runs through every event (each event passes it through, aliased: no
copy). The op's inputs go through `lax.optimization_barrier` together with the token, so the
op starts after event 2r.
Event 2r+1 takes the token and every output of the op as operands (never read), so it follows
all of the op's kernels, and the outputs are made in the default layout a caller gets (a
layout change such as the physical transpose of `y.T` cannot slip out of the bracket); event
2r+2 takes the token of event 2r+1. The last event takes the outputs of all R ops: none is
dead, each keeps its own buffer, and as only the token is returned XLA adds no output copy
that could land in a bracket. So a bracket holds exactly one op's kernels. A spin kernel
(`eqx_quant_bench_delay_cuda`, R x 100 us, at most 20 ms) before the first event keeps the
GPU busy while the host enqueues the R ops, so the GPU does not wait for the host inside a
bracket. After `block_until_ready` the R times are read; the first call (compile, warm-up)
is dropped, `--reps` calls follow, and the figure is the median of all their brackets. The
largest gap between an op's end event and the next op's start event is reported too (~0
when the GPU never idled between ops); events out of order or not recorded are an error.
Back to back ("b2b" columns, `*_b2b_us` in --json): the same R ops in one jitted function with
only two events, before the first and after the last (which takes every output), op r+1's
inputs passed through an optimization barrier together with op r's outputs (so XLA neither
fuses nor overlaps them); the figure is the median over the calls of (time / R). This is how
TE's anchors were measured (back-to-back calls in a CUDA graph replay); the
bracket of one op adds the cost of its two event records (~1-3 us).

On a CPU the header also gives the thread count the CPU kernels split their work over: the
size of XLA's intra-op thread pool, read through the `CpuThreads` FFI handler of
`_kernels_cpu.so` (`eqx_quant/bench/_threads.py`), next to the cores available to the process.

Fallback (CPU, or no `_kernels_cuda.so` / an old one without the event target): host wall
clock. One jitted function applies the op to the K distinct buffers and is dispatched back to
back many times; the time per op is the wall clock of a batch / (dispatches x K), after a
`block_until_ready`, and the figure is the median over `--reps` batches. Per-dispatch host
cost is divided by K and hidden behind device work where the op takes longer than its
dispatch; small shapes can still be host bound (JAX dispatch is tens of microseconds). The
header and the "timing" field of --json say which method was used ("cuda_events" or
"wall_clock", and why in "timing_detail").

Copy bandwidth: a jitted reversal `a[::-1]` of a 1 GiB (GPU; 64 MiB on CPU) uint32 array,
which XLA cannot elide or alias: it reads and writes every byte once, coalesced; timed the same
way as the ops.
GB/s counts each input read once and each output written once (x, the FP8 data, the
transposed copy, the bf16 dbias, the MXFP8 scale bytes; a few scalars ignored); % is of the
copy bandwidth. The hand-written MXFP8 version is plain jnp (block amax by reshape + max,
the E8M0 exponent by bit operations, a multiply and a clipped cast); it skips the exact
NaN / subnormal rules of the op, which only makes it cheaper.
"""

from ._cli import main as main
from ._gemm import GEMM_OPS as GEMM_OPS
from ._gemm import run_gemm_benchmark as run_gemm_benchmark
from ._quantize import OPS as OPS
from ._quantize import run_benchmark as run_benchmark
