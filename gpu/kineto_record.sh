#!/usr/bin/env bash
# Real PyTorch profiler (Kineto) traces for `rankmap ingest --from kineto`, and rankmap's profile of
# the same run to compare the import with. One command, from the repository root, about 2 minutes:
#
#     bash gpu/kineto_record.sh              on the GPU machine (python3 with torch; one GPU is enough)
#     DRY=1 bash gpu/kineto_record.sh        anywhere: no torch; the worker compiled, a generated trace
#                                            (tests/kineto_gen.py) imported and checked the same way
#
#  0. packages: python3's, plus the wheels carried in ./.whl (gpu/_pyenv.sh; SQLAlchemy is the one a
#     GPU image usually lacks); env.txt says what the machine, torch and NCCL are;
#  1. NCCL, world size 1 (NCCL refuses two ranks on one GPU): gpu/kineto_worker.py under
#       rankmap profile -- python3 -m torch.distributed.run --standalone --nproc_per_node=1 ...
#     -> $OUT/kineto/nccl-1/: rank0.pt.trace.json, expected-rank0.json, profile.csv (the profiled
#     job's pairs), profile-ops.json (its NCCL calls and payload per operation), nccl-debug*.log;
#     then the traces imported into a scratch store and checked by gpu/kineto_check.py: pairs equal
#     (p2p exact, collectives within 1 %; with one rank both are empty), calls and payload equal;
#  2. gloo, 4 ranks on the CPU: the same worker (no rankmap profile: its hooks see no gloo traffic).
#     Whether this torch's gloo writes record_param_comms is checked, not assumed: if it does, the
#     traces are kept in $OUT/kineto/gloo-4/ and their import's p2p pairs checked against the bytes
#     the program itself sent (expected-rank*.json); if not, one SKIP line says so.
# Every trace must stay under 1 MB (they are meant for tests/data/kineto/: copy $OUT/kineto/* there).
# Logs: $OUT/kineto_record.log. Exit status: the number of FAIL lines.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
OUT=${OUT:-$ROOT/out-kineto}
DRY=${DRY:-0}
PY=${PYTHON:-python3}
mkdir -p "$OUT/kineto"
LOG=$OUT/kineto_record.log
: > "$LOG"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export RANKMAP_HOME=$WORK/home RANKMAP_CACHE=$WORK/cache RANKMAP_DB="sqlite:///$WORK/profiled.db"
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }
check() {   # check RUN_DIR: import its traces into a fresh store, then gpu/kineto_check.py
  local run=$1 db="sqlite:///$WORK/import-$(basename "$1").db"
  if ! timeout 120 $PY -m rankmap ingest --from kineto "$run"/rank*.json* --db "$db" >> "$LOG" 2>&1; then
    echo "FAIL rankmap ingest --from kineto of $(basename "$run") (see $LOG)" | tee -a "$LOG"; return
  fi
  timeout 120 $PY gpu/kineto_check.py "$run" "$db" 2>&1 | tee -a "$LOG"
}
count_fails() { FAILS=$(grep -c '^FAIL' "$LOG" || true); }

# 0. packages
source "$ROOT/gpu/_pyenv.sh"
if [ "$DRY" = 1 ]; then rankmap_pyenv sqlalchemy numpy rich || exit 100
else rankmap_pyenv sqlalchemy numpy rich torch || exit 100; fi
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; echo "host: $(hostname), $(nproc) CPUs"
  nvidia-smi -L 2>&1 | head -8
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")' 2>&1 | tail -1
  echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git status --short 2>/dev/null | wc -l) files changed"
} > "$OUT/kineto/env.txt" 2>&1
cat "$OUT/kineto/env.txt" >> "$LOG"

if [ "$DRY" = 1 ]; then
  say "dry run: the worker compiled, a generated 4-rank trace imported and checked"
  $PY -m py_compile gpu/kineto_worker.py gpu/kineto_check.py || { echo "FAIL the worker does not compile"; exit 1; }
  run=$OUT/kineto/dry-4
  $PY tests/kineto_gen.py "$run" 4 >> "$LOG" 2>&1
  # what the program sent, as the worker would write it: the scenario's two ring sends of 5000 floats
  # to rank+1 and the 64-byte send of the reversed group to its comm rank +1 (world rank - 1)
  $PY - "$run" <<'EOF'
import json, sys
from pathlib import Path
run, n = Path(sys.argv[1]), 4
for r in range(n):
    to = {(r + 1) % n: 2 * 5000 * 4}
    to[(r - 1) % n] = to.get((r - 1) % n, 0) + 64
    (run / f"expected-rank{r}.json").write_text(json.dumps({"rank": r, "p2p_bytes_to": {str(k): v for k, v in to.items()}}))
EOF
  # rankmap's profile of the same scenario: the NCCL harness drives rankmap's plugin through it
  # without NCCL or a GPU (tests/nccl_harness/harness.c), 4 ranks; its run directory ingested
  plugin=$($PY -c 'from rankmap.capture.nccl_build import build_plugin; print(build_plugin())' 2>> "$LOG")
  cc -std=gnu11 -O1 -o "$WORK/harness" tests/nccl_harness/harness.c -ldl >> "$LOG" 2>&1
  mkdir -p "$WORK/hrun"
  pids=()
  for r in 0 1 2 3; do
    RANK=$r WORLD_SIZE=4 RANKMAP_RUN_DIR="$WORK/hrun" "$WORK/harness" "$plugin" 7 scenario >> "$LOG" 2>&1 & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || echo "FAIL a harness rank" | tee -a "$LOG"; done
  $PY -m rankmap ingest "$WORK/hrun" >> "$LOG" 2>&1
  $PY -m rankmap export latest > "$run/profile.csv"
  $PY -m rankmap export latest --format json | $PY gpu/kineto_check.py --ops > "$run/profile-ops.json"
  check "$run"
  count_fails
  say "done: $FAILS FAIL lines"
  exit "$FAILS"
fi

# 1. NCCL, one GPU
run=$OUT/kineto/nccl-1
say "NCCL, world size 1, under rankmap profile"
if timeout 240 $PY -m rankmap profile --no-summary --no-progress -- \
     $PY -m torch.distributed.run --standalone --nproc_per_node=1 gpu/kineto_worker.py --backend nccl --out "$run" \
     >> "$LOG" 2>&1; then
  $PY -m rankmap export latest > "$run/profile.csv"
  $PY -m rankmap export latest --format json | $PY gpu/kineto_check.py --ops > "$run/profile-ops.json"
  rundir=$($PY -m rankmap jobs --format json | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["run_dir"] or "")')
  [ -n "$rundir" ] && cp "$rundir"/nccl-debug*.log "$run/" 2>/dev/null
  check "$run"
else
  echo "FAIL the NCCL run under rankmap profile (see $LOG)" | tee -a "$LOG"
fi

# 2. gloo, 4 ranks on the CPU
run=$OUT/kineto/gloo-4
say "gloo, 4 ranks"
if timeout 240 $PY -m torch.distributed.run --standalone --nproc_per_node=4 gpu/kineto_worker.py --backend gloo \
     --out "$run" >> "$LOG" 2>&1; then
  n=$(cat "$run"/rank*.pt.trace.json | grep -o '"record_param_comms"' | wc -l)
  if [ "$n" -gt 0 ]; then
    say "gloo wrote $n record_param_comms events"
    check "$run"
  else
    echo "SKIP gloo: this torch's ProcessGroupGloo writes no record_param_comms events (nothing to import)" | tee -a "$LOG"
    rm -rf "$run"
  fi
else
  echo "FAIL the gloo run (see $LOG)" | tee -a "$LOG"
fi

# sizes: meant for tests/data
for f in "$OUT"/kineto/*/*; do
  [ -f "$f" ] || continue
  s=$(stat -c %s "$f")
  if [ "$s" -gt 1000000 ]; then
    gzip -9 "$f"; say "$(basename "$f") was $s bytes: gzipped"
  fi
done
du -ab "$OUT/kineto" | tee -a "$LOG"
count_fails
say "done: $FAILS FAIL lines"
exit "$FAILS"
