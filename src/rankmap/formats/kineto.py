"""PyTorch profiler (Kineto) traces: the communication facts of one rank's Chrome-trace JSON.

``torch.profiler`` writes one trace per process (``export_chrome_trace``, TensorBoard's
``*.pt.trace.json[.gz]``): a JSON object with ``traceEvents`` and, for a ``torch.distributed``
job, ``distributedInfo`` (``rank``, ``world_size``, ``backend``, ``pg_config``: every process
group's name, size and global ranks; ``nccl_version``). Each collective or point-to-point call
of a process group appears as a ``cpu_op`` named ``record_param_comms`` whose ``args`` are the
facts c10d recorded (``ParamCommsDebugInfo``, written by the profiler's ``saveNcclMeta``):

``Collective name`` (``allreduce``, ``_allgather_base``, ``send``, ...), ``In msg nelems`` /
``Out msg nelems`` (elements), ``dtype`` (``c10::toString`` of the scalar type: ``Float``,
``BFloat16``, ...), ``In split size`` / ``Out split size`` (lists, as text), ``Group size``,
``Process Group Name`` / ``Process Group Description``, ``Process Group Ranks`` (the group's
global ranks, as text, cut after 30 entries), ``Global rank start`` / ``Global rank stride``
(when the group is evenly strided), ``Rank`` -- the calling rank's group rank, except that
rooted calls (broadcast, reduce, gather, scatter) put the root there and ``send``/``recv`` the
peer -- and, in newer releases, ``Dst Rank`` / ``Src Rank`` (the p2p peer's global rank).
Kineto copies these args onto the NCCL kernels the call launched (``cat: kernel``), whose names
(``ncclDevKernel_AllReduce_Sum_f32_RING_LL``) carry NCCL's algorithm and protocol.

This module reads that and nothing else: :func:`read` returns a :class:`KinetoTrace` or raises
:class:`RankmapError` naming the file and what is wrong. What the facts mean for pairs of ranks is
:mod:`rankmap.pairs.imported`'s business.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankmap.errors import RankmapError, shown

PARAM_COMMS = "record_param_comms"

#: bytes per element of each ``c10::toString(ScalarType)`` name
DTYPE_BYTES = {
    "Byte": 1, "Char": 1, "Bool": 1, "QInt8": 1, "QUInt8": 1, "QUInt4x2": 1, "QUInt2x4": 1,
    "Float8_e5m2": 1, "Float8_e4m3fn": 1, "Float8_e5m2fnuz": 1, "Float8_e4m3fnuz": 1, "Float8_e8m0fnu": 1,
    "Short": 2, "Half": 2, "BFloat16": 2, "UInt16": 2, "ComplexHalf": 4,
    "Int": 4, "Float": 4, "UInt32": 4, "QInt32": 4,
    "Long": 8, "Double": 8, "UInt64": 8, "ComplexFloat": 8, "ComplexDouble": 16,
}

_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)(?:_[A-Za-z0-9]+)*?_(RING|TREE|NVLS_TREE|NVLS|COLLNET_DIRECT|"
                     r"COLLNET_CHAIN|PAT)_(LL128|LL|SIMPLE)(?![A-Za-z0-9])")


@dataclass(frozen=True)
class CommCall:
    """One ``record_param_comms`` event: what one process group call carried."""

    name: str                       # Collective name
    in_nelems: int
    out_nelems: int
    dtype: str
    group_size: int
    pg_name: str
    pg_desc: str
    group_ranks: tuple[int, ...] | None   # None: absent or cut short in the trace
    rank_arg: int                   # the trace's "Rank" (own group rank, the root, or the p2p peer)
    in_split: tuple[int, ...]
    out_split: tuple[int, ...]
    rank_start: int | None          # Global rank start / stride (None when not recorded)
    rank_stride: int | None
    peer_global: int | None         # Dst Rank (send) / Src Rank (recv) where the release records it
    ts_us: float
    dur_us: float

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


@dataclass
class KinetoTrace:
    """One rank's trace: who it is and what it communicated."""

    path: Path
    rank: int | None
    world_size: int | None
    backend: str
    nccl_version: str
    pg_ranks: dict[str, tuple[int, ...]]       # process group name -> its global ranks (pg_config)
    calls: list[CommCall]
    #: (pg name, collective name, in nelems, dtype) -> {(algorithm, protocol): kernels}
    kernels: dict[tuple[str, str, int, str], dict[tuple[str, str], int]] = field(default_factory=dict)
    kernel_names: int = 0                      # NCCL kernels whose name says algorithm and protocol
    host: str = ""
    pid: int = 0
    start_us: float = 0.0
    end_us: float = 0.0


def _load(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise RankmapError(f"{path}: cannot read it: {e.strerror or e}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as e:
        raise RankmapError(f"{path}: not a PyTorch profiler trace (Kineto JSON): {e}") from None


def _int(v: Any, path: Path, key: str, i: int) -> int:
    if isinstance(v, bool):
        raise RankmapError(f"{path}: event {i} ({PARAM_COMMS}): {key!r} is {shown(v)}, not an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    raise RankmapError(f"{path}: event {i} ({PARAM_COMMS}): {key!r} is {shown(v)}, not an integer")


def _list(v: Any) -> tuple[tuple[int, ...], bool]:
    """A list the profiler wrote as text (``"[0, 1, 2]"``, ``"[0, 1, ..., 31]"`` when cut short) or
    as JSON; (values, complete)."""
    if isinstance(v, list):
        return tuple(int(x) for x in v), True
    s = str(v or "").strip().strip('"').strip()
    if s.startswith("[") and s.endswith("]"):
        s = s[1:-1]
    parts = [p.strip() for p in s.split(",") if p.strip()]
    whole = "..." not in parts
    try:
        return tuple(int(p) for p in parts if p != "..."), whole
    except ValueError:
        return (), False


def _call(e: dict, path: Path, i: int) -> CommCall:
    a = e.get("args")
    if not isinstance(a, dict):
        raise RankmapError(f"{path}: event {i} ({PARAM_COMMS}) has no args")
    for key in ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size"):
        if key not in a:
            raise RankmapError(f"{path}: event {i} ({PARAM_COMMS}) lacks {key!r}: not a trace of a torch.distributed "
                               f"job recorded by torch.profiler")
    dtype = str(a["dtype"]).strip('"')
    if dtype not in DTYPE_BYTES:
        raise RankmapError(f"{path}: event {i} ({PARAM_COMMS}): unknown dtype {shown(dtype)}")
    ranks, whole = _list(a.get("Process Group Ranks"))
    peer = a.get("Dst Rank", a.get("Src Rank"))
    return CommCall(
        name=str(a["Collective name"]).strip('"'),
        in_nelems=_int(a["In msg nelems"], path, "In msg nelems", i),
        out_nelems=_int(a["Out msg nelems"], path, "Out msg nelems", i),
        dtype=dtype, group_size=_int(a["Group size"], path, "Group size", i),
        pg_name=str(a.get("Process Group Name", "")).strip('"'),
        pg_desc=str(a.get("Process Group Description", "")).strip('"'),
        group_ranks=ranks if whole and ranks else None,
        rank_arg=_int(a.get("Rank", -1), path, "Rank", i),
        in_split=_list(a.get("In split size"))[0], out_split=_list(a.get("Out split size"))[0],
        rank_start=_int(a["Global rank start"], path, "Global rank start", i) if "Global rank start" in a else None,
        rank_stride=_int(a["Global rank stride"], path, "Global rank stride", i) if "Global rank stride" in a else None,
        peer_global=_int(peer, path, "Dst Rank", i) if peer is not None else None,
        ts_us=float(e.get("ts", 0.0) or 0.0), dur_us=float(e.get("dur", 0.0) or 0.0))


def read(path: str | Path) -> KinetoTrace:
    """One Kineto trace file (``.json`` or ``.json.gz``), checked."""
    path = Path(path)
    doc = _load(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise RankmapError(f"{path}: not a PyTorch profiler trace (Kineto JSON): no traceEvents list")
    info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    pg_ranks: dict[str, tuple[int, ...]] = {}
    for pg in info.get("pg_config") or []:
        if isinstance(pg, dict) and isinstance(pg.get("ranks"), list):
            try:
                pg_ranks[str(pg.get("pg_name", ""))] = tuple(int(r) for r in pg["ranks"])
            except (TypeError, ValueError):
                pass
    calls: list[CommCall] = []
    kernels: dict[tuple[str, str, int, str], dict[tuple[str, str], int]] = {}
    named = 0
    host, pid = "", 0          # a trace does not name its host
    t0, t1 = float("inf"), float("-inf")
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            raise RankmapError(f"{path}: traceEvents[{i}] is {shown(e)}, not an event object")
        if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)):
            t0 = min(t0, float(e["ts"]))
            t1 = max(t1, float(e["ts"]) + float(e.get("dur") or 0))
        name = e.get("name")
        if name == PARAM_COMMS and e.get("cat", "cpu_op") == "cpu_op":
            calls.append(_call(e, path, i))
            if not pid and isinstance(e.get("pid"), int):
                pid = e["pid"]
        elif e.get("cat") == "kernel" and isinstance(name, str) and (m := _KERNEL.search(name)):
            named += 1
            a = e.get("args") if isinstance(e.get("args"), dict) else {}
            if "Collective name" in a and "In msg nelems" in a:
                try:
                    key = (str(a.get("Process Group Name", "")).strip('"'), str(a["Collective name"]).strip('"'),
                           int(a["In msg nelems"]), str(a.get("dtype", "")).strip('"'))
                except (TypeError, ValueError):
                    continue
                d = kernels.setdefault(key, {})
                d[(m.group(2), m.group(3))] = d.get((m.group(2), m.group(3)), 0) + 1
    rank = info.get("rank")
    world = info.get("world_size")
    return KinetoTrace(path, int(rank) if isinstance(rank, (int, str)) and str(rank).isdigit() else None,
                       int(world) if isinstance(world, (int, str)) and str(world).isdigit() else None,
                       str(info.get("backend", "")), str(info.get("nccl_version", "")), pg_ranks, calls, kernels,
                       named, host, pid, t0 if calls else 0.0, t1 if calls else 0.0)
