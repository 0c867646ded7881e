"""The checks of gpu/kineto_record.sh, one PASS/FAIL/SKIP line each (exit status: the FAIL lines).

    kineto_check.py RUN_DIR DB
    rankmap export JOB --format json | kineto_check.py --ops     (writes profile-ops.json's content)

RUN_DIR holds one run's traces (rank<r>.pt.trace.json), the worker's expected-rank<r>.json and, for
a run rankmap profiled, profile.csv and profile-ops.json (that job's pairs and per-operation calls
and payload). DB is the store the traces were imported into (its latest job). Checks: the import's
p2p pairs equal profile.csv exactly and its collective pairs within 1 % per pair (per-pair L1 over
the profile's total); its calls and payload per NCCL operation equal the profile's; its p2p pairs
equal the bytes the program says it sent (expected-rank*.json).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

P2P = {"ncclSend", "ncclRecv"}


def rankmap(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "rankmap", *args], capture_output=True, text=True, check=True).stdout


def pairs(text: str) -> dict[tuple[int, int, str], int]:
    out: dict[tuple[int, int, str], int] = {}
    for r in csv.DictReader(io.StringIO(text)):
        k = (int(r["src"]), int(r["dst"]), r["operation"])
        out[k] = out.get(k, 0) + int(r["bytes"])
    return out


def ops(doc: dict) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for r in doc.get("op_stats", []):
        if r.get("source") == "nccl":
            c, p = out.get(r["operation"], (0, 0))
            out[r["operation"]] = (c + int(r["calls"]), p + int(r.get("payload") or 0))
    return out


def main(argv: list[str]) -> int:
    if argv == ["--ops"]:
        json.dump(ops(json.load(sys.stdin)), sys.stdout, indent=1)
        return 0
    run, db = Path(argv[0]), argv[1]
    fails = 0

    def say(ok: bool | None, what: str) -> None:
        nonlocal fails
        print(("SKIP" if ok is None else "PASS" if ok else "FAIL"), what)
        fails += ok is False

    got = pairs(rankmap("export", "latest", "--db", db))
    doc = json.loads(rankmap("export", "latest", "--format", "json", "--db", db))
    print(f"  import: {len(got)} pair rows, {sum(got.values())} bytes; notes: {doc['job']['meta'].get('notes')}")
    if (run / "profile.csv").is_file():
        prof = pairs((run / "profile.csv").read_text())
        p2p_a = {k: v for k, v in prof.items() if k[2] in P2P}
        p2p_b = {k: v for k, v in got.items() if k[2] in P2P}
        say(p2p_a == p2p_b, f"{run.name}: p2p pairs equal rankmap profile's ({sum(p2p_a.values())} bytes)")
        ca = {k: v for k, v in prof.items() if k[2] not in P2P}
        cb = {k: v for k, v in got.items() if k[2] not in P2P}
        dist = sum(abs(ca.get(k, 0) - cb.get(k, 0)) for k in set(ca) | set(cb)) / max(sum(ca.values()), 1)
        say(dist <= 0.01, f"{run.name}: collective pairs within 1 % of rankmap profile's (L1 {dist:.4f}, "
                          f"{sum(ca.values())} bytes profiled, {sum(cb.values())} imported)")
        want = json.loads((run / "profile-ops.json").read_text())
        have = ops(doc)
        say({k: tuple(v) for k, v in want.items()} == have,
            f"{run.name}: calls and payload per NCCL operation equal the profile's: {want} vs {have}")
    expected = sorted(run.glob("expected-rank*.json"))
    sent = {}
    for f in expected:
        e = json.loads(f.read_text())
        for dst, b in e["p2p_bytes_to"].items():
            sent[(e["rank"], int(dst))] = b
    mine = {}
    for (s, d, op), b in got.items():
        if op in P2P:
            mine[(s, d)] = mine.get((s, d), 0) + b
    if expected:
        say(mine == sent if sent or mine else None, f"{run.name}: p2p pairs equal the program's own sends {sent}")
    return fails


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
