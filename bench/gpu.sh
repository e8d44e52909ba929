#!/usr/bin/env bash
# The GPU benchmarks in one command (run from the repository root on a CUDA machine with the
# project installed): throughput engine vs bare loop, then the table-3-shaped run in fp32 eager,
# bf16, and bf16 with CUDA graphs (torch.compile reduce-overhead); then packing: K table-3-shaped
# runs sharing the GPU at once against one alone; then the bf16 accuracy check.
set -euo pipefail
python -m fedkd.bench --device cuda --steps 300 --repeats 5 --run-rounds 2
python -m fedkd.bench --device cuda --steps 300 --repeats 5 --run-rounds 2 --precision bf16
python -m fedkd.bench --device cuda --steps 300 --repeats 5 --run-rounds 2 --precision bf16 \
    --compile reduce-overhead
for k in 1 4; do
  start=$(date +%s.%N)
  for _ in $(seq "$k"); do
    python -m fedkd.bench --device cuda --skip-throughput --run-rounds 2 --precision bf16 \
        >"/tmp/fedkd-pack-$k-$_.log" 2>&1 &
  done
  wait
  end=$(date +%s.%N)
  python -c "print(f'packing: $k concurrent table-3-shaped runs (2 rounds each) took {$end - $start:.1f} s')"
done
python -m fedkd.bench --device cuda --skip-run --steps 50 --repeats 1 --precision-check
