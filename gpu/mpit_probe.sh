#!/usr/bin/env bash
# What the MPI shim adds to MPI_Init on this machine, and where: a 2-rank job timing its own MPI_Init
# and MPI_Finalize, plain and with the shim preloaded (3 each, interleaved), then one rank under strace
# with the shim: the MCA components opened after the shim's record file (Open MPI's MPI_T_init_thread
# opens every framework MPI_Init left closed) and every pause over 20 ms. Logs under $OUT. From the
# repository root (SHIM: a shim to probe; default: the one `rankmap profile -- mpirun` injects, built
# into a scratch cache):
#     bash gpu/mpit_probe.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out-mpit-probe}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/t.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int c, char **v) {
  double a = now(); MPI_Init(&c, &v); double b = now(); int r; MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Barrier(MPI_COMM_WORLD); double d = now(); MPI_Finalize(); double e = now();
  if (!r) printf("MPI_Init %.3f s, MPI_Finalize %.3f s\n", b - a, e - d);
  return 0;
}
C
mpicc -O1 -o "$WORK/t" "$WORK/t.c" || exit 1
if [ -z "${SHIM:-}" ]; then
  SHIM=$(RANKMAP_CACHE="$WORK/cache" PYTHONPATH="$PWD/src" python3 -c 'from rankmap.capture import launchers as L
from rankmap.capture.shim_build import build_shim
print(build_shim(L.find_mpicc(L.recognise(["mpirun", "true"]))))' 2> "$OUT/shim_build.txt" | tail -1)
fi
[ -f "$SHIM" ] || { echo "no shim ($SHIM): see shim_build.txt"; exit 1; }
R=(mpirun --allow-run-as-root -np 2)
{
  for i in 1 2 3; do
    echo "plain: $("${R[@]}" "$WORK/t" 2>&1 | tail -1)"
    echo "shim:  $("${R[@]}" -x LD_PRELOAD="$SHIM" -x RANKMAP_RUN_DIR="$WORK/rd$i" "$WORK/t" 2>&1 | tail -1)"
  done
} > "$OUT/mpi_init.txt"
cat "$OUT/mpi_init.txt"
command -v strace > /dev/null || { echo "no strace here"; exit 0; }
cat > "$WORK/w.sh" <<SH
#!/bin/sh
[ "\$OMPI_COMM_WORLD_RANK" = 0 ] && exec strace -tt -o "$WORK/st" "\$@"
exec "\$@"
SH
chmod +x "$WORK/w.sh"
"${R[@]}" -x LD_PRELOAD="$SHIM" -x RANKMAP_RUN_DIR="$WORK/rds" "$WORK/w.sh" "$WORK/t" > /dev/null 2>&1
python3 - "$WORK/st" <<'PY' | tee "$OUT/mpit_strace.txt"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
def t(l):
    h, m, s = l.split()[0].split(":"); return int(h) * 3600 + int(m) * 60 + float(s)
start = next((i for i, l in enumerate(lines) if "rank-0.mpi.rmrec" in l), 0)
print(f"{len(lines)} syscalls; the shim's record file opened at line {start}, {t(lines[start]) - t(lines[0]):.3f} s "
      f"after exec; exit {t(lines[-1]) - t(lines[0]):.3f} s after exec")
comps = re.findall(r'mca_([a-z0-9_]+)\.so", O_RDONLY', "\n".join(lines[start:]))
print(f"components opened after it ({len(comps)}): {' '.join(comps)}")
libs = sorted(set(re.findall(r'openat\(AT_FDCWD, "[^"]*/(lib[a-z0-9_+-]+)\.so[^"]*", O_RDONLY\|O_CLOEXEC\) = \d', "\n".join(lines[start:]))))
print(f"libraries loaded after it: {' '.join(libs)}")
prev = None
for i, l in enumerate(lines[start:], start):
    if prev is not None and t(l) - t(lines[i - 1]) > 0.02:
        print(f"pause {t(l) - t(lines[i - 1]):.3f} s after: {lines[i - 1][16:140]}")
sleeps = sum(1 for l in lines[start:] if "nanosleep" in l)
print(f"nanosleep calls after it: {sleeps}")
PY
