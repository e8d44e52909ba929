#!/usr/bin/env bash
# The oldest releases pyproject.toml allows, under test: a virtual environment in which every
# requirement of fedkd (and of its test extra) is at its declared floor, resolved by uv's
# `--resolution lowest-direct` (what those floors pull in is resolved as usual), on the oldest
# Python that requires-python allows; then the test suite in it.
#
#   bash scripts/floor-test.sh [--venv DIR] [pytest arguments]
#
# DIR defaults to .floor-venv (git-ignored); its floor-versions.txt lists what was installed.
# PyTorch's floor is a CUDA build on PyPI (several GB with its NVIDIA libraries) and runs on the
# CPU here. With no pytest arguments the fast tests run (-m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.floor-venv
if [ "${1:-}" = "--venv" ]; then
  venv=$2
  shift 2
fi
pytest_args=("$@")
[ ${#pytest_args[@]} -gt 0 ] || pytest_args=(-m "not slow")

floor_python=$(python - <<'EOF'
import re, tomllib
spec = tomllib.load(open("pyproject.toml", "rb"))["project"]["requires-python"]
print(re.fullmatch(r">=(\d+\.\d+)", spec)[1])
EOF
)
python_bin=$(command -v "python$floor_python" || true)
if [ -z "$python_bin" ]; then
  echo "floor-test: requires-python's floor is $floor_python and no python$floor_python is on PATH" >&2
  exit 2
fi

python -m pip install --quiet uv
echo "== a virtual environment at the floors ($venv, Python $floor_python)"
# --seed: pip and setuptools, as `python -m venv` gives them (torch 2.3 compiles with setuptools)
python -m uv venv --quiet --clear --seed --python "$python_bin" "$venv"
python -m uv pip install --quiet --python "$venv/bin/python" --resolution lowest-direct -e ".[test]"
python -m uv pip freeze --python "$venv/bin/python" > "$venv/floor-versions.txt"
grep -iE '^(torch|numpy|pandas|pyarrow|scipy|snakemake|datasets|transformers|pytest)(-xdist)?==' \
  "$venv/floor-versions.txt" || true

echo "== tests at the floors"
"$venv/bin/python" -m pytest -q "${pytest_args[@]}"
