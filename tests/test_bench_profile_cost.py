"""bench/profile_cost.py's reading and judging: the OSU programs' and bench/pingpong.c's output read as
printed (output of real runs, Open MPI 4.1.4), each repetition's ratio taken against its own plain
run, and the targets of issue 27 judged from the medians and their intervals."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, load_script

pc = load_script(ROOT / "bench" / "profile_cost.py")

OSU_LATENCY = """
# OSU MPI Latency Test
# Datatype: MPI_CHAR.
# Size         Avg Latency(us)
8                         0.37
"""
OSU_MBW_MR = """# OSU MPI Multiple Bandwidth / Message Rate Test
# [ pairs: 1 ] [ window size: 64 ]
# Datatype: MPI_CHAR.
# Size                    MB/s          Messages/s
8                        55.68          6960425.63
"""
OSU_BW = """
# OSU MPI Bandwidth Test
# Datatype: MPI_CHAR.
# Size        Bandwidth (MB/s)
65536                   138.62
1048576                 631.76
"""
PINGPONG = "pairs lat 8 1.4 0.7\nlat 8 1.3947 0.7664\nrate 8 9608838 9152255\nosu 8 7097611 8901938\n" \
           "lat 1048576 400.0 420.0\n"
PAIRS = "pairs_every_ms: 16 ranks, 1024 bytes to each peer x 6000 rounds in 6.512 s\n"


def figures(w: str, progs, out: str) -> dict[str, float | None]:
    _jobs, figs = pc.workload_jobs(w, progs, 16, 6000)
    return {f.name: f.read(out) for f in figs}


def test_osu_output_is_read_as_printed(tmp_path: Path):
    progs = pc.Programs(osu={n: tmp_path / n for n in ("osu_latency", "osu_mbw_mr", "osu_bw")}, pairs=tmp_path / "p")
    assert figures("lat", progs, OSU_LATENCY) == {"8 B latency": 0.37}
    assert figures("rate", progs, OSU_MBW_MR) == {"8 B message rate": 6.96042563}
    assert figures("bw", progs, OSU_BW) == {"64 KiB bandwidth": 138.62, "1 MiB bandwidth": 631.76}
    assert figures("pairs", progs, PAIRS) == {"loop": 6.512}
    assert figures("lat", progs, "rankmap: error: something\n") == {"8 B latency": None}   # a failed run: no figure
    jobs, _ = pc.workload_jobs("lat", progs, 16, 6000)
    assert jobs[0][:3] == ["-np", "2", str(tmp_path / "osu_latency")] and "8:8" in jobs[0]


def test_pingpong_stands_in_with_its_mpi_column(tmp_path: Path):
    progs = pc.Programs(pingpong=tmp_path / "pingpong")
    assert figures("lat", progs, PINGPONG) == {"8 B latency": 0.7664}
    assert figures("rate", progs, PINGPONG) == {"8 B message rate": 8.901938}
    assert figures("bw", progs, PINGPONG) == {"1 MiB bandwidth": 1048576 / 420.0}


def run(w: str, mode: str, rep: int, wall: float, **figs: float) -> "pc.Run":
    return pc.Run(w, mode, rep, wall, 0, dict(figs))


def test_each_repetition_is_compared_with_its_own_plain_run():
    runs = [run("rate", "plain", 0, 1.0, r=10.0), run("rate", "profile", 0, 2.0, r=9.0),
            run("rate", "plain", 1, 1.0, r=5.0), run("rate", "profile", 1, 2.0, r=4.75),
            run("rate", "profile", 2, 2.0, r=1.0)]                  # no plain run in rep 2: left out
    assert pc._paired(runs, "rate", "profile", lambda r: r.figures.get("r")) == [0.9, 0.95]


def test_targets_are_judged_on_the_medians():
    said: list[str] = []
    s = {("rate", "profile", "8 B message rate x"): (0.91, 0.88, 0.93),
         ("lat", "profile", "8 B latency x"): (1.12, 1.05, 1.2),
         ("bw", "profile", "64 KiB bandwidth x"): (0.96, 0.9, 1.01), ("bw", "plain", "64 KiB bandwidth"): (100, 90, 110),
         ("bw", "profile", "1 MiB bandwidth x"): (0.90, 0.88, 0.92), ("bw", "plain", "1 MiB bandwidth"): (100, 99, 101),
         ("pairs", "profile", "loop x"): (1.02, 1.0, 1.04), ("pairs", "profile", "steady"): (2.5, 2.0, 3.0),
         ("pairs", "profile", "share"): (4.0, 3.0, 5.0),
         ("fixed", "plain", "wall"): (0.4, 0.3, 0.5), ("fixed", "profile", "wall"): (0.8, 0.7, 0.9)}
    a = type("A", (), {"ranks": 16})()
    fails = pc.targets(s, a, said.append)
    verdict = {l.split(":")[0]: l.split()[0] for l in said}
    assert verdict == {
        "PASS 8 B message rate >= 0.90 x plain": "PASS", "FAIL 8 B latency <= +10 %": "FAIL",
        "PASS 64 KiB bandwidth within the run's noise": "PASS",       # its interval holds 1
        "FAIL 1 MiB bandwidth within the run's noise": "FAIL",        # 10 % below, plain's own spread 1 %
        "PASS 16-rank job's loop <= 1.03 x": "PASS",
        "FAIL rankmap's process <= 2 % of a core while a 16-rank job runs (its ingest and link sampler threads)": "FAIL",
        "PASS fixed cost <= 0.5 s wall": "PASS"}
    assert fails == 3
    skipped: list[str] = []
    assert pc.targets({}, a, skipped.append) == 0                   # nothing measured: nothing failed
    assert len(skipped) == 7 and all(l.startswith("SKIP") for l in skipped)


def test_a_part_can_be_the_default_profile_with_an_environment():
    """``profile:NAME=VALUE+...`` is the default profile with that environment (say, the store on
    /dev/shm); without settings it is no part at all."""
    assert pc._known_part("profile:RANKMAP_DB=sqlite:////dev/shm/x.db+RANKMAP_SQLITE_SYNCHRONOUS=FULL")
    assert not pc._known_part("profile:") and not pc._known_part("profile:RANKMAP_DB")
    assert pc._profiled("profile:RANKMAP_DB=x") == "profile" and pc._profiled("nosampler") == "nosampler"
    assert pc._profiled("shim:RANKMAP_FLUSH_MS=100") is None and pc._profiled("plain") is None
    assert pc.shim_knobs("profile:A=1+B=2=3") == ["A=1", "B=2=3"]
