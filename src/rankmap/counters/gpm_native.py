"""The native GPM reader: :meth:`GpmSource.read <rankmap.counters.sampler.GpmSource>` as one C call.

At 10 Hz the sampler thread sleeps between reads and every Python step after the sleep is cold:
on an H200 VM the Python around the two driver calls cost 0.07-0.08 ms CPU per GPU per read
(``docs/monitor.md``). ``native/monitor/gpm_read.c`` does the whole read (the timed snapshot, the
stalled-snapshot rule, the rates, the integral, the per-metric bookkeeping) in one call that
takes the NVML entry points as function pointers, so it neither includes ``nvml.h`` nor links
``libnvidia-ml``: it calls the very functions pynvml resolved. It is built on first use into
rankmap's cache (``<cache>/monitor/<hash>/librankmap_gpm.so``) through the one build path.

The Python read stays the reference and the fallback: :func:`open_readers` raises
:class:`NativeUnavailable` (with the reason) where the library cannot be built or loaded or the
NVML module does not expose its entry points as C functions.
"""

from __future__ import annotations

import ctypes
import operator
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Sequence

from rankmap.capture.native_build import build_c_hook
from rankmap.errors import RankmapError

LIBNAME = "librankmap_gpm.so"
# flags beyond the hooks' own: the integral's arithmetic must round exactly as Python's (no fused
# multiply-add), and llrint needs libm
EXTRA = ["-ffp-contract=off", "-lm"]
OUT_TX, OUT_RX, OUT_PTX, OUT_PRX, OUT_OKMASK, OUT_GAPS, OUT_DISCARDED, OUT_N = range(8)
DISCARDED = -1  # rm_gpm_read: a stalled snapshot was not used (the last totals stand)
#: tests only: a ctypes ``CFUNCTYPE(c_int64)`` the readers call instead of CLOCK_MONOTONIC
CLOCK: Any = None


class NativeUnavailable(Exception):
    """Why the native reader cannot be used here (the Python read is used instead)."""


def build(cc: str = "cc") -> Path:
    """Compile ``native/monitor/gpm_read.c`` if needed; the cached library's path."""
    return build_c_hook("monitor", LIBNAME, "GPM reader", cc, record_writer=False, extra=EXTRA)


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | str:
    """The loaded library, or why not (a build failure is remembered for the process: no retry per GPU)."""
    try:
        lib = ctypes.CDLL(str(build()))
    except (RankmapError, OSError) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.rm_gpm_open.restype = p
    lib.rm_gpm_open.argtypes = [p, p, p, p, p, p, i64, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_double),
                                i64, i64, ctypes.c_uint, ctypes.c_uint]
    lib.rm_gpm_out.restype = ctypes.POINTER(i64)
    lib.rm_gpm_out.argtypes = [p]
    lib.rm_gpm_close.restype = None
    lib.rm_gpm_close.argtypes = [p]
    lib.rm_gpm_read.restype = ctypes.c_int
    lib.rm_gpm_read.argtypes = [p]
    lib.rm_gpm_layout.restype = ctypes.c_int
    lib.rm_gpm_layout.argtypes = [ctypes.POINTER(i64), ctypes.c_int]
    return lib


def library() -> ctypes.CDLL:
    lib = _library()
    if isinstance(lib, str):
        raise NativeUnavailable(lib)
    return lib


def layout() -> dict[str, int]:
    """The GPM ABI as the C file declares it (sizes and offsets, bytes)."""
    names = ["metric_size", "metric.metricId", "metric.nvmlReturn", "metric.value", "metric.metricInfo",
             "request_head_size", "request.version", "request.numMetrics", "request.sample1", "request.sample2",
             "request.metrics"]
    buf = (ctypes.c_int64 * len(names))()
    n = library().rm_gpm_layout(buf, len(names))
    assert n == len(names), n
    return dict(zip(names, buf))


def pointer(obj: Any) -> int:
    """The C pointer an NVML handle stands for: pynvml's are ctypes pointers; a stand-in's may be ints."""
    try:
        return operator.index(obj)
    except TypeError:
        pass
    try:
        return ctypes.cast(obj, ctypes.c_void_p).value or 0
    except (ctypes.ArgumentError, TypeError) as e:
        raise NativeUnavailable(f"an NVML handle is not a C pointer ({type(obj).__name__})") from e


def entry_point(nvml: Any, name: str) -> int:
    """The address of an NVML function as the NVML module resolved it (pynvml's ``_nvmlGetFunctionPointer``)."""
    get = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if get is None:
        raise NativeUnavailable("the NVML module does not expose its C entry points")
    try:
        fn = get(name)
    except Exception as e:  # noqa: BLE001 - NVMLError (function not found) or anything of a stand-in
        raise NativeUnavailable(f"{name} did not resolve ({e})") from None
    addr = pointer(fn)
    if not addr:
        raise NativeUnavailable(f"{name} resolved to a null pointer")
    return addr


class NativeReader:
    """One GPU's C reader. ``read()`` returns 0 (new totals in ``out``), ``DISCARDED``, or an NVML code."""

    __slots__ = ("lib", "handle", "out", "read", "_keep")

    def __init__(self, lib: ctypes.CDLL, entries: tuple[int, int], device: Any, bufs: Sequence[Any], prev_t: int,
                 ids: Sequence[int], units: Sequence[float], snap_max_ns: int, snap_max_gap_ns: int, version: int,
                 slots: int) -> None:
        self.lib = lib
        self._keep = (CLOCK,)  # the clock callback must outlive the reader
        ids_c = (ctypes.c_uint * 4)(*ids)
        units_c = (ctypes.c_double * 4)(*map(float, units))
        clock = ctypes.cast(CLOCK, ctypes.c_void_p).value if CLOCK is not None else None
        h = lib.rm_gpm_open(entries[0], entries[1], clock, pointer(device) or None, pointer(bufs[0]),
                            pointer(bufs[1]), prev_t, ids_c, units_c, snap_max_ns, snap_max_gap_ns, version, slots)
        if not h:
            raise NativeUnavailable("rm_gpm_open refused its arguments (a null entry point or sample, or no memory)")
        self.handle = ctypes.c_void_p(h)
        self.out = ctypes.cast(lib.rm_gpm_out(self.handle), ctypes.POINTER(ctypes.c_int64 * OUT_N)).contents
        # bound once: a read is then one ctypes call with a ready argument, no Python frame of its own
        self.read = partial(lib.rm_gpm_read, self.handle)

    def close(self) -> None:
        if self.handle:
            self.lib.rm_gpm_close(self.handle)
            self.handle = None
