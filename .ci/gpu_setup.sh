# Sourced by .ci/gpu and .ci/gpu_sanitize on the H200 machine (no network): the carried
# wheels of .whl/ (beartype; pytest-xdist and execnet for EQX_QUANT_TEST_WORKERS), then eqx_quant
# with its CUDA kernels (sm_90a), built here or, with EQX_QUANT_WHEEL=<path>, a wheel built on the
# CPU machine:
#   pip wheel --no-build-isolation --no-deps -w <dir> . \
#     -Ccmake.define.EQX_QUANT_CUDA=ON -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90a
# (saves ~100 s of device time; installed outside the tree, and the tests then run from a copy
# without the source package). Leaves the shell in the directory to run pytest from. The
# install targets are emptied first: pip --target does not replace a package already there, so
# a second call on a warm machine would otherwise test and time the previous call's wheel.
OUT="${OUT:-/tmp/eqxq_gpu}"
mkdir -p "${OUT}"
export PYTHONUNBUFFERED=1
if ! python3 -c "import beartype" 2>/dev/null || [[ -n "${EQX_QUANT_TEST_WORKERS:-}" ]]; then
  rm -rf /tmp/site
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
if [[ -n "${EQX_QUANT_WHEEL:-}" ]]; then
  rm -rf /tmp/eqxq_site
  python3 -m pip install -q --no-index --no-deps --target /tmp/eqxq_site "${EQX_QUANT_WHEEL}"
  export PYTHONPATH="/tmp/eqxq_site${PYTHONPATH:+:${PYTHONPATH}}"
  rm -rf /tmp/eqxq_tests && mkdir -p /tmp/eqxq_tests
  cp -r tests examples pyproject.toml README.md /tmp/eqxq_tests/
  cd /tmp/eqxq_tests
else
  python3 -m pip install -q --no-build-isolation --no-deps -e . \
    -Ccmake.define.EQX_QUANT_CUDA=ON -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90a 2>&1 | tail -5
fi
python3 -c "import eqx_quant as q, jax; print(jax.devices(), q.library_paths())"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "${OUT}/gpu.txt"
