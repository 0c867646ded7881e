#!/usr/bin/env bash
# What `rankmap profile` costs a job end to end on a GPU node's host, and whether its default can break a
# job: one command, at most ~9 minutes, every log under $OUT (default ./out-profile-cost). From the
# repository root:
#
#     OSU_SRC=.osu-src bash gpu/profile_cost.sh
#
#  0. the Python packages: what python3 has, plus any wheels in ./.whl (installed into a scratch folder:
#     SQLAlchemy is the one a GPU image usually lacks); stops at once, in one line, if one is missing;
#  1. bench/profile_cost.py (OSU osu_latency / osu_mbw_mr / osu_bw built from $OSU_SRC with this MPI's
#     mpicc, else bench/pingpong.c; the 16-rank pairs_every_ms job; a 2-rank MPI_Init/MPI_Finalize job):
#     plain against `rankmap profile` at its defaults, 7 interleaved repetitions, the parts taken apart
#     in the last 3 of them, runs started within BUDGET_S seconds (default 340; none later than BUDGET_S + 80 s after the start) -> profile_cost.txt (the table and
#     the PASS/FAIL lines of the targets), profile_cost.json (every run), runs.log, build.log;
#  2. bench/profile_threads.py: one profile of the 16-rank job with rankmap's threads under cProfile
#     (where its own CPU time goes, the link sampler on) -> threads.txt;
#  3. examples/mpi/neighbors.c (neighbourhood collectives, 4 ranks, Cartesian and distributed graph): plain,
#     with Open MPI's monitoring PML, under `rankmap profile` (default) and `--collectives library`; the
#     exit status of each and the default's per-pair bytes against the program's own neighbour lists
#     -> neighbors.txt.
# env.txt says what the machine is: eight files in all (what the GPU runner brings back). Exit status: the
# number of FAIL lines.
# `DRY=1 bash gpu/profile_cost.sh` runs the same flow small (2 repetitions, 4 ranks, 300 rounds), to
# check the script on a machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID PYTHONUNBUFFERED=1
OUT=${OUT:-$ROOT/out-profile-cost}
DRY=${DRY:-0}
BUDGET_S=${BUDGET_S:-340}
PY=${PYTHON:-python3}
MPIRUN=${MPIRUN:-mpirun}
MPICC=${MPICC:-mpicc}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export RANKMAP_HOME=$WORK/home RANKMAP_CACHE=$WORK/cache RANKMAP_DB="sqlite:///$WORK/rankmap.db"
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

# 0. packages
source "$ROOT/gpu/_pyenv.sh"
rankmap_pyenv sqlalchemy numpy rich pynvml || exit 100
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"; echo "host: $(hostname), $(nproc) CPUs"
  lscpu 2>/dev/null | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)"
  nvidia-smi -L 2>&1 | head -8; $MPIRUN --version 2>&1 | head -1; $PY --version
  $PY -c 'import sqlalchemy, numpy, pynvml; print("sqlalchemy", sqlalchemy.__version__, "numpy", numpy.__version__)'
  echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git status --short 2>/dev/null | wc -l) files changed"
  uptime
} > "$OUT/env.txt" 2>&1
say "machine: $(head -3 "$OUT/env.txt" | tr '\n' ' ')"

OSU=()
[ -n "${OSU_SRC:-}" ] && OSU=(--osu-src "$OSU_SRC")
[ -z "${OSU_SRC:-}" ] && [ -d .osu-src ] && OSU=(--osu-src "$ROOT/.osu-src")
SIZE=(); PAIRS_OPTS=--oversubscribe
[ "$DRY" = 1 ] && SIZE=(--reps 2 --part-reps 1 --ranks 4 --rounds 300) && BUDGET_S=200
# PARTS / WORKLOADS / REPS / PART_REPS / LOOP_ROUNDS: bench/profile_cost.py's --parts, --workloads, --reps, --part-reps, --rounds
[ -n "${PARTS+x}" ] && SIZE+=(--parts "$PARTS")
[ -n "${WORKLOADS:-}" ] && SIZE+=(--workloads "$WORKLOADS")
[ -n "${REPS:-}" ] && SIZE+=(--reps "$REPS")
[ -n "${PART_REPS:-}" ] && SIZE+=(--part-reps "$PART_REPS")
[ -n "${LOOP_ROUNDS:-}" ] && SIZE+=(--rounds "$LOOP_ROUNDS")   # the 16-rank job's rounds (default 6000, ~1 ms each)

# 1. the benchmark
say "1. bench/profile_cost.py ${OSU[*]} ${SIZE[*]} (budget $BUDGET_S s)"
timeout -k 10 $(( BUDGET_S + 120 )) $PY bench/profile_cost.py "${OSU[@]}" "${SIZE[@]}" --mpirun "$MPIRUN" \
  --mpicc "$MPICC" --pairs-opts="$PAIRS_OPTS" --budget-s "$BUDGET_S" --deadline-s $(( BUDGET_S + 80 )) --out "$OUT" > "$WORK/bench.out" 2> "$OUT/bench.err"
say "   exit $?"
tail -25 "$OUT/bench.err" | grep -v "^# rep" | sed 's/^/   | /'

# 2. rankmap's threads under cProfile
RANKS=16; ROUNDS=3000; [ "$DRY" = 1 ] && RANKS=4 && ROUNDS=300
"$MPICC" -O2 -w -o "$WORK/pairs_every_ms" examples/mpi/pairs_every_ms.c &&
  say "2. bench/profile_threads.py: $RANKS ranks x $ROUNDS rounds" &&
  timeout -k 10 120 $PY bench/profile_threads.py --top 30 -- "$MPIRUN" --allow-run-as-root $PAIRS_OPTS -np $RANKS \
    "$WORK/pairs_every_ms" 1024 $ROUNDS 1000 > "$OUT/threads.txt" 2>&1
say "   exit $?: $(grep -m1 '^# rankmap profile' "$OUT/threads.txt" | cut -c1-400)"

# 3. neighbourhood collectives: what breaks and what the default records
say "3. examples/mpi/neighbors.c"
"$MPICC" -O2 -w -o "$WORK/neighbors" examples/mpi/neighbors.c
{
  for topo in cart graph; do
    J=("$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$WORK/neighbors" $topo 1000 7)
    timeout 60 "${J[@]}" > "$WORK/plain.txt" 2>&1; echo "$topo plain: exit $?"
    timeout 60 "${J[@]:0:2}" --mca pml_monitoring_enable 2 "${J[@]:2}" > "$WORK/mon.txt" 2>&1
    echo "$topo monitoring PML: exit $? $(grep -m1 -o 'signal [0-9]* ([A-Za-z ]*)' "$WORK/mon.txt")"
    timeout 90 $PY -m rankmap profile --no-summary --no-progress -- "${J[@]}" > "$WORK/prof.txt" 2>&1
    echo "$topo rankmap profile (default): exit $?"
    $PY -m rankmap export latest > "$WORK/pairs.csv" 2>/dev/null
    $PY - "$WORK/plain.txt" "$WORK/pairs.csv" <<'EOF'
import csv, re, sys
want = {}
for m in re.finditer(r"neighbors: rank (\d+) sends to ([-\d ]+)", open(sys.argv[1]).read()):
    for d in map(int, m.group(2).split()):
        if d >= 0:
            want[(int(m.group(1)), d)] = want.get((int(m.group(1)), d), 0) + 7000
got = {}
for r in csv.DictReader(open(sys.argv[2])):
    if r["operation"].startswith("MPI_Neighbor_"):
        got.setdefault(r["operation"], {})[(int(r["src"]), int(r["dst"]))] = int(r["bytes"])
ok = bool(want) and got == {"MPI_Neighbor_allgather": want, "MPI_Neighbor_alltoall": want}
print(("PASS" if ok else "FAIL") + f" default profile: neighbourhood pairs exact ({len(want)} pairs)")
EOF
    timeout 90 $PY -m rankmap profile --no-summary --no-progress --collectives library -- "${J[@]}" > "$WORK/lib.txt" 2>&1
    echo "$topo rankmap profile --collectives library: exit $? ($(grep -m1 'rankmap: error' "$WORK/lib.txt" | cut -c1-120))"
  done
} > "$OUT/neighbors.txt" 2>&1
sed 's/^/   | /' "$OUT/neighbors.txt"

FAILS=$(cat "$OUT/profile_cost.txt" "$OUT/neighbors.txt" 2>/dev/null | grep -c "^FAIL")
say "done: $FAILS FAIL lines; the table is $OUT/profile_cost.txt"
grep -h -E "^(PASS|FAIL|SKIP)" "$OUT/profile_cost.txt" "$OUT/neighbors.txt" 2>/dev/null
exit "$FAILS"
