"""``rankmap monitor``: sample every GPU's NVLink and PCIe counters on its own, into the store.

A monitor session is stored as a job of launcher ``monitor`` with no ranks: its link samples go
into ``link_samples`` like those of a profiled job, so the dashboard, ``/metrics`` and the
utilisation view read both the same way. Its ``meta.monitor`` says where and how it sampled
(host, GPUs with their UUIDs, source, interval, the wall-clock time of the first sample, so that
other jobs on the host can be lined up with it) and, once it ends, what sampling cost.

With GPM the NVLink bytes are integrated rates; the session also reads NVML's exact NVLink
counters once at its start and once at its end (two field-value calls per GPU, whatever its
length): DATA (payload, what GPM's NVLink metrics count, measured on an H200) and RAW (payload
and protocol overhead). Every session says how exact its integral was against DATA over exactly
its own span, with the RAW counters beside for the overhead.
"""

from __future__ import annotations

import resource
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from rankmap.counters.sampler import (FieldSource, LinkSample, LinkSampler, StoreWriter, check_interval, hostname,
                                     open_source)
from rankmap.errors import RankmapError

MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 3600.0


def parse_interval(text: str, option: str = "--interval", longest: float | None = MAX_INTERVAL_S) -> float:
    """``100ms``, ``0.5s``, ``250us``, ``30min``, ``2h`` -> seconds. A bare number is refused: its unit
    would be a guess. ``longest=None`` for a span with no upper bound (``--duration``: a monitor
    session of a day is fine, though one sample an hour is not)."""
    t = text.strip().lower()
    for unit, scale in (("ms", 1e-3), ("us", 1e-6), ("min", 60.0), ("s", 1.0), ("h", 3600.0)):
        if t.endswith(unit):
            num = t[: -len(unit)].strip()
            break
    else:
        raise RankmapError(f"{option} {text!r}: give a unit, e.g. 100ms or 0.5s")
    try:
        v = float(num) * scale
    except ValueError:
        raise RankmapError(f"{option} {text!r}: not a number of {unit}") from None
    if longest is None and not v >= MIN_INTERVAL_S:
        raise RankmapError(f"{option} {text!r}: must be at least {span_text(MIN_INTERVAL_S)}")
    if longest is not None and not MIN_INTERVAL_S <= v <= longest:
        raise RankmapError(f"{option} {text!r}: must be between {span_text(MIN_INTERVAL_S)} and {span_text(longest)}")
    return v


def span_text(seconds: float) -> str:
    """Seconds as ``parse_interval`` reads them back, in the largest unit that keeps a whole number
    (3600 -> '1h', 5400 -> '90min', 0.01 -> '10ms'), so that a bound quoted in a message can be typed as is."""
    for unit, scale in (("h", 3600.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        q = seconds / scale
        if q >= 1 and abs(q - round(q)) < 1e-9:
            return f"{round(q)}{unit}"
    return f"{seconds:g}s"


class _DataCounters:
    """NVML's exact NVLink DATA and RAW TX/RX counters, read just before the first and after the last sample.

    Only for GPM sessions (whose NVLink bytes are integrated rates); a node whose field values
    cannot be read simply gets no check.
    """

    def __init__(self, nvml: Any) -> None:
        try:
            self.fs: FieldSource | None = FieldSource(nvml)
        except RankmapError:
            self.fs = None

    def read(self) -> list[list[int | None]] | None:
        """Per GPU: [DATA tx, DATA rx, RAW tx, RAW rx] bytes (None where NVML has no answer)."""
        if self.fs is None:
            return None
        try:
            return [[None if v is None else v * 1024 for v in self.fs.nvlink_data_raw(g)]
                    for g in range(self.fs.gpu_count())]
        except Exception:  # noqa: BLE001 - the check is extra; the session goes on without it
            return None

    def close(self) -> None:
        if self.fs is not None:
            self.fs.close()


@dataclass
class MonitorResult:
    job_id: int
    host: str
    source: str
    interval_s: float
    gpus: list[dict]
    totals: dict[int, LinkSample]
    elapsed_s: float
    cost: dict
    process_cpu_share: float | None   # the process's CPU time / wall time while sampling (steady state)
    data_check: list[dict] | None = None
    warnings: list[str] = field(default_factory=list)
    process_cpu_s: float | None = None  # the process's CPU time over the whole session, start and stop included

    def as_dict(self) -> dict:
        d = asdict(self)
        d["totals"] = {str(g): asdict(s) for g, s in self.totals.items()}
        return d


def _data_check(before, after, totals: dict[int, LinkSample]) -> list[dict] | None:
    """Per GPU: the integrated NVLink bytes against the RAW and DATA counter deltas of the same span.

    ``diff_data_*`` is the like-for-like error of the integral (GPM counts payload, as DATA does);
    ``diff_raw_*`` is that error less the protocol overhead that RAW counts on top.
    """
    if not before or not after:
        return None
    out = []
    for g, (b, a) in enumerate(zip(before, after)):
        s = totals.get(g)
        row: dict[str, Any] = {"gpu": g}
        for k, d in enumerate(("tx", "rx")):
            got = getattr(s, f"nvlink_{d}") if s else None
            row[f"sampled_{d}"] = got
            for kind, i in (("data", k), ("raw", k + 2)):
                exact = None if a[i] is None or b[i] is None else a[i] - b[i]
                row[f"{kind}_{d}"] = exact
                row[f"diff_{kind}_{d}"] = (got - exact) / exact if exact and got is not None else None
        out.append(row)
    return out


class _StopOnSignals:
    """Ctrl-C, SIGTERM and SIGHUP end the session cleanly (the last samples are stored)."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop, self.old = stop, {}

    def __enter__(self) -> "_StopOnSignals":
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                self.old[s] = signal.signal(s, lambda *_: self.stop.set())
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)


def run_monitor(store: Any, *, interval_s: float = 0.1, source: str = "auto", duration_s: float | None = None,
                nvml: Any = None, stop: threading.Event | None = None,
                on_start: Callable[[int, str, int], None] | None = None) -> MonitorResult:
    """Sample until ``stop`` is set, a signal comes, or ``duration_s`` passes; returns the totals.

    ``on_start(job_id, source kind, GPU count)`` is called once sampling runs (to tell the user).
    """
    if duration_s is not None and duration_s <= 0:
        raise RankmapError("--duration must be positive")
    src = open_source(source, nvml)
    check = None
    try:
        check_interval(src, interval_s)
        gpus = [asdict(g) for g in src.gpus()]
        if not gpus:
            raise RankmapError("NVML sees no GPU on this node: nothing to monitor")
        host = hostname()
        ms = round(interval_s * 1000, 3)
        meta = {"monitor": {"host": host, "source": src.kind, "interval_ms": ms, "gpus": gpus}}
        job_id = store.create_job(["rankmap", "monitor", "--interval", f"{ms:g}ms"], launcher="monitor",
                                  hosts=[host], key=f"rankmap monitor {host}", meta=meta)
        check = _DataCounters(nvml) if src.kind == "gpm" else None
        writer = StoreWriter(store, job_id)
        after: list = []

        def on_sample(batch: Any) -> None:
            if check and sampler.stopping:  # the DATA counters right after the last GPM snapshots
                after[:] = [check.read()]
            writer(batch)

        sampler = LinkSampler(src, interval_s=interval_s, on_sample=on_sample, keep=False)
        stop = stop or threading.Event()

        def cpu_s() -> float:
            ru = resource.getrusage(resource.RUSAGE_SELF)
            return ru.ru_utime + ru.ru_stime

        try:
            cpu0, t0 = cpu_s(), time.monotonic()
            with _StopOnSignals(stop):
                before = check.read() if check else None
                sampler.start()
                meta["monitor"]["t0_unix_ns"] = sampler.t0_unix_ns
                store.update_job_meta(job_id, meta)
                if on_start:
                    on_start(job_id, src.kind, len(gpus))
                # the steady state: what sampling at this interval costs, without the one-off work of
                # starting and stopping (NVML set-up, the DATA/RAW reads, the job's meta)
                cpu1, t1 = cpu_s(), time.monotonic()
                deadline = None if duration_s is None else t0 + duration_s
                while not stop.is_set():  # short waits: a signal is acted on within half a second
                    left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
                    if left <= 0 or stop.wait(left):
                        break
                cpu2, t2 = cpu_s(), time.monotonic()
                sampler.stop()
            elapsed = time.monotonic() - t0
            cpu3 = cpu_s()
        except BaseException:
            sampler.stop()
            writer.flush()
            store.finish_job(job_id, exit_status=1, meta=meta)
            raise
        warnings = list(sampler.warnings)
        if not writer.flush():
            warnings.append(f"{len(writer.pending)} link sample rows could not be stored")
        warnings += writer.warnings
        totals = sampler.totals()
        steady = (cpu2 - cpu1) / (t2 - t1) if t2 > t1 else None
        res = MonitorResult(job_id, host, src.kind, interval_s, gpus, totals, elapsed, sampler.cost.as_dict(),
                            steady, _data_check(before, after[0] if after else None, totals), warnings,
                            process_cpu_s=cpu3 - cpu0)
        meta["monitor"].update(cost=res.cost, process_cpu_share=res.process_cpu_share, process_cpu_s=res.process_cpu_s,
                               data_check=res.data_check,
                               gaps=getattr(src, "gaps", 0))
        store.finish_job(job_id, exit_status=0, elapsed_ns=int(elapsed * 1e9), meta=meta)
        return res
    finally:
        src.close()
        if check:
            check.close()
