"""rankmap as a user installs it: a wheel in a fresh virtual environment, run away from the checkout."""

from __future__ import annotations

import csv
import io
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.mpi


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_profiles_a_real_mpi_job(tmp_path):
    """The wheel carries the C sources: installed into a fresh venv and run from a directory that is
    not the checkout, it builds the MPI shim on first use (saying so) and records a real job exactly."""
    if not shutil.which("mpicc.openmpi"):
        pytest.skip("Open MPI (mpicc.openmpi) is not installed")
    # Every child runs as a user's shell would, away from the checkout and with no PYTHONPATH: a
    # developer's PYTHONPATH=src (relative, so it means the checkout from its root) would show pip the
    # checkout's own rankmap.egg-info, left there by the wheel's build, and pip would skip installing
    # a wheel of the version it believes is installed already.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANKMAP_", "PYTHON", "VIRTUAL_ENV"))}
    away = tmp_path / "elsewhere"
    away.mkdir()
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True, timeout=600, cwd=away, env=env)
    (wheel,) = wheels.glob("rankmap-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300, cwd=away, env=env)
    py = venv / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True,
                       timeout=900, cwd=away, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (venv / "bin" / "rankmap").is_file(), f"pip installed no rankmap into the venv: {p.stdout + p.stderr}"

    prog = away / "pairs_every_ms"
    subprocess.run(["mpicc.openmpi", "-O2", "-o", str(prog), str(ROOT / "examples" / "mpi" / "pairs_every_ms.c")],
                   check=True)
    env.update(RANKMAP_HOME=str(away / "home"), RANKMAP_CACHE=str(away / "cache"))

    def rankmap(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin" / "rankmap"), *args], capture_output=True, text=True, cwd=away,
                              env=env, timeout=600)

    where = subprocess.run([str(py), "-c", "import rankmap.native_sources as n, rankmap; "
                            "print(rankmap.__file__); print(n.native_dir())"],
                           capture_output=True, text=True, cwd=away, env=env, check=True).stdout.split()
    site = str(venv / "lib")
    assert where[0].startswith(site) and where[1].startswith(site), where      # not the checkout's
    n, nbytes, rounds = 4, 1000, 40
    p = rankmap("profile", "--no-summary", "--", "mpirun.openmpi", "--allow-run-as-root", "--oversubscribe",
                "-np", str(n), str(prog), str(nbytes), str(rounds), "0")
    assert p.returncode == 0, p.stderr
    assert "rankmap: building the MPI shim with" in p.stderr and "first use" in p.stderr
    m = [[0] * n for _ in range(n)]
    for r in csv.DictReader(io.StringIO(rankmap("export", "latest").stdout)):
        m[int(r["src"])][int(r["dst"])] += int(r["bytes"])
    assert m == [[0 if i == j else nbytes * rounds for j in range(n)] for i in range(n)]
    doctor = rankmap("doctor").stdout
    assert re.search(rf"native sources\s+{re.escape(where[1])}", doctor) and re.search(r"MPI shim\s+built for", doctor), doctor
    again = rankmap("profile", "--no-summary", "--", "mpirun.openmpi", "--allow-run-as-root", "--oversubscribe",
                    "-np", "2", str(prog), "10", "5", "0")
    assert again.returncode == 0 and "building" not in again.stderr, again.stderr    # cached now
    assert Path(where[1], "common", "rmrec_layout.h").is_file()
    # the native GPM reader's source ships too, and builds from the wheel into the user's cache
    gpm = subprocess.run([str(py), "-c", "from rankmap.counters import gpm_native as g; print(g.build()); "
                          "print(g.layout()['metric_size'])"], capture_output=True, text=True, cwd=away, env=env)
    assert gpm.returncode == 0, gpm.stderr
    lib, size = gpm.stdout.split()
    assert lib.startswith(str(away / "cache" / "monitor")) and size == "40", gpm.stdout


def test_wheel_carries_every_native_source_and_static_file(tmp_path):
    """Every file of native/ (the .cu of `rankmap bench p2p` too) and of the dashboard's static folder
    is in the wheel, where the package looks for it: a source left out fails only on a user's machine."""
    import zipfile

    # built from a copy of the checkout's files, as a fresh clone would be: the checkout's own
    # build/ and rankmap.egg-info/ (left by earlier builds) list files that setup.py alone would miss
    tree = tmp_path / "tree"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for f in files:
        if (ROOT / f).is_file():
            (tree / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, tree / f)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANKMAP_", "PYTHON", "VIRTUAL_ENV"))}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(tree)],
                   check=True, capture_output=True, timeout=600, cwd=tmp_path, env=env)
    (wheel,) = tmp_path.glob("rankmap-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"rankmap/native/{p.relative_to(ROOT / 'native')}" for p in (ROOT / "native").rglob("*") if p.is_file()}
    static = ROOT / "src" / "rankmap" / "web" / "static"
    want |= {f"rankmap/web/static/{p.relative_to(static)}" for p in static.rglob("*") if p.is_file()}
    assert any(n.endswith(".cu") for n in want) and "rankmap/web/static/common.js" in want
    assert sorted(want - names) == []
