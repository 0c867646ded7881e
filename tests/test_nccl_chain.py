"""RANKMAP_NCCL_CHAIN: rankmap's NCCL plugin and a second profiler plugin in the same job.

The harness (tests/nccl_harness/harness.c) drives rankmap's plugin as NCCL does, with a second
plugin chained (tests/nccl_harness/counter_plugin.c: it counts every event it gets and checks that
every handle, parent and context it is handed is its own). Chained, rankmap must record exactly what
it records alone, and the second plugin must get exactly what it gets when NCCL loads it alone.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rankmap.formats import record as records
from test_nccl_plugin import N, ROOT, harness, plugin, run_ranks  # noqa: F401  (fixtures)

COUNTER_SRC = ROOT / "tests" / "nccl_harness" / "counter_plugin.c"
COUNTER_ABIS = {"all": (2, 7), "v5": (5, 5)}      # "v5": what NCCL Inspector exports


@pytest.fixture(scope="module")
def counters(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("counter")
    out = {}
    for name, (lo, hi) in COUNTER_ABIS.items():
        out[name] = d / f"libcounter-{name}.so"
        subprocess.run(["cc", "-std=gnu11", "-O1", "-Wall", "-Werror", "-shared", "-fPIC", f"-DMIN_ABI={lo}",
                        f"-DMAX_ABI={hi}", "-o", str(out[name]), str(COUNTER_SRC)], check=True)
    return out


def counts(prefix: Path) -> list[dict[str, int]]:
    """The counter plugin's report of each process, ordered by pid."""
    files = sorted(prefix.parent.glob(prefix.name + ".*"), key=lambda p: int(p.suffix[1:]))
    return [dict((k, int(v)) for k, v in (line.split() for line in f.read_text().splitlines())) for f in files]


def facts(run_dir: Path) -> list[tuple]:
    """What rankmap recorded, without its clock readings: calls, payload, communicators, op tables."""
    out = []
    for rec in records.read_dir(run_dir, source="nccl"):
        tables = {k: [line.split()[:7] + line.split()[10:] for line in v.splitlines()]
                  for k, v in rec.meta.items() if k.startswith("nccl.ops.")}
        comms = {k: v for k, v in rec.meta.items() if k.startswith("nccl.comm.")}
        out.append((rec.world_rank, {op: c for op, (c, _ns) in rec.op_time.items()}, dict(rec.payload),
                    comms, tables, sum(v for *_x, v in rec.timeline), rec.finalized, rec.problems))
    return out


def alone(harness: Path, lib: Path, abi: int, tmp: Path) -> list[dict[str, int]]:
    """The counter plugin loaded by the harness itself (as NCCL alone would), N ranks at once."""
    out = tmp / "alone"
    procs = [subprocess.Popen([str(harness), str(lib), str(abi), "scenario"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(N), COUNTER_OUT=str(out)))
             for r in range(N)]
    for p in procs:
        _so, se = p.communicate(timeout=60)
        assert p.returncode == 0, se
    return counts(out)


@pytest.mark.parametrize("abi,variant,theirs", [(7, "all", 7), (6, "all", 6), (5, "all", 5), (4, "all", 4),
                                                (3, "all", 3), (2, "all", 2), (7, "v5", 5), (6, "v5", 5)])
def test_chained_plugin_gets_every_event_and_rankmap_records_the_same(abi, variant, theirs, plugin, harness,
                                                                      counters, tmp_path) -> None:
    lib = counters[variant]
    solo = tmp_path / "solo"
    for p in run_ranks(harness, plugin, abi, solo):
        assert p.returncode == 0 and p.stderr == "", p.stderr
    chained = tmp_path / "chained"
    out = tmp_path / "count"
    for p in run_ranks(harness, plugin, abi, chained, RANKMAP_NCCL_CHAIN=str(lib), COUNTER_OUT=str(out)):
        assert p.returncode == 0, p.stderr
        assert p.stderr.splitlines() == [f"rankmap: NCCL profiler events also go to {lib} (counter, ABI v{theirs})"]
    assert facts(chained) == facts(solo)          # rankmap records the same, chained or not
    got, want = counts(out), alone(harness, lib, theirs, tmp_path)
    assert len(got) == N and got == want          # the other plugin gets what it gets alone
    for c in got:
        assert c["foreign"] == 0 and c["inits"] == c["finals"] == 2
        assert c["start.2"] > 0 and c["start.4"] > 0 and c["stops"] > 0 and c["records"] > 0


def test_chain_works_with_rankmaps_capture_off(plugin, harness, counters, tmp_path) -> None:
    """Without RANKMAP_RUN_DIR rankmap records nothing, and the other plugin still gets everything."""
    lib, out = counters["all"], tmp_path / "count"
    e = {k: v for k, v in os.environ.items() if k != "RANKMAP_RUN_DIR"}
    p = subprocess.run([str(harness), str(plugin), "7", "scenario"], capture_output=True, text=True, timeout=60,
                       env=dict(e, RANK="0", WORLD_SIZE="1", RANKMAP_NCCL_CHAIN=str(lib), COUNTER_OUT=str(out)))
    assert p.returncode == 0, p.stderr
    assert "capture disabled" in p.stderr
    got = counts(out)
    assert len(got) == 1 and got[0]["foreign"] == 0 and got[0]["start.2"] > 0


def test_chain_that_cannot_be_used_is_one_line(plugin, harness, counters, tmp_path) -> None:
    def run(chain: str, abi: int = 7) -> subprocess.CompletedProcess:
        return subprocess.run([str(harness), str(plugin), str(abi), "scenario"], capture_output=True, text=True,
                              timeout=60, env=dict(os.environ, RANK="0", WORLD_SIZE="1", RANKMAP_NCCL_CHAIN=chain,
                                                   RANKMAP_RUN_DIR=str(tmp_path / chain.replace("/", "_"))))
    for chain, words in ((str(tmp_path / "nope.so"), "cannot load it"),
                         (str(plugin), "names rankmap's own plugin"),
                         (str(counters["v5"]), "exports no profiler table NCCL's ABI v4 can drive")):
        p = run(chain, 4 if "v4" in words else 7)
        assert p.returncode == 0
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and words in lines[0], p.stderr
        rec = records.read_dir(tmp_path / chain.replace("/", "_"), source="nccl")
        assert len(rec) == 1 and rec[0].op_time["ncclAllReduce"][0] == 5     # rankmap records alone (3 + 1 + 1)
