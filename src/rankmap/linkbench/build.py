"""Build the benchmark programs of ``native/linkbench`` once, then keep them in rankmap's cache.

Three programs, all through the one native build path (:func:`rankmap.capture.native_build.compile_cached`):

* ``rankmap-p2p``: CUDA C, compiled with ``nvcc`` for this machine's GPU archs only (one
  ``-gencode`` per arch found; nvcc's default when none is found) -- a full multi-arch build
  would take minutes;
* ``rankmap-mpi-bench``: C, compiled with the MPI's own ``mpicc`` (cached per MPI identity, like
  the PMPI shim); the CUDA runtime is loaded at run time;
* ``rankmap-nccl-bench``: C, compiled with ``cc`` (one process, every GPU) or with ``mpicc`` and
  ``-DRM_WITH_MPI`` (one process per GPU under a launcher); NCCL and CUDA are loaded at run time.

The cache folder of each is named by a hash of its sources, the compiler's identity and the flags.
``strict=True`` adds ``-Werror`` (the tests build that way, so a new warning fails CI, not a user).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from rankmap.linkbench import tools
from rankmap.capture.native_build import cache_root, compile_cached, compiler_identity
from rankmap.errors import RankmapError
from rankmap.native_sources import native_dir

C_FLAGS = ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
C_OPT_FLAGS = ["-Wno-format-truncation", "-Wno-stringop-overflow"]   # dropped if the compiler rejects them
NVCC_FLAGS = ["-O2", "-std=c++17", "-Xcompiler", "-Wall,-Wextra,-Wno-unused-parameter"]


def bench_src() -> Path:
    """``native/linkbench``: the C and CUDA sources of the benchmark programs."""
    return native_dir() / "linkbench"


def _sources(*names: str) -> list[Path]:
    files = [bench_src() / n for n in names]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise RankmapError(f"benchmark sources missing: {', '.join(missing)} (is this a complete rankmap checkout?)")
    return files


def _key(*parts: str | bytes, files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files + sorted(bench_src().glob("*.h")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def gencode_flags(archs: list[str]) -> list[str]:
    """``-gencode arch=compute_90,code=sm_90`` per arch (and PTX of the newest, so a newer GPU can JIT it)."""
    out: list[str] = []
    for a in archs:
        if not a.isdigit():
            raise RankmapError(f"not a CUDA arch: {a!r} (give it as 90 for sm_90, e.g. RANKMAP_CUDA_ARCH=90)")
        out += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    if archs:
        top = max(archs, key=int)
        out += ["-gencode", f"arch=compute_{top},code=compute_{top}"]
    return out


def build_p2p(nvcc: str | None = None, archs: list[str] | None = None, *, strict: bool = False,
              force: bool = False) -> Path:
    """The GPU-pair benchmark, compiled with nvcc for ``archs`` (default: this machine's)."""
    nvcc = nvcc or tools.find_nvcc()
    if not nvcc:
        raise RankmapError("nvcc not found: bench p2p compiles its CUDA code with nvcc on first use; install the "
                           "CUDA toolkit or set RANKMAP_NVCC=/path/to/nvcc")
    version = tools.nvcc_version(nvcc)
    if version is None:
        raise RankmapError(f"{nvcc} --version does not run or names no release: check the CUDA toolkit")
    archs = tools.gpu_archs() if archs is None else archs
    srcs = _sources("p2p.cu")
    flags = NVCC_FLAGS + gencode_flags(archs) + (["-Werror", "all-warnings", "-Xcompiler", "-Werror"] if strict else [])
    key = _key(nvcc, version, *flags, files=srcs)

    def commands(tmp: str) -> list[list[str]]:
        return [[nvcc, *flags, "-I", str(bench_src()), str(srcs[0]), "-o", tmp]]

    what = f"GPU-pair benchmark with {nvcc} (CUDA {version}, {'sm_' + ', sm_'.join(archs) if archs else 'default arch'})"
    return compile_cached(cache_root() / "bench" / f"p2p-{key}", "rankmap-p2p", commands, what, force=force,
                          notes={"build.txt": f"nvcc: {nvcc} {version}\nflags: {' '.join(flags)}\n"}, timeout=600)


def _c_build(compiler: str, identity: str, src: str, out_name: str, defines: list[str], what: str,
             strict: bool, force: bool) -> Path:
    srcs = _sources(src)
    flags = C_FLAGS + defines + (["-Werror"] if strict else [])
    key = _key(compiler, identity, *flags, files=srcs)

    def commands(tmp: str) -> list[list[str]]:
        tail = ["-I", str(bench_src()), str(srcs[0]), "-o", tmp, "-ldl"]
        return [[compiler, *flags, *C_OPT_FLAGS, *tail], [compiler, *flags, *tail]]

    return compile_cached(cache_root() / "bench" / f"{out_name}-{key}", out_name, commands, what, force=force,
                          notes={"identity.txt": identity + "\n"})


def build_mpi_bench(mpicc: str = "mpicc", *, strict: bool = False, force: bool = False) -> Path:
    """The MPI benchmark, compiled with ``mpicc`` (cached per MPI identity, as the shim is)."""
    from rankmap.capture.shim_build import mpi_identity

    identity = mpi_identity(mpicc)
    wrapper = shutil.which(mpicc) or mpicc
    return _c_build(wrapper, identity, "mpi_bench.c", "rankmap-mpi-bench", [], f"MPI benchmark with {wrapper}",
                    strict, force)


def build_nccl_bench(mpicc: str | None = None, cc: str = "cc", *, strict: bool = False, force: bool = False) -> Path:
    """The NCCL benchmark: with ``mpicc`` the one-process-per-GPU build, else the one-process build with ``cc``."""
    if mpicc:
        from rankmap.capture.shim_build import mpi_identity

        identity = mpi_identity(mpicc)
        wrapper = shutil.which(mpicc) or mpicc
        return _c_build(wrapper, identity, "nccl_bench.c", "rankmap-nccl-bench-mpi", ["-DRM_WITH_MPI"],
                        f"NCCL benchmark with {wrapper}", strict, force)
    path, version = compiler_identity(cc, "NCCL benchmark")
    return _c_build(path, f"{path} {version}", "nccl_bench.c", "rankmap-nccl-bench", [],
                    f"NCCL benchmark with {cc} ({path})", strict, force)
