#!/usr/bin/env bash
# rankmap run -- torchrun on two GPUs: is every worker where the mapping puts it?
#
# Makes a 2-rank mapping of this node (rankmap map on a ring, then ranks 0 and 1 swapped onto each
# other's GPU, disjoint CPU halves and a NIC name, so that every binding is visible), launches
#   rankmap run --mapping M -- torchrun --nproc_per_node=2 gpu/placed_worker.py
# and checks each worker's RANK/LOCAL_RANK, CUDA_VISIBLE_DEVICES and the GPU that device LOCAL_RANK
# is (UUID), CPU affinity, memory policy and NIC variables against the mapping, plus one NCCL
# all-reduce. One PASS/FAIL (or SKIP) line per check. About 30 s on 2x H200; every step runs under
# timeout, at most 85 s in all (map 15 s, dry run 10 s, the job 55 s, nvidia-smi 5 s).
#
#   gpu/run_torchrun.sh           on the GPU machine (torch, 2 GPUs)
#   DRY=1 gpu/run_torchrun.sh     anywhere: the h200x2-nvswitch fixture and a stand-in torchrun
#                                 (tests/data/launchers/torchrun), no torch needed
# Logs: ${OUT:-./out-run_torchrun}/run_torchrun.log and results.json.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/out-run_torchrun}
mkdir -p "$OUT"
LOG=$OUT/run_torchrun.log
: > "$LOG"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID   # CUDA's device numbers are nvidia-smi's and the mapping's
export NCCL_IB_DISABLE=1   # the mapping names a NIC for the check; the two GPUs talk over NVLink
export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export RANKMAP_HOME=$WORK/home
T0=$(date +%s)

if [ "${DRY:-0}" = 1 ]; then
  TOPO=h200x2-nvswitch
  TORCHRUN=("$ROOT/tests/data/launchers/torchrun")
  echo "dry run: topology $TOPO, stand-in torchrun" | tee -a "$LOG"
else
  TOPO=live
  if command -v torchrun >/dev/null; then TORCHRUN=(torchrun); else TORCHRUN=("$PY" -m torch.distributed.run); fi
fi

# 1. a mapping file: the solver's placement of a 2-rank ring, then a visible permutation
printf 'src,dst,class,operation,bytes,messages\n0,1,p2p,MPI_Send,1000000,1\n1,0,p2p,MPI_Send,1000000,1\n' > "$WORK/ring.csv"
if ! timeout 15 "$PY" -m rankmap map --traffic "$WORK/ring.csv" --topology "$TOPO" --format json \
     -o "$WORK/solved.json" >> "$LOG" 2>&1; then
  echo "FAIL rankmap map on $TOPO (see $LOG)"; exit 1
fi
"$PY" - "$WORK/solved.json" "$WORK/mapping.json" <<'PYEOF' >> "$LOG" 2>&1
import json, os, sys
doc = json.load(open(sys.argv[1]))
cpus = sorted(os.sched_getaffinity(0))
half = max(1, len(cpus) // 2)
sets = [cpus[:half], cpus[half:] or cpus[:half]]
e0, e1 = doc["mapping"]["0"], doc["mapping"]["1"]
for k in ("gpu", "uuid"):
    e0[k], e1[k] = e1[k], e0[k]               # rank 0 on rank 1's GPU and back: not the default
for e, s in zip((e0, e1), sets):
    e["cpus"] = ",".join(str(c) for c in s)
    e["numa"] = e.get("numa") if e.get("numa") is not None else 0
    if not e.get("netdev"):
        e["nic"], e["netdev"] = "check-nic", "rankmap_check0"
json.dump(doc, open(sys.argv[2], "w"), indent=1)
print("mapping:", json.dumps(doc["mapping"]))
PYEOF

# 2. the launch, through torchrun's own workers
echo "+ rankmap run --mapping mapping.json --topology $TOPO -- ${TORCHRUN[*]} --nproc_per_node=2 gpu/placed_worker.py" >> "$LOG"
timeout 10 "$PY" -m rankmap run --mapping "$WORK/mapping.json" --topology "$TOPO" --dry-run -- \
  "${TORCHRUN[@]}" --nproc_per_node=2 "$ROOT/gpu/placed_worker.py" >> "$LOG" 2>&1
timeout 55 "$PY" -m rankmap run --mapping "$WORK/mapping.json" --topology "$TOPO" -- \
  "${TORCHRUN[@]}" --nproc_per_node=2 "$ROOT/gpu/placed_worker.py" > "$WORK/run.out" 2>&1
RC=$?
cat "$WORK/run.out" >> "$LOG"

# 3. the checks
UUIDS=""
if [ "${DRY:-0}" != 1 ] && command -v nvidia-smi >/dev/null; then
  UUIDS=$(timeout 5 nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>>"$LOG" | tr -d ' ')
fi
"$PY" - "$WORK/mapping.json" "$WORK/run.out" "$RC" "$OUT/results.json" "$UUIDS" "$T0" <<'PYEOF' 2>&1 | tee -a "$LOG"
import json, sys, time
mapping_file, out_file, rc, results, uuids, t0 = sys.argv[1:7]
wall = time.time() - float(t0)
doc = json.load(open(mapping_file))
m = doc["mapping"]
uuid_of = dict(l.split(",", 1) for l in uuids.split() if "," in l)
# a launcher may prefix its workers' lines ("[rank0]: ..."): find the record wherever it starts
workers = [json.loads(l[l.index("WORKER {") + len("WORKER "):]) for l in open(out_file) if "WORKER {" in l]
lines = []
def check(ok, what):
    lines.append(("PASS " if ok else "FAIL ") + what)
def skip(what):
    lines.append("SKIP " + what)
def cpus(text):
    s = set()
    for p in str(text).split(","):
        if "-" in p:
            a, b = p.split("-"); s.update(range(int(a), int(b) + 1))
        elif p:
            s.add(int(p))
    return s
check(rc == "0", f"the job exited with status {rc}" + (" (killed by timeout)" if rc in ("124", "137") else ""))
check(str(m["0"]["gpu"]) != "0", f"the mapping puts rank 0 on GPU {m['0']['gpu']}, not the default GPU 0")
check(len(workers) == 2, f"{len(workers)} of 2 workers reported")
node_ranks = sorted((int(r) for r, e in m.items() if e["node"] == 0))
for w in sorted(workers, key=lambda w: int(w["RANK"] or -1)):
    local = int(w["LOCAL_RANK"])
    rank = int(w["RANK"])
    want = node_ranks[local]
    e = m[str(rank)]
    tag = f"rank {rank} (local {local})"
    check(rank == want, f"{tag}: RANK is the mapped world rank of local rank {local} on node 0 ({want})")
    vis = (w["CUDA_VISIBLE_DEVICES"] or "").split(",")
    check(len(vis) > local and vis[local] == str(e["gpu"]),
          f"{tag}: CUDA_VISIBLE_DEVICES={w['CUDA_VISIBLE_DEVICES']}, so device {local} is GPU {e['gpu']}")
    if w.get("device_uuid") and uuid_of:
        check(w["device_uuid"] == uuid_of.get(str(e["gpu"])),
              f"{tag}: torch device {local} is {w['device_uuid']}, GPU {e['gpu']} is {uuid_of.get(str(e['gpu']))}")
    else:
        skip(f"{tag}: device UUID (no torch with CUDA or no nvidia-smi here)")
    want_cpus = cpus(e["cpus"])
    check(set(w["affinity"]) == want_cpus, f"{tag}: CPU affinity {w['affinity']} == mapped {e['cpus']}")
    mp = w.get("mempolicy")
    if w.get("RANKMAP_MEMBIND", "").isdigit():
        check(bool(mp) and mp["mode"] == "bind" and mp["nodes"] == [int(e["numa"])],
              f"{tag}: memory policy {mp} binds to NUMA node {e['numa']}")
    else:
        skip(f"{tag}: memory binding (RANKMAP_MEMBIND={w.get('RANKMAP_MEMBIND')}), policy {mp}")
    check(w.get("NCCL_IB_HCA") == e["netdev"] and w.get("UCX_NET_DEVICES") == f"{e['netdev']}:1",
          f"{tag}: NCCL_IB_HCA={w.get('NCCL_IB_HCA')} UCX_NET_DEVICES={w.get('UCX_NET_DEVICES')} (NIC {e['netdev']})")
    if w.get("allreduce") is not None:
        check(w["allreduce"] == 3.0, f"{tag}: NCCL all-reduce of RANK+1 gives {w['allreduce']} (want 3)")
    else:
        skip(f"{tag}: NCCL all-reduce (no torch with CUDA here)")
check(wall <= 90, f"map + run + checks took {wall:.0f} s (limit 90 s)")
print("\n".join(lines))
print(f"wall time of map + run + checks: {wall:.0f} s; workers: " +
      ", ".join(f"rank {w['RANK']} {w['seconds']} s" for w in workers))
json.dump({"workers": workers, "checks": lines, "mapping": m, "wall_s": round(wall, 1)}, open(results, "w"), indent=1)
sys.exit(1 if any(l.startswith("FAIL") for l in lines) else 0)
PYEOF
