#!/usr/bin/env bash
# Where the rankmap process's CPU goes on a GPU node's host, part by part: one short command, every
# log under $OUT. Each line: wall, user and system seconds of one step run alone (interpreter start,
# each heavy import, NVML's start, topology discovery), then `rankmap profile` of a job that does
# nothing with the CPU time of every thread of the rankmap process (polled from /proc every 20 ms),
# and the same under cProfile (the main thread's own calls). From the repository root:
#     bash gpu/cost_probe.sh           (wheels in ./.whl are installed first, as gpu/profile_cost.sh does)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$ROOT/out-cost-probe}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export RANKMAP_HOME=$WORK/home RANKMAP_CACHE=$WORK/cache RANKMAP_DB="sqlite:///$WORK/rankmap.db"
source "$ROOT/gpu/_pyenv.sh"
rankmap_pyenv sqlalchemy numpy rich pynvml || exit 100
mpicc -O1 -o "$WORK/nop" -x c - <<'C'
#include <mpi.h>
int main(int c, char **v) { MPI_Init(&c, &v); MPI_Finalize(); return 0; }
C
$PY -m rankmap profile --no-summary --no-progress -- mpirun --allow-run-as-root -np 2 "$WORK/nop" > "$OUT/first.txt" 2>&1
echo "first profile (builds the shim): exit $?" >> "$OUT/first.txt"
{
  step() { local name=$1; shift; /usr/bin/time -f "%e %U %S" -o "$WORK/t" "$@" > "$WORK/o" 2>&1;
           printf '%-44s wall %5s s  user %5s s  sys %5s s (with its children)\n' "$name" $(tail -1 "$WORK/t");
           grep -q "^Command exited" "$WORK/t" && sed 's/^/    | /' "$WORK/o" | tail -3; }
  echo "## one step at a time (second run of each: caches warm)"
  for pass in 1 2; do
    [ $pass = 2 ] && echo "--"
    step "python -c pass" $PY -c pass
    step "import numpy" $PY -c "import numpy"
    step "import numpy (OPENBLAS_NUM_THREADS=1)" env OPENBLAS_NUM_THREADS=1 $PY -c "import numpy"
    step "import sqlalchemy" $PY -c "import sqlalchemy"
    step "import rich" $PY -c "import rich.console"
    step "import pynvml" $PY -c "import pynvml"
    step "nvmlInit + nvmlShutdown" $PY -c "import pynvml as N; N.nvmlInit(); N.nvmlShutdown()"
    step "nvmlInit + GPM sample x2" $PY -c "
import pynvml as N, time; N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)
try:
    a = N.nvmlGpmSampleAlloc(); b = N.nvmlGpmSampleAlloc(); N.nvmlGpmSampleGet(h, a); time.sleep(0.05); N.nvmlGpmSampleGet(h, b)
except Exception as e: print(e)
N.nvmlShutdown()"
    step "import rankmap.cli" $PY -c "import rankmap.cli"
    step "import rankmap.pipeline.profile" $PY -c "import rankmap.pipeline.profile"
    step "rankmap topo (live discovery)" $PY -m rankmap topo
    step "mpirun -np 2 nop (plain)" mpirun --allow-run-as-root -np 2 "$WORK/nop"
    step "rankmap profile -- mpirun -np 2 nop" $PY -m rankmap profile --no-summary --no-progress -- mpirun --allow-run-as-root -np 2 "$WORK/nop"
    step "  the same, OPENBLAS_NUM_THREADS=1" env OPENBLAS_NUM_THREADS=1 $PY -m rankmap profile --no-summary --no-progress -- mpirun --allow-run-as-root -np 2 "$WORK/nop"
    step "  the same, --no-link-sampler" $PY -m rankmap profile --no-summary --no-progress --no-link-sampler -- mpirun --allow-run-as-root -np 2 "$WORK/nop"
  done
} > "$OUT/steps.txt" 2>&1
# every thread of the rankmap process: its CPU at the last poll before it ended
$PY - "$WORK/nop" > "$OUT/threads.txt" 2>&1 <<'PYEOF'
import os, subprocess, sys, time
tick = os.sysconf("SC_CLK_TCK")
for env_extra in ({}, {"OPENBLAS_NUM_THREADS": "1"}):
    env = dict(os.environ, **env_extra)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "rankmap", "profile", "--no-summary", "--no-progress", "--", "mpirun",
                          "--allow-run-as-root", "-np", "2", sys.argv[1]], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    seen, first = {}, {}
    while p.poll() is None:
        try:
            for tid in os.listdir(f"/proc/{p.pid}/task"):
                try:
                    f = open(f"/proc/{p.pid}/task/{tid}/stat").read()
                except OSError:
                    continue
                name = f[f.index("(") + 1:f.rindex(")")]
                rest = f[f.rindex(")") + 2:].split()
                seen[tid] = (name, int(rest[11]) / tick, int(rest[12]) / tick)
                first.setdefault(tid, time.perf_counter() - t0)
        except OSError:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    print(f"## rankmap profile of a 2-rank MPI_Init/MPI_Finalize job {env_extra or ''}: wall {wall:.2f} s, "
          f"{len(seen)} threads seen")
    tot = 0.0
    for tid, (name, u, s) in sorted(seen.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        tot += u + s
        print(f"  tid {tid:>8} {name:<16} first seen at {first[tid]:5.2f} s  user {u:5.2f} s  sys {s:5.2f} s")
    print(f"  all threads: {tot:.2f} s of CPU")
PYEOF
# (cli.main, not the entry point: that one ends the process with os._exit, before cProfile could write)
$PY -c "import cProfile, sys; from rankmap import cli
cProfile.run('try:\n    cli.main(sys.argv[2:])\nexcept SystemExit:\n    pass', sys.argv[1])" "$WORK/p.prof" profile --no-summary \
  --no-progress -- mpirun --allow-run-as-root -np 2 "$WORK/nop" > /dev/null 2>&1
$PY -c "import pstats, sys; s = pstats.Stats(sys.argv[1], stream=sys.stdout); s.sort_stats('cumulative').print_stats(45)" "$WORK/p.prof" > "$OUT/cprofile.txt" 2>&1
$PY -X importtime -m rankmap profile --no-summary --no-progress -- mpirun --allow-run-as-root -np 2 "$WORK/nop" 2> "$WORK/imp" > /dev/null
sort -t'|' -k2 -n "$WORK/imp" | tail -30 > "$OUT/importtime.txt"
cat "$OUT/first.txt" "$OUT/steps.txt" "$OUT/threads.txt"
