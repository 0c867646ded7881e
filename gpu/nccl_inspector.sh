#!/usr/bin/env bash
# NCCL Inspector and rankmap recording the same NCCL job (RANKMAP_NCCL_CHAIN), on every GPU of the node.
#   bash gpu/stage_inspector.sh NCCL_GIT_DIR     (on a machine with the NCCL repository: the source
#                                                 travels as untracked files in third_party_src/)
#   bash gpu/nccl_inspector.sh                   (on the GPU machine; results under $OUT)
#  1. builds NCCL Inspector from third_party_src/nccl-inspector with its own Makefile (CUDA_HOME:
#     /usr/local/cuda, else the CUDA of the installed nvidia-* wheels) and rankmap's plugin;
#  2. `rankmap profile -- torchrun --nproc_per_node=G job.py` (G = the GPUs visible; one GPU is a
#     NCCL world of one rank), the job doing ITERS all-reduces of 4 MiB and, with two ranks or more,
#     ITERS send/recv pairs around the ring, with RANKMAP_NCCL_CHAIN = Inspector and
#     NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR=$OUT/inspector;
#  3. checks: rankmap stored every rank's ncclAllReduce calls (ITERS each) and, with G >= 2, the
#     send bytes exactly; Inspector wrote its dump with a coll_perf entry per all-reduce it saw
#     (one rank: NCCL may launch no kernel for a one-rank all-reduce, and then says nothing either;
#     the check says which); rankmap said on stderr that events also went to Inspector.
# Every check prints one PASS or FAIL line; the exit status is the number of FAILs.
# `bash gpu/nccl_inspector.sh --dry` only prints what it would run.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export NCCL_NVLS_ENABLE=0 CUDA_DEVICE_ORDER=PCI_BUS_ID PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/out-inspector}
ITERS=${ITERS:-20}
SRC=$ROOT/third_party_src/nccl-inspector
DRY=0; [ "${1:-}" = "--dry" ] && DRY=1
mkdir -p "$OUT"
fails=0
check() { if [ "$1" = 0 ]; then echo "PASS $2"; else echo "FAIL $2"; fails=$((fails + 1)); fi; }

cuda_home() {
  [ -f /usr/local/cuda/include/cuda.h ] && { echo /usr/local/cuda; return; }
  $PY - <<'PY'
import pathlib, nvidia
for base in nvidia.__path__:
    for inc in pathlib.Path(base).glob("*/include/cuda.h"):
        print(inc.parent.parent); raise SystemExit
PY
}

cat > "$OUT/job.py" <<'PY'
"""ITERS all-reduces of 4 MiB, and (two ranks or more) ITERS send/recv pairs of 1 MiB around the ring."""
import os, torch, torch.distributed as dist
iters = int(os.environ.get("ITERS", "20"))
dist.init_process_group("nccl")
r, n = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
x = torch.ones(1 << 20, device="cuda")
for _ in range(iters):
    dist.all_reduce(x)
    if n > 1:
        y = torch.empty(1 << 18, device="cuda")
        ops = [dist.P2POp(dist.isend, torch.ones(1 << 18, device="cuda"), (r + 1) % n),
               dist.P2POp(dist.irecv, y, (r - 1) % n)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
torch.cuda.synchronize()
dist.destroy_process_group()
PY

G=$(nvidia-smi -L 2>/dev/null | wc -l); [ "$G" -ge 1 ] || G=1
CUDA_HOME_=$(cuda_home)
if [ $DRY = 1 ]; then
  echo "make -C $SRC CUDA_HOME=${CUDA_HOME_:-?}"
  echo "RANKMAP_NCCL_CHAIN=$SRC/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR=$OUT/inspector"
  echo "$PY -m rankmap profile --db sqlite:///$OUT/rankmap.db -- torchrun --nproc_per_node=$G $OUT/job.py"
  exit 0
fi
[ -f "$SRC/Makefile" ] || { echo "FAIL Inspector source staged in $SRC (run gpu/stage_inspector.sh first)"; exit 1; }
make -C "$SRC" CUDA_HOME="$CUDA_HOME_" >"$OUT/inspector-build.log" 2>&1
check $? "NCCL Inspector builds (log: inspector-build.log)"
LIB=$SRC/libnccl-profiler-inspector.so
[ -f "$LIB" ] || { echo "FAIL no $LIB"; exit $((fails + 1)); }
rm -rf "$OUT/inspector" && mkdir -p "$OUT/inspector"
RANKMAP_NCCL_CHAIN=$LIB NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR=$OUT/inspector \
NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=500 ITERS=$ITERS \
  $PY -m rankmap profile --db "sqlite:///$OUT/rankmap.db" --no-summary -- \
  torchrun --nproc_per_node="$G" "$OUT/job.py" >"$OUT/profile.out" 2>"$OUT/profile.err"
check $? "rankmap profile of the job exits 0 (profile.out, profile.err)"
grep -q "also go to $LIB" "$OUT/profile.err"; check $? "rankmap's plugin chained the events to Inspector"
$PY - "$OUT" "$G" "$ITERS" <<'PY'
import json, pathlib, sys
from rankmap.store import open_store
out, G, iters = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
st = open_store(f"sqlite:///{out / 'rankmap.db'}")
jid = st.resolve_job("latest")
calls = {(o["rank"], o["operation"]): o["calls"] for o in st.op_stats(jid)}
fails = 0
def check(ok, what):
    global fails
    print(("PASS " if ok else "FAIL ") + what); fails += not ok
check(all(calls.get((r, "ncclAllReduce")) == iters for r in range(G)),
      f"rankmap: every rank's ncclAllReduce calls = {iters} ({ {k: v for k, v in calls.items() if 'AllReduce' in k[1]} })")
if G > 1:
    sent = {(t["src"], t["dst"]): t["bytes"] for t in st.traffic(jid) if t["operation"] == "ncclSend"}
    check(sent == {(r, (r + 1) % G): iters * 4 * (1 << 18) for r in range(G)}, f"rankmap: send bytes exact {sent}")
entries = []
for f in sorted((out / "inspector").rglob("*")):
    if f.is_file():
        for line in f.read_text(errors="replace").splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                pass
colls = [e for e in entries if isinstance(e, dict) and "coll_perf" in e]
names = sorted({str(e["coll_perf"].get("coll")) for e in colls})
print(f"Inspector: {len(entries)} JSON lines, {len(colls)} coll_perf entries, collectives {names}")
if G > 1:
    check(sum(1 for e in colls if "AllReduce" in str(e["coll_perf"].get("coll"))) >= iters * G,
          "Inspector: a coll_perf entry for every all-reduce of every rank")
else:
    check(len(entries) > 0, "Inspector (one rank) wrote its dump (a one-rank all-reduce may launch no kernel, "
                            "so its coll_perf entries may be absent: counted above)")
sys.exit(fails)
PY
fails=$((fails + $?))
echo "$fails FAILs"
exit $fails
