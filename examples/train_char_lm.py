"""Train a small GPT on characters in every recipe and compare it with bfloat16.

The model is built from `eqx.nn` (embeddings, `LayerNorm`, `Linear`)
and converted with `eqx_quant.nn.quantize_model`; the embeddings and the output head stay in
bfloat16. The corpus is the Python standard library's own source files (sorted, so every
machine reads the same text), split into training and validation text by position. Each
recipe starts from the same initialisation and sees the same batches.

    python examples/train_char_lm.py --out runs/char_lm            # --small: ~1 min on a CPU
    python examples/train_char_lm.py --large --out runs/char_lm_h200

Writes `metrics.json` (per recipe: losses, tokens/s, peak memory, scale trajectories) and
`char_lm.png` (loss curves, their difference to bf16, and per-layer scales) to `--out`.
"""

import argparse
import dataclasses
import json
import pathlib
import resource
import sysconfig
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

import eqx_quant.nn as qnn


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int
    d_model: int
    heads: int
    seq: int
    batch: int
    steps: int
    lr: float
    corpus_chars: int
    eval_every: int
    eval_batches: int


SMALL = Config(layers=2, d_model=64, heads=2, seq=64, batch=16, steps=120, lr=3e-3,
               corpus_chars=400_000, eval_every=20, eval_batches=4)
LARGE = Config(layers=12, d_model=2048, heads=16, seq=1024, batch=16, steps=2000, lr=3e-4,
               corpus_chars=40_000_000, eval_every=100, eval_batches=8)

RECIPES = {
    "bf16": None,
    "delayed": qnn.DelayedScaling(amax_history_len=16),
    "current": qnn.CurrentScaling(),
    "mxfp8": qnn.MXFP8BlockScaling(),
    "nvfp4": qnn.NVFP4BlockScaling(),
    "fp8_block": qnn.Float8BlockScaling(),
}


def load_corpus(chars: int) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of the standard library's .py files in sorted order: 90% train, 10% validation."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    parts, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        data = path.read_bytes()
        parts.append(data)
        total += len(data)
        if total >= chars:
            break
    text = np.frombuffer(b"".join(parts)[:chars], np.uint8).astype(np.int32)
    split = int(len(text) * 0.9)
    return text[:split], text[split:]


def attention_backend() -> str | None:
    """cuDNN's fused attention on a GPU (JAX's default there is XLA's unfused attention,
    which writes every score to memory and dominates the step), JAX's default elsewhere."""
    return "cudnn" if jax.default_backend() == "gpu" else None


class Block(eqx.Module):
    """Pre-norm attention + MLP. The projections are `eqx.nn.Linear`s called with a key, so
    that NVFP4's stochastic rounding gets fresh bits each step once they are converted
    (`eqx.nn.Linear` ignores the key)."""

    ln1: eqx.nn.LayerNorm
    qkv: eqx.nn.Linear
    out: eqx.nn.Linear
    ln2: eqx.nn.LayerNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear
    heads: int = eqx.field(static=True)

    def __init__(self, d: int, heads: int, key):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        self.ln1, self.ln2 = eqx.nn.LayerNorm(d), eqx.nn.LayerNorm(d)
        self.qkv = eqx.nn.Linear(d, 3 * d, use_bias=False, key=k1)
        self.out = eqx.nn.Linear(d, d, use_bias=False, key=k2)
        self.up = eqx.nn.Linear(d, 4 * d, key=k3)
        self.down = eqx.nn.Linear(4 * d, d, key=k4)
        self.heads = heads

    def __call__(self, x, *, key):
        seq, d = x.shape
        keys = jax.random.split(key, 4)
        h = jax.vmap(self.ln1)(x).astype(x.dtype)
        q, k, v = jnp.split(jax.vmap(lambda t: self.qkv(t, key=keys[0]))(h), 3, axis=-1)
        q, k, v = (a.reshape(seq, self.heads, d // self.heads) for a in (q, k, v))
        att = jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                           implementation=attention_backend()).reshape(seq, d)
        x = x + jax.vmap(lambda t: self.out(t, key=keys[1]))(att).astype(x.dtype)
        h = jax.vmap(self.ln2)(x).astype(x.dtype)
        h = jax.nn.gelu(jax.vmap(lambda t: self.up(t, key=keys[2]))(h))
        return x + jax.vmap(lambda t: self.down(t, key=keys[3]))(h).astype(x.dtype)


class GPT(eqx.Module):
    embed: eqx.nn.Embedding
    pos: eqx.nn.Embedding
    blocks: tuple[Block, ...]
    ln_f: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, cfg: Config, key):
        keys = jax.random.split(key, cfg.layers + 3)
        self.embed = eqx.nn.Embedding(256, cfg.d_model, key=keys[0])
        self.pos = eqx.nn.Embedding(cfg.seq, cfg.d_model, key=keys[1])
        self.blocks = tuple(Block(cfg.d_model, cfg.heads, k) for k in keys[3:])
        self.ln_f = eqx.nn.LayerNorm(cfg.d_model)
        self.head = eqx.nn.Linear(cfg.d_model, 256, key=keys[2])

    def __call__(self, tokens, *, key):
        seq = tokens.shape[0]
        x = (jax.vmap(self.embed)(tokens) + jax.vmap(self.pos)(jnp.arange(seq)))
        x = x.astype(jnp.bfloat16)
        for block, k in zip(self.blocks, jax.random.split(key, len(self.blocks))):
            x = block(x, key=k)
        x = jax.vmap(self.ln_f)(x)
        return jax.vmap(self.head)(x.astype(jnp.float32))


def loss_fn(model, tokens, key):
    # One key for the whole batch: the layers fold the examples into one GEMM.
    logits = jax.vmap(lambda t: model(t, key=key))(tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def batches(data: np.ndarray, cfg: Config, seed: int, count: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(data) - cfg.seq - 1, size=(count, cfg.batch))
    return data[starts[..., None] + np.arange(cfg.seq + 1)]


def keep_in_bf16(path, linear) -> bool:
    """quantize_model's filter: the output head stays unquantized."""
    return "head" not in jax.tree_util.keystr(path)


def peak_memory_mb() -> float:
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return stats["peak_bytes_in_use"] / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def x_scales(model) -> dict[str, float]:
    """Each delayed-scaling layer's input scale (empty for stateless recipes)."""
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(
        model, is_leaf=lambda v: isinstance(v, qnn.Linear)
    ):
        if isinstance(leaf, qnn.Linear) and leaf.state is not None:
            out[jax.tree_util.keystr(path)] = float(leaf.state.x.scale_value()[0])
    return out


def train(name: str, recipe, cfg: Config, data, seed: int, show_progress: bool) -> dict:
    train_data, val_data = data
    model = GPT(cfg, jax.random.key(seed))
    # Every run converts the same layers; recipe=None is the plain bf16 twin (bf16 GEMMs).
    model = qnn.quantize_model(model, recipe, filter_fn=keep_in_bf16)
    optim = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(cfg.lr, weight_decay=0.01))
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, opt_state, tokens, key):
        loss, grads, model = qnn.value_and_grad(loss_fn)(model, tokens, key)
        params = eqx.filter(model, eqx.is_inexact_array)
        updates, opt_state = optim.update(grads, opt_state, params)
        return eqx.apply_updates(model, updates), opt_state, loss

    evaluate = eqx.filter_jit(loss_fn)
    train_batches = batches(train_data, cfg, seed + 1, cfg.steps)
    val_batches = batches(val_data, cfg, seed + 2, cfg.eval_batches)
    record = {"train_loss": [], "val_loss": [], "val_step": [], "scales": []}
    tokens_seen, timed_seconds = 0, 0.0
    bar = tqdm(range(cfg.steps), desc=f"{name:>8}", disable=not show_progress, leave=False)
    for i in bar:
        start = time.perf_counter()
        step_key = jax.random.fold_in(jax.random.key(seed + 3), i)
        model, opt_state, loss = step(model, opt_state, jnp.asarray(train_batches[i]), step_key)
        loss = float(loss)
        if i > 0:  # the first step compiles
            timed_seconds += time.perf_counter() - start
            tokens_seen += cfg.batch * cfg.seq
        record["train_loss"].append(loss)
        if (i + 1) % cfg.eval_every == 0 or i + 1 == cfg.steps:
            eval_key = jax.random.key(seed + 4)
            val = float(np.mean([evaluate(model, jnp.asarray(b), eval_key) for b in val_batches]))
            record["val_loss"].append(val)
            record["val_step"].append(i + 1)
            record["scales"].append(x_scales(model))
            bar.set_postfix(loss=f"{loss:.3f}", val=f"{val:.3f}")
    record["tokens_per_s"] = tokens_seen / max(timed_seconds, 1e-9)
    record["peak_memory_mb"] = peak_memory_mb()
    return record


def plot(results: dict, out: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    base = np.asarray(results["bf16"]["val_loss"])
    for name, rec in results.items():
        axes[0].plot(rec["val_step"], rec["val_loss"], label=name)
        axes[1].plot(rec["val_step"], np.asarray(rec["val_loss"]) - base, label=name)
    axes[0].set(title="validation loss", xlabel="step", ylabel="nats")
    axes[1].set(title="validation loss - bf16", xlabel="step", ylabel="nats")
    delayed = results.get("delayed", {"scales": []})
    for layer in sorted({k for s in delayed["scales"] for k in s}):
        axes[2].plot(delayed["val_step"], [s[layer] for s in delayed["scales"]], label=layer)
    axes[2].set(title="delayed scaling: input scale per layer", xlabel="step", yscale="log")
    for ax in axes[:2]:
        ax.legend()
    if axes[2].lines:
        axes[2].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "char_lm.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--small", action="store_true", help="the CPU configuration (default)")
    size.add_argument("--large", action="store_true", help="12 layers, d_model 2048, seq 1024")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/char_lm"))
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES))
    parser.add_argument("--steps", type=int, default=None, help="override the step count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    cfg = LARGE if args.large else SMALL
    if args.steps is not None:
        cfg = dataclasses.replace(cfg, steps=args.steps)
    names = ["bf16"] + [n for n in args.recipes if n != "bf16"]
    data = load_corpus(cfg.corpus_chars)
    print(f"corpus: {len(data[0])} training and {len(data[1])} validation bytes; "
          f"{jax.devices()[0].platform}; {cfg}")
    results = {}
    for name in names:
        results[name] = train(name, RECIPES[name], cfg, data, args.seed, not args.no_progress)
        rec = results[name]
        gap = rec["val_loss"][-1] - results["bf16"]["val_loss"][-1]
        print(f"{name:>8}: val loss {rec['val_loss'][-1]:.4f} ({gap:+.4f} vs bf16), "
              f"{rec['tokens_per_s']:,.0f} tokens/s, peak {rec['peak_memory_mb']:.0f} MiB")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "metrics.json").write_text(json.dumps(
        {"config": dataclasses.asdict(cfg), "recipes": results}, indent=1))
    plot(results, args.out)
    print(f"wrote {args.out / 'metrics.json'} and {args.out / 'char_lm.png'}")


if __name__ == "__main__":
    main()
