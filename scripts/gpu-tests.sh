#!/usr/bin/env bash
# The GPU test suite in one command, from a fresh checkout on a CUDA machine:
#
#   bash scripts/gpu-tests.sh            # installs what is missing, then pytest -m gpu
#
# The machine's own torch (a CUDA build) is kept: the project is installed without its
# dependencies, and only the packages the tests import that are missing get installed, from the
# package index or, offline, from a folder of wheels (FEDKD_WHEELS=/path/to/wheels).
# The log goes to $FEDKD_GPU_LOG (default results/gpu-tests.log).
set -euo pipefail
cd "$(dirname "$0")/.."
log="${FEDKD_GPU_LOG:-results/gpu-tests.log}"
mkdir -p "$(dirname "$log")"

python - <<'EOF' || { echo "no usable torch with CUDA: install your CUDA build of torch first" >&2; exit 2; }
import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
EOF

pip_from=()
if [ -n "${FEDKD_WHEELS:-}" ]; then pip_from=(--no-index --find-links "$FEDKD_WHEELS"); fi
# import name -> package name, for what the GPU tests and the engine import
missing=$(python - <<'EOF'
import importlib.util
need = {"numpy": "numpy", "pandas": "pandas", "pyarrow": "pyarrow", "yaml": "pyyaml",
        "pytest": "pytest", "mlxtend": "mlxtend", "jsonschema": "jsonschema"}
print(" ".join(pkg for mod, pkg in need.items() if importlib.util.find_spec(mod) is None))
EOF
)
if [ -n "$missing" ]; then
  echo "installing: $missing"
  # shellcheck disable=SC2086
  python -m pip install --quiet "${pip_from[@]}" $missing
fi
if ! python -c "import fedkd" 2>/dev/null; then
  python -m pip install --quiet --no-deps --no-build-isolation -e . 2>/dev/null \
    || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi

set -o pipefail
python -m pytest -m gpu -v -rs tests 2>&1 | tee "$log"
