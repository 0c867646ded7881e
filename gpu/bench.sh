#!/usr/bin/env bash
# GPU validation of `rankmap bench` on a node with 2 NVLink-connected GPUs, side by side with nvbandwidth
# and nccl-tests run on the same GPUs right after (built beforehand; their paths come in):
#
#     NVBANDWIDTH=/path/to/nvbandwidth NCCL_TESTS_BUILD=/path/to/nccl-tests/build bash gpu/bench.sh
#
# Wall time at most 240 s: the measuring steps share BUDGET seconds (default 190, building rankmap's CUDA
# code for this GPU's arch included), each under `timeout` with a cap of its own; the dashboard check, the
# comparison and the log writing after them have 40 s more between them. NCCL: $NCCL_HOME/lib when set
# (the NCCL nccl-tests was built against), else the one PyTorch's wheel brings (see src/rankmap/linkbench/tools.py).
# Writes $OUT/bench.txt (all it prints) and $OUT/results.json (every raw result, kept under 1 MiB),
# OUT default ./out-bench.
#  1. build the benchmark programs: nvcc for this machine's GPU arch only, the MPI's mpicc, cc;
#  2. rankmap bench p2p (every test), nvbandwidth on the same cases, then the copy-engine tests of both
#     once more (ours, reference, ours, reference);
#  3. rankmap bench mpi -- mpirun -np 2: device buffers staged through host memory vs rankmap's CUDA IPC
#     path, latency / bw / bibw from 8 B to 64 MiB;
#  4. rankmap bench nccl, one process driving both GPUs: every operation once, then all_reduce 1-128 MiB
#     interleaved with nccl-tests all_reduce_perf -g 2 (ours, reference, ours, reference; the reference
#     runs one size per invocation, so that each size is warmed up as ours is), one plain nccl-tests
#     sweep kept for the record, and one sendrecv_perf;
#  5. rankmap bench nccl -- mpirun -np 2: NCCL and MPI collectives on the same GPUs;
#  6. rankmap topo --measured and the dashboard's machine data (gpu/machine_page_check.py), from the stored runs;
#  7. gpu/bench_compare.py: the side-by-side tables, one PASS/FAIL line per check (3 % targets).
# Exit status: the number of FAILs. Missing reference tools are SKIP lines, not failures.
# `bash gpu/bench.sh --dry` runs the same flow without a GPU (stand-in CUDA runtime and NCCL from
# tests/native, small sizes, the GPU-pair step only built) to check the script itself.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=0
[ "${1:-}" = "--dry" ] && DRY=1

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
[ $DRY = 1 ] && [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python   # the dev install
OUT=${OUT:-$ROOT/out-bench}
BUDGET=${BUDGET:-190}
WORK=$(mktemp -d)
mkdir -p "$OUT" "$WORK/res"
export RANKMAP_HOME="$WORK/home" RANKMAP_CACHE="$WORK/cache"
read -r -a MPIRUN <<< "${MPIRUN:-mpirun --allow-run-as-root -np 2}"
T0=$(date +%s)

RM=("$PY" -m rankmap)          # every bench call below also gets --timeout @LIMIT@
MPI_SIZES=8:64M; NCCL_SIZES=8:128M; AR_SIZES=1M:128M; NCCL_MPI_SIZES=1K:64M; MPI_MAX=16M
P2P_ARGS=()
if [ $DRY = 1 ]; then   # no GPU: stand-ins built from the tests, small sizes
  cc -std=gnu11 -O2 -shared -fPIC -o "$WORK/libcudart.so.13" tests/native/fake_cudart.c -lrt &&
    cc -std=gnu11 -O2 -shared -fPIC -o "$WORK/libnccl.so.2" tests/native/fake_nccl.c || exit 1
  export RANKMAP_CUDART="$WORK/libcudart.so.13" RANKMAP_NCCL_LIB="$WORK/libnccl.so.2" FAKE_CUDA_DEVICES=2
  export RANKMAP_CUDA_ARCH=${RANKMAP_CUDA_ARCH:-90}
  MPIRUN+=(--oversubscribe)
  MPI_SIZES=8:64K; NCCL_SIZES=8:64K; AR_SIZES=1K:64K; NCCL_MPI_SIZES=1K:16K; MPI_MAX=16K
fi

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# run NAME CAP cmd...: the command under `timeout` (CAP seconds, less when the budget is nearly spent),
# stdout to $WORK/res/NAME, stderr to $WORK/NAME.err; prints what it did and how long it took. An
# argument @LIMIT@ becomes a few seconds less than the limit: rankmap's own --timeout, which stops the
# benchmark's whole process group (an MPI job included) before `timeout` stops rankmap.
run() {
  local name=$1 cap=$2; shift 2
  local t=$(left)
  [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 8 ]; then echo "SKIP $name: the ${BUDGET} s budget is spent"; return 124; fi
  local args=() a
  for a in "$@"; do [ "$a" = @LIMIT@ ] && args+=("$(( t - 4 ))") || args+=("$a"); done
  local s=$(date +%s)
  timeout -k 5 "$t" "${args[@]}" > "$WORK/res/$name" 2> "$WORK/$name.err"
  local rc=$?
  echo "   $name: exit $rc in $(( $(date +%s) - s )) s (limit $t s; $(( $(date +%s) - T0 )) s so far)"
  if [ $rc != 0 ]; then
    [ $rc = 124 ] && echo "   $name: stopped by its time limit"
    tail -3 "$WORK/$name.err" | sed 's/^/   | /'
  else
    grep -h "^bench " "$WORK/$name.err" | sed 's/^/   /'
  fi
  return $rc
}

main() {
echo "== rankmap bench on $(hostname), $(date -u +%FT%TZ)$([ $DRY = 1 ] && echo ' (dry: no GPU, stand-in CUDA and NCCL)')"
timeout 10 nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/   /'
timeout 10 "${MPIRUN[0]}" --version 2>&1 | head -1 | sed 's/^/   /'

# ---- 1. build (timed: nvcc for this GPU's arch only) ----
s=$(date +%s)
if timeout 120 "$PY" - > "$WORK/build.txt" 2>&1 <<'EOF'
from rankmap.linkbench import build, tools
from rankmap.capture.launchers import find_mpicc, recognise
import os, shlex
launcher = recognise(shlex.split(os.environ.get("MPIRUN") or "mpirun -np 2"))
mpicc = find_mpicc(launcher)
print("archs:", tools.gpu_archs() or "nvcc default", "| nvcc:", tools.find_nvcc(), "| mpicc:", mpicc)
print("cudart:", tools.find_cudart(), "| nccl:", tools.loaded_path(tools.find_nccl() or "none"))
for f in (lambda: build.build_p2p(), lambda: build.build_mpi_bench(mpicc), lambda: build.build_nccl_bench(),
          lambda: build.build_nccl_bench(mpicc=mpicc)):
    print("built", f())
EOF
then
  sed 's/^/   /' "$WORK/build.txt"
  echo "PASS built the benchmark programs in $(( $(date +%s) - s )) s (CUDA code for this GPU's arch only)"
else
  sed 's/^/   /' "$WORK/build.txt" | tail -5
  echo "FAIL building the benchmark programs"
fi
NCCL_LIB=$("$PY" -c 'from rankmap.linkbench import tools; print(tools.loaded_path(tools.find_nccl() or ""))' 2>/dev/null)
NCCL_DIR=$(dirname "${NCCL_LIB:-/nonexistent/x}")

# ---- 2. GPU pairs, and nvbandwidth on the same cases ----
echo "== GPU pairs"
CE=ce_write,ce_read,ce_bidir_write,ce_bidir_read
NVB_ALL=(device_to_device_memcpy_write_ce device_to_device_memcpy_read_ce
         device_to_device_bidirectional_memcpy_write_ce device_to_device_bidirectional_memcpy_read_ce
         device_to_device_memcpy_write_sm device_to_device_memcpy_read_sm host_to_device_memcpy_ce
         device_to_host_memcpy_ce device_to_device_latency_sm)
NVB_CE=("${NVB_ALL[@]:0:4}")
if [ $DRY = 1 ]; then
  run p2p-dry 60 "${RM[@]}" bench p2p --format json --timeout @LIMIT@
  grep -q "no usable CUDA GPU" "$WORK/p2p-dry.err" && echo "PASS bench p2p without a GPU says so in one line: $(cat "$WORK/p2p-dry.err")" \
    || echo "FAIL bench p2p without a GPU: $(tail -1 "$WORK/p2p-dry.err")"
else
  run p2p-1.json 60 "${RM[@]}" bench p2p --format json --timeout @LIMIT@
  if [ -n "${NVBANDWIDTH:-}" ]; then
    run nvbandwidth-1.txt 60 "$NVBANDWIDTH" -t "${NVB_ALL[@]}"
    run p2p-2.json 30 "${RM[@]}" bench p2p --format json --timeout @LIMIT@ --tests "$CE"
    run nvbandwidth-2.txt 30 "$NVBANDWIDTH" -t "${NVB_CE[@]}"
  else
    echo "SKIP nvbandwidth: NVBANDWIDTH is not set (the path of an nvbandwidth binary)"
  fi
fi

# ---- 3. MPI: staged vs CUDA IPC ----
echo "== MPI device buffers: staged vs CUDA IPC"
run mpi.json 50 "${RM[@]}" bench mpi --format json --timeout @LIMIT@ --buffers device-staged,device-ipc --tests latency,bw,bibw \
  --sizes "$MPI_SIZES" --trials 2 --max-iters 30 -- "${MPIRUN[@]}"

# ---- 4. NCCL in one process vs nccl-tests, interleaved ----
echo "== NCCL, one process, both GPUs"
run nccl-1proc-all.json 30 "${RM[@]}" bench nccl --format json --timeout @LIMIT@ --sizes "$NCCL_SIZES" --iters 20 --trials 3
AR=(bench nccl --format json --timeout @LIMIT@ --ops all_reduce --sizes "$AR_SIZES" --iters 20 --warmup 5 --trials 5)
NT_ARGS=(-b "${AR_SIZES%%:*}" -e "${AR_SIZES##*:}" -f 2 -g 2 -n 20 -w 5)
# nccl-tests warms up once, at the start of a sweep, and then times each size from its first call;
# rankmap bench warms up at every size. So the reference runs one size per invocation (its -w 5
# then warms that size), and the plain sweep is kept beside it for the record, not compared.
# per_size NCCL-TESTS-BINARY MIN MAX ARGS...: one invocation per size, outputs concatenated (a
# command line, so that run's timeout can start it)
per_size=(bash -c 'bin=$1 lo=$2 hi=$3; shift 3
  for ((s = lo; s <= hi; s *= 2)); do "$bin" -b "$s" -e "$s" "$@" || exit; done' per_size)
bytes_of() { numfmt --from=iec "$1"; }
for i in 1 2; do
  run "nccl-1proc-$i.json" 25 "${RM[@]}" "${AR[@]}"
  if [ -n "${NCCL_TESTS_BUILD:-}" ]; then
    LD_LIBRARY_PATH="$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run "all_reduce_perf-$i.txt" 40 \
      "${per_size[@]}" "$NCCL_TESTS_BUILD/all_reduce_perf" "$(bytes_of "${AR_SIZES%%:*}")" "$(bytes_of "${AR_SIZES##*:}")" \
      -f 2 -g 2 -n 20 -w 5
  fi
done
if [ -n "${NCCL_TESTS_BUILD:-}" ]; then
  LD_LIBRARY_PATH="$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run nccl-tests-sweep.txt 20 \
    "$NCCL_TESTS_BUILD/all_reduce_perf" "${NT_ARGS[@]}"
  LD_LIBRARY_PATH="$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run sendrecv_perf-1.txt 20 \
    "$NCCL_TESTS_BUILD/sendrecv_perf" "${NT_ARGS[@]}"
else
  echo "SKIP nccl-tests: NCCL_TESTS_BUILD is not set (the build folder of nccl-tests)"
fi

# ---- 5. NCCL and MPI on the same GPUs ----
echo "== NCCL vs MPI, one rank per GPU"
NCCL_MPI_ENV=(); [ $DRY = 1 ] && NCCL_MPI_ENV=(env RANKMAP_NCCL_LIB=none)   # the stand-in NCCL is one-process only
run nccl-mpi.json 40 ${NCCL_MPI_ENV[@]+"${NCCL_MPI_ENV[@]}"} "${RM[@]}" bench nccl --format json --timeout @LIMIT@ --ops all_reduce,all_gather,reduce_scatter,broadcast,sendrecv \
  --sizes "$NCCL_MPI_SIZES" --mpi-max-size "$MPI_MAX" --iters 10 --trials 3 --warmup 2 -- "${MPIRUN[@]}"

# ---- 6. the stored runs: topo --measured and the dashboard ----
echo "== stored results"
if [ $DRY = 0 ]; then
  if run topo-measured.txt 20 "${RM[@]}" topo --measured; then
    grep -A4 "nominal vs measured" "$WORK/res/topo-measured.txt" | sed 's/^/   /'
    grep -q "GPU0->GPU1" "$WORK/res/topo-measured.txt" && echo "PASS topo --measured shows GPU0->GPU1 measured" \
      || echo "FAIL topo --measured shows no measured GPU pair"
  else
    echo "FAIL rankmap topo --measured: $(tail -1 "$WORK/topo-measured.txt.err")"
  fi
fi
timeout 15 "$PY" gpu/machine_page_check.py 2>&1 | sed 's/^/   /;s/^   \(PASS\|FAIL\)/\1/'

# ---- 7. side by side ----
CMP=(); [ $DRY = 1 ] && CMP=(--mpi-max-size 65536 --only mpi --only nccl)
timeout 15 "$PY" gpu/bench_compare.py --work "$WORK/res" ${CMP[@]+"${CMP[@]}"}
fails=$?
[ $fails = 124 ] && echo "FAIL the comparison did not finish in 15 s"
echo "== done in $(( $(date +%s) - T0 )) s (budget $BUDGET s): $fails FAIL in the comparison"
}

main 2>&1 | tee "$OUT/bench.txt"
# every step's FAIL lines count, not only the comparison's
rc=$(grep -c '^FAIL' "$OUT/bench.txt")
echo "== $rc FAIL in all" | tee -a "$OUT/bench.txt"
rc=$(( rc > 100 ? 100 : rc ))
timeout 10 "$PY" - "$WORK/res" "$OUT/results.json" <<'EOF'
import json, os, sys
res, out = sys.argv[1], sys.argv[2]
LIMIT = 1000000                     # the log stays under 1 MiB: the largest results give way first
doc = {}
for name in sorted(os.listdir(res)):
    text = open(os.path.join(res, name), errors="replace").read()
    try:
        doc[name] = json.loads(text) if name.endswith(".json") else text
    except ValueError:
        doc[name] = text
while len(json.dumps(doc)) > LIMIT:
    big = max(doc, key=lambda k: len(json.dumps(doc[k])))
    text = json.dumps(doc[big])
    doc[big] = f"(cut to its last {LIMIT // 4} characters) " + text[-(LIMIT // 4):]
json.dump(doc, open(out, "w"))
EOF
rm -rf "$WORK"
exit "$rc"
