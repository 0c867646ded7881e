#!/usr/bin/env bash
# GPU validation of rankmap's NCCL capture on a node with 2 NVLink-connected GPUs.
# Run from the repository root:   bash gpu/nccl.sh        (results under $OUT, default ./out-nccl)
#
#  1. builds the NCCL profiler plugin with `cc` (PYTHONPATH=src, fresh cache);
#  2. runs `torchrun --nproc_per_node=2 examples/torch/ddp_step.py` with the plugin
#     (NCCL_PROFILER_PLUGIN, RANKMAP_RUN_DIR), NVML NVLink DATA_TX/RX counters of every GPU read
#     just before and just after;
#  3. checks the records: every rank's file complete, the explicit operations with exactly the
#     expected bytes and calls, send/recv pair bytes exact, DDP's gradient all-reduce bytes exact,
#     the ingested pair rows (rankmap.pairs.nccl_model) the same seen from both ends, and the bytes the model puts
#     on the GPU0<->GPU1 link (with protocol overhead) within 2 % of the NVML counter deltas;
#  4. all-reduce 8 B .. 1 GiB without and with the plugin, two torchrun jobs each, alternating
#     (BENCH_ROUNDS, BENCH_TRIALS, BENCH_MAX_BYTES change that; BENCH_ONLY=1 skips step 2);
#     a table of the medians and the overhead targets (<= 1 % at >= 1 MiB, <= 2 us below).
#     BENCH_MODES (default "without with") adds plugin modes, each a column of its own:
#     none | coll | p2p | all = the plugin loaded with RANKMAP_NCCL_EVENTS=<mode> ("none": NCCL is
#     asked for no event, so the column is the cost of NCCL's profiler machinery alone); the
#     PASS/FAIL targets stay "with" (= all) against "without", which always run; with extra
#     modes the job order rotates every round;
#  5. writes nccl.txt (checks) and bench.txt (benchmark) under $OUT.
# Every check prints one PASS or FAIL line; the exit status is the number of FAILs (capped).
# `bash gpu/nccl.sh --write-helpers DIR` only writes the Python helpers to DIR (for testing).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# NVLink SHARP / multicast stay off on these machines, for every job of this script
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID           # CUDA device i == NVML device i
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
OUT=${OUT:-$ROOT/out-nccl}

write_helpers() {   # the Python parts, as files in $1
  mkdir -p "$1"
  cat > "$1/nvml_read.py" <<'EOF'
"""Write {gpu index: [nvlink data tx bytes, rx bytes]} (all links, one query per GPU) to argv[1]."""
import json, sys
import pynvml as N
ALL = 0xFFFFFFFF
def val(v):
    if v.nvmlReturn != 0:
        return None
    return int(v.value.ullVal) * 1024          # the counters count KiB
N.nvmlInit()
out = {}
for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    tx, rx = N.nvmlDeviceGetFieldValues(h, [(N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL),
                                            (N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL)])
    out[i] = [val(tx), val(rx)]
N.nvmlShutdown()
json.dump(out, open(sys.argv[1], "w"))
EOF
  cat > "$1/check_ddp.py" <<'EOF'
"""Check the NCCL profile of examples/torch/ddp_step.py.  argv: run_dir expect.json nvml_before.json
nvml_after.json nccl_log.  Prints PASS/FAIL lines; exit status = number of FAILs."""
import json, sys
import numpy as np
from rankmap.pairs import nccl_model
from rankmap.formats import record as records

run_dir, expect_p, before_p, after_p, log_p = sys.argv[1:6]
fails = 0
def stopped(kind, e, tb):     # an exception is a FAIL line too, never a silent stop
    import traceback
    traceback.print_exception(kind, e, tb)
    print(f"FAIL checker stopped: {e!r}", flush=True)
    sys.exit(min(fails + 1, 100))
sys.excepthook = stopped
def check(ok, what):
    global fails
    fails += 0 if ok else 1
    print(("PASS " if ok else "FAIL ") + what, flush=True)

exp = json.load(open(expect_p))
n = exp["world_size"]
recs = records.read_dir(run_dir, source="nccl")
check([r.world_rank for r in recs] == list(range(n)), f"one NCCL record file per rank ({[r.world_rank for r in recs]}, expected 0..{n - 1})")
for r in recs:
    check(r.finalized and not r.problems, f"rank {r.world_rank}: record complete, {r.flushes} flushes, "
          f"{r.elapsed_ns / 1e9:.1f} s, problems: {r.problems or 'none'}")
from pathlib import Path
prof = nccl_model.load(run_dir, extra_logs=[Path(log_p)])     # NCCL's rings from the job's INFO output
print(f"global ranks {prof.ranks} from {prof.ranks_from}")
print("communicators:")
for h, c in prof.comms.items():
    print(f"  {h:016x} name={c.name or '-'} nranks={c.nranks} files={c.files} graph={'yes' if c.graph else 'no'}"
          f" rows={ {k: len(v) for k, v in c.rows.items()} }")
check(all(c.resolved for c in prof.comms.values()), "every communicator's ranks joined to record files")
ingested = nccl_model.ingest_records(prof)

# ---- exact bytes per operation ----
summ = nccl_model.op_summary(prof)
print("operations per rank (function, bytes per call: calls):")
for w in sorted(summ):
    print(f"  rank {w}: " + ", ".join(f"{f} {b}: {c}" for (f, b), c in sorted(summ[w].items())))
for w in range(n):
    for e in exp["explicit"]:
        got = summ.get(w, {}).get((e["func"], e["bytes"]), 0)
        if e["func"] in ("Send", "Recv") and (w ^ 1) >= n:
            continue
        check(got == e["calls"], f"rank {w}: nccl{e['func']} {e['bytes']} bytes x {e['calls']} calls recorded (got {got})")
ar_explicit = {e["bytes"] for e in exp["explicit"] if e["func"] == "AllReduce"}
for w in range(n):
    ddp = sum(b * c for (f, b), c in summ.get(w, {}).items() if f == "AllReduce" and b not in ar_explicit)
    check(ddp == exp["ddp_allreduce_bytes_per_rank"], f"rank {w}: DDP gradient AllReduce payload {ddp} bytes "
          f"(expected {exp['steps']} steps x {exp['param_bytes']} = {exp['ddp_allreduce_bytes_per_rank']})")
p2p = next((e for e in exp["explicit"] if e["func"] == "Send"), None)
sendm = records.traffic_matrix(ingested, klass="nccl", operation="ncclSend")
recvm = records.received_matrix(ingested, klass="nccl", operation="ncclSend")
for w in range(n):
    if p2p and (w ^ 1) < n:
        want = p2p["bytes"] * p2p["calls"]
        check(sendm[w, w ^ 1] == want and recvm[w, w ^ 1] == want,
              f"send/recv {w}->{w ^ 1}: sender says {sendm[w, w ^ 1]}, receiver says {recvm[w, w ^ 1]}, expected {want}")

# ---- the ingested pair rows: the sender's and the receiver's views agree ----
cm = records.traffic_matrix(ingested, klass="nccl")
check(np.array_equal(cm, records.received_matrix(ingested, klass="nccl")),
      "pair rows: sender's and receiver's views agree")
print("NCCL traffic matrix T[src][dst], bytes (ingest):")
print("\n".join("  " + " ".join(f"{v:>14d}" for v in row) for row in cm))

# ---- link bytes: the model (NCCL's rings when its log had them) vs NVML ----
log = open(log_p, errors="replace").read()
loaded = [l.split("NCCL INFO", 1)[1].strip() for l in log.splitlines() if "PROFILER/Plugin: Loaded" in l]
check(bool(loaded), f"NCCL loaded the plugin: {loaded[0] if loaded else 'no PROFILER/Plugin line in the log'}")
wire, used = nccl_model.pair_matrix(prof, wire=True)
payload, _ = nccl_model.pair_matrix(prof, wire=False)
print(f"ring order used per communicator: { {f'{h:016x}': u for h, u in used.items()} }")
before, after = json.load(open(before_p)), json.load(open(after_p))
if n != 2:
    print("NVML comparison skipped: it is written for 2 ranks on GPUs 0 and 1")
    sys.exit(min(fails, 100))
def delta(g, k):
    b, a = before.get(str(g)), after.get(str(g))
    return None if not b or not a or b[k] is None or a[k] is None else a[k] - b[k]
tx0, rx0, tx1, rx1 = delta(0, 0), delta(0, 1), delta(1, 0), delta(1, 1)
print(f"NVML NVLink data deltas: GPU0 tx {tx0} rx {rx0}; GPU1 tx {tx1} rx {rx1}")
for what, nv, model, pay in (("GPU0->GPU1 (GPU0 TX)", tx0, wire[0, 1], payload[0, 1]),
                             ("GPU0->GPU1 (GPU1 RX)", rx1, wire[0, 1], payload[0, 1]),
                             ("GPU1->GPU0 (GPU1 TX)", tx1, wire[1, 0], payload[1, 0]),
                             ("GPU1->GPU0 (GPU0 RX)", rx0, wire[1, 0], payload[1, 0])):
    if nv is None:
        check(False, f"{what}: NVML counter not available")
        continue
    err = abs(nv - model) / model if model else float("inf")
    check(err <= 0.02, f"{what}: profile {model:.0f} bytes on the link (payload {pay:.0f}), NVML {nv}, "
          f"difference {100 * err:.3f} % (payload only: {100 * abs(nv - pay) / max(pay, 1):.3f} %)")
sys.exit(min(fails, 100))
EOF
  cat > "$1/bench_table.py" <<'EOF'
"""Median table of bench/nccl_allreduce.py runs.  argv: out.txt without1.json,without2.json with1.json,with2.json
[rundir_of_with_run ...] [--mode NAME=a.json,b.json ...] (more plugin modes, a column each).
Prints PASS/FAIL lines for the targets (with vs without); exit status = number of FAILs."""
import json, statistics, sys
from rankmap.formats import record as records
argv, extra = [], []
it = iter(sys.argv[1:])
for a in it:
    if a == "--mode":
        name, _, files = next(it, "=").partition("=")
        extra.append((name, files))
    else:
        argv.append(a)
out_p, wo, wi, *run_dirs = argv
load = lambda ps: [json.load(open(p)) for p in ps.split(",") if p]
wo, wi = load(wo), load(wi)
extra = [(name, load(files)) for name, files in extra]
extra = [(name, runs) for name, runs in extra if runs]
lines, fails = [], 0
def stopped(kind, e, tb):
    import traceback
    traceback.print_exception(kind, e, tb)
    print(f"FAIL benchmark table stopped: {e!r}", flush=True)
    sys.exit(min(fails + 1, 100))
sys.excepthook = stopped
def say(s=""):
    lines.append(s); print(s, flush=True)
def check(ok, what):
    global fails
    fails += 0 if ok else 1
    say(("PASS " if ok else "FAIL ") + what)
if not wo or not wi:
    check(False, "benchmark: runs missing (see the torchrun logs)")
    open(out_p, "w").write("\n".join(lines) + "\n"); sys.exit(1)
sizes = sorted(set.intersection(*[set(map(int, r["us_per_op"])) for r in wo + wi + [x for _, rs in extra for x in rs]]))
def med(runs, s):
    return statistics.median(v for r in runs for v in r["us_per_op"][str(s)])
def human(s):
    for u, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if s >= 1 << k:
            return f"{s >> k} {u}"
    return f"{s} B"
jobs = "".join(f", {len(rs)} {name}" for name, rs in extra)
say(f"all_reduce, 2 ranks, float32; median of {sum(len(r['us_per_op'][str(sizes[0])]) for r in wo)} samples "
    f"per cell ({len(wo)} jobs without and {len(wi)} with the plugin{jobs}, alternating)")
xh = "".join(f" {name + ' (us)':>12} | {name + ' added':>12} |" for name, _ in extra)
say(f"| {'size':>8} | {'without (us)':>12} | {'with (us)':>10} | {'added (us)':>10} | {'added %':>8} |{xh} {'busbw GB/s':>10} |")
say("|---:|---:|---:|---:|---:|" + "---:|---:|" * len(extra) + "---:|")
worst_small, worst_big = -1e9, -1e9
small = {name: [] for name in ["with"] + [n for n, _ in extra]}
for s in sizes:
    a, b = med(wo, s), med(wi, s)
    d, pct = b - a, 100.0 * (b - a) / a
    busbw = s / (a * 1e-6) / 1e9     # 2 ranks: bus bandwidth = algorithm bandwidth
    xc = ""
    for name, runs in extra:
        x = med(runs, s)
        xc += f" {x:12.2f} | {x - a:12.2f} |"
        if s < 1 << 20:
            small[name].append(x - a)
    say(f"| {human(s):>8} | {a:12.2f} | {b:10.2f} | {d:10.2f} | {pct:8.2f} |{xc} {busbw:10.1f} |")
    if s >= 1 << 20:
        worst_big = max(worst_big, pct)
    else:
        worst_small = max(worst_small, d)
        small["with"].append(d)
say()
if extra and small["with"]:
    say("median added time below 1 MiB (us per operation, vs without): " +
        ", ".join(f"{name} {statistics.median(v):.2f}" for name, v in small.items() if v))
check(worst_small <= 2.0, f"added time below 1 MiB: worst {worst_small:.2f} us per operation (target <= 2 us)")
check(worst_big <= 1.0, f"added time at >= 1 MiB: worst {worst_big:.2f} % (target <= 1 %)")
for d, r in zip(run_dirs, wi):
    try:
        rec = records.read_dir(d, source="nccl")
        calls = {x.world_rank: x.op_time.get("ncclAllReduce", (0, 0))[0] for x in rec}
        check(calls and all(c == r["calls"] for c in calls.values()),
              f"plugin recorded every all_reduce of the run in {d}: {calls} (issued {r['calls']} per rank)")
    except Exception as e:  # noqa: BLE001 - report, do not stop
        check(False, f"records of {d}: {e}")
open(out_p, "w").write("\n".join(lines) + "\n")
sys.exit(min(fails, 100))
EOF
}

if [ "${1:-}" = "--write-helpers" ]; then write_helpers "${2:?directory}"; exit 0; fi

main() {
FAILS=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
T0=$(date +%s)
echo "== rankmap NCCL capture validation, $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv,noheader 2>&1 | sed 's/^/   /'
$PY - <<'EOF' 2>&1 | sed 's/^/   /'
import torch, torch.cuda.nccl as n
v = n.version()
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, v)) if isinstance(v, tuple) else v)
EOF

# ---- 1. build ----
export RANKMAP_CACHE="$WORK/cache"
if PLUGIN=$($PY -c 'from rankmap.capture.nccl_build import build_plugin; print(build_plugin("cc"))' 2>"$WORK/build.err"); then
  pass "plugin built with cc: $PLUGIN"
else
  fail "plugin build: $(head -1 "$WORK/build.err")"
  echo "== $FAILS FAIL"; return 1
fi
cc -std=gnu11 -O2 -o "$WORK/harness" tests/nccl_harness/harness.c -ldl \
  && (RANK=0 WORLD_SIZE=1 RANKMAP_RUN_DIR="$WORK/hb" "$WORK/harness" "$PLUGIN" 5 bench 200000 | grep ns_per_op \
      | sed 's/^ns_per_op /   plugin cost per operation (every event NCCL 2.28 issues; harness, no GPU): /; s/$/ ns/')

TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc_per_node=2)

# ---- 2. the DDP example, profiled, between two NVML readings (skipped with BENCH_ONLY=1) ----
if [ -z "${BENCH_ONLY:-}" ]; then
RUN="$OUT/run-ddp"
rm -rf "$RUN"
$PY "$WORK/nvml_read.py" "$WORK/nvml_before.json" || { echo '{}' > "$WORK/nvml_before.json"; fail "NVML read (before)"; }
NCCL_PROFILER_PLUGIN="$PLUGIN" RANKMAP_RUN_DIR="$RUN" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV \
  timeout 100 "${TORCHRUN[@]}" examples/torch/ddp_step.py --expect "$WORK/expect.json" > "$OUT/ddp.log" 2>&1
rc=$?
$PY "$WORK/nvml_read.py" "$WORK/nvml_after.json" || { echo '{}' > "$WORK/nvml_after.json"; fail "NVML read (after)"; }
if [ $rc = 0 ]; then pass "torchrun ddp_step.py with the plugin (exit 0)"; else fail "torchrun ddp_step.py exit $rc (tail of ddp.log below)"; tail -25 "$OUT/ddp.log"; fi
grep -m1 -o "NCCL version .*" "$OUT/ddp.log" | sed 's/^/   /'
grep -v "NCCL INFO" "$OUT/ddp.log" | grep -E "^ +|ddp_step|rankmap" | head -20 | sed 's/^/   /'
if [ -s "$WORK/expect.json" ]; then
  cp "$WORK/expect.json" "$WORK/nvml_before.json" "$WORK/nvml_after.json" "$OUT/" 2>/dev/null
  $PY "$WORK/check_ddp.py" "$RUN" "$WORK/expect.json" "$WORK/nvml_before.json" "$WORK/nvml_after.json" "$OUT/ddp.log"
  FAILS=$((FAILS + $?))
else
  fail "no expectations written by ddp_step.py: nothing to check"
fi
echo "   ($(( $(date +%s) - T0 )) s so far)"
fi

# ---- 3. all-reduce benchmark, without / with the plugin, alternating ----
ROUNDS=${BENCH_ROUNDS:-2}
BARGS=(--trials "${BENCH_TRIALS:-5}" --max-bytes "${BENCH_MAX_BYTES:-1073741824}")
# modes: without and with always; then the extra plugin modes of BENCH_MODES, each once
MODES=(without with)
for m in ${BENCH_MODES:-without with}; do
  case "$m" in
    without|with) ;;
    all|none|coll|p2p) [[ " ${MODES[*]} " == *" $m "* ]] || MODES+=("$m") ;;
    *) fail "BENCH_MODES: unknown mode '$m' (without with all none coll p2p)" ;;
  esac
done
echo "== all-reduce 8 B .. ${BENCH_MAX_BYTES:-1073741824} B, modes: ${MODES[*]} ($ROUNDS jobs each, alternating)"
WO=() ; WI=() ; DIRS=() ; declare -A XJ=()
for round in $(seq 1 "$ROUNDS"); do
  # with extra modes, rotate the order every round so that no mode always runs right after the
  # same one (just "without with": today's strict alternation, without first)
  k=0; [ ${#MODES[@]} -gt 2 ] && k=$(( (round - 1) % ${#MODES[@]} ))
  for mode in "${MODES[@]:$k}" "${MODES[@]:0:$k}"; do
    j="$WORK/bench-$mode-$round.json"
    case $mode in
      without)
        env -u NCCL_PROFILER_PLUGIN -u RANKMAP_RUN_DIR -u RANKMAP_NCCL_EVENTS timeout 60 "${TORCHRUN[@]}" \
          bench/nccl_allreduce.py --out "$j" "${BARGS[@]}" > "$OUT/bench-$mode-$round.log" 2>&1 ;;
      with)
        d="$OUT/run-bench-$round"; rm -rf "$d"
        env -u RANKMAP_NCCL_EVENTS NCCL_PROFILER_PLUGIN="$PLUGIN" RANKMAP_RUN_DIR="$d" timeout 60 "${TORCHRUN[@]}" \
          bench/nccl_allreduce.py --out "$j" "${BARGS[@]}" > "$OUT/bench-$mode-$round.log" 2>&1 ;;
      *)
        xd="$OUT/run-bench-$mode-$round"; rm -rf "$xd"
        RANKMAP_NCCL_EVENTS="$mode" NCCL_PROFILER_PLUGIN="$PLUGIN" RANKMAP_RUN_DIR="$xd" timeout 60 "${TORCHRUN[@]}" \
          bench/nccl_allreduce.py --out "$j" "${BARGS[@]}" > "$OUT/bench-$mode-$round.log" 2>&1 ;;
    esac
    rc=$?
    if [ $rc = 0 ] && [ -s "$j" ]; then
      echo "   $mode #$round done ($(( $(date +%s) - T0 )) s)"
      case $mode in
        with) WI+=("$j"); DIRS+=("$d") ;;
        without) WO+=("$j") ;;
        *) XJ[$mode]="${XJ[$mode]:-}${XJ[$mode]:+,}$j" ;;
      esac
    else
      fail "benchmark job $mode #$round exit $rc (see bench-$mode-$round.log)"; tail -5 "$OUT/bench-$mode-$round.log"
    fi
  done
done
XARGS=()
for mode in "${MODES[@]:2}"; do [ -n "${XJ[$mode]:-}" ] && XARGS+=(--mode "$mode=${XJ[$mode]}"); done
( IFS=,; $PY "$WORK/bench_table.py" "$OUT/bench.txt" "${WO[*]:-}" "${WI[*]:-}" ${DIRS[@]+"${DIRS[@]}"} ${XARGS[@]+"${XARGS[@]}"} )
FAILS=$((FAILS + $?))
{ echo; echo "machine: $(hostname), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x2"; } >> "$OUT/bench.txt"

echo "== done in $(( $(date +%s) - T0 )) s: $FAILS FAIL"
return $(( FAILS > 100 ? 100 : FAILS ))
}

mkdir -p "$OUT"
WORK=$(mktemp -d)
write_helpers "$WORK"
main 2>&1 | tee "$OUT/nccl.txt"
rc=${PIPESTATUS[0]}
rm -rf "$WORK"
exit "$rc"
