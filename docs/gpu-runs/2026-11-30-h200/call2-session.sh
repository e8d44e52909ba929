#!/usr/bin/env bash
# Second device call: the batched GPU tests again (moon in float64, every strategy compiled),
# then whole fedgkd table-3 runs of 10 rounds from the start: CUDA graphs, then the compiled
# step with an empty compiler cache, then again with that cache filled.
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/out}
mkdir -p "$O/b"
exec > >(tee -a "$O/session2.log") 2>&1
T0=$SECONDS
echo "tree: ${FEDKD_TREE:-?}; $(date -u)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
XD=""
python3 -c "import xdist" 2>/dev/null && XD="-n 8"
echo "== [$((SECONDS - T0)) s] tests (cap ${FEDKD_TESTS_TIMEOUT:-190} s)"
OMP_NUM_THREADS=2 timeout "${FEDKD_TESTS_TIMEOUT:-190}" python3 -m pytest -o addopts= -p no:cacheprovider -m gpu -v -rs $XD --junitxml "$O/b/tests-2.xml" tests/test_batched_gpu.py >"$O/tests-2.log" 2>&1
echo "rc $?" >>"$O/tests-2.log"
echo "-- tests-2: $(grep -E '(passed|failed|error)' "$O/tests-2.log" | tail -1) $(tail -1 "$O/tests-2.log")"
B=(python3 -m fedkd.tools.bench --device "${DEV:-cuda}" --out "$O/b" --skip-throughput --rounds-bench none --strategies fedgkd --precision tf32 --warmup-rounds 0 --run-rounds 10 ${EXTRA:-})
whole() {
  local t=$1 label=$2
  shift 2
  local start end
  echo "== [$((SECONDS - T0)) s] (cap $t s) $label: $*"
  start=$(date +%s.%N)
  timeout "$t" "${B[@]}" "$@"
  local rc=$?
  end=$(date +%s.%N)
  echo "== rc $rc; $label: process wall $(python3 -c "print(f'{$end - $start:.2f}')") s"
}
export TORCHINDUCTOR_CACHE_DIR=/tmp/fedkd-inductor TRITON_CACHE_DIR=/tmp/fedkd-triton
rm -rf "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR"
whole 50 "CUDA graphs" --engine batched
whole 75 "compiled step, empty compiler caches" --engine batched-compiled
whole 60 "compiled step, caches filled by the run before" --engine batched-compiled
echo "== [$((SECONDS - T0)) s] done"
ls -la "$O" "$O/b"
