#!/usr/bin/env bash
# GPU validation of the MPI shim's memory-kind classification (device / managed / host).
# Run from the repository root on a GPU node with Open MPI (or MPICH) and nvcc:
#     bash gpu/mpi_device.sh              (results under $OUT, default ./out-mpi-device; ~15 s)
#     DRY=1 bash gpu/mpi_device.sh        (no GPU: builds both and stops before the run)
#  1. builds librankmap_mpi.so with this machine's mpicc (PYTHONPATH=src, fresh cache);
#  2. detects whether the MPI is CUDA-aware (ompi_info ... mpi_built_with_cuda_support);
#  3. builds examples/mpi/cuda_pingpong.c against the CUDA runtime and runs it on 2 ranks under
#     mpirun with LD_PRELOAD + RANKMAP_RUN_DIR (device buffers passed to MPI if CUDA-aware, else
#     staged through host memory plus 0-byte sends of the device pointers; receives alternate
#     between MPI_Recv, MPI_Irecv + MPI_Wait and MPI_Irecv + MPI_Waitall, whose buffers the shim
#     classifies at completion);
#  4. reads the records with rankmap.formats.record and checks the device / managed / host split
#     of every rank's sent and received bytes against the exact expectation -- this covers the
#     paths on which the shim asks the driver nothing (a heap buffer used before CUDA was loaded
#     and after, device buffers inside allocations seen before, a small device allocation), and
#     the memory kind of repeated MPI_Bcast calls from each kind of buffer (the collectives' fast
#     path reads it from the granule cache);
#  5. writes mpi_device.txt (split table + PASS/FAIL lines) under $OUT.
# Exit status: the number of FAILs (0 = all good).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
DRY=${DRY:-0}
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/out-mpi-device}
MPICC=${MPICC:-mpicc}
MPIRUN=${MPIRUN:-mpirun}
BYTES=${BYTES:-1048576}
ITERS=${ITERS:-5}
mkdir -p "$OUT"
WORK=$(mktemp -d)
REPORT="$OUT/mpi_device.txt"
export RANKMAP_CACHE="$WORK/cache"

{
  echo "# rankmap MPI device-buffer validation"
  echo "date: $(date -u +%FT%TZ)   host: $(hostname)"
  nvidia-smi --query-gpu=index,name --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
  echo "mpicc: $(command -v "$MPICC")   mpirun: $(command -v "$MPIRUN")"
  "$MPIRUN" --version 2>&1 | head -1 | sed 's/^/mpi: /'
} > "$REPORT"

SHIM=$(timeout 120 "$PY" -c "from rankmap.capture.shim_build import build_shim; print(build_shim('$MPICC'))") || {
  echo "FAIL shim build" | tee -a "$REPORT"; exit 1; }
echo "shim: $SHIM" >> "$REPORT"

AWARE=0
if command -v ompi_info >/dev/null 2>&1 && \
   ompi_info --parsable --all 2>/dev/null | grep -q "mpi_built_with_cuda_support:value:true"; then
  AWARE=1
fi
echo "cuda-aware: $AWARE" >> "$REPORT"

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
timeout 120 "$MPICC" -O2 examples/mpi/cuda_pingpong.c -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64" \
  -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart -o "$WORK/cuda_pingpong" 2>>"$REPORT" || {
  echo "FAIL build cuda_pingpong" | tee -a "$REPORT"; exit 1; }

if [ "$DRY" = 1 ]; then
  echo "PASS build shim and cuda_pingpong (DRY=1: not run)" | tee -a "$REPORT"; rm -rf "$WORK"; exit 0
fi

RUN="$WORK/run"
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
  LAUNCH=("$MPIRUN" --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD="$SHIM" -x RANKMAP_RUN_DIR="$RUN" -x PATH -x LD_LIBRARY_PATH)
else
  LAUNCH=("$MPIRUN" -n 2 -genv LD_PRELOAD "$SHIM" -genv RANKMAP_RUN_DIR "$RUN")
fi
echo "command: ${LAUNCH[*]} $WORK/cuda_pingpong $BYTES $ITERS $AWARE" >> "$REPORT"
timeout 60 "${LAUNCH[@]}" "$WORK/cuda_pingpong" "$BYTES" "$ITERS" "$AWARE" >> "$REPORT" 2>&1
RC=$?
echo "exit status: $RC" >> "$REPORT"

"$PY" - "$RUN" "$BYTES" "$ITERS" "$AWARE" >> "$REPORT" 2>&1 <<'PYEOF'
import sys
from rankmap.formats import record as records
run, n, iters, aware = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fails = 0
def check(ok, what):
    global fails
    print(("PASS " if ok else "FAIL ") + what)
    fails += not ok
recs = records.read_dir(run)
check(len(recs) == 2 and all(r.finalized and not r.problems for r in recs), "two complete record files")
S = 256                                    # cuda_pingpong's small buffers
exp_send = {"host": (2 * n * iters + 2 * S * iters + (0 if aware else n * iters),
                     4 * iters + (0 if aware else iters)),
            "managed": (n * iters, iters),
            "device": (n * iters + S * iters if aware else 0, 3 * iters)}
print(f"{'rank':>4} {'dir':>4} {'kind':>8} {'bytes':>12} {'messages':>9}")
for r in recs:
    split = {}
    for t in r.traffic:                    # TrafficRow: by name, so new fields do not break it
        if t.klass != "p2p":
            continue
        x = split.setdefault((t.direction, t.mem), [0, 0])
        x[0] += t.bytes
        x[1] += t.messages
    for (d, mem), (b, m) in sorted(split.items()):
        print(f"{r.world_rank:>4} {d:>4} {mem:>8} {b:>12} {m:>9}")
    check(r.meta.get("cuda") == "loaded", f"rank {r.world_rank} saw CUDA loaded after MPI_Init (meta cuda: {r.meta.get('cuda')})")
    for d in ("send", "recv"):
        got = {mem: tuple(v) for (dd, mem), v in split.items() if dd == d}
        check(got == exp_send, f"rank {r.world_rank} {d} split by memory kind {got} == {exp_send}")
    facts = {f.sig: f for f in r.coll_facts if f.operation == "MPI_Bcast"}
    bc = {}
    for sig, _bucket, calls in r.coll_calls:
        if sig in facts:
            bc[facts[sig].mem] = bc.get(facts[sig].mem, 0) + calls
    check(bc == {"host": 80, "managed": 40, "device": 40},
          f"rank {r.world_rank} MPI_Bcast calls by memory kind {bc} == host 80, managed 40, device 40")
dev = sum(t.bytes for r in recs for t in r.traffic if t.mem == "device")
tot = sum(t.bytes for r in recs for t in r.traffic)
print(f"device-resident share of p2p bytes: {dev / max(tot, 1):.1%} (cuda-aware={aware})")
sys.exit(min(fails, 100))
PYEOF
FAILS=$?
[ "$RC" -eq 0 ] || FAILS=$((FAILS + 1))
echo "fails: $FAILS" >> "$REPORT"
cat "$REPORT"
rm -rf "$WORK"
exit "$FAILS"
