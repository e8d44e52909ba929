#!/usr/bin/env bash
# One device call: the GPU tests (parallel, correctness only), the paired fp32/tf32 accuracy
# check beside them, then the timings with the GPU to themselves.
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/out}
mkdir -p "$O/b"
exec > >(tee -a "$O/session.log") 2>&1
T0=$SECONDS
echo "tree: ${FEDKD_TREE:-?}; $(date -u)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -c "import torch,sys;print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.get_device_name(0))"
XD=""
python3 -c "import xdist" 2>/dev/null && XD="-n 6"
echo "xdist: ${XD:-absent}"
PT=(python3 -m pytest -o addopts= -p no:cacheprovider -m gpu -v -rs)
BT=${FEDKD_TESTS_TIMEOUT:-210}
echo "== [$((SECONDS - T0)) s] phase 1: tests and precision check in parallel (cap ${BT} s)"
(OMP_NUM_THREADS=2 timeout "$BT" "${PT[@]}" $XD --junitxml "$O/b/tests-2.xml" tests/test_batched_gpu.py >"$O/tests-2.log" 2>&1; echo "rc $?" >>"$O/tests-2.log") &
P1=$!
(OMP_NUM_THREADS=2 timeout "$BT" "${PT[@]}" ${XD:+-n 5} --junitxml "$O/b/tests-1.xml" tests/gpu >"$O/tests-1.log" 2>&1; echo "rc $?" >>"$O/tests-1.log") &
P2=$!
(OMP_NUM_THREADS=2 timeout "$BT" python3 -m fedkd.tools.bench --device "${DEV:-cuda}" --out "$O/b" --skip-throughput --rounds-bench none --skip-run --precision-check --check-setting table3 --check-precisions fp32,tf32 ${CHECK:---check-seeds 5 --check-rounds 10} >"$O/precision.log" 2>&1; echo "rc $?" >>"$O/precision.log") &
P3=$!
wait "$P1" "$P2" "$P3"  # not a bare wait: it would wait for the tee above too
for f in tests-2 tests-1 precision; do echo "-- $f: $(grep -E '(passed|failed|error)' "$O/$f.log" | tail -1) $(tail -1 "$O/$f.log")"; done
echo "== [$((SECONDS - T0)) s] phase 2: timings, the GPU to themselves"
B=(python3 -m fedkd.tools.bench --device "${DEV:-cuda}" --out "$O/b" --skip-throughput --rounds-bench none ${EXTRA:-})
step() {
  local t=$1
  shift
  echo "== [$((SECONDS - T0)) s] (cap $t s) ${*:${#B[@]}+1}"
  timeout "$t" "$@"
  echo "== rc $? at $((SECONDS - T0)) s"
}
step 80 "${B[@]}" --strategies fedgkd,fedavg --engine auto --precision tf32
step 110 "${B[@]}" --strategies fedgkd --engine batched-compiled --precision tf32
step 45 "${B[@]}" --strategies fedgkd --engine auto --precision tf32 --clients-per-round 8
step 60 "${B[@]}" --strategies fedgkd --engine auto --precision tf32 --clients-per-round 16
step 45 "${B[@]}" --strategies fedavg --norm batch --engine auto --precision tf32
if [ $((SECONDS - T0)) -lt "${FEDKD_PROFILE_BEFORE:-500}" ]; then
  step 60 "${B[@]}" --skip-run --strategies fedgkd --engine auto --precision tf32 --profile --profile-rows 25
fi
echo "== [$((SECONDS - T0)) s] done"
ls -la "$O" "$O/b"
