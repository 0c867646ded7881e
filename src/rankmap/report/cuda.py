"""What the GPUs did, per job: the CUDA activity report (``rankmap show``, the profile summary, the
JSON export and the dashboard card all use :func:`cuda_report`).

From each rank's CUDA activity (copies by kind, kernels by name) and its MPI/NCCL operation times:

* the per-job table: category (``CUDA_KERNEL``, ``MEMORY_OPER``, ``collectives``, ``point-to-point``,
  ``one-sided``, ``other``), operation, average total time per process, min and max over the
  processes, instances per process;
* bytes by copy kind (H2D, D2H, D2D, P2P, memset), with the pageable share of host copies;
* peer-to-peer copies by source and destination GPU;
* POP efficiencies extended with device time (docs/pop-metrics.md): device load balance, device
  communication efficiency (time the GPUs spend on kernels rather than on copies), device
  parallel efficiency, and the share of the run the GPUs computed;
* a plain verdict where the data support one: bytes staged through host memory that a
  CUDA-aware MPI would not copy, a GPU-aware exchange, copy-bound GPUs.

Bytes are decimal (GB = 1e9), times ns.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rankmap.errors import counted, noun

COPY_KINDS = ("other", "H2D", "D2H", "D2D", "P2P", "H2H", "memset")   # record codes 0..6
#: CUPTI memory kinds, as the record keeps them (docs/record-format.md)
MEMORY_KINDS = ("unknown", "pageable", "pinned", "device", "array", "managed", "device_static", "managed_static")
TOP_KERNELS = 8
#: the staging verdict needs at least this much matched host traffic, and this share of the MPI bytes
STAGED_MIN_BYTES = 1_000_000
STAGED_MIN_SHARE = 0.5

_COLL_BASES = {"bcast", "reduce", "allreduce", "gather", "gatherv", "scatter", "scatterv", "allgather",
               "allgatherv", "alltoall", "alltoallv", "alltoallw", "reduce_scatter", "reduce_scatter_block", "scan",
               "exscan", "barrier", "neighbor_allgather", "neighbor_allgatherv", "neighbor_alltoall",
               "neighbor_alltoallv", "neighbor_alltoallw"}
_P2P_BASES = {"send", "bsend", "ssend", "rsend", "recv", "sendrecv", "sendrecv_replace", "start", "startall",
              "request_free", "wait", "waitall", "waitany", "waitsome", "test", "testall", "testany", "testsome"}
_RMA_BASES = {"put", "get", "accumulate", "get_accumulate", "fetch_and_op", "compare_and_swap", "rput", "rget",
              "raccumulate", "rget_accumulate"}
_NCCL_P2P = {"ncclSend", "ncclRecv", "ncclSendRecv"}


def category(operation: str) -> str:
    """The report's category of an MPI or NCCL operation name."""
    if operation.startswith("nccl"):
        if operation in _NCCL_P2P:
            return "point-to-point"
        return "other" if operation == "ncclOther" else "collectives"
    if not operation.startswith("MPI_"):
        return "other"
    base = operation[4:].lower()
    if base.endswith("_init"):
        base = base[:-5]
    if base in _RMA_BASES:
        return "one-sided"
    if base in _P2P_BASES or (base[:1] == "i" and base[1:] in _P2P_BASES):
        return "point-to-point"
    if base in _COLL_BASES or (base[:1] == "i" and base[1:] in _COLL_BASES):
        return "collectives"
    return "other"


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """A C++ symbol (Itanium ABI, ``_Z...``) as C++ reads it; any other name as it is.

    CUPTI reports kernel names mangled: on an H200 a PyTorch job's four kernels all began
    "_ZN2at6native29vectoriz…", which told a reader nothing. The C++ runtime's own
    ``__cxa_demangle`` (libstdc++, present wherever a CUDA program runs) reads them, so no
    dependency is added; where it is missing or refuses a name, the name stays mangled."""
    if not name.startswith("_Z"):
        return name
    fn = _cxa_demangle()
    if fn is None:
        return name
    import ctypes
    status = ctypes.c_int(1)
    out = fn(name.encode(), None, None, ctypes.byref(status))
    if not out:
        return name
    try:
        return ctypes.string_at(out).decode(errors="replace") if status.value == 0 else name
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(out))


@functools.lru_cache(maxsize=1)
def _cxa_demangle():
    import ctypes
    import ctypes.util
    for lib in ("libstdc++.so.6", ctypes.util.find_library("stdc++")):
        try:
            fn = ctypes.CDLL(lib).__cxa_demangle if lib else None
        except (OSError, AttributeError):
            continue
        if fn is not None:
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            return fn
    return None


def short_kernel_name(name: str, width: int = 80) -> str:
    """A kernel name, demangled, without its return type and parameter list, at most ``width`` characters."""
    return _cut_end(_short(name), width)


def _short(name: str) -> str:
    """:func:`short_kernel_name`, whole."""
    s = _full(name)
    depth = 0
    for i, ch in enumerate(s):          # cut at the parameter list: the first '(' outside <...>
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            s = s[:i]
            break
    # inside the template arguments, namespaces only repeat what the kernel's own name says and push
    # what tells instantiations apart (the functor, the types) past the cut: a PyTorch job's kernels
    # all read "at::native::vectorized_elementwise_kernel<4, at::native::…" with them
    lt = s.find("<")
    if lt > 0:
        s = s[:lt] + _QUALIFIER.sub("", s[lt:])
    return s


def _full(name: str) -> str:
    """A kernel name demangled, with its parameter list, without its return type ``void``."""
    s = demangle(name.strip()).replace("(anonymous namespace)::", "")
    return s[5:] if s.startswith("void ") else s


def _cut_end(s: str, width: int) -> str:
    return s if len(s) <= width else s[:width - 1] + "…"


def kernel_labels(names: Iterable[str], width: int = 80) -> dict[str, str]:
    """Each kernel name (as recorded) -> its label in the report: :func:`short_kernel_name`, unless
    two names would then read the same.

    Such names are shown fuller first (with their parameter lists, then as recorded): overloads
    differ only there. Names still alike in their first ``width`` characters are shown past the cut,
    to the end of the word where they part: on an H200 two cuBLAS kernels both read
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma…". Every label
    then shows a character where it differs from each other label, so no two read the same."""
    forms = (_short, _full, str)
    level = {n: 0 for n in dict.fromkeys(names)}
    while True:     # a name whose form another shares takes its next, fuller form
        alike = [n for g in _alike({n: forms[k](n) for n, k in level.items()}) for n in g
                 if level[n] < len(forms) - 1]
        if not alike:
            break
        for n in alike:
            level[n] += 1
    whole = {n: forms[k](n) for n, k in level.items()}
    label = {}
    for n, s in whole.items():
        part = max((len(os.path.commonprefix([s, o])) for m, o in whole.items() if m != n), default=0)
        label[n] = _cut_end(s, width) if part < width - 1 else _cut_after(s, part)
    return label


def _alike(forms: Mapping[str, str]) -> list[list[str]]:
    """The groups of keys (two or more) that share one form."""
    by: dict[str, list[str]] = {}
    for n, s in forms.items():
        by.setdefault(s, []).append(n)
    return [g for g in by.values() if len(g) > 1]


def _cut_after(s: str, part: int) -> str:
    """``s`` up to the end of the word of its character ``part`` (and whole if little more follows):
    "…_ffma_aligna4_alignc4_execute_segment…"."""
    ends = [i for i in (s.find(c, part + 1) for c in "_:<>,() ") if i > 0]
    end = min(ends, default=len(s))
    return s if len(s) - end <= 12 else s[:end] + "…"


_QUALIFIER = re.compile(r"(?:\{lambda[^}]*\}|[A-Za-z_]\w*)::")


@dataclass
class CudaInputs:
    """What the report reads, as plain rows (from the store, or from record files).

    copies: ``rank, kind, src_mem, dst_mem, src_dev, dst_dev, count, bytes, ns`` (kind a name of
    :data:`COPY_KINDS`, mems names of :data:`MEMORY_KINDS`, devices ordinals or -1 for host);
    kernels: ``rank, device, name, count, ns``; cuda_ranks: ``rank, activity, devices`` (ordinal ->
    "PCI bus id and name"); op_stats: ``rank, source, operation, calls, ns``; traffic: ``src, dst,
    source, mem, bytes`` (sent bytes); elapsed: rank -> ns; capture: what the profile driver said
    about CUDA capture for the job ("on", or "off: why").
    """

    copies: list[Mapping[str, Any]] = field(default_factory=list)
    kernels: list[Mapping[str, Any]] = field(default_factory=list)
    cuda_ranks: list[Mapping[str, Any]] = field(default_factory=list)
    op_stats: list[Mapping[str, Any]] = field(default_factory=list)
    traffic: list[Mapping[str, Any]] = field(default_factory=list)
    elapsed: dict[int, int] = field(default_factory=dict)
    capture: str | None = None


@dataclass
class TableRow:
    category: str
    operation: str
    avg_ns: float
    min_ns: int
    max_ns: int
    instances: float          # calls (copies, launches) per process, averaged over the processes
    bytes: float | None = None   # bytes per process, averaged (copies and MPI/NCCL payloads)


@dataclass
class CopyKind:
    kind: str
    count: int
    bytes: int
    ns: int
    pageable_bytes: int       # bytes whose host end was pageable memory (H2D, D2H)

    @property
    def gbps(self) -> float | None:
        return self.bytes / self.ns if self.ns else None


@dataclass
class PeerPair:
    src: str
    dst: str
    count: int
    bytes: int
    ns: int


@dataclass
class DevicePop:
    ranks: int
    runtime_ns: int
    avg_kernel_ns: float
    max_kernel_ns: int
    avg_copy_ns: float
    load_balance: float
    communication_efficiency: float
    parallel_efficiency: float
    compute_share: float      # avg kernel time / runtime


@dataclass
class CudaReport:
    state: str                            # one line: on / off and why / no rank used CUDA
    ranks: list[int]
    table: list[TableRow]
    copy_kinds: list[CopyKind]
    peer_pairs: list[PeerPair]
    pop: DevicePop | None
    verdicts: list[str]
    staged_share: float | None = None     # share of MPI bytes that went through host copies
    staged_bytes: int = 0                 # D2H+H2D bytes matched with MPI host traffic
    kernels_total: int = 0
    devices: dict[str, str] = field(default_factory=dict)   # "rank r dev d" -> "bus name"

    def as_dict(self) -> dict:
        d = asdict(self)
        for ck, src in zip(d["copy_kinds"], self.copy_kinds):
            ck["gbps"] = src.gbps
        return d


def _stats(per_rank: Mapping[int, float], ranks: Sequence[int]) -> tuple[float, int, int]:
    vals = [float(per_rank.get(r, 0)) for r in ranks]
    if not vals:
        return 0.0, 0, 0
    return sum(vals) / len(vals), int(min(vals)), int(max(vals))


def _row(cat: str, op: str, ns: Mapping[int, float], calls: Mapping[int, float], ranks: Sequence[int],
         by: Mapping[int, float] | None = None) -> TableRow:
    avg, lo, hi = _stats(ns, ranks)
    inst = sum(calls.get(r, 0) for r in ranks) / len(ranks) if ranks else 0.0
    b = sum(by.get(r, 0) for r in ranks) / len(ranks) if by is not None and ranks else None
    return TableRow(cat, op, avg, lo, hi, inst, b)


def _kernels_recorded(inp: CudaInputs) -> bool:
    """False when every rank's capture recorded copies only (``--cuda-activity copies``): then no
    kernel time is known, and nothing may be concluded from its absence."""
    acts = [str(r.get("activity") or "") for r in inp.cuda_ranks]
    on = [a for a in acts if a.startswith("on")]
    return bool(inp.kernels) or not on or not all(a.startswith("on: copies") for a in on)


def _state(inp: CudaInputs, on_ranks: list[int]) -> str:
    if inp.capture and inp.capture.startswith("off"):
        return f"CUDA activity: {inp.capture}"
    off: dict[str, list[int]] = {}
    for r in inp.cuda_ranks:
        a = str(r.get("activity") or "")
        if a and not a.startswith("on"):
            off.setdefault(a, []).append(int(r["rank"]))
    parts = []
    if on_ranks:
        parts.append(f"on for {counted(len(on_ranks), 'rank')}" if _kernels_recorded(inp) else
                     f"copies only (kernels not recorded) for {counted(len(on_ranks), 'rank')}")
    for why, rs in sorted(off.items()):
        parts.append(f"{why} ({noun(len(rs), 'rank')} {', '.join(map(str, sorted(rs)[:8]))})")
    if not parts:
        return "CUDA activity: none recorded (no rank initialised CUDA)" if inp.capture else \
               "CUDA activity: not captured"
    return "CUDA activity: " + "; ".join(parts)


def cuda_report(inp: CudaInputs) -> CudaReport:
    """The report of one job (see the module docstring)."""
    on_ranks = sorted({int(r["rank"]) for r in inp.cuda_ranks if str(r.get("activity") or "").startswith("on")}
                      | {int(c["rank"]) for c in inp.copies} | {int(k["rank"]) for k in inp.kernels})
    devices: dict[tuple[int, int], str] = {}
    for r in inp.cuda_ranks:
        for d, label in (r.get("devices") or {}).items():
            devices[(int(r["rank"]), int(d))] = str(label)

    table: list[TableRow] = []
    # kernels: all, then the heaviest names
    k_ns: dict[int, float] = {}
    k_n: dict[int, float] = {}
    by_name: dict[str, tuple[dict[int, float], dict[int, float]]] = {}
    for k in inp.kernels:
        r = int(k["rank"])
        k_ns[r] = k_ns.get(r, 0) + int(k["ns"])
        k_n[r] = k_n.get(r, 0) + int(k["count"])
        ns, n = by_name.setdefault(str(k["name"]), ({}, {}))
        ns[r] = ns.get(r, 0) + int(k["ns"])
        n[r] = n.get(r, 0) + int(k["count"])
    if inp.kernels:
        table.append(_row("CUDA_KERNEL", f"all kernels ({counted(len(by_name), 'name')})", k_ns, k_n, on_ranks))
        heavy = sorted(by_name.items(), key=lambda kv: (-sum(kv[1][0].values()), kv[0]))
        labels = kernel_labels(name for name, _ in heavy[:TOP_KERNELS])
        for name, (ns, n) in heavy[:TOP_KERNELS]:
            table.append(_row("CUDA_KERNEL", labels[name], ns, n, on_ranks))
        if len(heavy) > TOP_KERNELS:
            rest_ns: dict[int, float] = {}
            rest_n: dict[int, float] = {}
            for _, (ns, n) in heavy[TOP_KERNELS:]:
                for r, v in ns.items():
                    rest_ns[r] = rest_ns.get(r, 0) + v
                for r, v in n.items():
                    rest_n[r] = rest_n.get(r, 0) + v
            table.append(_row("CUDA_KERNEL", counted(len(heavy) - TOP_KERNELS, "other kernel"), rest_ns, rest_n, on_ranks))

    # copies by kind
    kinds: dict[str, CopyKind] = {}
    per_kind: dict[str, tuple[dict[int, float], dict[int, float], dict[int, float]]] = {}
    pairs: dict[tuple[str, str], PeerPair] = {}
    c_ns: dict[int, float] = {}
    d2h: dict[int, int] = {}
    h2d: dict[int, int] = {}
    for c in inp.copies:
        r, kind = int(c["rank"]), str(c["kind"])
        n, b, ns = int(c["count"]), int(c["bytes"]), int(c["ns"])
        ck = kinds.setdefault(kind, CopyKind(kind, 0, 0, 0, 0))
        ck.count += n
        ck.bytes += b
        ck.ns += ns
        if (kind == "H2D" and c.get("src_mem") == "pageable") or (kind == "D2H" and c.get("dst_mem") == "pageable"):
            ck.pageable_bytes += b
        t_ns, t_n, t_b = per_kind.setdefault(kind, ({}, {}, {}))
        t_ns[r] = t_ns.get(r, 0) + ns
        t_n[r] = t_n.get(r, 0) + n
        t_b[r] = t_b.get(r, 0) + b
        c_ns[r] = c_ns.get(r, 0) + ns
        if kind == "D2H":
            d2h[r] = d2h.get(r, 0) + b
        elif kind == "H2D":
            h2d[r] = h2d.get(r, 0) + b
        elif kind == "P2P":
            sd, dd = int(c["src_dev"]), int(c["dst_dev"])
            src = devices.get((r, sd)) or f"rank {r} device {sd}"
            dst = devices.get((r, dd)) or f"rank {r} device {dd}"
            p = pairs.setdefault((src, dst), PeerPair(src, dst, 0, 0, 0))
            p.count += n
            p.bytes += b
            p.ns += ns
    order = {k: i for i, k in enumerate(("D2D", "D2H", "H2D", "P2P", "memset", "H2H", "other"))}
    for kind in sorted(per_kind, key=lambda k: order.get(k, 99)):
        t_ns, t_n, t_b = per_kind[kind]
        table.append(_row("MEMORY_OPER", kind, t_ns, t_n, on_ranks, t_b))

    # MPI and NCCL operations
    op_ranks: dict[str, set[int]] = {}
    ops: dict[tuple[str, str], tuple[dict[int, float], dict[int, float]]] = {}
    for o in inp.op_stats:
        src, op, r = str(o["source"]), str(o["operation"]), int(o["rank"])
        op_ranks.setdefault(src, set()).add(r)
        if not int(o.get("calls") or 0):
            continue
        ns, n, pb = ops.setdefault((src, op), ({}, {}, {}))
        ns[r] = ns.get(r, 0) + int(o["ns"])
        n[r] = n.get(r, 0) + int(o["calls"])
        pb[r] = pb.get(r, 0) + int(o.get("payload") or 0)
    cat_order = {"collectives": 0, "point-to-point": 1, "one-sided": 2, "other": 3}
    op_rows = [_row(category(op), op, ns, n, sorted(op_ranks[src]), pb) for (src, op), (ns, n, pb) in ops.items()]
    table += sorted(op_rows, key=lambda t: (cat_order[t.category], -t.avg_ns, t.operation))

    # device POP
    runtime = max(inp.elapsed.values()) if inp.elapsed else 0
    pop = None
    kernels_known = _kernels_recorded(inp)
    if on_ranks and runtime > 0 and (k_ns or c_ns) and kernels_known:
        ks = [k_ns.get(r, 0) for r in on_ranks]
        busy = [k_ns.get(r, 0) + c_ns.get(r, 0) for r in on_ranks]
        avg_k, max_k, max_b = sum(ks) / len(ks), max(ks), max(busy)
        pop = DevicePop(len(on_ranks), runtime, avg_k, int(max_k), sum(c_ns.get(r, 0) for r in on_ranks) / len(on_ranks),
                        avg_k / max_k if max_k else 1.0, max_k / max_b if max_b else 1.0,
                        avg_k / max_b if max_b else 1.0, avg_k / runtime)

    # verdicts
    verdicts: list[str] = []
    mpi_sent: dict[int, int] = {}
    mpi_recv: dict[int, int] = {}
    mpi_total = dev_total = all_total = 0
    for t in inp.traffic:
        b = int(t["bytes"])
        all_total += 2 * b
        if t.get("mem") == "device":
            dev_total += 2 * b
        if t.get("source") != "mpi":
            continue
        mpi_total += 2 * b
        if t.get("mem") == "host":
            mpi_sent[int(t["src"])] = mpi_sent.get(int(t["src"]), 0) + b
            mpi_recv[int(t["dst"])] = mpi_recv.get(int(t["dst"]), 0) + b
    staged = sum(min(mpi_sent.get(r, 0), d2h.get(r, 0)) + min(mpi_recv.get(r, 0), h2d.get(r, 0))
                 for r in set(mpi_sent) | set(mpi_recv))
    share = staged / mpi_total if mpi_total else None
    from rankmap.report.summary import human_bytes
    if share is not None and staged >= STAGED_MIN_BYTES and share >= STAGED_MIN_SHARE:
        verdicts.append(f"{100 * share:.0f} % of MPI bytes were staged through host memory: {human_bytes(staged)} "
                        f"of D2H+H2D copies that a CUDA-aware MPI would avoid")
    elif all_total and dev_total / all_total >= 0.9:
        # the host copies are known only where CUDA activity was recorded: no "0 B" for copies never watched
        host_copies = sum(d2h.values()) + sum(h2d.values())
        verdicts.append(f"GPU-aware: {100 * dev_total / all_total:.0f} % of the bytes exchanged between ranks "
                        f"left device memory directly" +
                        (f"; host copies moved {human_bytes(host_copies)} in all" if on_ranks else ""))
    if pop and pop.avg_copy_ns > pop.avg_kernel_ns and pop.avg_copy_ns > 0.1 * runtime:
        verdicts.append(f"the GPUs spent longer copying ({pop.avg_copy_ns / 1e9:.3g} s per GPU) than computing "
                        f"({pop.avg_kernel_ns / 1e9:.3g} s)")
    pageable = sum(k.pageable_bytes for k in kinds.values())
    host_bytes = sum(k.bytes for k in kinds.values() if k.kind in ("H2D", "D2H"))
    host_ns = sum(k.ns for k in kinds.values() if k.kind in ("H2D", "D2H")) / max(1, len(on_ranks))
    if host_bytes >= STAGED_MIN_BYTES and pageable >= 0.5 * host_bytes and runtime and host_ns >= 0.05 * runtime:
        verdicts.append(f"{100 * pageable / host_bytes:.0f} % of the host<->device bytes used pageable host memory "
                        f"(pinned buffers copy faster and can overlap)")

    return CudaReport(
        state=_state(inp, on_ranks), ranks=on_ranks, table=table,
        copy_kinds=[kinds[k] for k in sorted(kinds, key=lambda k: order.get(k, 99))],
        peer_pairs=sorted(pairs.values(), key=lambda p: (-p.bytes, p.src, p.dst)), pop=pop, verdicts=verdicts,
        staged_share=share, staged_bytes=staged, kernels_total=int(sum(k_n.values())),
        devices={f"rank {r} device {d}": v for (r, d), v in sorted(devices.items())})


def inputs_from_rows(copies: Iterable[Mapping], kernels: Iterable[Mapping], cuda_ranks: Iterable[Mapping],
                     op_stats: Iterable[Mapping], traffic: Iterable[Mapping], ranks: Iterable[Mapping],
                     capture: str | None) -> CudaInputs:
    """:class:`CudaInputs` from store rows (``ranks`` gives each rank's elapsed time, the longest source)."""
    elapsed: dict[int, int] = {}
    for r in ranks:
        if r.get("elapsed_ns"):
            elapsed[int(r["world_rank"])] = max(elapsed.get(int(r["world_rank"]), 0), int(r["elapsed_ns"]))
    return CudaInputs(list(copies), list(kernels), list(cuda_ranks), list(op_stats), list(traffic), elapsed, capture)


def report_for_job(store: Any, job_id: int, *, gpu_only: bool = False) -> CudaReport:
    """:func:`cuda_report` of a stored job. ``gpu_only``: a job without CUDA activity gets only its
    state line (no MPI/NCCL rows: the dashboard shows those elsewhere), which costs two queries."""
    job = store.job(job_id)
    act = store.cuda_activity(job_id)
    capture = (job.get("meta") or {}).get("cuda_activity")
    if gpu_only and not (act["copies"] or act["kernels"]):
        return cuda_report(CudaInputs(cuda_ranks=act["ranks"], capture=capture))
    return cuda_report(inputs_from_rows(act["copies"], act["kernels"], act["ranks"], store.op_stats(job_id),
                                        store.traffic(job_id, by_mem=True, by_source=True), store.ranks(job_id),
                                        capture))


def no_activity_text(job: Mapping, rep: CudaReport) -> str | None:
    """What ``rankmap show JOB --gpu`` says of a stored job (:meth:`Store.job`) with no CUDA activity
    recorded (None when it has some): why there is none, and where the capture was simply not asked
    for, the option that asks. A monitor session samples links and runs no program to profile."""
    if rep.table:
        return None
    job_id, command, capture = job["id"], job["command"], (job.get("meta") or {}).get("cuda_activity")
    if job.get("launcher") == "monitor":
        return f"job {job_id} is a `rankmap monitor` session: it sampled the GPUs' links, and records no CUDA activity"
    if capture is None or capture.startswith("off ("):       # not asked for (the default, or off)
        return (f"job {job_id} has no CUDA activity recorded: it was profiled without --cuda-activity; profile it "
                f"with `rankmap profile --cuda-activity on -- {command}` to record its GPUs' copies and kernels")
    return f"job {job_id} has no CUDA activity recorded ({rep.state.removeprefix('CUDA activity: ')})"


# ---- terminal rendering ------------------------------------------------------------------------

def human_time(ns: float) -> str:
    """ns -> '850 µs', '12.3 ms', '1.20 s'."""
    ns = float(ns)
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.3g} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.3g} ms"
    return f"{ns / 1e9:.3g} s"


def _fmt_count(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"


def renderables(rep: CudaReport, *, full: bool = True) -> list[Any]:
    """The report as rich renderables: the state line, then (when there is activity) the tables and the verdicts.

    ``full=False`` (the profile summary) leaves out the MPI/NCCL rows of the table, which the
    summary shows already, when there is no CUDA activity at all."""
    from rich import box
    from rich.console import Group
    from rich.table import Table as RichTable
    from rich.text import Text

    def Table() -> RichTable:  # noqa: N802  (compact: the report is often read side by side)
        return RichTable(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)

    from rankmap.report.summary import human_bytes

    out: list[Any] = [Text(rep.state, style="bold" if rep.ranks else "dim")]
    if not rep.ranks and not full:
        return out
    # The category heads its rows instead of taking a column, and the figures' headers are short, so
    # that the operation names (kernel names above all) keep their room in an 80-column terminal or a
    # file: with a category column and long headers they were the column dropped.
    # a bytes column only where some row moved bytes: a job of barriers had an empty one
    with_bytes = any(r.bytes for r in rep.table)
    t = Table()
    t.add_column("operation", min_width=18, overflow="fold")
    for c in ("avg time", "min", "max", "n/proc", "bytes/proc")[:5 if with_bytes else 4]:
        t.add_column(c, justify="right", no_wrap=True)
    category = None
    for r in rep.table:
        if r.category != category:
            category = r.category
            t.add_row(Text(category, style="bold"))
        t.add_row("  " + r.operation, human_time(r.avg_ns), human_time(r.min_ns), human_time(r.max_ns),
                  _fmt_count(r.instances), *([human_bytes(r.bytes) if r.bytes else ""] if with_bytes else []))
    if rep.table:
        head = (f"per process, over {counted(len(rep.ranks), 'GPU rank')}" if rep.ranks else
                "MPI/NCCL operations per process (no CUDA activity recorded)")
        head += ": total time (average, min, max over the processes), instances" + (", bytes" if with_bytes else "")
        out.append(Group(Text(head, style="bold"), t))
    if rep.copy_kinds:
        t = Table()
        for c in ("copy kind", "copies", "bytes", "time", "GB/s", "pageable host"):
            t.add_column(c, justify="left" if c == "copy kind" else "right")
        for k in rep.copy_kinds:
            t.add_row(k.kind, f"{k.count:,}", human_bytes(k.bytes), human_time(k.ns),
                      f"{k.gbps:.1f}" if k.gbps else "-",
                      f"{100 * k.pageable_bytes / k.bytes:.0f} %" if k.kind in ("H2D", "D2H") and k.bytes else "")
        out.append(Group(Text("bytes by copy kind (all ranks)", style="bold"), t))
    if rep.peer_pairs:
        t = Table()
        for c in ("source GPU", "destination GPU", "copies", "bytes", "GB/s"):
            t.add_column(c, justify="right" if c in ("copies", "bytes", "GB/s") else "left")
        for p in rep.peer_pairs:
            t.add_row(p.src, p.dst, f"{p.count:,}", human_bytes(p.bytes), f"{p.bytes / p.ns:.1f}" if p.ns else "-")
        out.append(Group(Text("peer-to-peer copies", style="bold"), t))
    if rep.pop:
        p = rep.pop
        t = Table()
        t.add_column("device metric")
        t.add_column("value", justify="right")
        t.add_row("device parallel efficiency", f"{100 * p.parallel_efficiency:.1f} %")
        t.add_row("  device load balance", f"{100 * p.load_balance:.1f} %")
        t.add_row("  device communication efficiency", f"{100 * p.communication_efficiency:.1f} %")
        t.add_row("GPU compute share of the run", f"{100 * p.compute_share:.1f} %")
        out.append(Group(Text(f"POP efficiency of the GPUs ({counted(p.ranks, 'rank')}, kernels {human_time(p.avg_kernel_ns)} and "
                              f"copies {human_time(p.avg_copy_ns)} per GPU, runtime {human_time(p.runtime_ns)})",
                              style="bold"), t))
    if rep.verdicts:
        out.append(Group(*[Text("verdict: " + v, style="bold yellow") for v in rep.verdicts]))
    return out
