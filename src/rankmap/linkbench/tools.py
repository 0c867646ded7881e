"""Where the CUDA toolkit, the CUDA runtime and NCCL are on this machine, and which GPU archs it has.

The benchmarks need three outside things, each found the same way everywhere in rankmap (``rankmap
doctor`` asks these functions too): ``nvcc`` to compile the GPU-pair benchmark, ``libcudart`` for the
MPI and NCCL benchmarks (loaded at run time, so they build without CUDA), and ``libnccl`` (loaded at run
time, so nothing is built against NCCL). An environment variable names each one explicitly:
``RANKMAP_NVCC``, ``RANKMAP_CUDART``, ``RANKMAP_NCCL_LIB`` (``none`` for "there is none"), and
``NCCL_HOME`` points at a NCCL install the way it does for nccl-tests;
``RANKMAP_CUDA_ARCH`` (e.g. ``90``) overrides the GPU arch the CUDA code is compiled for.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

CUDA_HOMES = ("/usr/local/cuda", "/usr/local/cuda-*", "/opt/cuda")


def _cuda_homes() -> list[str]:
    out = [os.environ[k] for k in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(k)]
    for pat in CUDA_HOMES:
        out += sorted(glob.glob(pat), reverse=True)
    return list(dict.fromkeys(out))


def find_nvcc() -> str | None:
    """``$RANKMAP_NVCC``, ``nvcc`` on PATH, else ``bin/nvcc`` of a CUDA home (``$CUDA_HOME``, /usr/local/cuda*)."""
    env = os.environ.get("RANKMAP_NVCC")
    if env:
        return env if os.access(env, os.X_OK) else None
    w = shutil.which("nvcc")
    if w:
        return w
    for home in _cuda_homes():
        p = os.path.join(home, "bin", "nvcc")
        if os.access(p, os.X_OK):
            return p
    return None


def nvcc_version(nvcc: str) -> str | None:
    """``13.0`` (the release) of an nvcc, else None when it does not run."""
    try:
        p = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release ([\d.]+)", p.stdout + p.stderr)
    return m.group(1) if m else None


def _python_wheel_libs(*subdirs: str) -> list[str]:
    """Library folders of NVIDIA's Python wheels (nvidia-nccl-cu13, nvidia-cuda-runtime-cu12, ...)."""
    out = []
    for sp in sys.path:
        if not sp or not os.path.isdir(os.path.join(sp, "nvidia")):
            continue
        for sub in subdirs:
            out += sorted(glob.glob(os.path.join(sp, "nvidia", sub, "lib")))
    return out


def _first_loadable(cands: list[str]) -> str | None:
    for c in dict.fromkeys(cands):
        if os.sep in c and not os.path.exists(c):
            continue
        try:
            ctypes.CDLL(c)
        except OSError:
            continue
        return c
    return None


def cudart_candidates() -> list[str]:
    """Where a CUDA runtime may be, most specific first."""
    cands: list[str] = []
    for home in _cuda_homes():
        cands += sorted(glob.glob(os.path.join(home, "lib64", "libcudart.so.*")), reverse=True)
        cands += sorted(glob.glob(os.path.join(home, "targets", "*", "lib", "libcudart.so.*")), reverse=True)
    for d in _python_wheel_libs("cu13", "cuda_runtime"):
        cands += sorted(glob.glob(os.path.join(d, "libcudart.so.*")), reverse=True)
    cands += ["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"]
    return [c for c in cands if not c.endswith(".a")]


def find_cudart() -> str | None:
    """A CUDA runtime library that loads here: ``$RANKMAP_CUDART`` or the first candidate that does."""
    env = os.environ.get("RANKMAP_CUDART")
    if env is not None:
        return None if env in ("", "none") else env
    return _first_loadable(cudart_candidates())


def nccl_candidates() -> list[str]:
    """Where libnccl may be: ``$NCCL_HOME/lib`` (the convention nccl-tests builds with, so both measure the
    same library), NVIDIA's Python wheel (the one PyTorch uses), the loader's path, CUDA homes."""
    cands: list[str] = []
    if os.environ.get("NCCL_HOME"):
        cands.append(os.path.join(os.environ["NCCL_HOME"], "lib", "libnccl.so.2"))
    for d in _python_wheel_libs("nccl"):
        cands.append(os.path.join(d, "libnccl.so.2"))
    cands += ["libnccl.so.2", "libnccl.so"]
    for home in _cuda_homes():
        cands += sorted(glob.glob(os.path.join(home, "lib64", "libnccl.so*")))
    cands += sorted(glob.glob("/usr/lib/*-linux-gnu/libnccl.so*"))
    return cands


def find_nccl() -> str | None:
    """A NCCL library that loads here: ``$RANKMAP_NCCL_LIB`` or the first candidate that does."""
    env = os.environ.get("RANKMAP_NCCL_LIB")
    if env is not None:
        return None if env in ("", "none") else env
    return _first_loadable(nccl_candidates())


def loaded_path(lib: str) -> str:
    """The file a library name resolves to (``libnccl.so.2`` -> ``/usr/lib/.../libnccl.so.2``), to say
    in the results exactly which library was measured."""
    if os.sep in lib:
        return os.path.realpath(lib)
    stem = lib.split(".so")[0] + ".so"
    try:
        ctypes.CDLL(lib)
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if os.path.basename(path).startswith(stem):
                    return path
    except OSError:
        pass
    return lib


def gpu_archs() -> list[str]:
    """Compute capabilities of this machine's GPUs as ``["90"]``: ``$RANKMAP_CUDA_ARCH``, NVML, nvidia-smi.

    Empty when nothing says (no GPU, no driver): the caller then compiles for nvcc's default arch.
    """
    env = os.environ.get("RANKMAP_CUDA_ARCH")
    if env:
        return [a.strip().replace(".", "").replace("sm_", "") for a in env.split(",") if a.strip()]
    archs: set[str] = set()
    try:
        import pynvml as N  # nvidia-ml-py

        N.nvmlInit()
        try:
            for i in range(N.nvmlDeviceGetCount()):
                major, minor = N.nvmlDeviceGetCudaComputeCapability(N.nvmlDeviceGetHandleByIndex(i))
                archs.add(f"{major}{minor}")
        finally:
            N.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no NVML, an old NVML: try nvidia-smi
        pass
    if not archs and shutil.which("nvidia-smi"):
        try:
            p = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
            archs |= {l.strip().replace(".", "") for l in p.stdout.splitlines() if re.fullmatch(r"\d+\.\d+", l.strip())}
        except (OSError, subprocess.SubprocessError):
            pass
    return sorted(archs)
