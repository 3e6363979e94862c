"""Probe (not part of the library): what `python -m eqx_quant.bench`'s CUDA-event bracket adds
to an op's time, and whether the input data changes a streaming kernel's time. Run by hand on
the H200 machine after .ci/gpu_setup.sh has installed the package:

    python3 benchmarks/probes/bracket_overhead.py

Prints, at 8192x8192 bf16: each op timed alone in a bracket and per op with 4 ops in one
bracket (the difference is the bracket's own cost), then MXFP8 / delayed rowwise / XLA's
negate on normal, uniform, constant and zero inputs.
"""

import jax
import jax.numpy as jnp

import eqx_quant as eqq
from eqx_quant.bench import _quantize as bench
from eqx_quant.bench import _timing as _bench_timing

SHAPE = (8192, 8192)


def main():
    events, why = _bench_timing.cuda_events()
    if events is None:
        raise SystemExit(f"needs the CUDA-event timer: {why}")
    scale = jnp.asarray([bench.FP8_MAX / 12.0], jnp.float32)
    mxfp8 = eqq.BlockScaleQuantizer(jnp.float8_e4m3fn, eqq.QuantizeLayout.ROWWISE)
    ops = {
        "mxfp8_row": lambda x, s: eqq.quantize(x, mxfp8, impl="ffi"),
        "delayed_row": bench._ours("delayed_row"),
        "negate (XLA)": lambda x, s: -x,
        "tiny (XLA s * 2)": lambda x, s: s * 2.0,
    }
    xs = bench._inputs(*SHAPE, seed=1)
    extra = bench._inputs(*SHAPE, seed=2)[:3]
    for name, op in ops.items():
        one = _bench_timing.time_events(events, op, xs, (scale,), 5)["seconds"]
        four = _bench_timing.time_events(
            events, lambda x, s, a, b, c, op=op: [op(v, s) for v in (x, a, b, c)],
            xs, (scale, *extra), 5,
        )["seconds"]
        print(f"{name:18s} alone {one * 1e6:8.2f} us   "
              f"4 per bracket {four * 1e6 / 4:8.2f} us per op")

    key = jax.random.PRNGKey(0)
    data = {
        "normal * 3": xs,
        "uniform [-4, 4)": [
            jax.random.uniform(jax.random.fold_in(key, i), SHAPE, jnp.float32, -4, 4)
            .astype(jnp.bfloat16) for i in range(3)
        ],
        "constant": [jnp.full(SHAPE, 1.0 + i, jnp.bfloat16) for i in range(3)],
        "zeros": [jnp.zeros(SHAPE, jnp.bfloat16) for _ in range(3)],
    }
    for data_name, inputs in data.items():
        for name in ("mxfp8_row", "delayed_row", "negate (XLA)"):
            seconds = _bench_timing.time_events(events, ops[name], inputs, (scale,), 5)["seconds"]
            print(f"{data_name:16s} {name:14s} {seconds * 1e6:8.2f} us")


if __name__ == "__main__":
    main()
