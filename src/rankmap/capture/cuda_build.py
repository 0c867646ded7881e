"""Build (once, then cached) the CUDA activity library ``librankmap_cuda.so``, find a CUPTI, and
probe for a CUDA driver that works (a toolkit's stub libcuda is none).

The library is plain C with no build dependency on CUDA or CUPTI (``native/cuda``: it declares the
few CUPTI types it reads and opens libcupti at run time). The CUDA driver loads it into every
process of the job that initialises CUDA, through ``CUDA_INJECTION64_PATH``
(``docs/cuda-activity.md``).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rankmap.capture.native_build import build_c_hook

LIBNAME = "librankmap_cuda.so"
CUPTI_NAMES = ("libcupti.so.13", "libcupti.so.12", "libcupti.so")


def build_library(cc: str = "cc", progress: Callable[[str], None] | None = None) -> Path:
    """Compile the library if needed and return the path of the cached ``librankmap_cuda.so``."""
    return build_c_hook("cuda", LIBNAME, "CUDA activity library", cc, progress=progress)


def _toolkit_dirs() -> list[str]:
    dirs: list[str] = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if os.environ.get(var):
            dirs.append(os.environ[var])
    dirs += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    libs: list[str] = []
    for d in dirs:
        libs += [f"{d}/extras/CUPTI/lib64", f"{d}/lib64", f"{d}/lib"] + sorted(glob.glob(f"{d}/targets/*/lib"))
    return libs


def _wheel_dirs() -> list[str]:
    """``nvidia/*/lib`` of the Python packages beside this interpreter (PyTorch's CUDA wheels)."""
    out: list[str] = []
    for p in sys.path:
        out += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")), reverse=True)
    return out


def find_cupti() -> str | None:
    """A libcupti for the ranks to open when they have none loaded: ``$RANKMAP_CUPTI``, the CUDA
    toolkit's, a CUDA wheel's, then the dynamic linker's cache. None when there is none."""
    env = os.environ.get("RANKMAP_CUPTI")
    if env:
        return env if os.path.isfile(env) else None
    for d in _toolkit_dirs() + _wheel_dirs():
        for name in CUPTI_NAMES:
            p = os.path.join(d, name)
            if os.path.isfile(p):
                return p
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for name in CUPTI_NAMES:
        for line in out.splitlines():
            if line.strip().startswith(name + " ") and "=>" in line:
                return line.split("=>", 1)[1].strip()
    return None


#: CUresult codes a probe may meet, by name (cuda.h)
CU_ERRORS = {1: "CUDA_ERROR_INVALID_VALUE", 3: "CUDA_ERROR_NOT_INITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY",
             35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE",
             101: "CUDA_ERROR_INVALID_DEVICE", 304: "CUDA_ERROR_OPERATING_SYSTEM",
             803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", 804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
             999: "CUDA_ERROR_UNKNOWN"}
CUDA_ERROR_STUB_LIBRARY = 34

# Run in a child interpreter: loading a driver and cuInit() leave state (threads, open device files)
# that the profiler, which forks the job and watches the GPUs' device files, should not carry.
_PROBE = r"""
import ctypes, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        continue
    path = name
    with open("/proc/self/maps") as f:
        for line in f:
            if "/libcuda" in line:
                path = line.split(None, 5)[-1].strip()
                break
    v = ctypes.c_int(0)
    out = {"path": path, "version_rc": lib.cuDriverGetVersion(ctypes.byref(v)) if hasattr(lib, "cuDriverGetVersion") else -1,
           "version": v.value, "init_rc": lib.cuInit(0) if hasattr(lib, "cuInit") else -1}
    break
print(json.dumps(out))
"""


@dataclass(frozen=True)
class CudaDriver:
    """What the probe found: ``error`` None means a driver that initialises CUDA."""
    path: str | None          # the libcuda the ranks would load (or the stub found instead); None: none
    version: int | None       # cuDriverGetVersion, e.g. 13000
    error: str | None


def _stub_candidates() -> list[str]:
    """libcuda files the dynamic loader would not pick but a link or ``find_library`` would: the
    CUDA toolkit's stubs, on the library paths or under the toolkit."""
    dirs = [d for var in ("LD_LIBRARY_PATH", "LIBRARY_PATH") for d in os.environ.get(var, "").split(":") if d]
    dirs += [os.path.join(d, "stubs") for d in _toolkit_dirs()]
    out: list[str] = []
    for d in dirs:
        for name in ("libcuda.so.1", "libcuda.so"):
            p = os.path.join(d, name)
            if os.path.isfile(p) and os.path.realpath(p) not in map(os.path.realpath, out):
                out.append(p)
    return out


def _run_probe(names: list[str]) -> dict:
    p = subprocess.run([sys.executable, "-S", "-c", _PROBE, *names], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise OSError((p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1])
    return json.loads(p.stdout)


def probe_driver() -> CudaDriver:
    """Whether this node has a CUDA driver the job's ranks can use: the ``libcuda.so.1`` the dynamic
    loader gives them, asked for its version and to initialise (``cuInit``). The CUDA toolkit's stub
    libcuda (linkable, present without a driver) answers both with CUDA_ERROR_STUB_LIBRARY and is no
    driver; nor is a libcuda whose cuInit fails (no device, a driver/module mismatch)."""
    try:
        got = _run_probe(["libcuda.so.1"])
        if not got:
            stubs = _stub_candidates()
            got = _run_probe(stubs) if stubs else {}
            if got and not (got["version_rc"] or got["init_rc"]):
                # one that works, but not under the name CUDA programs load: not their driver
                return CudaDriver(got["path"], None, f"no CUDA driver: the dynamic loader finds no libcuda.so.1 "
                                                     f"(only {got['path']}, which CUDA programs do not load)")
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return CudaDriver(None, None, f"the CUDA driver probe failed: {e}")
    if not got:
        return CudaDriver(None, None, "no CUDA driver (libcuda.so.1) on this machine")
    path, rc = got["path"], got["version_rc"] or got["init_rc"]
    if rc == 0:
        return CudaDriver(path, got["version"], None)
    if rc == CUDA_ERROR_STUB_LIBRARY:
        return CudaDriver(path, None, f"no CUDA driver: {path} is the CUDA toolkit's stub libcuda "
                                      f"(CUDA_ERROR_STUB_LIBRARY)")
    call = "cuDriverGetVersion" if got["version_rc"] else "cuInit"
    what = CU_ERRORS.get(rc, "a missing entry point" if rc == -1 else f"error {rc}")
    return CudaDriver(path, None, f"the CUDA driver {path} does not work here: {call} returned {what}")
