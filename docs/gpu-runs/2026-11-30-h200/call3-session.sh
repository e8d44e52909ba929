#!/usr/bin/env bash
# Third device call: every GPU test at the tree with the compiled step on by default, then the
# table-3 runs as config/paper.yaml runs them with no flag.
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/out}
mkdir -p "$O/b"
exec > >(tee -a "$O/session3.log") 2>&1
T0=$SECONDS
echo "tree: $(cat .gpurun/tree); $(date -u)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
XD=""
python3 -c "import xdist" 2>/dev/null && XD="-n 7"
PT=(python3 -m pytest -o addopts= -p no:cacheprovider -m gpu -v -rs)
echo "== [$((SECONDS - T0)) s] tests (cap 150 s)"
(OMP_NUM_THREADS=2 timeout 150 "${PT[@]}" $XD --junitxml "$O/b/tests-2.xml" tests/test_batched_gpu.py >"$O/tests-2.log" 2>&1; echo "rc $?" >>"$O/tests-2.log") &
P1=$!
(OMP_NUM_THREADS=2 timeout 150 "${PT[@]}" ${XD:+-n 5} --junitxml "$O/b/tests-1.xml" tests/gpu >"$O/tests-1.log" 2>&1; echo "rc $?" >>"$O/tests-1.log") &
P2=$!
wait "$P1" "$P2"
for f in tests-2 tests-1; do echo "-- $f: $(grep -E '(passed|failed|error)' "$O/$f.log" | tail -1) $(tail -1 "$O/$f.log")"; done
echo "== [$((SECONDS - T0)) s] table-3 runs, engine auto, tf32 (cap 80 s)"
timeout 80 python3 -m fedkd.tools.bench --device cuda --out "$O/b" --skip-throughput --rounds-bench none --strategies fedgkd,fedavg --engine auto --precision tf32
echo "== rc $? at $((SECONDS - T0)) s"
ls -la "$O" "$O/b"
