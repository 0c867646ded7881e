"""``rankmap doctor``: what this machine offers rankmap, one line per component.

Each line is ``OK`` with what was found (version, path) or ``missing`` with what to do.
Probes run the tools the way rankmap will (``mpicc -showme:version``, ``ncclGetVersion``)
so that a line saying OK means rankmap can use it. Exit status is 0 unless ``--strict``.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Check:
    name: str
    ok: bool
    detail: str  # what was found, or what to do when missing


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check GPUs, driver, NVML, MPI, NCCL, CUDA and the other tools rankmap uses",
                       description="One line per component: OK with what was found, or missing with what to do.")
    p.add_argument("--strict", action="store_true", help="exit 1 when anything is missing")
    c = p.add_argument_group("collectives", "--collectives checks the mirror of an installed MPI's collective "
                                            "selection against the library's own count of its messages and "
                                            "records, in rankmap's home, which collectives it reproduces exactly: "
                                            "profiles of that MPI build then use the mirror for them")
    c.add_argument("--collectives", action="store_true",
                   help="run the collective conformance probe (only this check)")
    c.add_argument("--mpicc", metavar="PATH", help="the MPI's C compiler wrapper (default: mpicc on PATH)")
    c.add_argument("--launcher", metavar="PATH", help="its launcher (default: the mpirun or mpiexec beside --mpicc)")
    c.add_argument("--ranks", metavar="N,N", help="communicator sizes to probe (default 3,4,5,8)")
    c.add_argument("--sizes", metavar="B,B", help="message sizes in bytes, multiples of 8 (default 8 B to 16 MiB, "
                                                   "eight of them)")
    p.set_defaults(func=run)


def _run(cmd: list[str], timeout: float = 20) -> str | None:
    """stdout+stderr of a command, or None if it cannot run."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return (p.stdout + p.stderr).strip()


def _which(*names: str, extra: tuple[str, ...] = ()) -> str | None:
    for n in names:
        w = shutil.which(n)
        if w:
            return w
    for path in extra:
        for hit in sorted(glob.glob(path)):
            if os.access(hit, os.X_OK):
                return hit
    return None


# ------------------------------------------------------------------------------ probes
def check_nvml() -> list[Check]:
    from rankmap.errors import RankmapError
    from rankmap.topology.discover import load_nvml

    try:
        nvml = load_nvml()
    except RankmapError as e:
        return [Check("NVML", False, f"{e}".replace("; use --fixture", "; rankmap topo can still use --fixture"))]
    out = []
    try:
        drv = nvml.nvmlSystemGetDriverVersion()
        ver = nvml.nvmlSystemGetNVMLVersion()
        drv, ver = (v.decode() if isinstance(v, bytes) else v for v in (drv, ver))
        out.append(Check("NVML", True, f"NVML {ver}, NVIDIA driver {drv}"))
        n = nvml.nvmlDeviceGetCount()
        names = []
        for i in range(n):
            nm = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))
            names.append(nm.decode() if isinstance(nm, bytes) else nm)
        if n:
            kinds = sorted(set(names))
            out.append(Check("GPUs", True, f"{n} x {', '.join(kinds)}"))
            out.append(check_open_watch())
        else:
            out.append(Check("GPUs", False, "NVML sees no GPU: check that the GPUs are visible to this container/VM"))
    except nvml.NVMLError as e:
        out.append(Check("GPUs", False, f"NVML error {e.__class__.__name__}: check the driver (nvidia-smi)"))
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return out


def check_open_watch(dev: str = "/dev") -> Check:
    """Whether the link sampler can see other processes open and close the GPUs' device files (its early hold)."""
    from rankmap.counters.devwatch import DeviceFileWatch, gpu_device_files

    w = DeviceFileWatch(gpu_device_files(dev))
    ok = w.ok
    w.close()
    if ok:
        return Check("GPU open watch", True, f"inotify on {w.status} in {dev}: the link sampler holds before "
                                             f"a job's driver stalls")
    return Check("GPU open watch", False, f"{w.status}: the link sampler's stall guard reacts only after a stall")


def mpi_identity(wrapper: str) -> str | None:
    """'Open MPI 4.1.4' / 'MPICH 4.0.2' for an MPI C compiler wrapper, else None."""
    text = _run([wrapper, "-showme:version"])
    if text:
        m = re.search(r"(Open MPI|Intel\(R\) MPI|Spectrum MPI)\s+v?([\w.]+)", text)
        if m:
            return f"{m.group(1)} {m.group(2)}"
    text = _run([wrapper, "-v"])
    if text:
        m = re.search(r"for (MPICH|MVAPICH2?|Intel\(R\) MPI Library)[^\d]*([\d][\w.]*)", text)
        if m:
            return f"{m.group(1)} {m.group(2)}"
    return None


def symlink_chain(path: str) -> list[str]:
    """``path`` and every link it goes through to the file that runs (Debian alternatives: mpirun ->
    /etc/alternatives/mpirun -> /usr/bin/mpirun.openmpi -> orterun)."""
    chain = [path]
    while os.path.islink(chain[-1]) and len(chain) < 20:
        nxt = os.readlink(chain[-1])
        chain.append(os.path.normpath(os.path.join(os.path.dirname(chain[-1]), nxt)))
    return chain


def launcher_identity(path: str) -> str | None:
    """'Open MPI 4.1.4' / 'MPICH 4.0.2' / 'Intel(R) MPI 2021.9' from the launcher's own ``--version``."""
    text = _run([path, "--version"]) or ""
    m = re.search(r"\((Open MPI|OpenRTE|PRRTE)\)\s+v?([\w.]+)", text)
    if m:
        return f"{'Open MPI' if m.group(1) != 'PRRTE' else 'PRRTE'} {m.group(2)}"
    m = re.search(r"HYDRA build details:\s*\n\s*Version:\s*([\w.]+)", text)
    if m:                                   # MPICH's process manager carries MPICH's version
        return f"MPICH {m.group(1)}"
    m = re.search(r"(Intel\(R\) MPI)\s+Library.*?Version\s+([\w.]+)", text)
    if m:
        return f"{m.group(1)} {m.group(2)}"
    return None


def _flavour(ident: str | None) -> str | None:
    return ident.split()[0] if ident else None


def check_launchers(mpicc_ident: str | None) -> list[Check]:
    """What ``mpirun`` and ``mpiexec`` on PATH really run, and whether that is the MPI of ``mpicc``
    (a job launched by one MPI with a shim built for the other fails, or counts nothing)."""
    out = []
    for name in ("mpirun", "mpiexec"):
        w = shutil.which(name)
        if not w:
            continue
        chain = symlink_chain(w)
        ident = launcher_identity(w)
        where = " -> ".join(chain)
        if not ident:
            out.append(Check(f"launcher {name}", False, f"{where} does not say which MPI it is (--version)"))
            continue
        note = ""
        if mpicc_ident and _flavour(mpicc_ident) != _flavour(ident):
            note = (f"; but mpicc is {mpicc_ident}: rankmap profile builds the shim with the mpicc of the "
                    f"launcher's MPI (or --mpicc)")
        out.append(Check(f"launcher {name}", True, f"{ident}: {where}{note}"))
    return out


def check_mpi() -> list[Check]:
    out = []
    seen: dict[str, str] = {}
    default = _which("mpicc")
    default_real = os.path.realpath(default) if default else None
    for impl, wrappers in (("Open MPI", ("mpicc.openmpi",)), ("MPICH", ("mpicc.mpich",)), ("default", ("mpicc",))):
        w = _which(*wrappers)
        if not w:
            continue
        ident = mpi_identity(w)
        real = os.path.realpath(w)
        if real in seen:
            continue
        seen[real] = ident or "?"
        label = f"MPI ({impl})" if impl != "default" else "MPI (mpicc)"
        if ident:
            siblings = [s for s in (w.replace("mpicc", "mpicxx"), w.replace("mpicc", "mpifort")) if os.path.exists(s)]
            also = [os.path.basename(s) for s in siblings]
            if impl != "default" and real == default_real:
                also.append("default mpicc")
            out.append(Check(label, True, f"{ident}: {w}" + (f" (+ {', '.join(also)})" if also else "")))
        else:
            out.append(Check(label, False, f"{w} does not say which MPI it is (-showme:version / -v): check the install"))
    out += check_launchers(mpi_identity(default) if default else None)
    if not out:
        out.append(Check("MPI", False, "no mpicc found: apt-get install libopenmpi-dev openmpi-bin (or libmpich-dev mpich)"))
    return out


def nccl_version() -> tuple[str, str] | None:
    """(version, where) from libnccl's ncclGetVersion, else from nccl.h."""
    from rankmap.linkbench.tools import nccl_candidates

    for lib in nccl_candidates():
        try:
            h = ctypes.CDLL(lib)
            v = ctypes.c_int(0)
            if h.ncclGetVersion(ctypes.byref(v)) == 0 and v.value:
                code = v.value
                major, minor, patch = (code // 10000, code // 100 % 100, code % 100) if code >= 10000 else \
                    (code // 1000, code // 100 % 10, code % 100)
                return f"{major}.{minor}.{patch}", lib
        except (OSError, AttributeError):
            continue
    for hdr in ["/usr/local/cuda/include/nccl.h", "/usr/include/nccl.h"] + sorted(glob.glob("/usr/local/cuda*/include/nccl.h")):
        try:
            text = open(hdr).read()
        except OSError:
            continue
        parts = [re.search(rf"#define NCCL_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(p.group(1) for p in parts), hdr  # type: ignore[union-attr]
    return None


def check_nccl() -> Check:
    v = nccl_version()
    if v:
        return Check("NCCL", True, f"{v[0]} ({v[1]})")
    return Check("NCCL", False, "libnccl.so.2 not found: install libnccl2 (NVIDIA CUDA repository) or pip install nvidia-nccl-cu12")


def check_cuda() -> Check:
    from rankmap.linkbench.tools import find_nvcc

    nvcc = find_nvcc()
    if not nvcc:
        return Check("CUDA toolkit", False, "nvcc not found: install the CUDA toolkit (needed only by `rankmap bench p2p`)")
    m = re.search(r"release ([\d.]+), V([\w.]+)", _run([nvcc, "--version"]) or "")
    return Check("CUDA toolkit", bool(m), f"nvcc {m.group(2)} ({nvcc})" if m else f"{nvcc} --version gave no release")


def check_cuda_driver() -> Check:
    """The driver CUDA programs here would load, as ``rankmap profile --cuda-activity`` probes it (a
    CUDA toolkit's stub libcuda is none)."""
    from rankmap.capture.cuda_build import probe_driver

    d = probe_driver()
    if d.error or d.version is None:
        return Check("CUDA driver", False, f"{d.error}: rankmap profile --cuda-activity on needs one")
    return Check("CUDA driver", True, f"CUDA {d.version // 1000}.{d.version % 1000 // 10} ({d.path})")


def check_torch() -> Check:
    code = "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())"
    out = _run([sys.executable, "-c", code], timeout=120)
    if out is None:
        return Check("PyTorch", False, "could not run the Python interpreter to import torch")
    last = out.splitlines()[-1] if out else ""
    parts = last.split()
    if len(parts) == 3 and parts[2] in ("True", "False"):
        return Check("PyTorch", True, f"torch {parts[0]}, CUDA {parts[1]}, GPU available: {parts[2]}")
    return Check("PyTorch", False, "torch not importable in this environment: pip install torch (for torchrun jobs)")


def check_tool(name: str, exe: list[str], args: list[str], pattern: str, fix: str, extra: tuple[str, ...] = ()) -> Check:
    w = _which(*exe, extra=extra)
    if not w:
        return Check(name, False, fix)
    m = re.search(pattern, _run([w, *args]) or "")
    return Check(name, True, f"{m.group(1) if m else 'present'} ({w})")


def check_hooks() -> list[Check]:
    """Where the C sources are, and which hooks are built and cached (the first profile builds them)."""
    from rankmap.capture.native_build import built, cache_root
    from rankmap.errors import RankmapError, counted
    from rankmap.native_sources import native_dir

    try:
        out = [Check("native sources", True, str(native_dir()))]
    except RankmapError as e:
        return [Check("native sources", False, str(e))]
    libs = built()
    first_use = {"MPI shim": "the first rankmap profile of an MPI job", "NCCL plugin": "the first rankmap profile of an NCCL job",
                 "CUDA activity library": "the first rankmap profile --cuda-activity",
                 "GPM reader": "the first link sampler on a GPU with NVML GPM (Hopper or newer; else its Python read is used)"}
    for hook, when in first_use.items():
        mine = [(lib, ident) for h, lib, ident in libs if h == hook]
        if not mine:
            out.append(Check(hook, True, f"not built yet: {when} builds it into {cache_root()} (a few seconds)"))
        newest: dict[str, Path] = {}             # built() lists the newest first: one line per compiler / MPI
        for lib, ident in mine:
            newest.setdefault(ident, lib)
        for ident, lib in newest.items():
            out.append(Check(hook, True, f"built{' for ' + ident if ident else ''}: {lib}"))
        if len(mine) > len(newest):
            out.append(Check(hook, True, f"{counted(len(mine) - len(newest), 'older build')} in {cache_root()}, left from other "
                                         f"source versions (a build's folder is named by the hash of its sources)"))
    return out


def checks() -> list[Check]:
    out = check_nvml()
    out += check_mpi()
    out.append(check_nccl())
    out.append(check_cuda())
    out.append(check_cuda_driver())
    out.append(check_torch())
    out.append(check_tool("SimGrid", ["smpirun"], ["--version"], r"SimGrid version ([\w.]+)",
                          "smpirun not found: apt-get install simgrid (simulated MPI runs)"))
    out.append(check_tool("Scotch", ["scotch_gmap", "gmap"], ["-V"], r"version ([\w.]+)",
                          "scotch_gmap not found: apt-get install scotch (graph mapping solver)"))
    out.append(check_tool("PostgreSQL", ["pg_ctl"], ["--version"], r"\(PostgreSQL\) ([\w.]+)",
                          "pg_ctl not found: apt-get install postgresql (optional store backend; SQLite works without it)",
                          extra=("/usr/lib/postgresql/*/bin/pg_ctl",)))
    out += check_hooks()
    return out


# ------------------------------------------------------------------------------ --collectives
def _numbers(text: str, what: str, multiple: int = 1, least: int = 1) -> tuple[int, ...]:
    from rankmap.errors import RankmapError

    try:
        got = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        got = ()
    if not got or any(n < least or n % multiple for n in got):
        raise RankmapError(f"{what} {text!r}: give a comma-separated list of integers of at least {least}"
                           + (f", multiples of {multiple}" if multiple > 1 else ""))
    return got


def collectives_target(mpicc: str | None, launcher: str | None):
    """The MPI to check: its family from its compiler wrapper, its launcher beside it (or given)."""
    from rankmap.errors import RankmapError
    from rankmap.pairs import conformance

    cc = shutil.which(mpicc or "mpicc")
    if not cc:
        raise RankmapError(f"no MPI compiler wrapper {mpicc or 'mpicc'} found: give --mpicc PATH")
    ident = mpi_identity(cc)
    family = _flavour(ident)
    if family == "Open":
        family = "Open MPI"
    if family not in ("Open MPI", "MPICH"):
        raise RankmapError(f"{cc} is {ident or 'an MPI that does not say which it is'}: the collective mirrors "
                           f"follow Open MPI and MPICH")
    if launcher:
        run_ = shutil.which(launcher)
        if not run_:
            raise RankmapError(f"launcher {launcher} not found")
    else:
        base = os.path.basename(cc)
        names = [base.replace("mpicc", n) for n in (("mpirun", "mpiexec") if family == "Open MPI"
                                                    else ("mpiexec", "mpirun"))]
        found = [os.path.join(os.path.dirname(cc), n) for n in names if "mpicc" in base]
        run_ = next((f for f in found if os.access(f, os.X_OK) and _flavour(launcher_identity(f)) == _flavour(ident)),
                    None)
        if not run_:
            raise RankmapError(f"no launcher of {ident} beside {cc} ({', '.join(names)}): give --launcher PATH")
    return conformance.target(cc, run_, family)


def run_collectives(args: argparse.Namespace) -> int:
    """``doctor --collectives``: probe the MPI, compare with the mirrors, record what is exact."""
    import tempfile

    from rankmap.capture.native_build import cache_root
    from rankmap.pairs import conformance

    ranks = _numbers(args.ranks, "--ranks", least=2) if args.ranks else conformance.RANKS
    sizes = _numbers(args.sizes, "--sizes", multiple=8, least=8) if args.sizes else conformance.SIZES
    t = collectives_target(args.mpicc, args.launcher)
    if t.unverifiable:
        print(f"{'missing':<8}collectives  the mirror cannot be verified on {t.mpicc}: {t.unverifiable}")
        return 1
    cache = cache_root() / "probe"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        cache = Path(tempfile.mkdtemp(prefix="rankmap-probe-"))
    b = conformance.verify(t, cache, ranks, sizes, say=lambda s: print(f"{'':<8}{s}", flush=True))
    f = conformance.save(b)
    n = len(b.exact) + len(b.inexact)
    sizes_txt = f"{_size_text(min(sizes))}-{_size_text(max(sizes))}" if len(sizes) > 1 else _size_text(sizes[0])
    print(f"{'OK':<8}collectives  {b.name} {b.version} ({b.file}, {b.fingerprint[:19]}): the {b.name} "
          f"{b.release[0]}.{b.release[1]} mirror reproduces {len(b.exact)} of {n} collectives exactly on "
          f"{', '.join(map(str, ranks))} ranks, {sizes_txt} (against {b.truth})")
    for coll, why in b.inexact.items():
        print(f"{'':<8}{'':<13}{coll}: {why}: the model")
    print(f"{'':<8}{'':<13}recorded in {f}: profiles of this build use the mirror for the exact ones")
    return 0


def _size_text(n: int) -> str:
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def run(args: argparse.Namespace) -> int:
    if args.collectives:
        return run_collectives(args)
    results = checks()
    width = max(len(c.name) for c in results)
    for c in results:
        print(f"{'OK' if c.ok else 'missing':<8}{c.name:<{width + 2}}{c.detail}")
    missing = [c for c in results if not c.ok]
    print(f"{len(results) - len(missing)} OK, {len(missing)} missing")
    return 1 if (args.strict and missing) else 0
