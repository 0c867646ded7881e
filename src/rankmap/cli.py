"""The ``rankmap`` command: one sub-command per verb, each in ``rankmap/commands/<verb>.py``.

A verb module exposes ``register(subparsers)`` (adds its parser, sets ``func``) and the
function it sets returns the exit status. Bad input surfaces as :class:`RankmapError`
and is printed as one line; nothing else is caught here, so a real bug shows its traceback.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
import threading
import time

from rankmap import __version__
from rankmap.background import numpy_with_one_blas_thread
from rankmap.errors import RankmapError

# Order is the order of `rankmap --help`. A verb whose module is absent is simply not offered.
VERBS = ["demo", "topo", "profile", "ingest", "jobs", "show", "export", "map", "tune", "run", "monitor", "serve",
         "bench", "doctor"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rankmap",
        description="See how the ranks of a multi-GPU job talk over the machine's links, and place them.",
    )
    parser.add_argument("--version", action="version", version=f"rankmap {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in VERBS:
        try:
            mod = importlib.import_module(f"rankmap.commands.{verb}")
        except ModuleNotFoundError as e:
            if e.name == f"rankmap.commands.{verb}":
                continue
            raise
        mod.register(sub)
    return parser


def process_started() -> float:
    """When this process started, on the ``time.perf_counter()`` clock (Linux: from ``/proc``): what a
    whole command's time counts from, the interpreter's start-up and imports included; elsewhere, now."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])     # field 22, starttime, in clock ticks since boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.perf_counter()
    return time.perf_counter() - max(0.0, age)


def main(argv: list[str] | None = None, started: float | None = None) -> int:
    """Run one verb. ``started`` (a ``time.perf_counter()`` value): when the command began, for the
    verbs whose budget covers the whole command (``map --time-budget``); default: now, as for a caller
    in a process that does more than this command (tests)."""
    started = time.perf_counter() if started is None else started
    parser = build_parser()
    args = parser.parse_args(argv)
    args.started = started
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if getattr(args, "numpy_at_start", True):   # a verb that imports it later says so (set_defaults)
        numpy_with_one_blas_thread()
    try:
        return int(args.func(args) or 0)
    except RankmapError as e:
        print(f"rankmap: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("rankmap: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def entry() -> None:
    """The ``rankmap`` command: :func:`main`, then the process ends without tearing its interpreter down.

    A profile imports SQLAlchemy and NumPy, whose hundreds of thousands of objects took 0.1-0.2 s of
    CPU to free at exit, after the job and the summary: time the command's user waits for nothing.
    The output is flushed and the atexit handlers run first, as at a normal exit; where a thread that
    is not a daemon still runs, the exit is the normal one (which waits for it)."""
    code = main(started=process_started())
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            code = code or 1
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        raise SystemExit(code)
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    entry()
