#!/usr/bin/env bash
# The GPU test suite, in parts that each fit one command of under 9 minutes on an H100:
#
#   bash scripts/gpu-tests.sh [--device cuda|cpu] [--out DIR] [-k EXPR] PART...
#
#   1 suite     tests/gpu: train and kill-resume on CUDA for fedavg, fedgkd, scaffold and feddf
#               (deterministic: true; the default engine, so CUDA graphs), and graphed fedgkd
#               and moon, bit-identical repeats, bf16, a CUDA checkpoint resumed on the CPU, a
#               bench smoke run
#   2 batched   every other test file marked gpu (tests/test_batched_gpu.py: the batched trainer
#               with CUDA graphs, with graphs and the compiled step (batched-compiled), and eager
#               (batched-eager), against the sequential one)
#   all         1 and 2 (the default)
#
# -k EXPR selects tests by name within the parts, as pytest's -k does (the kit's own CPU test
# runs one test of each part this way; a GPU run leaves it out and runs them all).
# Only those files are collected (pytest -m gpu over them), so a test module elsewhere that
# imports a package the GPU machine lacks (snakemake) cannot stop the collection. With
# --device cpu, FEDKD_TEST_DEVICE=cpu: the tests of tests/gpu run on the CPU instead of skipping;
# a test that still needs CUDA is skipped, and the summary names it with its reason.
# Logs (tests-1-suite.log, tests-2-batched.log), JUnit reports (tests-1-suite.xml, ...) and
# summary-tests.txt go to the one folder --out (default $FEDKD_GPU_OUT, else results/gpu). A
# failed part does not stop the others; the exit status is 1 if any step failed. Each part's
# time, estimated and as measured on an H200: docs/performance.md, "The GPU kit".
#
# On the GPU machine, from a checkout plus the wheel folder of scripts/fetch-gpu-wheels.sh:
#   bash scripts/gpu-tests.sh 1 --out "$OUT"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KIT_NAME="scripts/gpu-tests.sh"
KIT_DEFAULT_PART=all
cd "$REPO" || exit 2
# shellcheck source=gpu-kit.sh
source "$REPO/scripts/gpu-kit.sh"

kit_usage() { sed -n '2,/^REPO=/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

kit_parse "$@"
parts=()
for p in "${KIT_PARTS[@]}"; do
  case "$p" in
    all) parts+=(1 2) ;;
    1 | suite) parts+=(1) ;;
    2 | batched) parts+=(2) ;;
    *) kit_die "unknown part '$p': one of 1, suite, 2, batched, all" ;;
  esac
done

log="$KIT_OUT/tests-setup.log"
kit_setup "$log"
if [ "$KIT_DEVICE" = cpu ]; then export FEDKD_TEST_DEVICE=cpu; else unset FEDKD_TEST_DEVICE; fi
workers=()
if [ "$KIT_DEVICE" = cuda ] && "$PY" -c "import xdist" 2>/dev/null; then workers=(-n 6); fi

# the test files of each part: tests/gpu, and the files elsewhere that mark tests gpu
files_1=(tests/gpu/test_*.py)
mapfile -t files_2 < <(grep -lE 'pytest\.mark\.gpu' tests/test_*.py)

report() {  # report XML: the counts, and every skipped test with its reason
  "$PY" - "$1" <<'EOF'
import sys
import xml.etree.ElementTree as ET

suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
print(f"{passed} passed, {counts['failures']} failed, {counts['errors']} errors, "
      f"{counts['skipped']} skipped")
for case in suite.iter("testcase"):
    skip = case.find("skipped")
    if skip is not None:
        print(f"  skipped: {case.get('classname')}::{case.get('name')}: {skip.get('message')}")
EOF
}

for n in "${parts[@]}"; do
  name=$([ "$n" = 1 ] && echo suite || echo batched)
  log="$KIT_OUT/tests-$n-$name.log"
  xml="$KIT_OUT/tests-$n-$name.xml"
  files_var="files_$n[@]"
  files=("${!files_var}")
  if [ ${#files[@]} -eq 0 ]; then
    kit_skip "$log" "pytest part $n ($name)" "no test file of this part in this checkout"
    continue
  fi
  rm -f "$xml"
  select=()
  [ -z "$KIT_SELECT" ] || select=(-k "$KIT_SELECT")
  # -o addopts= : the project's addopts start a worker per core; on a GPU machine with
  # pytest-xdist, 6 workers share the one GPU (the tests compare numbers, not times), else one
  # process
  kit_step "$log" "pytest part $n ($name): ${files[*]}" \
    "$PY" -m pytest -o addopts= -p no:cacheprovider -m gpu -v -rs --junitxml "$xml" \
    "${workers[@]}" "${select[@]}" "${files[@]}"
  if [ -f "$xml" ]; then
    results="$(report "$xml")"
    printf '%s\n' "$results" | tee -a "$log"
    kit_note "part $n ($name): $results"
  fi
done
kit_summary "$KIT_OUT/summary-tests.txt"
