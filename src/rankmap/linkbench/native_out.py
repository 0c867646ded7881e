"""The one reader of what the benchmark programs print (``native/linkbench/bench_out.h``).

Each line of their stdout is one JSON object with ``rec``: ``info``, ``device``, ``peer``, ``rank``,
``result``, ``note``, ``skip`` or ``error``. Lines that are not such objects (an MPI launcher's own
chatter, a library's warning) are kept apart as ``other`` so an error message can quote them.
Running a program and reading its lines live here too: every benchmark is a child process with a
time limit, killed with its whole process group when the limit passes, so a hung GPU or MPI job
never hangs rankmap.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Sequence

from rankmap.errors import RankmapError

FORMAT = 1                      # RMB_FORMAT of bench_out.h
STOP_GRACE_S = 5.0              # from SIGTERM to SIGKILL when a program runs past its time
EXIT_FAILED, EXIT_NO_GPU, EXIT_USAGE = 3, 4, 5
KINDS = {"info", "device", "peer", "rank", "result", "note", "skip", "error"}


@dataclass
class Output:
    """Everything one benchmark program said, sorted by record kind."""

    records: list[dict] = field(default_factory=list)
    other: list[str] = field(default_factory=list)     # lines that were not records
    stderr: str = ""
    returncode: int | None = None

    def of(self, kind: str) -> list[dict]:
        return [r for r in self.records if r["rec"] == kind]

    @property
    def info(self) -> dict:
        """The first info record (what the program found), merged with later ones."""
        out: dict = {}
        for r in self.of("info"):
            for k, v in r.items():
                out.setdefault(k, v)
        return out

    @property
    def errors(self) -> list[dict]:
        return self.of("error")

    @property
    def finished(self) -> bool:
        return any("done" in r for r in self.of("info"))


def parse_lines(lines: Sequence[str], source: str = "benchmark") -> Output:
    """Sort lines into records and other output; a record of a newer format is refused by name."""
    out = Output()
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        rec = None
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                rec = None
        if not isinstance(rec, dict) or rec.get("rec") not in KINDS:
            out.other.append(line)
            continue
        if rec["rec"] == "info" and int(rec.get("format", FORMAT)) > FORMAT:
            raise RankmapError(f"{source} writes output format {rec['format']}, newer than this rankmap reads "
                               f"({FORMAT}): clear the build cache (RANKMAP_CACHE) or upgrade rankmap")
        out.records.append(rec)
    return out


def run(argv: Sequence[str], *, what: str, timeout: float, env: dict[str, str] | None = None) -> Output:
    """Run one benchmark program (or a launcher running it) and read its records.

    Raises :class:`RankmapError` when it cannot start or runs past ``timeout`` seconds (then its
    whole process group is stopped first: SIGTERM, and SIGKILL to what is left after ``STOP_GRACE_S``;
    an MPI launcher given the time removes its job's shared memory, which a SIGKILL leaves in
    /dev/shm). A non-zero exit is returned, not raised: the caller decides what a failure means (see
    :func:`failure`).
    """
    try:
        p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, start_new_session=True, errors="replace")
    except OSError as e:
        raise RankmapError(f"cannot run {what} ({argv[0]}): {e.strerror or e}") from None
    timed_out = threading.Event()

    def signal_group(sig: int) -> None:
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop() -> None:
        timed_out.set()
        signal_group(signal.SIGTERM)
        try:
            p.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        signal_group(signal.SIGKILL)       # what the launcher left, or the launcher itself

    timer = threading.Timer(timeout, stop)
    timer.start()
    try:
        stdout, stderr = p.communicate()
    except KeyboardInterrupt:
        stop()
        p.wait()
        raise
    finally:
        timer.cancel()
        if timed_out.is_set():
            timer.join()
    if timed_out.is_set():
        raise RankmapError(f"{what} ran longer than {timeout:g} s and was stopped (raise --timeout, or run fewer sizes)")
    out = parse_lines(stdout.splitlines(), what)
    out.stderr = stderr
    out.returncode = p.returncode
    return out


def failure(out: Output, what: str) -> str:
    """One line saying why a program failed: its error record, else its last words."""
    for e in out.errors:
        if e.get("what") == "arguments":
            return f"{what} refused its arguments: {e.get('message')} (a rankmap bug: please report it)"
    if out.errors:
        e = out.errors[0]
        code = e.get("code")
        code_s = f" (code {code})" if code not in (None, -1) else ""
        return f"{what} failed: {e.get('what')}: {e.get('message')}{code_s}"
    return f"{what} exited with status {out.returncode}" + (f": {said}" if (said := last_words(out)) else
                                                              " and said nothing")


def no_gpu(out: Output, what: str) -> RankmapError:
    """The error of a program that found no usable GPU (``EXIT_NO_GPU``). The CUDA runtime's reason
    ("CUDA driver version is insufficient") is what it says without a driver too; the driver probe
    says what is really there, e.g. only the CUDA toolkit's stub libcuda."""
    from rankmap.capture.cuda_build import probe_driver

    why = out.errors[0].get("message") if out.errors else "no CUDA device"
    driver = probe_driver().error
    return RankmapError(f"{what}: no usable CUDA GPU here ({why}{'; ' + driver if driver else ''}); nothing measured")


def last_words(out: Output) -> str:
    """The telling line of a program's (or its launcher's) own output: the first sentence of an
    MPI launcher's boxed message (between lines of dashes), else the last line naming an error."""
    lines = [l.strip() for l in (out.stderr.splitlines() + out.other) if l.strip()]
    for i, l in enumerate(lines):
        if set(l) == {"-"} and i + 1 < len(lines) and set(lines[i + 1]) != {"-"}:
            block = []
            for m in lines[i + 1:]:
                if set(m) == {"-"}:
                    break
                block.append(m)
                if ". " in m or m.endswith((".", ":")):
                    break
            text = " ".join(block)
            return text[:text.index(". ") + 1] if ". " in text else text
    return next((l for l in reversed(lines) if "error" in l.lower() or "fail" in l.lower()),
                lines[-1] if lines else "")
