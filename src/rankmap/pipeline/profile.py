"""``profile_command``: run a job with capture injected, stream its records into the store.

The job runs as a child of rankmap with its stdin/stdout/stderr untouched. While it runs, a
background thread appends what the ranks flushed since its last look to the store
(:mod:`rankmap.pipeline.ingest`: only new blocks are parsed, only changed counters written), so a
job that is killed (or a rankmap that is) leaves in the store what the ranks had flushed, and
``rankmap serve`` can watch a job live. After the job ends, one final cycle takes the rest, and the
reader's problems (a truncated tail, a rank that never finalised) become warnings: the data before
the damage is still used. The store being away (a database restarted, a file locked) costs the
job nothing: see :func:`profile_command`.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rankmap.capture import launchers as L
from rankmap.capture.rundir import RunDir, make_run_dir, parse_utc, utc_now
from rankmap.errors import RankmapError
from rankmap.pipeline.pacing import MAX_GAP_S, next_wait

if TYPE_CHECKING:   # the store and the ingest are imported once the job runs (their imports take a while)
    from rankmap.pipeline.ingest import RunIngest


@dataclass
class ProfileResult:
    job_id: int
    exit_status: int
    run_dir: Path
    launcher: str
    world_size: int | None
    elapsed_ns: int
    ranks_reporting: int = 0
    bytes_sent: int = 0
    problems: list[str] = field(default_factory=list)
    stored: bool = True                 # everything reached the store (else see ingest_command)
    cpu_s: float = 0.0                  # CPU time of rankmap's own process while the job ran
    ingest_command: str | None = None   # what completes the job when the store was away
    store: Any = None                   # the store the job went into (None: it could not be opened)


def _warn(msg: str) -> None:
    print(f"rankmap: warning: {msg}", file=sys.stderr, flush=True)


def _note(msg: str) -> None:
    print(f"rankmap: {msg}", file=sys.stderr, flush=True)


def _build_shim(mpicc: str) -> Path:
    try:
        from rankmap.capture.shim_build import build_shim
    except ImportError as e:
        raise RankmapError(f"the MPI shim builder is not available in this installation ({e})") from None
    try:
        return Path(build_shim(mpicc, progress=_note))
    except RankmapError:
        raise
    except (OSError, subprocess.SubprocessError) as e:
        raise RankmapError(f"building the MPI shim with {mpicc} failed: {e}") from None


def _build_nccl_plugin(required: bool) -> Path | None:
    """The NCCL profiler plugin; when not ``required`` a failure just leaves NCCL uncaptured."""
    try:
        from rankmap.capture.nccl_build import build_plugin
        return Path(build_plugin(progress=_note))
    except ImportError as e:
        if required:
            raise RankmapError(f"the NCCL profiler plugin is not available in this installation ({e})") from None
    except RankmapError:
        if required:
            raise
    except (OSError, subprocess.SubprocessError) as e:
        if required:
            raise RankmapError(f"building the NCCL profiler plugin failed: {e}") from None
    return None


def linked_mpi(exe: str) -> str | None:
    """'openmpi' or 'hydra' when a single-process program is linked with an MPI library (a singleton run)."""
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    if "libmpich" in out or "libmpi_mpich" in out:
        return "hydra"
    if "libmpi.so" in out:
        return "openmpi" if "openmpi" in out or "libopen-" in out else "hydra"
    return None


class _Streamer(threading.Thread):
    """Appends what the ranks flush to the store while the job runs, at a bounded cost.

    Each cycle parses only what the record files gained (:class:`RunIngest`) and appends it. The
    cycle's own CPU time sets the wait before the next one, so rankmap's share of a core stays near
    :data:`~rankmap.pipeline.pacing.CPU_BUDGET` however many ranks flush how often
    (:func:`~rankmap.pipeline.pacing.next_wait`): a small job is stored about every ``interval``
    seconds, a large one in larger, rarer batches (never rarer than every
    :data:`~rankmap.pipeline.pacing.MAX_GAP_S`, which is also the heartbeat that tells the store
    this profiler is alive).

    A store that cannot be reached (or stays locked) does not stop the job: the batch is kept, the
    writes are retried with backoff, and :meth:`outage` says so once.
    """

    def __init__(self, ingest: "RunIngest", interval: float, on_outage: Callable[[str], None] | None = None):
        super().__init__(name="rankmap-ingest", daemon=True)
        self.ingest, self.interval = ingest, interval
        self.on_outage = on_outage
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self.down: str | None = None          # why the store is unreachable, while it is
        self.outages = 0
        self.backoff = 0.0
        self.cpu_s = 0.0
        self.cycles = 0
        self.written = time.monotonic()        # the last write (the job's creation was the first heartbeat)

    def run(self) -> None:
        from rankmap.background import yield_to_the_job

        with self.lock:
            self.ingest.warm_up()     # off the main thread, which goes on to wait for the job
        # only then the lowest priority: the warm-up (imports, the store's first statements) is one
        # burst while the job starts, and a short job's end waits for it (on a loaded machine a
        # thread at nice 19 took over a second for it); the cycles after it are the steady cost
        self.priority = yield_to_the_job()
        wait, first = 0.0, True          # the first cycle at once: what the job flushed while the store opened
        while not self.stop_event.wait(wait):
            t0 = time.thread_time()
            try:
                self.cycle(final=False)
            except Exception as e:  # the job must go on; the final cycle reports for real
                self.error = e
            # the first cycle catches up with what the job wrote while the store was being opened, and
            # pays one-off costs (first readers): it does not set the pace
            wait = self.interval if first else next_wait(time.thread_time() - t0, self.interval)
            first = False
            if self.down:
                self.backoff = min(MAX_GAP_S, max(1.0, 2 * self.backoff))
                wait = max(wait, self.backoff)

    def cycle(self, final: bool) -> bool:
        """One poll and write; False when the store could not take the write (the batch is kept).

        A cycle that found nothing new writes nothing, unless the last write is :data:`MAX_GAP_S`
        old (the write is also the heartbeat that says this profiler lives) or the store was away
        (the write says whether it is back)."""
        from rankmap.store import StoreUnavailable

        with self.lock:
            t0 = time.thread_time()
            try:
                self.ingest.poll(final=final)
                if (not final and self.down is None and not self.ingest.pending()
                        and time.monotonic() - self.written < MAX_GAP_S):
                    return True
                try:
                    self.ingest.write()
                    self.written = time.monotonic()
                except StoreUnavailable as e:
                    if self.down is None:
                        self.outages += 1
                        if self.on_outage and self.outages == 1:
                            self.on_outage(str(e))
                    self.down = str(e)
                    return False
                self.down, self.backoff = None, 0.0
                return True
            finally:
                self.cpu_s += time.thread_time() - t0
                self.cycles += 1

    def finish(self, deadline_s: float) -> bool:
        """The last cycle (everything the ranks wrote), retried with backoff until ``deadline_s`` passed."""
        self.stop_event.set()
        self.join()
        end = time.monotonic() + deadline_s
        delay = 0.5
        while not self.cycle(final=True):
            if time.monotonic() + delay > end:
                return False
            time.sleep(delay)
            delay = min(8.0, delay * 2)
        return True

    @property
    def ranks_reporting(self) -> int:
        return len(self.ingest.ranks)

    @property
    def bytes_sent(self) -> int:
        return self.ingest.bytes_sent


class _ProgressLine:
    """``rankmap: job 7 · 0:12 · 4 ranks reporting · 1.2 GB sent`` redrawn in place on stderr."""

    def __init__(self, job_id: int, streamer: _Streamer, world_size: int | None, force: bool):
        from rich.console import Console
        from rich.live import Live
        self.job_id, self.streamer, self.world_size = job_id, streamer, world_size
        self.t0 = time.monotonic()
        console = Console(stderr=True, force_terminal=True if force else None, highlight=False)
        self.live = Live(self, console=console, refresh_per_second=1, transient=True,
                         redirect_stdout=False, redirect_stderr=False)

    def __rich__(self) -> str:
        from rankmap.errors import counted
        from rankmap.report.summary import human_bytes
        s = int(time.monotonic() - self.t0)
        shown = self.world_size or self.streamer.ranks_reporting
        ranks = (f"{self.streamer.ranks_reporting}/" if self.world_size else "") + counted(shown, "rank")
        return (f"[dim]rankmap:[/dim] job {self.job_id} · {s // 3600}:{s // 60 % 60:02d}:{s % 60:02d} · "
                f"{ranks} reporting · {human_bytes(self.streamer.bytes_sent)} sent")

    def __enter__(self) -> "_ProgressLine":
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)


class _Signals:
    """While the job runs: Ctrl-C / SIGTERM / SIGHUP terminate it (a second one kills it)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.count, self.old = 0, {}
        self.received: int | None = None

    def attach(self, child: subprocess.Popen) -> None:
        """The job to stop; a signal that came while it was being started stops it now."""
        self.child = child
        if self.count:
            self._stop()

    def handler(self, signum: int, _frame: Any) -> None:
        self.count += 1
        self.received = signum
        if self.child is not None:
            self._stop()

    def _stop(self) -> None:
        try:
            if self.count == 1:
                self.child.terminate()
            else:
                self.child.kill()
        except ProcessLookupError:
            pass

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self.old[s] = signal.signal(s, self.handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)



def _write_end(rd: Any, info: dict, warn: Callable[[str], None]) -> None:
    """How the job ended, into its ``job.json``; a run directory that cannot take it (its disk full)
    is a warning: the job ran, its exit status is still rankmap's, and the store has the end."""
    try:
        rd.write_job(info)
    except RankmapError as e:
        warn(f"{e}; the job's end is in the store only")


def stopped_status(status: int, received: int | None, ran_to_the_end: bool) -> int:
    """The exit status of a job rankmap stopped on a signal it received (Ctrl-C, a SIGTERM): 128 plus
    that signal, as a shell reports a command the signal ended (130 for Ctrl-C), not whatever the
    launcher said after it was told to stop (Open MPI's mpirun: 1; MPICH's mpiexec: 0). A job whose
    ranks all finalised before it stopped ran to its end and keeps its own status."""
    if not received or (status == 0 and ran_to_the_end):
        return status
    return 128 + received


def _collective_source(launcher: L.Launcher, asked: str | None) -> str:
    """The source of collective pairs for this launch; ``library`` only where it can be had safely.

    The library source is Open MPI's monitoring PML, so it needs an Open MPI launch; and the
    monitoring brings coll/monitoring, which kills a job that calls a neighbourhood collective
    (:mod:`rankmap.capture.program_scan`): such a program is refused before it starts, in one line."""
    source = L.collective_source(asked, os.environ)
    if source != "library" or not launcher.is_mpi:
        return source
    if launcher.kind != "openmpi":
        raise RankmapError(f"--collectives library: only Open MPI's monitoring PML counts a library's own "
                           f"messages, and {launcher.argv[0]} is not Open MPI's launcher; use --collectives auto "
                           f"(the mirror of the library's algorithms)")
    from rankmap.capture.program_scan import neighbourhood_user
    culprit = neighbourhood_user(launcher.programs())
    if culprit is not None:
        raise RankmapError(f"--collectives library: {culprit} calls neighbourhood collectives (MPI_Neighbor_*), "
                           f"which Open MPI's coll/monitoring, loaded with the library source, kills with SIGFPE "
                           f"or SIGSEGV; profile it with --collectives auto (the default records them exactly)")
    return source


def _capture_libraries(launcher: L.Launcher, argv: list[str], mpicc: str | None,
                       nccl: str) -> tuple[Path | None, str | None, Path | None]:
    """The MPI shim (and the mpicc it was built with) and the NCCL plugin this launch needs."""
    shim = mpicc_used = None
    if launcher.is_mpi:
        mpicc_used = L.find_mpicc(launcher, mpicc)
    elif launcher.kind == "plain":
        # A single process linked with MPI (a singleton run) is profiled too; so is any program
        # when --mpicc says which MPI it loads (e.g. Python with mpi4py).
        flavour = linked_mpi(launcher.executable or argv[0])
        if flavour or mpicc:
            mpicc_used = L.find_mpicc(L.Launcher(flavour or "plain", argv, None), mpicc)
    if mpicc_used:
        from rankmap.capture.native_build import cache_root
        from rankmap.capture.preload import check_folder
        check_folder(cache_root() / "shim")      # before seconds of build for a shim no rank could load
        shim = _build_shim(mpicc_used)
    want_nccl = nccl == "on" or (nccl == "auto" and launcher.kind == "torchrun")
    plugin = None if nccl == "off" else _build_nccl_plugin(required=want_nccl)
    return shim, mpicc_used, plugin


# What --cuda-activity on costs, measured on 2x H200 (docs/benchmarks.md): the default's summary line quotes it.
CUDA_ON_COST = "+17-29 % in launch-bound loops"
CUDA_MODES = ("off", "copies", "on", "auto")


def _cuda_library(mode: str | None) -> tuple[Path | None, str | None, str, str]:
    """The CUDA activity library and CUPTI to inject, the activity kinds, and the capture's state for
    the summary.

    ``mode`` None is the default, off: CUPTI tracing costs launch-bound loops 17-29 % (copies only:
    11-15 %; docs/benchmarks.md), which is not negligible, so the summary names the switch and its
    cost instead. ``on`` (copies and kernels) and ``copies`` require a CUDA capture (a clear error
    otherwise); ``auto`` records what ``on`` does where this machine has a CUDA driver and a CUPTI,
    and otherwise says why not in one line (for wrappers that run on machines with and without
    GPUs); ``off`` never injects. A CUDA driver is a ``libcuda.so.1`` whose version and ``cuInit``
    answer: the CUDA toolkit's stub libcuda (found by linkers, e.g. through ``LIBRARY_PATH``, on
    machines without a driver) is none, and ``on`` with only a stub is an error naming it.
    """
    if mode is None:
        return None, None, "", f"off (default; --cuda-activity on records copies+kernels: {CUDA_ON_COST})"
    if mode == "off":
        return None, None, "", "off (--cuda-activity off)"
    kinds = "copies" if mode == "copies" else "all"
    strict = mode != "auto"
    if os.environ.get("CUDA_INJECTION64_PATH"):
        why = f"CUDA_INJECTION64_PATH is already set ({os.environ['CUDA_INJECTION64_PATH']}): another tool injects into CUDA"
        if strict:
            raise RankmapError(f"--cuda-activity {mode}: {why}")
        return None, None, "", f"off: {why}"
    from rankmap.capture.cuda_build import build_library, find_cupti, probe_driver
    driver = probe_driver()
    if driver.error:
        if strict:
            raise RankmapError(f"--cuda-activity {mode}: {driver.error} (--cuda-activity auto records CUDA "
                               f"activity only where there is a driver)")
        return None, None, "", f"off: {driver.error}"
    cupti = find_cupti()
    if cupti is None:
        if strict:
            raise RankmapError(f"--cuda-activity {mode}: no CUPTI library found (install the CUDA toolkit's CUPTI, "
                               "or set RANKMAP_CUPTI=/path/to/libcupti.so)")
        return None, None, "", "off: no CUPTI library found (set RANKMAP_CUPTI to its path)"
    state = "on" if kinds == "all" else "on: copies"
    try:
        return build_library(progress=_note), cupti, kinds, state
    except RankmapError as e:
        if strict:
            raise
        return None, None, "", f"off: {e}"
    except (OSError, subprocess.SubprocessError) as e:
        if strict:
            raise RankmapError(f"building the CUDA activity library failed: {e}") from None
        return None, None, "", f"off: building the CUDA activity library failed: {e}"


#: how long the end of a job waits for a link sampler still starting (NVML: 0.2-0.4 s on a GPU node)
START_WAIT_S = 2.0


class _SamplerStart(threading.Thread):
    """The link sampler, started beside the job's own start: NVML's initialisation (pynvml's import,
    ``nvmlInit``, GPM's set-up) runs while the main thread opens the store, and the sampling begins
    once the job is in the store (:meth:`attach`). :meth:`result` is the sampler, or None where there
    is no NVML or no GPU, or the job never reached the store.

    A profile's sampler reads once a flush interval (1 s), not once a timeline bucket (100 ms): on the
    H200 host, a 16-rank job whose ranks poll all 16 cores in lockstep lost 4.7 % of its loop to a
    sampler at 10 Hz (0.44 % of a core of its own; the reads cost the ranks more than the sampler's
    CPU shows) and 1.2 % at 1 Hz, against 0.7 % with no sampler (bench/profile_cost.py). Its ticks fall
    on the moments the ranks flush, so the job is held once a second for both."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(name="rankmap-link-sampler-start", daemon=True)
        self.interval_s = interval_s
        self.sampler: Any = None
        self.abandoned = False      # the job ended before NVML was ready: no sampling began
        self._go = threading.Event()
        self._target: tuple[Any, int] | None = None
        self._lock = threading.Lock()

    def run(self) -> None:
        try:
            from rankmap.counters.sampler import open_source
            source = open_source("auto")
        except Exception:  # no driver, no GPU, no pynvml: profiling goes on without link counters
            return
        if source.gpu_count() == 0:
            source.close()
            return
        self._go.wait()
        with self._lock:
            if self._target is None or self.abandoned:
                source.close()
                return
            self.sampler = _start_sampling(source, self.interval_s, *self._target)

    def attach(self, store: Any, job_id: int) -> None:
        """Sample into job ``job_id`` of ``store`` (as soon as the source is open)."""
        self._target = (store, job_id)
        self._go.set()

    def result(self) -> Any:
        """The sampler, once the start is done; None where NVML is still starting :data:`START_WAIT_S`
        after the job's end (a driver that hangs must not hold the profile's end for long)."""
        self._go.set()
        self.join(START_WAIT_S)      # NVML ready in a moment: the job's link totals are worth the wait
        with self._lock:
            if self.sampler is None and self.is_alive():
                self.abandoned = True      # the thread closes its source when it gets there
                return None
        self.join()
        return self.sampler


def _start_sampling(source: Any, interval_s: float, store: Any, job_id: int) -> Any:
    """NVLink/PCIe counters of the node's GPUs (GPM where the GPUs have it, else NVML field values)
    streamed into job ``job_id``; None (the source closed) where sampling cannot start."""
    from dataclasses import asdict

    from rankmap.counters.sampler import GPM_MIN_INTERVAL_S, LinkSampler, StoreWriter, hostname
    try:
        if source.kind == "gpm":   # a finer timeline than GPM can follow: the link samples keep their own pace
            interval_s = max(interval_s, GPM_MIN_INTERVAL_S)
        sampler = LinkSampler(source, interval_s=interval_s, on_sample=StoreWriter(store, job_id), keep=False).start()
    except Exception:  # a first read that fails: profiling goes on without link counters
        source.close()
        return None
    # where and when it samples: the dashboard lines the samples up with the ranks, /metrics labels them
    from rankmap.store import StoreUnavailable
    try:
        store.update_job_meta(job_id, {"link_sampler": {
            "source": source.kind, "interval_ms": interval_s * 1000, "t0_unix_ns": sampler.t0_unix_ns,
            "host": hostname(), "gpus": [asdict(g) for g in source.gpus()]}})
    except StoreUnavailable:   # the store is away: the samples wait in the writer, the job goes on
        pass
    return sampler


def slurm_ids(env) -> dict:
    """``{"slurm": {"job_id", "step_id"}}`` of a profile started inside a Slurm allocation (the labels
    of its /metrics series), else nothing."""
    ids = {k: env[v] for k, v in (("job_id", "SLURM_JOB_ID"), ("step_id", "SLURM_STEP_ID")) if env.get(v)}
    return {"slurm": ids} if ids else {}


def profile_command(argv: Sequence[str], *, store: Any = None, bucket_ms: int = 100, flush_ms: int = 1000,
                    link_ms: int | None = None, mpicc: str | None = None, progress: bool = True,
                    force_progress: bool = False, run_dir: str | os.PathLike | None = None, nccl: str = "auto",
                    link_sampler: bool = True, cuda: str | None = None, warn: Callable[[str], None] = _warn,
                    store_wait_s: float | None = None, collectives: str | None = None,
                    started: float | None = None) -> ProfileResult:
    """Run ``argv`` with capture injected, stream its records into ``store``; returns the job's result.

    ``store`` is a :class:`rankmap.store.Store`, a database URL, or None for the default store.
    ``nccl`` is ``'auto'`` (the NCCL plugin for torchrun always, for other launchers when it can be
    built), ``'on'`` (required) or ``'off'``; ``cuda`` is the CUDA activity capture: None (the default:
    off, with the switch and its measured cost in the summary), ``'off'``, ``'copies'``, ``'on'`` or ``'auto'``
    (see :func:`_cuda_library`); ``collectives`` the source of collective pairs (``auto``, the
    default: the mirror where it covers the library, no monitoring loaded into the job; ``library``,
    ``mirror``, ``model``: :func:`_collective_source`). With ``link_sampler``, the GPUs' NVLink and PCIe byte
    counters are sampled every ``link_ms`` (default: ``flush_ms``) while the job runs, where NVML is available
    (why not once a bucket: :class:`_SamplerStart`). The progress line shows when stderr is a terminal and
    ``progress`` is set, or always with ``force_progress``. ``started`` (a ``time.perf_counter()``
    value, the command's start) dates the job's meta ``launch_s``: the seconds rankmap took before the
    job started, beside ``end_s``, those from the job's end to its finish in the store (the two
    halves of the fixed cost a user waits for).

    The job starts as soon as its capture is ready (:func:`_prepare`): the store is opened, the job
    created in it and the streaming started while it runs (:func:`_attach`), so the store's imports
    and set-up are not added to the job's wall time. A store that becomes unreachable while the job
    runs -- or that cannot be opened once it started -- does not stop it: the records stay in the run
    directory, writes are retried, and if the store is still away ``store_wait_s`` seconds
    (``$RANKMAP_STORE_WAIT``, default 20) after the job ended, the result says so
    (``stored=False``) with the ``rankmap ingest`` command that completes the job.
    """
    if store_wait_s is None:
        store_wait_s = float(os.environ.get("RANKMAP_STORE_WAIT") or 20)
    plan = _prepare(list(argv), store=store, bucket_ms=bucket_ms, flush_ms=flush_ms, link_ms=link_ms, mpicc=mpicc,
                    run_dir=run_dir, nccl=nccl, cuda=cuda, collectives=collectives)
    show = force_progress or (progress and sys.stderr.isatty())
    with _Signals() as sigs:
        t0 = time.monotonic_ns()
        if started is not None:
            plan.meta["launch_s"] = round(time.perf_counter() - started, 3)
        try:
            child = subprocess.Popen(plan.inj.argv, env=plan.inj.env)
        except OSError as e:
            plan.rd.remove_if_empty()
            raise RankmapError(f"cannot start {plan.argv[0]}: {e.strerror or e}") from None
        sigs.attach(child)
        cpu0 = time.process_time()
        live = _attach(plan, child, warn, link_sampler)
        if show and live.streamer is not None:
            with _ProgressLine(live.job_id, live.streamer, plan.launcher.world_size, force_progress):
                rc = _wait(child)
        else:
            rc = _wait(child)
        elapsed = time.monotonic_ns() - t0
        cpu_s = time.process_time() - cpu0        # rankmap's own process while the job ran (not the job)
    return _finish(plan, live, rc if rc >= 0 else 128 - rc, elapsed, cpu_s, sigs.received, warn, store_wait_s)


@dataclass
class _Plan:
    """What :func:`_prepare` decided before the launch."""

    argv: list[str]
    launcher: L.Launcher
    rd: RunDir
    inj: L.Injection
    store: Any                  # a Store, or the URL to open once the job runs
    mpicc: str | None
    meta: dict[str, Any]
    started: str = ""


def _prepare(argv: list[str], *, store: Any, bucket_ms: int, flush_ms: int, link_ms: int | None,
             mpicc: str | None, run_dir: Any, nccl: str, cuda: str | None, collectives: str | None) -> _Plan:
    """Everything that must hold before the job starts: the options, the launcher, the run directory,
    the hooks (built or found in the cache) and the environment that carries them; a bad store URL
    is refused here too (:func:`rankmap.home.check_url`), without the store's imports."""
    if bucket_ms <= 0 or flush_ms <= 0 or (link_ms is not None and link_ms <= 0):
        raise RankmapError("--bucket-ms, --flush-ms and --link-ms must be positive")
    if nccl not in ("auto", "on", "off"):
        raise RankmapError(f"--nccl must be auto, on or off, not {nccl!r}")
    if cuda is not None and cuda not in CUDA_MODES:
        raise RankmapError(f"--cuda-activity must be {', '.join(CUDA_MODES)}, not {cuda!r}")
    launcher = L.recognise(argv)
    rd = make_run_dir(run_dir)        # before the slow part: an unwritable place fails at once
    try:
        if store is None or isinstance(store, str):
            from rankmap.home import check_url
            check_url(store)
        source = _collective_source(launcher, collectives)
        shim, mpicc_used, plugin = _capture_libraries(launcher, argv, mpicc, nccl)
        cuda_lib, cupti, cuda_kinds, cuda_state = _cuda_library(cuda)
    except BaseException:
        rd.remove_if_empty()
        raise
    inj = L.prepare(launcher, run_dir=rd.path, shim=shim, nccl_plugin=plugin, cuda_lib=cuda_lib, cupti=cupti,
                    cuda_kinds=cuda_kinds, bucket_ms=bucket_ms, flush_ms=flush_ms, collectives=source)
    meta = {"injected": inj.injected, "mpicc": mpicc_used, "bucket_ms": bucket_ms, "flush_ms": flush_ms,
            "link_ms": link_ms or flush_ms, "cuda_activity": cuda_state, "collectives": source, **slurm_ids(os.environ)}
    return _Plan(argv, launcher, rd, inj, store, mpicc_used, meta, started=utc_now())


@dataclass
class _Live:
    """The running job's ties to the store (all None when the store could not be opened)."""

    store: Any = None
    job_id: int = 0
    streamer: _Streamer | None = None
    sampler_start: _SamplerStart | None = None
    sampler: Any = None
    completes: str = ""
    why_not: str | None = None       # why the store could not be opened


def _attach(plan: _Plan, child: subprocess.Popen, warn: Callable[[str], None], link_sampler: bool) -> _Live:
    """Once the job runs: the store opened, the job created in it and in ``job.json``, the streaming
    ingest and the link sampler started. A store that cannot be opened now is an outage, not an
    error: the job goes on and its records wait in the run directory."""
    from rankmap.background import numpy_with_one_blas_thread
    numpy_with_one_blas_thread()      # NumPy's first import, now that the job runs (not before it)
    from rankmap.pipeline.ingest import RunIngest, ingest_command, new_run_uid
    from rankmap.store import Store, command_key, open_store, process_id

    live = _Live()
    store, rd, launcher = plan.store, plan.rd, plan.launcher
    if link_sampler:    # its ticks are wall-clock multiples of link_ms: bucket boundaries, and the ranks' flush moments
        live.sampler_start = _SamplerStart(plan.meta["link_ms"] / 1000)
        live.sampler_start.start()
    uid = new_run_uid()
    rd.write_job({"run_uid": uid, "command": plan.argv, "launched": plan.inj.argv, "launcher": launcher.kind,
                  "world_size": launcher.world_size, "start": plan.started, "env": plan.inj.injected,
                  "mpicc": plan.mpicc, "bucket_ms": plan.meta["bucket_ms"], "flush_ms": plan.meta["flush_ms"]})
    try:
        if not isinstance(store, Store):
            store = open_store(store)
        live.job_id = store.create_job(plan.argv, launcher=launcher.kind, world_size=launcher.world_size,
                                       run_dir=rd.path, key=command_key(plan.argv), run_uid=uid,
                                       profiler=process_id(), meta=plan.meta,
                                       created=parse_utc(plan.started))
    except Exception as e:  # noqa: BLE001 - whatever stops the store, the job that already runs goes on
        live.why_not = str(e).splitlines()[0] if str(e) else type(e).__name__
        from rankmap.home import shown
        url = store.url if isinstance(store, Store) else store
        live.completes = f"rankmap ingest {shlex.quote(str(rd.path))} --db {shlex.quote(shown(url))}"
        warn(f"{live.why_not}; the job goes on and its records stay in {rd.path}")
        return live
    live.store = store
    rd.write_job({"job_id": live.job_id, "store": store.url})
    live.completes = ingest_command(rd.path, store)

    def outage(why: str) -> None:
        warn(f"{why}; job {live.job_id} goes on and its records stay in {rd.path}; retrying")

    ingest = RunIngest(store, live.job_id, rd.path, resume=False)
    flush_ms = plan.meta["flush_ms"]
    live.streamer = _Streamer(ingest, interval=min(1.0, max(0.2, flush_ms / 1000)), on_outage=outage)
    live.streamer.start()
    if live.sampler_start is not None:
        live.sampler_start.attach(store, live.job_id)
    return live


def _finish(plan: _Plan, live: _Live, status: int, elapsed: int, cpu_s: float, received: int | None,
            warn: Callable[[str], None], store_wait_s: float) -> ProfileResult:
    """After the job: the last ingest cycle, the link sampler's last sample, the job finished in the
    store, and what the user must know (problems, ranks that never wrote, an incomplete store)."""
    t_end = time.monotonic_ns()
    rd, launcher = plan.rd, plan.launcher
    streamer = live.streamer
    # the sampler's last sample (an NVML read while the job's contexts are torn down can take a few
    # hundred ms on a GPU node) is taken beside the last ingest cycle, not after it
    sampler_end: dict = {"problems": []}

    def stop_sampler() -> None:
        try:
            live.sampler = live.sampler_start.result() if live.sampler_start is not None else None
            sampler_end["sampled"] = _stop_link_sampler(live, sampler_end["problems"])
        except Exception as e:  # noqa: BLE001 - the job's records matter more than its link counters
            sampler_end["problems"].append(f"link sampler: stopping it failed: {e}")

    stopper = threading.Thread(target=stop_sampler, name="rankmap-link-sampler-stop", daemon=True)
    stopper.start()
    stored = streamer.finish(store_wait_s) if streamer else False
    status = stopped_status(status, received, streamer.ingest.ran_to_the_end() if streamer else False)
    problems = streamer.ingest.problems() if streamer else []
    if streamer and streamer.error is not None and stored:
        problems.append(f"a write to the store failed while the job ran ({streamer.error}); "
                        f"the final one stored everything")
    stopper.join()
    problems += sampler_end["problems"]
    sampled = sampler_end.get("sampled", {})
    for p in problems:
        warn(p)
    sizes = streamer.ingest.world_ranks if streamer else _ranks_of_files(rd)
    ws = (streamer.ingest.world_size if streamer else None) or launcher.world_size
    _write_end(rd, {"end": utc_now(), "exit_status": status, "elapsed_ns": elapsed, "ranks_reporting": len(sizes),
                    "world_size": ws, "rankmap_cpu_s": round(cpu_s, 3)}, warn)
    if streamer is not None:
        from rankmap.store import StoreUnavailable
        meta = {"problems": len(problems), "signal": signal.Signals(received).name if received else None,
                "rankmap_cpu_s": round(cpu_s, 3), "ingest_cycles": streamer.cycles,
                "ingest_cpu_s": round(streamer.cpu_s, 3), "ingest_priority": getattr(streamer, "priority", None),
                "store_outages": streamer.outages, **sampled, **streamer.ingest.collective_meta(),
                "end_s": round((time.monotonic_ns() - t_end) / 1e9, 3)}
        if stored:
            try:
                live.store.finish_job(live.job_id, exit_status=status, elapsed_ns=elapsed, world_size=ws, meta=meta)
            except StoreUnavailable as e:
                stored = False
                if streamer.outages == 0:
                    warn(f"{e}; job {live.job_id} goes on and its records stay in {rd.path}; retrying")
    if not stored:
        what = f"job {live.job_id} is incomplete in the store {live.store.url}" if live.store is not None else \
            "the job is not in the store"
        warn(f"{what}; complete it with: {live.completes}")
    _say_what_was_captured(live.job_id, status, sizes, ws, rd, warn)
    return ProfileResult(job_id=live.job_id, exit_status=status, run_dir=rd.path, launcher=launcher.kind,
                         world_size=ws, elapsed_ns=elapsed, ranks_reporting=len(sizes),
                         bytes_sent=streamer.bytes_sent if streamer else 0, problems=problems, stored=stored,
                         cpu_s=cpu_s, ingest_command=None if stored else live.completes, store=live.store)


def _stop_link_sampler(live: _Live, problems: list[str]) -> dict:
    """The sampler's last sample and its cost, for the job's meta; its problems added to ``problems``."""
    sampler = live.sampler
    if sampler is None:
        if live.sampler_start is not None and live.sampler_start.abandoned:
            return {"link_sampler": {"state": "none: the job ended before NVML was ready"}}
        return {}
    from rankmap.store import StoreUnavailable
    sampler.stop()
    try:
        if not sampler.on_sample.flush():
            problems.append(f"{len(sampler.on_sample.pending)} link samples could not be stored")
    finally:
        sampler.source.close()
    problems += sampler.warnings + sampler.on_sample.warnings
    try:
        info = (live.store.job(live.job_id).get("meta") or {}).get("link_sampler") or {}
    except StoreUnavailable:
        info = {}
    return {"link_sampler": {**info, "cost": sampler.cost.as_dict()}}


def _ranks_of_files(rd: RunDir) -> set[int]:
    """World ranks that wrote a record file (``rank-<world>.<source>.rmrec``), when no ingest read them."""
    out = set()
    for f in rd.record_files():
        stem = f.name.split(".")[0]
        if stem[5:].isdigit():
            out.add(int(stem[5:]))
    return out


def _say_what_was_captured(job_id: int, status: int, sizes: set[int], ws: int | None, rd: RunDir,
                           warn: Callable[[str], None]) -> None:
    if status != 0 and not sizes:
        # nothing to keep: the launcher failed before any rank started (a missing program, a bad option)
        warn(f"job {job_id} failed (exit status {status}) before any rank wrote a record file in {rd.path}: "
             f"nothing was captured")
    elif status != 0:
        _note(f"job exited with status {status}; kept records up to last flush")
    elif not sizes:
        warn(f"no rank wrote a record file in {rd.path}: nothing was captured")
    elif ws and len(sizes) < ws:
        missing = sorted(set(range(ws)) - sizes)
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        warn(f"only {len(sizes)} of {ws} ranks wrote records (missing: {shown}); ranks on other nodes write to "
             f"their node's own {rd.path} unless it is shared: copy their record files here, then "
             f"rankmap ingest {shlex.quote(str(rd.path))}")


def _wait(child: subprocess.Popen) -> int:
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:  # signal handlers not installed (not the main thread)
            child.terminate()
