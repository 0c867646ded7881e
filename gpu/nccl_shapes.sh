#!/usr/bin/env bash
# GPU validation of rankmap's NCCL capture on every shape of job, on a node with 2 NVLink-connected
# GPUs; about 150 s in all. Run from the repository root:
#
#   NCCL_TESTS_BUILD=/path/to/nccl-tests/build bash gpu/nccl_shapes.sh     (results under $OUT)
#
#  1. nccl-tests all_reduce_perf, sendrecv_perf, alltoall_perf -g 2 (ONE process driving both GPUs)
#     under `rankmap profile`: both GPUs become ranks 0 and 1 with their GPU, the bytes of every
#     call are exactly the sizes nccl-tests ran, and the pair bytes on the wire (NCCL's own rings
#     from the INIT,GRAPH log that rankmap profile keeps in the run directory, protocol overhead
#     included) agree with NVML's NVLink data counters of both GPUs within 0.1 %;
#  2. a JAX job on both GPUs of one process (gpu/jax_collectives.py): every collective captured,
#     bytes exact, NVLink within 0.1 %;
#  3. a PyTorch job whose all-reduces are captured into a CUDA graph and replayed
#     (gpu/torch_graphs.py, torchrun): the captured calls are counted and the summary says that NCCL
#     does not report replays; NVLink = profile + (replays - 1) x the graph's bytes, within 0.1 %
#     (capture records the calls without running them, and the profile counts each once); the same
#     job once more with --cuda-activity on (CUPTI beside the NCCL plugin) must end cleanly;
#  4. small-op cost: all_reduce_perf -g 2 8 B .. 4 MiB, plain vs plugin vs plugin with no events
#     (RANKMAP_NCCL_EVENTS=none: NCCL's own cost of a loaded profiler), BENCH_ROUNDS (default 6)
#     interleaved runs per mode; targets <= 1 us per operation below 1 MiB, <= 1 % from 1 MiB.
#
# Writes $OUT/nccl_shapes.txt (every check and number) and $OUT/nccl-graph-h200x2.log (NCCL's INIT
# and GRAPH output of the all_reduce_perf job, for tests/data/nccl). Steps 1 and 4 are skipped with a
# clear line when NCCL_TESTS_BUILD is unset; 2 when JAX sees fewer than 2 GPUs. Every PASS/FAIL is one
# line; the exit status is the number of FAILs (at most 100). `bash gpu/nccl_shapes.sh --dry` only
# checks that the script and its helpers parse.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# NVLink SHARP / multicast stay off on these machines, for every job of this script
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID           # CUDA device i == NVML device i
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
unset NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_DEBUG_FILE RANK WORLD_SIZE
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/out-nccl-shapes}
CHECK=("$PY" "$ROOT/gpu/nccl_shapes_check.py")

if [ "${1:-}" = "--dry" ]; then
  bash -n "$0" && "$PY" -m py_compile gpu/nccl_shapes_check.py gpu/jax_collectives.py gpu/torch_graphs.py && echo "dry: ok"
  exit $?
fi

main() {
FAILS=0
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
T0=$(date +%s)
elapsed() { echo "   ($(( $(date +%s) - T0 )) s so far)"; }
echo "== rankmap NCCL capture on every shape of job, $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>&1 | sed 's/^/   /'
"$PY" -c 'import torch, torch.cuda.nccl as n; v = n.version(); print("   torch", torch.__version__, "nccl", ".".join(map(str, v)) if isinstance(v, tuple) else v)' 2>&1

export RANKMAP_CACHE="$WORK/cache" RANKMAP_HOME="$WORK/home"
DB="sqlite:///$WORK/rankmap.db"
if PLUGIN=$("$PY" -c 'from rankmap.capture.nccl_build import build_plugin; print(build_plugin("cc"))' 2>"$WORK/build.err"); then
  echo "PASS plugin built: $PLUGIN"
else
  fail "plugin build: $(head -1 "$WORK/build.err")"; return 1
fi

# profile JOB-NAME CHECK-KIND SPEC [--replays R] -- COMMAND...: NVML before, rankmap profile, NVML after, checks
profile() {
  local name=$1 kind=$2 spec=$3; shift 3
  local extra=(); while [ "$1" != "--" ]; do extra+=("$1"); shift; done; shift
  local run="$WORK/run-$name"
  "${CHECK[@]}" nvml "$WORK/$name-before.json" || { echo '{}' > "$WORK/$name-before.json"; fail "$name: NVML read"; }
  # shellcheck disable=SC2086  # PFLAGS: extra profile options of one case, split on purpose
  timeout 90 "$PY" -m rankmap profile --db "$DB" --nccl on --no-summary --no-progress --no-link-sampler ${PFLAGS:-} \
    --run-dir "$run" -- "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  "${CHECK[@]}" nvml "$WORK/$name-after.json" || { echo '{}' > "$WORK/$name-after.json"; fail "$name: NVML read"; }
  if [ $rc = 0 ]; then echo "PASS $name: rankmap profile -- $(basename "$1") ... exit 0"
  else fail "$name: exit $rc"; tail -15 "$WORK/$name.log" | sed 's/^/   | /'; fi
  grep -E "^rankmap: (warning|capture)" "$WORK/$name.log" | head -5 | sed 's/^/   /'
  grep -q "only 1 of" "$WORK/$name.log" && fail "$name: rankmap says a rank wrote no records"
  [ -z "$(ls "$run"/nccl-debug.*.log 2>/dev/null)" ] && fail "$name: no NCCL INIT/GRAPH log in the run directory"
  if [ -n "$spec" ] || [ "$kind" = graphs ]; then
    "${CHECK[@]}" capture "$run" "$WORK/$name-before.json" "$WORK/$name-after.json" "$kind" "$spec" "${extra[@]}"
    FAILS=$((FAILS + $?))
  fi
  elapsed
}

# ---- 1. nccl-tests -g 2: one process, two GPUs ----
NT=${NCCL_TESTS_BUILD:-}
SIZES=33554432,67108864,134217728            # -b 32M -e 128M -f 2
if [ -z "$NT" ] || [ ! -x "$NT/all_reduce_perf" ]; then
  echo "SKIP nccl-tests checks: NCCL_TESTS_BUILD is not set to a build directory with all_reduce_perf"
else
  for t in all_reduce sendrecv alltoall; do
    profile "nt-$t" "$t" "$SIZES" -- "$NT/${t}_perf" -b 32M -e 128M -f 2 -g 2 -w 2 -n 5 -c 0
  done
  log=$(ls "$WORK"/run-nt-all_reduce/nccl-debug.*.log 2>/dev/null | head -1)
  if [ -n "$log" ]; then
    { echo "# NCCL INIT,GRAPH output of nccl-tests all_reduce_perf -g 2 under rankmap profile on $(hostname),"
      echo "# $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x2, $(date -u +%F)"
      head -c 900000 "$log"; } > "$OUT/nccl-graph-h200x2.log"
    grep -c "NCCL INFO Channel [0-9]*/[0-9]* :" "$log" | sed 's/^/   ring lines in the NCCL log: /'
  fi
fi

# ---- 2. JAX, one process, both GPUs ----
if [ "$("$PY" -c 'import jax; print(len(jax.devices("gpu")))' 2>/dev/null)" -ge 2 ] 2>/dev/null; then
  profile jax jax "$WORK/jax-expect.json" -- "$PY" gpu/jax_collectives.py --expect "$WORK/jax-expect.json"
  grep -m1 "^jax " "$WORK/jax.log" | sed 's/^/   /'
else
  echo "SKIP JAX: JAX sees fewer than 2 GPUs"
fi

# ---- 3. PyTorch with CUDA graphs, torchrun ----
REPLAYS=10
profile graphs graphs "$WORK/graphs-expect.json" --replays $REPLAYS -- \
  "$PY" -m torch.distributed.run --standalone --nproc_per_node=2 gpu/torch_graphs.py \
  --expect "$WORK/graphs-expect.json" --replays $REPLAYS
# the same job with CUDA activity recorded (CUPTI in the process beside the NCCL plugin): it must end
PFLAGS="--cuda-activity on" profile graphs-cupti none "" -- \
  "$PY" -m torch.distributed.run --standalone --nproc_per_node=2 gpu/torch_graphs.py \
  --expect "$WORK/graphs-cupti-expect.json" --replays $REPLAYS

# ---- 4. small-op cost: plain / plugin / plugin with no events, interleaved ----
if [ -n "$NT" ] && [ -x "$NT/all_reduce_perf" ]; then
  ROUNDS=${BENCH_ROUNDS:-6}
  echo "== small-op cost: all_reduce_perf -g 2 -b 8 -e 4M -f 2 -w 20 -n ${BENCH_ITERS:-200}, $ROUNDS rounds x 3 modes"
  LOGS=()
  for round in $(seq 1 "$ROUNDS"); do
    k=$(( (round - 1) % 3 )); modes=(plain plugin none); order=("${modes[@]:$k}" "${modes[@]:0:$k}")
    for mode in "${order[@]}"; do
      l="$WORK/bench/$mode-$round.log"; mkdir -p "$WORK/bench"
      case $mode in
        plain) env -u NCCL_PROFILER_PLUGIN -u RANKMAP_RUN_DIR timeout 30 "$NT/all_reduce_perf" \
                 -b 8 -e 4M -f 2 -g 2 -w 20 -n "${BENCH_ITERS:-200}" -c 0 > "$l" 2>&1 ;;
        plugin) NCCL_PROFILER_PLUGIN="$PLUGIN" RANKMAP_RUN_DIR="$WORK/bench/run-$mode-$round" timeout 30 \
                 "$NT/all_reduce_perf" -b 8 -e 4M -f 2 -g 2 -w 20 -n "${BENCH_ITERS:-200}" -c 0 > "$l" 2>&1 ;;
        none) RANKMAP_NCCL_EVENTS=none NCCL_PROFILER_PLUGIN="$PLUGIN" RANKMAP_RUN_DIR="$WORK/bench/run-$mode-$round" \
                 timeout 30 "$NT/all_reduce_perf" -b 8 -e 4M -f 2 -g 2 -w 20 -n "${BENCH_ITERS:-200}" -c 0 > "$l" 2>&1 ;;
      esac
      rc=$?
      if [ $rc = 0 ]; then LOGS+=("$l"); else fail "bench $mode #$round exit $rc"; tail -3 "$l" | sed 's/^/   | /'; fi
    done
  done
  "${CHECK[@]}" bench "$WORK/bench.txt" ${LOGS[@]+"${LOGS[@]}"}
  FAILS=$((FAILS + $?))
  "$PY" - "$WORK/bench/run-plugin-1" <<'EOF'
import sys
from rankmap.pairs import nccl_model
p = nccl_model.load(sys.argv[1])
calls = {w: sum(c for (f, _b), c in d.items() if f == "AllReduce") for w, d in nccl_model.op_summary(p).items()}
ok = sorted(calls) == [0, 1] and len(set(calls.values())) == 1
print("PASS" if ok else "FAIL", f"bench: the plugin recorded the all-reduces of both GPUs {calls}")
sys.exit(0 if ok else 1)
EOF
  FAILS=$((FAILS + $?))
  elapsed
fi

echo "== done in $(( $(date +%s) - T0 )) s: $FAILS FAIL"
return $(( FAILS > 100 ? 100 : FAILS ))
}

mkdir -p "$OUT"
WORK=$(mktemp -d)
main 2>&1 | tee "$OUT/nccl_shapes.txt"
rc=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$rc"
