"""Train a small Equinox MLP with FP8 delayed scaling (runs on CPU).

Each linear layer quantizes its input and its weight to FP8 E4M3 with a
`DelayedScaleQuantizer` of its own. The quantizers are fields of the model, like the weights,
but they are state, not parameters:
- the gradient step must leave them alone: `trainable` below marks only the float arrays
  outside quantizers as trainable, and `eqx.partition` splits the model accordingly;
- they change only through `update`, with the amaxes each step observed (returned as the
  loss's auxiliary output), which gives the scales of the next step.

The GEMM is emulated (dequantize, then a float32 matmul) so that the script runs anywhere; a
GPU GEMM would read `t.rowwise.data` and `t.rowwise.scale_inv` directly. Gradients pass
straight through the quantizers. The script trains the same network from the same start in
float32 and with FP8, and prints both losses and the first layer's scales:

    python examples/fp8_training.py
"""

import equinox as eqx
import jax
import jax.numpy as jnp

import eqx_quant as eqq


D_IN, D_HIDDEN, D_OUT, BATCH = 64, 128, 16, 256
STEPS, LEARNING_RATE, REPORT_EVERY = 300, 0.1, 50


class FP8Linear(eqx.Module):
    weight: jax.Array
    bias: jax.Array
    x_quantizer: eqq.DelayedScaleQuantizer
    w_quantizer: eqq.DelayedScaleQuantizer

    def __init__(self, weight, bias):
        self.weight, self.bias = weight, bias
        # Rowwise only: the emulated GEMM reads one copy; a GPU recipe would also keep the
        # colwise copy for the backward GEMMs (QuantizeLayout.ROWWISE_COLWISE, the default).
        rowwise = eqq.QuantizeLayout.ROWWISE
        self.x_quantizer = eqq.DelayedScaleQuantizer(q_layout=rowwise, amax_history_len=16)
        self.w_quantizer = eqq.DelayedScaleQuantizer(q_layout=rowwise, amax_history_len=16)

    def __call__(self, x):
        """The layer's output and the amaxes of x and of the weight seen by this call."""
        xt = eqq.quantize(x, self.x_quantizer)
        wt = eqq.quantize(self.weight, self.w_quantizer)
        return xt.dequantize() @ wt.dequantize().T + self.bias, (xt.amax, wt.amax)

    def updated(self, amaxes):
        """The layer with its quantizers advanced by one step of observed amaxes."""
        x_amax, w_amax = amaxes
        new = (self.x_quantizer.update(x_amax), self.w_quantizer.update(w_amax))
        return eqx.tree_at(lambda layer: (layer.x_quantizer, layer.w_quantizer), self, new)


class FP8MLP(eqx.Module):
    hidden: FP8Linear
    out: FP8Linear

    def __call__(self, x):
        h, hidden_amaxes = self.hidden(x)
        y, out_amaxes = self.out(jax.nn.tanh(h))
        return y, (hidden_amaxes, out_amaxes)

    def updated(self, amaxes):
        return FP8MLP(self.hidden.updated(amaxes[0]), self.out.updated(amaxes[1]))


def trainable(model):
    """Filter spec: True for the float arrays an optimizer may change, False for quantizers."""

    def is_quantizer(node):
        return isinstance(node, eqq.AbstractQuantizer)

    return jax.tree.map(
        lambda node: False if is_quantizer(node) else eqx.is_inexact_array(node),
        model,
        is_leaf=is_quantizer,
    )


def mse(prediction, target):
    return jnp.mean((prediction - target) ** 2)


@eqx.filter_jit
def fp8_step(model, x, target):
    params, state = eqx.partition(model, trainable(model))

    def loss(params):
        prediction, amaxes = eqx.combine(params, state)(x)
        return mse(prediction, target), amaxes

    (value, amaxes), grads = jax.value_and_grad(loss, has_aux=True)(params)
    params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return eqx.combine(params, state).updated(amaxes), value


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
    model = FP8MLP(FP8Linear(w1, b1), FP8Linear(w2, b2))
    print(f"{'step':>5} {'float32_loss':>13} {'fp8_loss':>10} {'x_scale':>9} {'w_scale':>9}")
    for step in range(STEPS + 1):
        x = jax.random.normal(jax.random.fold_in(k_data, step), (BATCH, D_IN))
        target = float_forward(teacher, x)
        x_scale = float(model.hidden.x_quantizer.scale[0])
        w_scale = float(model.hidden.w_quantizer.scale[0])
        params, float_loss = float_step(params, x, target)
        model, fp8_loss = fp8_step(model, x, target)
        if step % REPORT_EVERY == 0:
            print(f"{step:5d} {float(float_loss):13.6f} {float(fp8_loss):10.6f} "
                  f"{x_scale:9.3f} {w_scale:9.3f}")


if __name__ == "__main__":
    main()
