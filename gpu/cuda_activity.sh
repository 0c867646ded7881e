#!/usr/bin/env bash
# GPU validation of the CUDA activity capture (CUPTI through CUDA_INJECTION64_PATH) and its report.
# Run from anywhere on a node with 2 GPUs, nvcc, Open MPI and the PyTorch Python:
#     bash gpu/cuda_activity.sh            (about 2 min; logs under $OUT, default ./out-cuda-activity)
#     DRY=1 bash gpu/cuda_activity.sh      (no GPU: the same checks on stand-in CUPTI/libcuda runs)
#  1. the CUPTI record layouts rankmap declares against this toolkit's cupti_activity.h;
#  2. builds examples/cuda (exchange_staged, exchange_nccl, peer_copy) with nvcc -arch=native;
#  3. rankmap profile -- mpirun -np 2 exchange_staged BYTES ITERS   (GPU-unaware: D2H, MPI, H2D)
#     rankmap profile -- mpirun -np 2 exchange_nccl   BYTES ITERS   (GPU-aware: NCCL, dlopen'ed)
#     and checks copy counts and bytes per rank exactly against what the programs do;
#     and rankmap profile -- the same staged run with the defaults: CUDA left alone (no injection,
#     no CUDA record file), the summary naming --cuda-activity on and its cost;
#  4. rankmap profile -- peer_copy: P2P copies named by source and destination GPU;
#  5. rankmap profile -- python3 (a small PyTorch job): its kernels and copies appear;
#  6. bench/cuda_activity.py, short: on a copy-heavy and a kernel-heavy load, the default costs nothing
#     measurable, and what --cuda-activity copies / on cost (the decision: on stays opt-in while > 5 %);
#  7. the staged and the GPU-aware reports side by side (for docs/validation.md).
# Writes $OUT/cuda_activity.txt (everything printed) and $OUT/cuda_activity.json (overhead samples).
# Environment: NCCL_LIB (libnccl.so.2; default: the nvidia-nccl wheel beside python3), BYTES, ITERS,
# MPIRUN, PYTHON. Exit status: the number of FAILs.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/out-cuda-activity}
MPIRUN=${MPIRUN:-mpirun}
BYTES=${BYTES:-8388608}
ITERS=${ITERS:-20}
DRY=${DRY:-0}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOG="$OUT/cuda_activity.txt"
: > "$LOG"
export RANKMAP_HOME="$WORK/home" RANKMAP_DB="sqlite:///$WORK/rankmap.db" RANKMAP_CACHE="$WORK/cache"
FAILS=0
say() { echo "$*" | tee -a "$LOG"; }
fail() { say "FAIL $*"; FAILS=$((FAILS + 1)); }
T0=$(date +%s)

say "# rankmap CUDA activity validation $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' | tee -a "$LOG"
"$MPIRUN" --version 2>&1 | head -1 | sed 's/^/mpi: /' | tee -a "$LOG"

# 1. layouts
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
INC=""
for d in "$CUDA_HOME/include" "$CUDA_HOME/extras/CUPTI/include" /usr/local/cuda*/include; do
  [ -f "$d/cupti_activity.h" ] && { INC=$d; break; }
done
if [ -n "$INC" ] && cc -std=gnu11 -Wall -Werror -I"$INC" -fsyntax-only tests/native/cupti_layout_check.c 2>>"$LOG"; then
  say "PASS CUPTI record layouts agree with $INC/cupti_activity.h"
else
  fail "CUPTI record layouts against ${INC:-no cupti_activity.h found}"
fi

PFLAGS=(--cuda-activity on)   # profile's CUDA flags; the default check empties them
profile() {  # profile NAME TIMEOUT CMD... -> $WORK/NAME.json (export), $WORK/NAME.txt (show)
  local name=$1 t=$2
  shift 2
  timeout "$t" "$PY" -m rankmap profile --no-progress --no-summary "${PFLAGS[@]}" -- "$@" \
    > "$WORK/$name.run" 2>&1
  local rc=$?
  sed "s/^/  $name: /" "$WORK/$name.run" | tail -n 12 >> "$LOG"
  [ $rc -eq 0 ] || { fail "$name: rankmap profile exited $rc"; return 1; }
  "$PY" -m rankmap export latest --format json -o "$WORK/$name.json" &&
    COLUMNS=120 "$PY" -m rankmap show latest --gpu > "$WORK/$name.txt" 2>&1
}
check() { "$PY" gpu/cuda_activity_check.py "$@" 2>&1 | tee -a "$LOG"; FAILS=$((FAILS + ${PIPESTATUS[0]})); }
default_check() {  # the default: profile without --cuda-activity leaves CUDA alone
  PFLAGS=(--run-dir "$WORK/default-run")
  profile default "$@" && grep -h "CUDA activity" "$WORK/default.txt" | sed 's/^/  default summary: /' | tee -a "$LOG" &&
    check default "$WORK/default.json" "$WORK/default-run"
  PFLAGS=(--cuda-activity on)
}

if [ "$DRY" = 1 ]; then
  # the stand-ins play the GPU side of the same exchange (tests/native/staged_app.c)
  mkdir -p "$WORK/lib"
  cc -shared -fPIC -O1 -Wl,-soname,libcupti.so.13 -o "$WORK/lib/libcupti.so.13" tests/native/fake_cupti.c -lpthread
  cc -shared -fPIC -O1 -Wl,-soname,libcuda.so.1 -o "$WORK/lib/libcuda.so.1" tests/native/fake_cuda.c
  mpicc -O1 -o "$WORK/staged_app" tests/native/staged_app.c -ldl
  export RANKMAP_CUPTI="$WORK/lib/libcupti.so.13" LD_LIBRARY_PATH="$WORK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  make -s -C examples/cuda OUT="$WORK/bin" NVCC="$NVCC" >> "$LOG" 2>&1 && say "PASS examples/cuda build (dry: not run)" \
    || fail "examples/cuda build"
  M=("$MPIRUN" --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -np 2 "$WORK/staged_app")
  profile staged 120 "${M[@]}" staged "$BYTES" "$ITERS" && check staged "$WORK/staged.json" "$BYTES" "$ITERS"
  profile aware 120 "${M[@]}" aware "$BYTES" "$ITERS"
  default_check 120 "${M[@]}" staged "$BYTES" "$ITERS"
else
  # 2. builds
  if make -s -j3 -C examples/cuda OUT="$WORK/bin" NVCC="$NVCC" NVFLAGS="-O2 -std=c++17 -arch=native" >> "$LOG" 2>&1; then
    say "PASS examples/cuda build"
  else
    fail "examples/cuda build"
  fi
  NCCL_LIB=${NCCL_LIB:-$("$PY" -c 'import glob, sys; print(next(iter(sorted(p for s in sys.path for p in glob.glob(s + "/nvidia/nccl/lib/libnccl.so.2"))), ""))')}
  export NCCL_LIB
  say "NCCL_LIB=$NCCL_LIB"
  M=("$MPIRUN" --allow-run-as-root -np 2 -x NCCL_LIB)
  # 3. the example pair
  profile staged 60 "${M[@]}" "$WORK/bin/exchange_staged" "$BYTES" "$ITERS" &&
    check staged "$WORK/staged.json" "$BYTES" "$ITERS"
  profile aware 90 "${M[@]}" "$WORK/bin/exchange_nccl" "$BYTES" "$ITERS" &&
    check aware "$WORK/aware.json" "$BYTES" "$ITERS"
  default_check 60 "${M[@]}" "$WORK/bin/exchange_staged" "$BYTES" "$ITERS"
  # 4. peer-to-peer copies
  PEER=16777216
  profile peer 60 "$WORK/bin/peer_copy" "$PEER" 10 && check peer "$WORK/peer.json" "$PEER" 10
  # 5. a small PyTorch job (one process, both GPUs)
  TB=$((64 << 20))
  cat > "$WORK/torch_job.py" <<EOF
import torch
n = $TB // 4
x = torch.ones(n)                        # host
y = x.to("cuda:0")                       # H2D of $TB bytes
a = torch.randn(1024, 1024, device="cuda:0")
for _ in range(10):
    a = torch.relu(a @ a) / 1024         # kernels
z = (y * 2).cpu()                        # D2H of $TB bytes
if torch.cuda.device_count() > 1:
    w = y.to("cuda:1")                   # GPU 0 -> GPU 1
torch.cuda.synchronize()
print("torch job done", float(z[0]), float(a.sum()))
EOF
  profile torch 90 "$PY" "$WORK/torch_job.py" && check torch "$WORK/torch.json" "$TB"
  # 6. overhead (short): the default must cost nothing, and on/copies are priced
  if timeout 240 "$PY" bench/cuda_activity.py --copies 4000 --kernels 40000 --trials 3 \
       --json "$OUT/cuda_activity.json" >> "$LOG" 2>&1; then
    check overhead "$OUT/cuda_activity.json" 5
  else
    fail "overhead benchmark did not finish (see $LOG)"
  fi
fi

# 7. the two reports side by side
if [ -f "$WORK/staged.txt" ] && [ -f "$WORK/aware.txt" ]; then
  say ""
  say "## GPU-unaware (staged through host memory)  |  GPU-aware ($([ "$DRY" = 1 ] && echo "CUDA-aware MPI, stand-in" || echo NCCL))"
  "$PY" - "$WORK/staged.txt" "$WORK/aware.txt" <<'EOF' | tee -a "$LOG"
import sys
a, b = (open(p).read().splitlines() for p in sys.argv[1:3])
w = max(map(len, a), default=0)
for i in range(max(len(a), len(b))):
    print(f"{a[i] if i < len(a) else '':<{w}} | {b[i] if i < len(b) else ''}".rstrip())
EOF
fi
say ""
say "wall time: $(( $(date +%s) - T0 )) s; FAILs: $FAILS"
exit "$FAILS"
