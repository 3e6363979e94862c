"""One process of the 2-process run of tests/sharding/test_multiprocess.py (4 CPU devices
each, one mesh of 8 over both, through `jax.distributed.initialize` on localhost).

Usage: python multiprocess_worker.py PROCESS_ID NUM_PROCESSES PORT OUT.npz
(process 0 writes the gathered results; NUM_PROCESSES=1 runs the same on 8 local devices).
"""

import sys

import jax

process_id, num_processes, port, out = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                        sys.argv[4])
jax.config.update("jax_num_cpu_devices", 8 // num_processes)
if num_processes > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}",
                               num_processes=num_processes, process_id=process_id)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P

import eqx_quant as eqq  # noqa: E402


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    rng = np.random.default_rng(0)
    x_host = (rng.standard_normal((256, 128)) * 3).astype(np.float32)
    w_host = (rng.standard_normal((128, 64)) * 0.1).astype(np.float32)
    sizes_host = np.asarray([60, 0, 100, 96], np.int32)

    def global_array(host, spec):
        sharding = NamedSharding(mesh, spec)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])

    x = global_array(x_host, P("data", None))
    w = global_array(w_host, P())
    sizes = global_array(sizes_host, P())
    results = {}

    cur = eqq.CurrentScaleQuantizer()
    t = jax.jit(lambda x: eqq.quantize(x, cur))(x)
    results["quantize_data"] = t.rowwise.data.view(jnp.uint8)
    results["quantize_scale_inv"] = t.rowwise.scale_inv
    t, db = jax.jit(lambda x: eqq.quantize_dbias(x, eqq.BlockScaleQuantizer()))(x)
    results["dbias"] = db
    results["mxfp8_data"] = t.rowwise.data.view(jnp.uint8)
    results["mxfp8_scale"] = t.rowwise.scale_inv.view(jnp.uint8)
    g = jax.jit(lambda x, s: eqq.grouped_quantize(x, s, eqq.BlockScaleQuantizer()))(x, sizes)
    results["grouped_data"] = g.rowwise.data.view(jnp.uint8)
    results["grouped_scale"] = g.rowwise.scale_inv.view(jnp.uint8)

    d = lambda dt=jnp.float8_e4m3fn: eqq.DelayedScaleQuantizer(dt, amax_history_len=4)  # noqa: E731
    qs = eqq.DenseQuantizers(d(), d(), d(jnp.float8_e5m2))

    @jax.jit
    def step(w, qs, x):
        def loss(w, qs):
            return jnp.mean(eqq.dense(x, w, quantizers=qs) ** 2)

        value, (dw, qs) = jax.value_and_grad(loss, argnums=(0, 1))(w, qs)
        return value, w - 0.1 * dw, qs

    for _ in range(2):
        value, w, qs = step(w, qs, x)
    results["loss"] = value
    results["w"] = w
    results["scale_x"] = qs.x.scale
    results["history_grad"] = qs.grad.amax_history

    gathered = {k: np.asarray(multihost_utils.process_allgather(v, tiled=True))
                for k, v in results.items()}
    if process_id == 0:
        np.savez(out, **gathered)


if __name__ == "__main__":
    main()
    if num_processes > 1:
        jax.distributed.shutdown()
