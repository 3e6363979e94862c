"""Train a small Equinox MLP with FP8 delayed scaling (runs on CPU).

Each linear layer is `eqx_quant.dense`: its three GEMMs (forward, input gradient, weight
gradient) read FP8 operands, with TE's HYBRID recipe: E4M3 for the input and the weights,
E5M2 for the output gradient, each with a `DelayedScaleQuantizer` of its own. The quantizers
are fields of the model, like the weights, but they are state, not parameters:
- the optimizer must leave them alone: `is_quantizer` below splits the model into the float
  parameters and the quantizers (`eqx.partition`);
- their next state is their gradient: `jax.grad` with respect to a `DenseQuantizers` returns
  it advanced with the amaxes the step observed (the output gradient's amax exists only in
  the backward pass, so it cannot come back any other way).

The GEMMs are computed exactly from the FP8 values (float32 sums), so the script runs
anywhere. It trains the same network from the same start in float32 and with FP8, and prints
both losses and the first layer's three scales:

    python examples/fp8_training.py
"""

import equinox as eqx
import jax
import jax.numpy as jnp

import eqx_quant as eqq

D_IN, D_HIDDEN, D_OUT, BATCH = 64, 128, 16, 256
STEPS, LEARNING_RATE, REPORT_EVERY = 300, 0.1, 50


class FP8Linear(eqx.Module):
    weight: jax.Array  # (in, out): dense contracts x's last dim with the kernel's first
    bias: jax.Array
    quantizers: eqq.DenseQuantizers

    def __init__(self, weight, bias):
        self.weight, self.bias = weight, bias

        def delayed(q_dtype):
            return eqq.DelayedScaleQuantizer(q_dtype=q_dtype, amax_history_len=16)

        e4m3, e5m2 = jnp.float8_e4m3fn, jnp.float8_e5m2
        self.quantizers = eqq.DenseQuantizers(delayed(e4m3), delayed(e4m3), delayed(e5m2))

    def __call__(self, x):
        return eqq.dense(x, self.weight, self.bias, quantizers=self.quantizers)


class FP8MLP(eqx.Module):
    hidden: FP8Linear
    out: FP8Linear

    def __call__(self, x):
        return self.out(jax.nn.tanh(self.hidden(x)))


def is_quantizer(node):
    return isinstance(node, eqq.DenseQuantizers)


def mse(prediction, target):
    return jnp.mean((prediction - target) ** 2)


@eqx.filter_jit
def fp8_step(model, x, target):
    quantizer_spec = jax.tree.map(is_quantizer, model, is_leaf=is_quantizer)
    quantizers, params = eqx.partition(model, quantizer_spec, is_leaf=is_quantizer)

    def loss(params, quantizers):
        return mse(eqx.combine(params, quantizers)(x), target)

    value, (grads, next_quantizers) = jax.value_and_grad(loss, argnums=(0, 1))(params, quantizers)
    params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return eqx.combine(params, next_quantizers), value


def float_forward(params, x):
    (w1, b1), (w2, b2) = params
    return jax.nn.tanh(x @ w1.T + b1) @ w2.T + b2


@jax.jit
def float_step(params, x, target):
    value, grads = jax.value_and_grad(lambda p: mse(float_forward(p, x), target))(params)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), value


def init_params(key):
    k1, k2 = jax.random.split(key)
    w1 = jax.random.normal(k1, (D_HIDDEN, D_IN)) / jnp.sqrt(D_IN)
    w2 = jax.random.normal(k2, (D_OUT, D_HIDDEN)) / jnp.sqrt(D_HIDDEN)
    return ((w1, jnp.zeros(D_HIDDEN)), (w2, jnp.zeros(D_OUT)))


def main() -> None:
    k_teacher, k_student, k_data = jax.random.split(jax.random.key(0), 3)
    teacher = init_params(k_teacher)
    params = init_params(k_student)
    (w1, b1), (w2, b2) = params
    model = FP8MLP(FP8Linear(w1.T, b1), FP8Linear(w2.T, b2))
    print(f"{'step':>5} {'float32_loss':>13} {'fp8_loss':>10} {'x_scale':>9} {'w_scale':>9} "
          f"{'grad_scale':>11}")
    for step in range(STEPS + 1):
        x = jax.random.normal(jax.random.fold_in(k_data, step), (BATCH, D_IN))
        target = float_forward(teacher, x)
        scales = model.hidden.quantizers
        x_scale, w_scale = float(scales.x.scale[0]), float(scales.kernel.scale[0])
        g_scale = float(scales.grad.scale[0])
        params, float_loss = float_step(params, x, target)
        model, fp8_loss = fp8_step(model, x, target)
        if step % REPORT_EVERY == 0:
            print(f"{step:5d} {float(float_loss):13.6f} {float(fp8_loss):10.6f} "
                  f"{x_scale:9.3f} {w_scale:9.3f} {g_scale:11.4g}")


if __name__ == "__main__":
    main()
