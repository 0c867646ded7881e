#!/usr/bin/env bash
# Whole-node validation on an N-GPU node: topology, NCCL and MPI capture against the link
# counters, and tune/run with measured times. Run from the repository root:
#     OUT=/some/dir bash gpu/node_validate.sh
# Needs python3 with torch, nvidia-ml-py, numpy, SQLAlchemy (PYTHONPATH may point at extra
# packages), Open MPI's mpirun/mpicc and the CUDA toolkit. Writes into $OUT:
#   topo.log, <name>-topo.json, <name>-nvidia-smi-topo-m.txt   live topology (kept as test recordings)
#   torch.txt   rankmap profile -- torchrun (all GPUs) + per-GPU NVLink comparison
#   mpi.txt     rankmap profile -- mpirun cuda_ring   + per-GPU NVLink/PCIe comparison
#   tune.txt    rankmap tune of the MPI job, then default vs `rankmap run` times, alternating
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export RANKMAP_HOME=${RANKMAP_HOME:-$(mktemp -d)}
OUT=${OUT:-./out-node}
mkdir -p "$OUT"
NG=$(nvidia-smi -L | wc -l)
NAME=${NAME:-h200x$NG}
RM=(python3 -m rankmap)

# 1. topology
OUT="$OUT/topo" bash gpu/topo.sh > "$OUT/topo.log" 2>&1; echo "topo: rc=$?" >> "$OUT/topo.log"
cat "$OUT/topo/compare.txt" >> "$OUT/topo.log" 2>/dev/null
cp "$OUT/topo/topo.json" "$OUT/$NAME-topo.json"; cp "$OUT/topo/nvidia-smi-topo-m.txt" "$OUT/$NAME-nvidia-smi-topo-m.txt"
rm -rf "$OUT/topo"

# 2. PyTorch / NCCL on every GPU
{
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH "${RM[@]}" profile -- torchrun --standalone --nproc_per_node="$NG" \
      examples/torch/ddp_step.py > /tmp/torch-job.log 2>&1
  echo "rankmap profile exit: $?"
  grep -v "NCCL INFO" /tmp/torch-job.log | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' | grep -v "^\s*$" | tail -60
  python3 gpu/compare_links.py --nccl-log /tmp/torch-job.log
} > "$OUT/torch.txt" 2>&1

# 3. MPI, host-staged GPU data, on every GPU
mpicc -O2 examples/mpi/cuda_ring.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 \
  -Wl,-rpath,/usr/local/cuda/lib64 -lcudart -o /tmp/cuda_ring
MPI=(mpirun --allow-run-as-root -np "$NG" /tmp/cuda_ring 67108864 20)
{
  "${RM[@]}" profile -- "${MPI[@]}" 2>&1 | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g'
  echo "rankmap profile exit: ${PIPESTATUS[0]}"
  python3 gpu/compare_links.py
} > "$OUT/mpi.txt" 2>&1

# 4. tune (reuses the profile above), then default vs tuned, alternating
{
  "${RM[@]}" tune -- "${MPI[@]}" 2>&1 | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g'
  echo "rankmap tune exit: ${PIPESTATUS[0]}"
  for i in 1 2 3; do
    echo "--- default #$i"; "${MPI[@]}" 2>&1 | grep cuda_ring
    echo "--- rankmap run #$i"; "${RM[@]}" run -- "${MPI[@]}" 2>&1 | grep cuda_ring
  done
} > "$OUT/tune.txt" 2>&1
grep -h -E "PASS|FAIL" "$OUT"/*.txt "$OUT/topo.log" | sort | uniq -c | sort -rn | head -40
