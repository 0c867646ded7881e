#!/usr/bin/env bash
# MPI collective pair traffic against Open MPI's own monitoring, on the GPU machine's Open MPI
# (4.1.6 there; this repository's tests run 4.1.4). Uses no GPU: it checks that the shim's library
# source (the monitoring PML's per-message callback) and the coll/tuned mirror hold on that build.
#
#   bash gpu/collectives.sh          # 3, 4, 5, 8 ranks x 8 B, 64 KiB, 1 MiB, 16 MiB (about 30 s on 32 cores)
#   DRY=1 bash gpu/collectives.sh    # 3 and 4 ranks x 8 B, 64 KiB: the same checks on a small machine
#
# bench/collective_pairs.py --check 0.02 runs examples/mpi/coll_mix.c (allreduce, allgather, bcast,
# reduce, reduce_scatter_block, alltoall, gather, scatter at one size) one job per (ranks, size)
# under the monitoring PML and the shim; per job one PASS/FAIL line for the library rows (all calls
# must have come from the library) and one for the mirror rows (L1 <= 2 % of the monitoring's bytes
# per pair), the table with the fixed model's L1 beside them, and what the shim saw of MPI_T.
# Env: OUT (log folder, default ./out-collectives: collectives.txt only), PYTHON (default python3),
# MPIRUN/MPICC (default mpirun/mpicc of Open MPI), LIMIT_S (hard limit of the whole run, default 75).
# The exit status is the number of FAILs (capped at 100).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/out-collectives}
mkdir -p "$OUT"
LOG=$OUT/collectives.txt
: >"$LOG"
if [ "${DRY:-0}" = 1 ]; then RANKS=3,4 SIZES=8,65536; else RANKS=3,4,5,8 SIZES=8,65536,1048576,16777216; fi
args=(--ranks "$RANKS" --sizes "$SIZES" --check 0.02 --timeout 30)
[ -n "${MPIRUN:-}" ] && args+=(--mpirun "$MPIRUN")
[ -n "${MPICC:-}" ] && args+=(--mpicc "$MPICC")

if ! command -v ompi_info >/dev/null || ! ompi_info | grep -q "pml: monitoring"; then
  echo "FAIL Open MPI with its monitoring components is needed (ompi_info)" | tee -a "$LOG"
  exit 1
fi
t0=$(date +%s)
timeout -k 5 "${LIMIT_S:-75}" "$PY" bench/collective_pairs.py "${args[@]}" 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "FAIL timed out after ${LIMIT_S:-75} s" | tee -a "$LOG"; rc=1; fi
echo "collectives.sh: $(( $(date +%s) - t0 )) s, exit status $rc" | tee -a "$LOG"
exit "$rc"
