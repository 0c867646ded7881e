#!/usr/bin/env bash
# Live topology check on a GPU node: what rankmap discovers, next to what nvidia-smi says.
#
# Run from the repository root:   PYTHONPATH=src OUT=/some/dir bash gpu/topo.sh
# Needs python3 with nvidia-ml-py (pynvml); rich only for the table (skipped without it).
# A folder .gpu-deps/ at the repository root (pip install --target .gpu-deps rich) is added
# to PYTHONPATH when present. Only rankmap.topology is imported, not the whole CLI.
# Writes into $OUT:
#   topo.txt                 the `rankmap topo` table
#   topo.json                `rankmap topo --format json`
#   nvsmi.txt                `rankmap topo --format nvsmi`
#   nvidia-smi-topo-m.txt    nvidia-smi topo -m (for comparison)
#   nvidia-smi-nvlink-s.txt  nvidia-smi nvlink -s
#   compare.txt              label by label, rankmap's matrix vs nvidia-smi's; NVLink bundles; unknowns; PASS/FAIL
# Exit status: 0 when discovery worked and every label agrees with nvidia-smi, 1 otherwise.
set -u
OUT=${OUT:-./gpu-topo-out}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-src}
[ -d .gpu-deps ] && export PYTHONPATH="$PYTHONPATH:$PWD/.gpu-deps"
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if ! "$PY" -c 'import pynvml' 2>/dev/null; then
  echo "gpu/topo.sh: $PY cannot import pynvml: install nvidia-ml-py (or set PYTHON=)" >&2
  exit 1
fi
nvidia-smi topo -m   >"$OUT/nvidia-smi-topo-m.txt"   2>&1
nvidia-smi nvlink -s >"$OUT/nvidia-smi-nvlink-s.txt" 2>&1
"$PY" - "$OUT" <<'PYEOF'
import sys
from pathlib import Path

from rankmap.errors import RankmapError
from rankmap.formats import topology_json
from rankmap.topology import LinkKind, nvsmi
from rankmap.topology.discover import discover

out = Path(sys.argv[1])
try:
    live = discover()
except RankmapError as e:
    (out / "compare.txt").write_text(f"FAIL: discovery: {e}\n")
    print(f"FAIL: discovery: {e}")
    sys.exit(1)
(out / "topo.json").write_text(topology_json.dumps(live))
(out / "nvsmi.txt").write_text(nvsmi.format_matrix(live))
try:
    import contextlib
    import io

    from rankmap.commands.topo import print_table

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_table(live)
    (out / "topo.txt").write_text(buf.getvalue())
except ImportError as e:
    (out / "topo.txt").write_text(f"table skipped: {e}\n")

lines = []
say = lines.append


def named(t):
    """Matrix labels keyed by GPUn / NIC name, so NIC order does not matter."""
    names = {f"NIC{i}": n.name for i, n in enumerate(t.nics)}
    return {(names.get(x, x), names.get(y, y)): v for (x, y), v in nvsmi.labels(t).items()}


bad = 0
try:
    ref = nvsmi.parse((out / "nvidia-smi-topo-m.txt").read_text(), source="nvidia-smi-topo-m.txt")
except RankmapError as e:
    ref = None
    bad += 1
    say(f"DIFF cannot read nvidia-smi topo -m: {e}")
if ref is not None:
    a, b = named(live), named(ref)
    say(f"NICs  nvidia-smi: {[n.name for n in ref.nics]}  rankmap: {[(n.name, n.attrs.get('rdma')) for n in live.nics]}")
    for key in sorted(b):
        if key not in a and not (key[0].startswith("GPU") and key[1].startswith("GPU")):
            say(f"skip {key[0]:>6}/{key[1]:<6} nvidia-smi {b[key]:<5} (NIC not found by rankmap)")
            continue
        got = a.get(key)
        bad += got != b[key]
        say(f"{'ok  ' if got == b[key] else 'DIFF'} {key[0]:>6}/{key[1]:<6} nvidia-smi {b[key]:<5} rankmap {got}")
    if len(live.gpus) != len(ref.gpus):
        bad += 1
        say(f"DIFF GPU count: nvidia-smi {len(ref.gpus)}, rankmap {len(live.gpus)}")
for g in live.gpus:
    for _, l in live.links_of(g.id):
        if l.kind == LinkKind.NVLINK:
            say(f"GPU{g.index} -> {l.other(g.id)}: {l.count} NVLinks, {l.bandwidth / l.count:g} GB/s each, "
                f"{l.bandwidth:g} GB/s per direction")
    say(f"GPU{g.index} {g.name} cpus={g.attrs.get('cpus')} numa={g.attrs.get('numa_node')} "
        f"bus={g.attrs.get('pci_bus_id')} local_cpu={getattr(live.local_cpu(g.id), 'id', None)}")
say("unknowns:")
lines += [f"  {u}" for u in live.unknowns]
say("notes:")
lines += [f"  {n}" for n in live.notes]
say("PASS" if bad == 0 else f"FAIL: {bad} differences")
(out / "compare.txt").write_text("\n".join(lines) + "\n")
print((out / "topo.txt").read_text())
print(lines[-1])
sys.exit(0 if bad == 0 else 1)
PYEOF
