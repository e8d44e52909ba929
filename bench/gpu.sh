#!/usr/bin/env bash
# The GPU benchmarks, in parts that each fit one command of under 9 minutes on an H100:
#
#   bash bench/gpu.sh [--device cuda|cpu] [--out DIR] [--size full|tiny] PART...
#
#   1 engines     op counts (fedavg, fedgkd); sequential trainer vs a bare PyTorch loop; one
#                 round's local training per engine (sequential, batched-eager, batched: CUDA
#                 graphs) on the default and the table-3 shapes, fedgkd's
#                 round with its teacher
#   2 batched     table-3 runs (20 clients, C 0.2, E 20, batch 64, ResNet-8-GN, synthetic
#                 CIFAR-10-shaped data), fedavg and fedgkd, first as config/paper.yaml runs them
#                 with no flag (engine auto: on CUDA the batched trainer with CUDA graphs and
#                 the compiled step; precision tf32), then without the compiled step (engine
#                 batched: graphs alone), then as they ran before those defaults
#                 (batched-eager, fp32), then fedavg on ResNet-8 with BatchNorm (FedDF Table 1's
#                 model; part 3 runs it sequentially): 2 warm-up rounds (compilation, capture), then 2 timed
#                 rounds: img/s of local training and of whole rounds, the fixed cost per
#                 round, the projected minutes per 100 rounds, the compile time
#   3 sequential  the same with the sequential trainer (1 warm-up round: it captures nothing)
#   4 packing     4 and then 8 table-3 fedgkd runs (engine batched, tf32) sharing the GPU, one
#                 process each, timed together from a shared start after their warm-up
#   5 precision   fedgkd with deterministic: true against the same run without, back to back;
#                 bf16; bf16 with torch.compile reduce-overhead; fp32 vs tf32 vs bf16 accuracy
#                 on mnist5k
#   6 profile     torch.profiler traces of one fedgkd round (1 local epoch, tf32) per engine
#   all           1 to 6 in turn (on a GPU: longer than one 10-minute command)
#
# Parts are named by number or name; at least one must be named. Every log, result (bench-results.jsonl: one JSON object per
# figure, the columns of docs/performance.md's GPU table) and trace goes to the one folder
# --out (default $FEDKD_GPU_OUT, else results/gpu): bench-<part>.log, profile-*.json.gz, and
# summary-bench.txt, which lists every step as ok, FAILED or skipped. A failed step does not
# stop the others; the exit status is 1 if any failed. Each part's time, estimated and as
# measured on an H200 (parts 2 and 4): docs/performance.md, "The GPU kit".
#
# On the GPU machine (PyTorch, numpy, pandas, pyarrow, PyYAML, pytest; nothing downloadable),
# from a checkout plus the wheel folder that scripts/fetch-gpu-wheels.sh fills here:
#   bash bench/gpu.sh 1 --out "$OUT"
# On a machine without a GPU, the whole kit end to end on tiny sizes:
#   bash bench/gpu.sh --device cpu all
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KIT_NAME="bench/gpu.sh"
cd "$REPO" || exit 2
# shellcheck source=../scripts/gpu-kit.sh
source "$REPO/scripts/gpu-kit.sh"

kit_usage() { sed -n '2,/^REPO=/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

PART_NAMES=(engines batched sequential packing precision profile)

part_number() {
  local i
  for i in "${!PART_NAMES[@]}"; do
    if [ "$1" = "$((i + 1))" ] || [ "$1" = "${PART_NAMES[$i]}" ]; then
      echo $((i + 1))
      return
    fi
  done
  return 1
}

kit_parse "$@"
[ -z "$KIT_SELECT" ] || kit_die "-k selects tests: it belongs to scripts/gpu-tests.sh, not bench/gpu.sh"
parts=()
for p in "${KIT_PARTS[@]}"; do
  if [ "$p" = all ]; then
    parts+=(1 2 3 4 5 6)
  else
    n="$(part_number "$p")" || kit_die "unknown part '$p': one of 1-6, ${PART_NAMES[*]}, all"
    parts+=("$n")
  fi
done

log="$KIT_OUT/bench-setup.log"
kit_setup "$log"

bench=("$PY" -m fedkd.tools.bench --device "$KIT_DEVICE" --out "$KIT_OUT")
if [ "$KIT_SIZE" = tiny ]; then
  # every step's shape, made small: 20 clients of 64 images, 1 local epoch, 1 timed round
  data=(--train-images 1280 --eval-images 200)
  run=("${data[@]}" --run-epochs 1 --run-rounds 1)
  round=("${data[@]}" --client-samples 128 --round-epochs 1 --repeats 1)
  bare=(--steps 4 --repeats 1)
  check=(--check-seeds 1 --check-rounds 1)
  packs=2
else
  run=()
  round=(--round-epochs 2 --repeats 3)
  bare=(--steps 300 --repeats 5)
  check=(--check-seeds 3 --check-rounds 10)
  packs=4,8
fi
only_runs=(--skip-throughput --rounds-bench none)
# engine auto is the batched trainer on CUDA; on a CPU (the kit's own test) it would be the
# sequential one, so there the batched trainer is named
if [ "$KIT_DEVICE" = cuda ]; then engines=sequential,batched-eager,batched paper=auto; else
  engines=sequential,batched paper=batched
fi
fastest=batched

part_1() {
  kit_step "$log" "op counts of one batched step (fedavg, fedgkd)" \
    "${bench[@]}" --ops --ops-strategies fedavg,fedgkd
  kit_step "$log" "sequential trainer vs bare PyTorch loop" \
    "${bench[@]}" --skip-run --rounds-bench none "${bare[@]}"
  kit_step "$log" "one round's local training per engine (default and table-3 shapes)" \
    "${bench[@]}" --skip-throughput --skip-run --rounds-bench default,table3 "${round[@]}"
}

part_2() {
  kit_step "$log" "table-3 runs, fedavg and fedgkd, as config/paper.yaml runs them (engine auto, tf32)" \
    "${bench[@]}" "${only_runs[@]}" --strategies fedavg,fedgkd --engine "$paper" \
    --precision tf32 "${run[@]}"
  kit_step "$log" "table-3 runs, fedavg and fedgkd, engine batched (CUDA graphs without the compiled step), tf32" \
    "${bench[@]}" "${only_runs[@]}" --strategies fedavg,fedgkd --engine batched \
    --precision tf32 "${run[@]}"
  kit_step "$log" "table-3 runs, fedavg and fedgkd, engine batched-eager, fp32 (the defaults before)" \
    "${bench[@]}" "${only_runs[@]}" --strategies fedavg,fedgkd --engine batched-eager \
    --precision fp32 "${run[@]}"
  kit_step "$log" "table-3-shaped runs on ResNet-8 with BatchNorm (FedDF Table 1's model), fedavg, engine $paper, tf32" \
    "${bench[@]}" "${only_runs[@]}" --strategies fedavg --norm batch --engine "$paper" \
    --precision tf32 "${run[@]}"
}

part_3() {
  kit_step "$log" "table-3 runs, fedavg and fedgkd, sequential engine" \
    "${bench[@]}" "${only_runs[@]}" --strategies fedavg,fedgkd --engine sequential \
    --warmup-rounds 1 "${run[@]}"
  kit_step "$log" "table-3-shaped runs on ResNet-8 with BatchNorm, fedavg, sequential engine, tf32" \
    "${bench[@]}" "${only_runs[@]}" --strategies fedavg --norm batch --engine sequential \
    --precision tf32 --warmup-rounds 1 "${run[@]}"
}

part_4() {
  kit_step "$log" "packed table-3 fedgkd runs ($packs at once, engine $fastest)" \
    "${bench[@]}" "${only_runs[@]}" --skip-run --strategies fedgkd --engine "$fastest" \
    --precision tf32 --pack "$packs" --pack-timeout 300 "${run[@]}"
}

part_5() {
  local fedgkd=("${bench[@]}" "${only_runs[@]}" --strategies fedgkd "${run[@]}")
  # back to back, so that the two figures see the same machine state
  kit_step "$log" "fedgkd table-3 run, engine $fastest, deterministic: false" \
    "${fedgkd[@]}" --engine "$fastest"
  # a kernel without a deterministic implementation raises here: a finding, reported as failed
  kit_step "$log" "fedgkd table-3 run, engine $fastest, deterministic: true" \
    "${fedgkd[@]}" --engine "$fastest" --deterministic
  kit_step "$log" "fedgkd table-3 run, engine $fastest, bf16" \
    "${fedgkd[@]}" --engine "$fastest" --precision bf16
  if [ "$KIT_DEVICE" = cuda ]; then
    kit_step "$log" "fedgkd table-3 run, bf16, torch.compile reduce-overhead (sequential)" \
      "${fedgkd[@]}" --engine sequential --precision bf16 --compile reduce-overhead \
      --warmup-rounds 1 --run-rounds 1
  else
    kit_skip "$log" "fedgkd table-3 run, bf16, torch.compile reduce-overhead" \
      "its CUDA graphs need a CUDA device"
  fi
  kit_step "$log" "fp32 vs tf32 vs bf16 best accuracy on mnist5k" \
    "${bench[@]}" --skip-throughput --skip-run --rounds-bench none --precision-check "${check[@]}"
}

part_6() {
  kit_step "$log" "profiles of one fedgkd round per engine" \
    "${bench[@]}" "${only_runs[@]}" --skip-run --profile --strategies fedgkd \
    --engine "$engines" --precision tf32 "${data[@]}"
}

for n in "${parts[@]}"; do
  log="$KIT_OUT/bench-$n-${PART_NAMES[$((n - 1))]}.log"
  "part_$n"
done
kit_summary "$KIT_OUT/summary-bench.txt"
