#!/usr/bin/env bash
# The figures of docs/benchmarks.md "TPU", on an accelerator machine whose image has jax but not
# this project's other requirements (h5py, rich, blake3, flatbuffers). Bring their wheels for that
# machine's Python into an ignored folder, then run this from the repository root there:
#   echo /.whl-tpu/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl-tpu \
#     blake3 flatbuffers rich markdown-it-py mdurl pygments 'h5py==3.12.1'
#   bash benchmarks/device_check.sh        (OUT=DIR for the results; one process holds the chip)
set -u -o pipefail
failed=0
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/device-check}
mkdir -p "$OUT"
if ls .whl-tpu/*.whl >/dev/null 2>&1; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .whl-tpu/*.whl || exit 3
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:$PWD
else
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
fi
python3 -c 'import jax, juliabridge; print("jax", jax.__version__, jax.devices())' | tee "$OUT/devices.txt" || exit 1
step() { echo "== $*"; timeout "$1" python3 "${@:2}" 2>&1 | tee -a "$OUT/device-check.log" | tail -40 || failed=1; }
step 170 benchmarks/bench_runtime.py --backends lax xla --repeats 21 --out "$OUT"
step 150 benchmarks/bench_lax.py --quick --out "$OUT"
step 120 benchmarks/bench_precision.py --backends lax xla --out "$OUT"
step 200 -m pytest -q -rs -p no:cacheprovider --tb=line tests/lax/test_matmul_precision.py \
  tests/test_readme.py tests/test_batchnorm_backends.py -k "not complex and not f64"
exit "$failed"
