"""The CUDA driver probe behind ``--cuda-activity``: a CUDA toolkit's stub libcuda is no driver.

The stub (``lib64/stubs/libcuda.so``, for linking on machines without a driver) answers
cuDriverGetVersion and cuInit with CUDA_ERROR_STUB_LIBRARY (34). ``auto`` took it for a driver (it
asked only whether a libcuda could be found, which ``LIBRARY_PATH`` makes true) and injected the
capture into a job that could never initialise CUDA; ``on`` went ahead too. Checked with the
toolkit's real stub where this machine has one, and with stand-ins built from
tests/native/fake_cuda.c: a driver, a stub, a driver whose cuInit finds no device.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, assert_one_line_error, cli, rankmap
from rankmap.capture import cuda_build
from rankmap.capture.cuda_build import probe_driver

STUBS = sorted(glob.glob("/usr/local/cuda*/lib64/stubs/libcuda.so") +
               glob.glob("/usr/local/cuda*/targets/*/lib/stubs/libcuda.so"))


@pytest.fixture(scope="module")
def standins(tmp_path_factory) -> dict[str, Path]:
    """Directories holding a stand-in ``libcuda.so.1`` each: driver (0), stub (34), nodevice (100)."""
    out = {}
    for name, code in (("driver", 0), ("stub", 34), ("nodevice", 100)):
        d = tmp_path_factory.mktemp(name)
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-DFAKE_CUDA_INIT={code}", "-Wl,-soname,libcuda.so.1",
                        "-o", str(d / "libcuda.so.1"), str(ROOT / "tests" / "native" / "fake_cuda.c")], check=True)
        out[name] = d
    return out


def test_probe_tells_a_driver_from_a_stub(standins, monkeypatch):
    monkeypatch.delenv("LIBRARY_PATH", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(standins["driver"]))
    d = probe_driver()
    assert (d.error, d.version, d.path) == (None, 13000, str(standins["driver"] / "libcuda.so.1"))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(standins["stub"]))
    d = probe_driver()
    assert d.version is None and d.error == (f"no CUDA driver: {standins['stub'] / 'libcuda.so.1'} is the CUDA "
                                             f"toolkit's stub libcuda (CUDA_ERROR_STUB_LIBRARY)")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(standins["nodevice"]))
    assert probe_driver().error == (f"the CUDA driver {standins['nodevice'] / 'libcuda.so.1'} does not work here: "
                                    f"cuInit returned CUDA_ERROR_NO_DEVICE")


def _profile(env: dict, mode: str) -> subprocess.CompletedProcess:
    return rankmap("profile", "--no-progress", "--cuda-activity", mode, "--", "/bin/true", env=env, timeout=300)


def _check_auto_and_on(env: dict, named: str) -> None:
    """``auto``: the job runs with nothing injected and the summary names the stub; ``on``: one line
    naming it, and no job stored."""
    p = _profile(env, "auto")
    assert p.returncode == 0, p.stdout + p.stderr
    job = json.loads(cli("export", "latest", "--format", "json", env=env).stdout)["job"]
    state = job["meta"]["cuda_activity"]
    assert state.startswith("off: no CUDA driver: ") and named in state and "CUDA_ERROR_STUB_LIBRARY" in state, state
    assert "CUDA_INJECTION64_PATH" not in job["meta"]["injected"]
    assert "CUDA activity: off: no CUDA driver" in p.stdout
    assert_one_line_error(_profile(env, "on"), "--cuda-activity on: no CUDA driver: ", named, "stub libcuda")
    assert_one_line_error(_profile(env, "copies"), "--cuda-activity copies: no CUDA driver: ", named)
    jobs = json.loads(cli("jobs", "--format", "json", env=env).stdout)
    assert [j["id"] for j in jobs] == [job["id"]]


def test_profile_with_a_stub_standin(standins, tmp_path):
    env = {"RANKMAP_HOME": str(tmp_path), "RANKMAP_DB": f"sqlite:///{tmp_path / 'r.db'}",
           "LD_LIBRARY_PATH": str(standins["stub"])}
    _check_auto_and_on(env, str(standins["stub"] / "libcuda.so.1"))


@pytest.mark.skipif(not STUBS, reason="no CUDA toolkit stub libcuda (/usr/local/cuda*/lib64/stubs) here")
def test_profile_with_the_toolkits_real_stub(tmp_path):
    stub = STUBS[0]
    env = {"RANKMAP_HOME": str(tmp_path), "RANKMAP_DB": f"sqlite:///{tmp_path / 'r.db'}"}
    # as a libcuda.so.1 the loader gives the job (a container's symlink into the stubs)
    link = tmp_path / "lib" / "libcuda.so.1"
    link.parent.mkdir()
    link.symlink_to(stub)
    _check_auto_and_on({**env, "LD_LIBRARY_PATH": str(link.parent)}, os.path.realpath(stub))
    # only on the linker's path, as the toolkit's environment sets it on a machine without a driver
    if cuda_build._run_probe(["libcuda.so.1"]):
        pytest.skip("this machine has a libcuda.so.1 of its own")
    home = tmp_path / "linker"
    home.mkdir()
    _check_auto_and_on({"RANKMAP_HOME": str(home), "RANKMAP_DB": f"sqlite:///{home / 'r.db'}",
                        "LIBRARY_PATH": os.path.dirname(stub), "LD_LIBRARY_PATH": ""}, "stubs/libcuda.so")


def test_doctor_says_which_driver(standins, tmp_path):
    """doctor's "CUDA driver" line is the probe's: the driver with its version, or the stub by name."""
    def line(lib: Path) -> str:
        p = rankmap("doctor", env={"LD_LIBRARY_PATH": str(lib), "RANKMAP_CACHE": str(tmp_path)})
        assert p.returncode == 0, p.stderr
        return next(l for l in p.stdout.splitlines() if l[8:].startswith("CUDA driver "))

    assert line(standins["driver"]).split() == ["OK", "CUDA", "driver", "CUDA", "13.0",
                                                f"({standins['driver'] / 'libcuda.so.1'})"]
    stub = line(standins["stub"])
    assert stub.startswith("missing CUDA driver ") and f"{standins['stub'] / 'libcuda.so.1'} is the CUDA toolkit's " \
        "stub libcuda (CUDA_ERROR_STUB_LIBRARY): rankmap profile --cuda-activity on needs one" in stub, stub
