"""`rankmap doctor` reports each component as OK or missing, and exits 0 unless --strict."""

from __future__ import annotations

import shutil

from conftest import rankmap
from rankmap.commands import doctor


def test_doctor_here():
    p = rankmap("doctor")
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert out[-1].endswith("missing") and " OK, " in out[-1]
    by_name = {l[8:].split("  ")[0].strip(): l for l in out[:-1]}
    for name in ("NVML", "NCCL", "CUDA toolkit", "CUDA driver", "PyTorch", "SimGrid", "Scotch", "PostgreSQL"):
        assert name in by_name, (name, out)
        assert by_name[name].startswith(("OK      ", "missing ")), by_name[name]
    if shutil.which("mpicc.openmpi"):
        assert by_name["MPI (Open MPI)"].startswith("OK") and "Open MPI " in by_name["MPI (Open MPI)"]
    if shutil.which("mpicc.mpich"):
        assert "MPICH " in by_name["MPI (MPICH)"]
    if not shutil.which("nvidia-smi"):
        assert by_name["NVML"].startswith("missing") and "--fixture NAME" in by_name["NVML"]


def test_doctor_names_every_native_library(tmp_path, monkeypatch):
    """Each library rankmap compiles on first use is listed, built or not: the MPI shim, the NCCL plugin,
    the CUDA activity library and the GPM reader of the link sampler."""
    cache = tmp_path / "cache"

    def line_of(out: str, hook: str) -> str:
        found = [l for l in out.splitlines() if f" {hook} " in f" {l} "]
        assert found, (hook, out)
        return found[0]

    p = rankmap("doctor", env={"RANKMAP_CACHE": str(cache)})
    assert p.returncode == 0, p.stderr
    for hook in ("MPI shim", "NCCL plugin", "CUDA activity library", "GPM reader"):
        assert "not built yet" in line_of(p.stdout, hook)
    if not shutil.which("cc"):
        return
    from rankmap.counters import gpm_native
    monkeypatch.setenv("RANKMAP_CACHE", str(cache))
    lib = gpm_native.build()
    p = rankmap("doctor", env={"RANKMAP_CACHE": str(cache)})
    assert "built" in line_of(p.stdout, "GPM reader") and str(lib) in p.stdout
    # an older build with the same compiler: one line for the newest, a count for the rest
    import os
    old = lib.parent.with_name("0" * len(lib.parent.name))
    shutil.copytree(lib.parent, old)
    os.utime(old / lib.name, (1, 1))
    p = rankmap("doctor", env={"RANKMAP_CACHE": str(cache)})
    lines = [l for l in p.stdout.splitlines() if " GPM reader " in f" {l} "]
    assert len(lines) == 2 and str(lib) in lines[0] and "1 older build in" in lines[1], lines


def test_doctor_with_nothing_on_path(tmp_path):
    env = {"PATH": str(tmp_path), "RANKMAP_NVML_LIB": "/nonexistent/libnvidia-ml.so.1", "LD_LIBRARY_PATH": ""}
    p = rankmap("doctor", env=env)
    assert p.returncode == 0, p.stderr
    text = p.stdout
    assert "missing MPI" in text and "apt-get install libopenmpi-dev" in text
    assert "missing SimGrid" in text and "apt-get install simgrid" in text
    assert "missing Scotch" in text
    assert "cannot load RANKMAP_NVML_LIB=/nonexistent/libnvidia-ml.so.1" in text
    q = rankmap("doctor", "--strict", env=env)
    assert q.returncode == 1 and "Traceback" not in q.stderr


def test_mpi_identity_parsing(tmp_path):
    fake = tmp_path / "mpicc"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = -showme:version ]; then echo 'unknown option' >&2; exit 1; fi\n"
                    "echo 'mpicc for MPICH version 4.1.2'\n")
    fake.chmod(0o755)
    assert doctor.mpi_identity(str(fake)) == "MPICH 4.1.2"
    fake.write_text("#!/bin/sh\necho 'mpicc: Open MPI 5.0.3 (Language: C)'\n")
    assert doctor.mpi_identity(str(fake)) == "Open MPI 5.0.3"
    fake.write_text("#!/bin/sh\necho hello\n")
    assert doctor.mpi_identity(str(fake)) is None


def test_launcher_resolved_through_links(tmp_path):
    """mpirun/mpiexec are followed through their links (Debian alternatives) to the program that
    runs, named by MPI and version; a launcher of another MPI than mpicc's is pointed out."""
    bin_, alt, real = tmp_path / "bin", tmp_path / "alternatives", tmp_path / "real"
    for d in (bin_, alt, real):
        d.mkdir()
    orte = real / "orterun"
    orte.write_text("#!/bin/sh\necho 'mpirun (Open MPI) 5.0.3'\necho\necho 'Report bugs to ...'\n")
    hydra = real / "mpiexec.hydra"
    hydra.write_text("#!/bin/sh\necho 'HYDRA build details:'\necho '    Version:      4.1.2'\n")
    cc = real / "mpicc.mpich"
    cc.write_text("#!/bin/sh\nif [ \"$1\" = -showme:version ]; then exit 1; fi\necho 'mpicc for MPICH version 4.1.2'\n")
    for f in (orte, hydra, cc):
        f.chmod(0o755)
    (alt / "mpirun").symlink_to(orte)
    (bin_ / "mpirun").symlink_to("../alternatives/mpirun")          # relative, as alternatives are
    (bin_ / "mpiexec").symlink_to(hydra)
    (bin_ / "mpicc").symlink_to(cc)
    env = {"PATH": str(bin_), "RANKMAP_NVML_LIB": "/nonexistent/libnvidia-ml.so.1"}
    p = rankmap("doctor", env=env)
    assert p.returncode == 0, p.stderr
    lines = {l[8:].split("  ")[0].strip(): l for l in p.stdout.splitlines()}
    run = lines["launcher mpirun"]
    assert run.startswith("OK") and f"Open MPI 5.0.3: {bin_ / 'mpirun'} -> {alt / 'mpirun'} -> {orte}" in run
    assert "but mpicc is MPICH 4.1.2" in run                         # the shim would be built for MPICH
    exe = lines["launcher mpiexec"]
    assert f"MPICH 4.1.2: {bin_ / 'mpiexec'} -> {hydra}" in exe and "but mpicc" not in exe
    (real / "orterun").write_text("#!/bin/sh\necho something else\n")
    q = rankmap("doctor", env=env)
    bad = [l for l in q.stdout.splitlines() if "launcher mpirun" in l][0]
    assert bad.startswith("missing") and "does not say which MPI it is" in bad


def test_open_watch_line(tmp_path):
    """The link sampler's early hold needs inotify on the GPUs' own device files: said either way."""
    from rankmap.commands.doctor import check_open_watch

    for name in ("nvidia0", "nvidiactl"):
        (tmp_path / name).write_bytes(b"")
    c = check_open_watch(str(tmp_path))
    assert c.ok and c.name == "GPU open watch" and "1 device file" in c.detail
    (tmp_path / "nvidia0").unlink()
    c = check_open_watch(str(tmp_path))
    assert not c.ok and "no GPU device file to watch" in c.detail
