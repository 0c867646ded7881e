"""Launcher adapters: recognition, world size, and how capture is injected into each launcher."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import assert_one_line_error, rankmap
from rankmap.capture import launchers as L
from rankmap.errors import RankmapError

ENV = {"RANKMAP_RUN_DIR": "/runs/x", "LD_PRELOAD": "/cache/librankmap_mpi.so"}


@pytest.fixture
def fakebin(tmp_path) -> Path:
    """Launchers that only answer --version, so recognition is tested without the real ones."""
    d = tmp_path / "bin"
    d.mkdir()
    scripts = {
        "mpirun": "echo 'mpirun (Open MPI) 5.0.3'",
        "mpiexec": "echo 'HYDRA build details:'; echo '    Version: 4.1'",
        "srun": "echo 'slurm 23.02.7'",
        "torchrun": "true",
        "python3": "true",
        "aprun": "true",
        "mystery-mpirun": "echo 'something else'",
        "app": "true",
    }
    for name, body in scripts.items():
        p = d / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)
    os.symlink("mystery-mpirun", d / "mpirun.x")
    return d


def rec(argv, fakebin):
    return L.recognise(argv, env_path=str(fakebin))


# --------------------------------------------------------------- recognition
def test_real_debian_alternatives():
    if not (shutil.which("mpirun.openmpi") and shutil.which("mpiexec.mpich")):
        pytest.skip("Debian's Open MPI and MPICH launchers are not both installed")
    assert L.recognise(["mpirun.openmpi", "-np", "4", "./a"]).kind == "openmpi"
    assert L.recognise(["mpiexec.openmpi", "-n", "2", "./a"]).kind == "openmpi"
    assert L.recognise(["mpiexec.mpich", "-n", "4", "./a"]).kind == "hydra"
    assert L.recognise(["mpiexec.hydra", "-n", "4", "./a"]).kind == "hydra"
    # plain names resolve through /etc/alternatives (realpath), then --version
    plain = L.recognise(["mpirun", "-np", "2", "./a"])
    assert plain.kind == L.mpi_flavour(os.path.realpath(shutil.which("mpirun")))
    assert L.find_mpicc(L.recognise(["mpirun.openmpi", "-np", "2", "x"])) == "/usr/bin/mpicc.openmpi"
    assert L.find_mpicc(L.recognise(["mpiexec.mpich", "-n", "2", "x"])) == "/usr/bin/mpicc.mpich"


def test_version_text_tells_the_mpi(fakebin):
    assert rec(["mpirun", "-np", "2", "x"], fakebin).kind == "openmpi"
    assert rec(["mpiexec", "-n", "2", "x"], fakebin).kind == "hydra"
    with pytest.raises(RankmapError, match="cannot tell which MPI"):
        rec(["mpirun.x", "-n", "2", "x"], fakebin)


def test_other_launchers(fakebin):
    assert rec(["srun", "-n", "8", "x"], fakebin).kind == "srun"
    assert rec(["torchrun", "--nproc_per_node=2", "t.py"], fakebin).kind == "torchrun"
    t = rec(["python3", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"], fakebin)
    assert t.kind == "torchrun" and t.world_size == 2 and t.prefix_len == 3
    p = rec(["app", "--flag"], fakebin)
    assert p.kind == "plain" and p.world_size == 1 and not p.is_mpi


def test_unknown_launcher_and_missing_command(fakebin):
    for name in ("aprun", "jsrun", "flux"):
        with pytest.raises(RankmapError) as e:
            rec([name, "-n", "4", "x"], fakebin)
        assert f"launcher {name!r} is not supported" in str(e.value)
        assert "Open MPI" in str(e.value) and "srun" in str(e.value) and "torchrun" in str(e.value)
    with pytest.raises(RankmapError, match="command not found: nosuch"):
        rec(["nosuch", "x"], fakebin)
    with pytest.raises(RankmapError, match="no command"):
        L.recognise([])


# ---------------------------------------------------------------- world size
@pytest.mark.parametrize("argv,size", [
    (["mpirun", "-np", "4", "./a", "-n", "9"], 4),
    (["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "6", "./a"], 6),
    (["mpirun", "--np=3", "./a"], 3),
    (["mpirun", "--mca", "btl", "self", "-np", "2", "./a"], 2),
    (["mpirun", "-x", "FOO=1", "-H", "a,b", "--map-by", "ppr:1:node", "-np", "2", "./a"], 2),
    (["mpirun", "-np", "2", "./a", ":", "-np", "3", "./b"], 5),
    (["mpirun", "./a"], None),
    (["mpirun", "-np", "2", "./a", ":", "./b"], None),
])
def test_openmpi_world_size(argv, size, fakebin):
    assert rec(argv, fakebin).world_size == size


@pytest.mark.parametrize("argv,size", [
    (["mpiexec", "-n", "4", "./a"], 4),
    (["mpiexec", "-np", "4", "./a", "-np", "7"], 4),
    (["mpiexec", "-genv", "A", "1", "-ppn", "2", "-n", "8", "./a"], 8),
    (["mpiexec", "-n", "2", "./a", ":", "-n", "2", "./b"], 4),
    (["mpiexec", "./a"], None),
])
def test_hydra_world_size(argv, size, fakebin):
    assert rec(argv, fakebin).world_size == size


@pytest.mark.parametrize("argv,size", [
    (["srun", "-n", "8", "./a"], 8),
    (["srun", "-n8", "./a"], 8),
    (["srun", "--ntasks=16", "./a"], 16),
    (["srun", "-N", "2", "--ntasks-per-node", "4", "./a"], 8),
    (["srun", "-N", "2", "./a", "-n", "3"], None),
    (["srun", "-p", "gpu", "-l", "-n", "2", "./a"], 2),
])
def test_srun_world_size(argv, size, fakebin):
    assert rec(argv, fakebin).world_size == size


@pytest.mark.parametrize("argv,size", [
    (["torchrun", "--nproc_per_node=2", "t.py"], 2),
    (["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "t.py", "--nnodes", "5"], 16),
    (["torchrun", "--nnodes=1:4", "--nproc_per_node=2", "t.py"], None),
    (["torchrun", "--nproc_per_node=gpu", "t.py"], None),
    (["torchrun", "t.py"], 1),
])
def test_torchrun_world_size(argv, size, fakebin):
    assert rec(argv, fakebin).world_size == size


# ----------------------------------------------------------------- injection
def test_openmpi_injection_goes_right_after_the_launcher(fakebin):
    lau = rec(["mpirun", "--oversubscribe", "-np", "4", "./a", "arg"], fakebin)
    argv, env = lau.inject(ENV, base_env={"PATH": "/bin"})
    assert argv == ["mpirun", "-x", "RANKMAP_RUN_DIR=/runs/x", "-x", "LD_PRELOAD=/cache/librankmap_mpi.so",
                    "--oversubscribe", "-np", "4", "./a", "arg"]
    assert env == {"PATH": "/bin"}      # mpirun itself is never preloaded


def test_ld_preload_is_prepended(fakebin):
    lau = rec(["mpirun", "-np", "2", "./a"], fakebin)
    argv, env = lau.inject(ENV, base_env={"LD_PRELOAD": "/usr/lib/libtcmalloc.so"})
    assert "LD_PRELOAD=/cache/librankmap_mpi.so:/usr/lib/libtcmalloc.so" in argv
    assert env["LD_PRELOAD"] == "/usr/lib/libtcmalloc.so"


def test_hydra_injection(fakebin):
    lau = rec(["mpiexec", "-n", "4", "./a"], fakebin)
    argv, env = lau.inject(ENV, base_env={})
    assert argv == ["mpiexec", "-genv", "RANKMAP_RUN_DIR", "/runs/x", "-genv", "LD_PRELOAD",
                    "/cache/librankmap_mpi.so", "-n", "4", "./a"]
    assert "LD_PRELOAD" not in env


def test_srun_injection(fakebin):
    argv, _ = rec(["srun", "-n", "2", "./a"], fakebin).inject(ENV, base_env={})
    assert argv == ["srun", "--export=ALL,RANKMAP_RUN_DIR=/runs/x,LD_PRELOAD=/cache/librankmap_mpi.so",
                    "-n", "2", "./a"]
    argv, _ = rec(["srun", "--export=ALL,FOO=1", "-n", "2", "./a"], fakebin).inject(ENV, base_env={})
    assert argv[1] == "--export=ALL,FOO=1,RANKMAP_RUN_DIR=/runs/x,LD_PRELOAD=/cache/librankmap_mpi.so"
    assert argv.count("-n") == 1 and not any(a.startswith("--export") for a in argv[2:])
    argv, _ = rec(["srun", "--export", "NONE", "-n", "2", "./a"], fakebin).inject(ENV, base_env={})
    assert argv == ["srun", "--export=RANKMAP_RUN_DIR=/runs/x,LD_PRELOAD=/cache/librankmap_mpi.so",
                    "-n", "2", "./a"]
    # a value with a comma cannot be an item of --export: it goes through srun's own environment,
    # which the tasks get whole unless the user's --export says otherwise (then it is an error)
    argv, env = rec(["srun", "./a"], fakebin).inject({"X": "a,b", "Y": "1"}, base_env={})
    assert argv == ["srun", "--export=ALL,Y=1", "./a"] and env["X"] == "a,b"
    argv, env = rec(["srun", "--export=ALL,FOO=1", "./a"], fakebin).inject({"X": "a,b"}, base_env={})
    assert argv == ["srun", "--export=ALL,FOO=1", "./a"] and env["X"] == "a,b"
    with pytest.raises(RankmapError, match="comma"):
        rec(["srun", "--export=NONE", "./a"], fakebin).inject({"X": "a,b"}, base_env={})
    with pytest.raises(RankmapError, match="comma"):
        rec(["srun", "--export", "FOO=1", "./a"], fakebin).inject({"X": "a,b"}, base_env={})


def test_torchrun_and_plain_inherit(fakebin):
    for argv in (["torchrun", "--nproc_per_node=2", "t.py"], ["app", "x"]):
        lau = rec(argv, fakebin)
        out, env = lau.inject({"NCCL_PROFILER_PLUGIN": "/p.so", "RANKMAP_RUN_DIR": "/r"}, base_env={"A": "1"})
        assert out == argv
        assert env == {"A": "1", "NCCL_PROFILER_PLUGIN": "/p.so", "RANKMAP_RUN_DIR": "/r"}


def test_prepare_sets_run_dir_and_buckets(fakebin, tmp_path):
    lau = rec(["torchrun", "t.py"], fakebin)
    inj = L.prepare(lau, run_dir=tmp_path, nccl_plugin="/p.so", bucket_ms=50, flush_ms=250, base_env={})
    assert inj.injected == {"RANKMAP_RUN_DIR": str(tmp_path.resolve()), "RANKMAP_BUCKET_MS": "50",
                            "RANKMAP_FLUSH_MS": "250", "NCCL_PROFILER_PLUGIN": "/p.so",
                            # NCCL's rings and trees into the run directory, not the job's output
                            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH",
                            "NCCL_DEBUG_FILE": str(tmp_path.resolve() / "nccl-debug.%h.%p.log")}
    assert inj.env["RANKMAP_BUCKET_MS"] == "50"
    # a user's own NCCL_DEBUG is respected: nothing of NCCL's logging is changed
    inj = L.prepare(lau, run_dir=tmp_path, nccl_plugin="/p.so", base_env={"NCCL_DEBUG": "WARN"})
    assert not any(k.startswith("NCCL_DEBUG") for k in inj.injected) and inj.env["NCCL_DEBUG"] == "WARN"
    # no plugin, no NCCL settings
    assert not any(k.startswith("NCCL") for k in L.prepare(lau, run_dir=tmp_path, base_env={}).injected)


def test_prepare_loads_open_mpi_monitoring_only_for_the_library_source(fakebin, tmp_path):
    """The default source (the mirror) loads nothing into the job; ``library`` turns on Open MPI's
    monitoring PML, unless the user set it; other launchers never get it; the source reaches the ranks."""
    ompi, hydra = rec(["mpirun", "-np", "2", "./a"], fakebin), rec(["mpiexec", "-n", "2", "./a"], fakebin)
    inj = L.prepare(ompi, run_dir=tmp_path, shim="/s.so", base_env={})
    assert "OMPI_MCA_pml_monitoring_enable" not in inj.injected
    assert inj.injected["RANKMAP_COLLECTIVES"] == "auto" and "RANKMAP_COLLECTIVES=auto" in inj.argv
    lib = L.prepare(ompi, run_dir=tmp_path, shim="/s.so", base_env={}, collectives="library")
    assert lib.injected["OMPI_MCA_pml_monitoring_enable"] == "2"
    assert "OMPI_MCA_pml_monitoring_enable=2" in lib.argv
    assert lib.injected["RANKMAP_COLLECTIVES"] == "library"
    env_lib = L.prepare(ompi, run_dir=tmp_path, shim="/s.so", base_env={"RANKMAP_COLLECTIVES": "library"})
    assert env_lib.injected["OMPI_MCA_pml_monitoring_enable"] == "2"
    assert "OMPI_MCA_pml_monitoring_enable" not in L.prepare(hydra, run_dir=tmp_path, shim="/s.so", base_env={},
                                                             collectives="library").injected
    mine = L.prepare(ompi, run_dir=tmp_path, shim="/s.so", base_env={"OMPI_MCA_pml_monitoring_enable": "1"},
                     collectives="library")
    assert "OMPI_MCA_pml_monitoring_enable" not in mine.injected
    mirror = L.prepare(ompi, run_dir=tmp_path, shim="/s.so", base_env={"RANKMAP_COLLECTIVES": "library"},
                       collectives="mirror")               # the option wins over the environment
    assert "OMPI_MCA_pml_monitoring_enable" not in mirror.injected
    assert mirror.injected["RANKMAP_COLLECTIVES"] == "mirror"          # reaches the ranks through -x
    assert "OMPI_MCA_pml_monitoring_enable" not in L.prepare(ompi, run_dir=tmp_path, base_env={},
                                                             collectives="library").injected   # no shim
    with pytest.raises(RankmapError, match="RANKMAP_COLLECTIVES 'x': choose one of auto, mirror, library, model"):
        L.prepare(ompi, run_dir=tmp_path, shim="/s.so", base_env={"RANKMAP_COLLECTIVES": "x"})


def test_programs_of_each_app_context(fakebin):
    lau = rec(["mpirun", "-np", "2", "-x", "A=1", "./a", "1", ":", "--mca", "btl", "self", "-np", "1", "./b"], fakebin)
    assert lau.programs() == [["./a", "1"], ["./b"]]
    assert rec(["mpiexec", "-n", "2", "-genv", "K", "V", "./c", "x"], fakebin).programs() == [["./c", "x"]]


def test_mpicc_choice(tmp_path):
    d = tmp_path / "opt" / "bin"
    d.mkdir(parents=True)
    for n in ("mpirun", "mpicc"):
        (d / n).write_text("#!/bin/sh\n")
        (d / n).chmod(0o755)
    lau = L.Launcher("openmpi", [str(d / "mpirun")], str(d / "mpirun"), 2)
    assert L.find_mpicc(lau) == str(d / "mpicc")          # a module-loaded MPI: mpicc beside mpirun
    with pytest.raises(RankmapError, match="MPI compiler wrapper not found: /nonexistent"):
        L.find_mpicc(lau, "/nonexistent")


# ------------------------------------------------------------------- the CLI
def test_cli_unknown_launcher(tmp_path):
    p = rankmap("profile", "--db", f"sqlite:///{tmp_path}/db.sqlite", "--", "jsrun", "-n", "4", "./a",
                env={"RANKMAP_HOME": str(tmp_path)})
    assert_one_line_error(p, "launcher 'jsrun' is not supported", "srun")


def test_cli_missing_command(tmp_path):
    p = rankmap("profile", "--db", f"sqlite:///{tmp_path}/db.sqlite", "--", "./no-such-program",
                env={"RANKMAP_HOME": str(tmp_path)})
    assert_one_line_error(p, "command not found: ./no-such-program")
    p = rankmap("profile", env={"RANKMAP_HOME": str(tmp_path)})
    assert_one_line_error(p, "no command to profile")
