#!/usr/bin/env bash
# MPI collective pair traffic against Open MPI's own monitoring, on the GPU machine's Open MPI
# (4.1.6 there; this repository's tests run 4.1.4). Uses no GPU: it checks that the shim's library
# source (the monitoring PML's per-message callback) and the coll/tuned mirror hold on that build.
# About 30 s on 32 cores. Run from the repository root:   bash gpu/collectives.sh
# (log: ${OUT:-./out-collectives}/collectives.txt; PYTHON=... picks the interpreter, default python3)
#
#  bench/collective_pairs.py --check 0.02: examples/mpi/coll_mix.c (allreduce, allgather, bcast,
#  reduce, reduce_scatter_block, alltoall, gather, scatter) on 3, 4 and 8 ranks at 8 B, 64 KiB,
#  1 MiB and 16 MiB, one job each, under the monitoring PML and the shim; per job one PASS/FAIL
#  line for the library rows and one for the mirror rows (L1 <= 2 % of the monitoring's bytes),
#  plus the table with the fixed model's L1 for comparison, and what the shim saw of MPI_T.
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

if ! command -v ompi_info >/dev/null || ! ompi_info | grep -q "pml: monitoring"; then
  echo "FAIL Open MPI with its monitoring components is needed (ompi_info)" | tee "$LOG"
  exit 1
fi
timeout 600 "$PY" bench/collective_pairs.py --ranks 3,4,8 --sizes 8,65536,1048576,16777216 --check 0.02 \
  2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
if [ "$rc" = 124 ]; then echo "FAIL timed out after 600 s" | tee -a "$LOG"; rc=1; fi
exit "$rc"
