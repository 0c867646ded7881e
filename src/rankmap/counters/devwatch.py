"""Another process opening or closing a GPU's device file: the warning that comes before a stalled NVML read.

While a process creates a CUDA context, and while it tears one down, single NVML reads of the GPUs
can spin milliseconds of CPU in the driver (``counters/sampler.py``, "Driver stalls"). The context's
set-up opens the GPU's own device file, ``/dev/nvidia<N>`` (N = the GPU's minor number), before that,
and its teardown closes it (the kernel reports a close before it runs the driver's release of the
file). An inotify watch on those files sees both at no driver cost (``bench/gpm_stall_signal.py``:
on an H200 every stalled GPM read came within 0.2 s after another process's device-file event).
``/dev/nvidiactl`` is left out on purpose: every NVML user opens it -- ``nvidia-smi`` polling, a
second monitor, this sampler's own reads -- so an open of it does not tell a poller from a job,
while a job opens its GPU's file too.

inotify does not say who opened or closed a file, so :class:`DeviceFileWatch` is drained at two
moments: right after the sampler's own reads (:meth:`drain`: those events are the sampler's own NVML
calls, thrown away) and when the sampler wakes (:meth:`others`: what came while it slept was another
process).
inotify through ctypes on libc, as the bench does: no dependency; where it is missing (not Linux,
no libc, ``fs.inotify.max_user_watches`` exhausted) the watch is off and says why.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
from collections import Counter
from pathlib import Path
from typing import Sequence

from rankmap.errors import counted

IN_OPEN = 0x20
IN_CLOSE_WRITE = 0x08
IN_CLOSE_NOWRITE = 0x10
IN_Q_OVERFLOW = 0x4000  # the kernel's queue overflowed: events were lost (counted as one)
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_WATCHED = IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (the name follows)
_GPU_FILE = re.compile(r"nvidia(\d+)$")


def gpu_device_files(dev: str | Path = "/dev") -> list[str]:
    """The GPUs' own device files in ``dev`` (``nvidia0``, ``nvidia1``, ...), not ``nvidiactl``,
    ``nvidia-uvm`` or ``nvidia-modeset``: only a GPU's file is opened by a context's set-up alone."""
    d = Path(dev)
    try:
        found = [(int(m.group(1)), p.name) for p in d.iterdir() if (m := _GPU_FILE.match(p.name))]
    except OSError:
        return []
    return [str(d / name) for _minor, name in sorted(found)]


class DeviceFileWatch:
    """Opens and closes of the watched files since the last look, by file; ``status`` says what is
    watched or why not.

    ``ok`` is False when the watch could not be set up (then every call answers nothing)."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.fd = -1
        self.paths: dict[int, str] = {}
        self.seen: Counter[str] = Counter()    # other processes' opens and closes by file, over the watch's life
        self.own = 0                           # events drained as the sampler's own
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except (OSError, AttributeError) as e:
            self.status = f"off: no inotify here ({e})"
            return
        if fd < 0:
            self.status = f"off: inotify_init1 failed ({os.strerror(ctypes.get_errno())})"
            return
        self.fd = fd
        failed = []
        for p in paths:
            wd = libc.inotify_add_watch(fd, os.fsencode(p), _WATCHED)
            if wd >= 0:
                self.paths[wd] = p
            else:
                failed.append(f"{p}: {os.strerror(ctypes.get_errno())}")
        if not self.paths:
            self.close()
            self.status = "off: " + ("; ".join(failed) if failed else "no GPU device file to watch")
            return
        self.status = counted(len(self.paths), "device file") + (f" ({len(failed)} not watched)" if failed else "")

    @property
    def ok(self) -> bool:
        return self.fd >= 0

    def events(self) -> list[tuple[str, str]]:
        """What came since the last look, as ``(kind, file)``: ``open``, ``close``, or ``overflow``
        (the kernel's queue overflowed, events were lost; the file is ``?``). Not counted in
        :attr:`seen` or :attr:`own`: for a caller that tells the events apart itself."""
        out: list[tuple[str, str]] = []
        while self.fd >= 0:
            try:
                buf = os.read(self.fd, 4096)
            except OSError:  # EAGAIN: nothing queued (EINTR or a closed fd: nothing to read either)
                break
            off = 0
            while off + _EVENT.size <= len(buf):
                wd, mask, _cookie, ln = _EVENT.unpack_from(buf, off)
                off += _EVENT.size + ln
                if mask & IN_Q_OVERFLOW:
                    out.append(("overflow", "?"))
                elif mask & _WATCHED:
                    out.append(("open" if mask & IN_OPEN else "close", self.paths.get(wd, "?")))
            if len(buf) < 4096 - 256:  # a short read took everything queued: skip the EAGAIN round trip
                break
        return out

    def _read(self) -> list[str]:
        """The files opened or closed since the last read, once per event (an overflow counts as one
        event of ``?``)."""
        return [path for _kind, path in self.events()]

    def drain(self) -> int:
        """Throw away what is queued: the caller's own events (its NVML calls just now). Returns how many."""
        n = len(self._read())
        self.own += n
        return n

    def others(self) -> list[str]:
        """The files other processes opened or closed since the last look (the caller slept meanwhile)."""
        got = self._read()
        self.seen.update(got)
        return got

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
