"""Step time and per-kernel profile of the char-LM example's training step, per recipe.

    python benchmarks/probes/char_lm_profile.py --recipes bf16 current current+xamax delayed \
        --out OUT

For each recipe: the example's model and optimizer step (examples/train_char_lm.py, the large
configuration unless --small), compiled once; the median wall time of 6 steps after 4 warm-up
steps; then `--steps` steps under `jax.profiler`, whose GPU kernels are summed per name and per
category (GEMM, attention, eqx_quant's kernels, reductions, other fusions). Counts from the
compiled HLO (custom calls, fusions) come with them. Writes OUT/profile.json and prints a
summary; the traces and HLO text go to /tmp (too deep or too many for a device run's $OUT).

A recipe name `<recipe>+xamax` runs current scaling with its amax taken in XLA before the
quantize op (which then casts with the given scale), as quantizing inside `shard_map` with
`amax_axes` does: whether XLA fusing the amax into the producer of x beats the kernel's own
amax pass.
"""

import argparse
import collections
import importlib.util
import json
import pathlib
import re
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import eqx_quant.nn as qnn
from eqx_quant._formats import _tensor_scaling
from eqx_quant.nn import _linear

REPO = pathlib.Path(__file__).resolve().parents[2]
CATEGORIES = [
    ("gemm", r"nvjet|gemm|xmma|cutlass|Gemm|sm90_|cublas"),
    ("attention", r"sdpa|fmha|flash|cudnn"),
    ("eqx_quant", r"eqx_quant|Quantize|quantize|Dequant"),
    ("reduce", r"reduce|Reduce"),
    ("fusion", r"fusion|Fusion"),
]


def load_example():
    spec = importlib.util.spec_from_file_location("char_lm", REPO / "examples/train_char_lm.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["char_lm"] = module
    spec.loader.exec_module(module)
    return module


class _NoAxes(tuple):
    """Truthy and empty: the format then takes the amax in XLA, and its pmax over no axes
    returns it unchanged."""

    def __bool__(self):
        return True


_KERNEL_AMAX = _tensor_scaling.TensorScalingFormat.quantize


def _xla_amax(self, x, quantizer, *, amax_axes, **kwargs):
    if quantizer.needs_amax_first and not amax_axes:
        amax_axes = _NoAxes()
    return _KERNEL_AMAX(self, x, quantizer, amax_axes=amax_axes, **kwargs)


_KERNEL_STATIC = _linear.make_static


def _reference_static(x, kernel, bias, n, kernel_last, q_static, impl, *rest, **kwargs):
    del impl
    return _KERNEL_STATIC(x, kernel, bias, n, kernel_last, q_static, "reference", *rest,
                          **kwargs)


def category(name: str) -> str:
    for label, pattern in CATEGORIES:
        if re.search(pattern, name):
            return label
    return "other"


def hlo_counts(compiled_text: str) -> dict:
    calls = re.findall(r'custom_call_target="([^"]+)"', compiled_text)
    return {"custom_calls": dict(collections.Counter(calls)),
            "fusions": compiled_text.count(" fusion(")}


def kernel_times(trace_dir: pathlib.Path, steps: int) -> collections.Counter:
    """Microseconds per step of each GPU kernel name in the newest trace under trace_dir."""
    files = sorted(trace_dir.rglob("*.xplane.pb"))
    data = jax.profiler.ProfileData.from_file(str(files[-1]))
    per_name = collections.Counter()
    for plane in data.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            if line.name.startswith("Stream"):
                for event in line.events:
                    per_name[event.name] += event.duration_ns / 1e3 / steps
    return per_name


def profile(lm, name: str, cfg, tokens: np.ndarray, steps: int) -> dict:
    _tensor_scaling.TensorScalingFormat.quantize = (
        _xla_amax if name.endswith("+xamax") else _KERNEL_AMAX)
    _linear.make_static = _reference_static if name.endswith("+ref") else _KERNEL_STATIC
    jax.clear_caches()  # the quantize's inner jit would keep the other variant's trace
    model = lm.GPT(cfg, jax.random.key(0))
    model = qnn.quantize_model(model, lm.RECIPES[name.split("+")[0]],
                               filter_fn=lm.keep_in_bf16)
    optim = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(cfg.lr, weight_decay=0.01))
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, opt_state, batch, key):
        loss, grads, model = qnn.value_and_grad(lm.loss_fn)(model, batch, key)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    key = jax.random.key(1)
    compiled = step.lower(model, opt_state, jnp.asarray(tokens[0]), key).compile()
    text = compiled.compiled.as_text()  # (equinox wraps the jax.stages.Compiled)
    pathlib.Path(f"/tmp/hlo_{name}.txt").write_text(text)
    for i in range(4):
        model, opt_state, loss = step(model, opt_state, jnp.asarray(tokens[i]), key)
    jax.block_until_ready(loss)
    times = []
    for i in range(6):
        start = time.perf_counter()
        model, opt_state, loss = step(model, opt_state, jnp.asarray(tokens[i]), key)
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - start)
    trace_dir = pathlib.Path(f"/tmp/trace_{name}")
    jax.profiler.start_trace(str(trace_dir))
    for i in range(steps):
        model, opt_state, loss = step(model, opt_state, jnp.asarray(tokens[i]), key)
    jax.block_until_ready(loss)
    jax.profiler.stop_trace()
    per_name = kernel_times(trace_dir, steps)
    per_category = collections.Counter()
    for kernel, us in per_name.items():
        per_category[category(kernel)] += us
    return {
        "wall_ms_median": float(np.median(times)) * 1e3,
        "tokens_per_s": cfg.batch * cfg.seq / float(np.median(times)),
        "kernel_us_per_step": sum(per_name.values()),
        "by_category_us": dict(per_category.most_common()),
        "top": [(kernel[:160], round(us, 1)) for kernel, us in per_name.most_common(60)],
        "hlo": hlo_counts(text),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["bf16", "current"])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/char_lm_profile"))
    args = parser.parse_args()
    lm = load_example()
    cfg = lm.SMALL if args.small else lm.LARGE
    args.out.mkdir(parents=True, exist_ok=True)
    tokens = np.random.default_rng(0).integers(0, 128, size=(8, cfg.batch, cfg.seq + 1))
    tokens = tokens.astype(np.int32)
    summary = {}
    for name in args.recipes:
        record = profile(lm, name, cfg, tokens, args.steps)
        summary[name] = record
        print(f"== {name}: {record['wall_ms_median']:.1f} ms/step, "
              f"{record['tokens_per_s']:,.0f} tokens/s, "
              f"kernels {record['kernel_us_per_step'] / 1e3:.1f} ms/step, {record['hlo']}")
        for label, us in record["by_category_us"].items():
            print(f"   {label:10s} {us / 1e3:8.2f} ms")
        for kernel, us in record["top"][:25]:
            print(f"   {us / 1e3:8.2f} ms {kernel[:110]}")
        (args.out / "profile.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
