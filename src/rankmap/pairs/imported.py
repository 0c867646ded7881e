"""Rank pairs from the traces other tools wrote: PyTorch profiler (Kineto) and OTF2 (Score-P).

Neither trace holds pairs for its collectives, so each is turned into the facts rankmap's own
hooks record, and the one model of each library makes the pairs:

* **Kineto** (:func:`kineto_profile`): every ``record_param_comms`` call of a process group
  becomes a row of that group's NCCL operation table -- the function NCCL runs (``allreduce`` ->
  AllReduce, ``_allgather_base`` -> AllGather, ``all_to_allv`` -> one Send per peer, as
  ProcessGroupNCCL issues it, ``barrier`` -> an AllReduce of one float), bytes per call as the
  plugin counts them, the root or peer in group ranks -- and the tables form a
  :class:`~rankmap.pairs.nccl_model.NcclProfile` with one record per trace (global rank:
  ``distributedInfo.rank``). :mod:`rankmap.pairs.nccl_model` does the rest, with NCCL's rings
  and trees when a NCCL INFO log of the run is given (matched to a group by its size). A trace
  does not say how many channels an operation used: it is spread over every ring the log shows.
  Its algorithm is read from the NCCL kernels the call launched (their names say it:
  ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``) where the trace has GPU activity, else RING is
  assumed, and the job says so.
* **OTF2** (:func:`otf2_records`): ``MpiSend``/``MpiIsend`` are exact point-to-point rows
  (label ``call``); each ``MpiCollectiveEnd`` becomes the collective signature the PMPI shim
  records, with the per-rank block recovered from Score-P's byte rules (``scorep_mpi_coll.h``:
  an allreduce of S bytes counts N x S sent, a broadcast root N x S, ...) as a byte-typed call,
  and :func:`rankmap.pairs.derive.apply` derives its pairs through the MPI library's mirror (when
  the library is named) or the model. The v-collectives' per-rank counts are not in OTF2: their
  bytes are reported, not paired. A mirror rule that splits by elements rather than bytes may cut
  a segment a few bytes apart from the real datatype's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from rankmap.errors import RankmapError, counted
from rankmap.formats import kineto as K
from rankmap.formats import otf2_trace as O
from rankmap.formats.record import CollFact, Communicator, RankRecord, TrafficRow
from rankmap.pairs import nccl_graph, nccl_model
from rankmap.pairs.derive import apply, node_index
from rankmap.pairs.library import Library
from rankmap.pairs.call import FLAG_INPLACE

BUCKET_NS = 100_000_000
#: a trace does not say how many channels an operation ran on: every ring or tree of NCCL's log
ALL_CHANNELS = 1 << 16

# record_param_comms collective name -> the NCCL function ProcessGroupNCCL runs
NCCL_FUNC = {
    "allreduce": "AllReduce", "allreduce_coalesced": "AllReduce", "barrier": "AllReduce",
    "broadcast": "Broadcast", "_broadcast_oop": "Broadcast", "reduce": "Reduce", "_reduce_oop": "Reduce",
    "all_gather": "AllGather", "_allgather_base": "AllGather", "allgather_coalesced": "AllGather",
    "allgather_into_tensor_coalesced": "AllGather", "reduce_scatter": "ReduceScatter",
    "_reduce_scatter_base": "ReduceScatter", "reduce_scatter_tensor_coalesced": "ReduceScatter",
    "all_to_all": "AlltoAll", "alltoall": "AlltoAll", "alltoall_base": "AlltoAll", "all_to_allv": "AlltoAll",
    "gather": "Gather", "scatter": "Scatter", "send": "Send", "recv": "Recv",
}
#: calls that move no payload (communicator set-up, the end of a coalescing range)
NO_PAYLOAD = {"init", "coalesced", "recvAnysource", "recv_any_source"}
ROOTED = {"Broadcast", "Reduce", "Gather", "Scatter"}


@dataclass
class Imported:
    """Records for the store, what the job's metadata says of how they were made, and notes."""

    records: list
    world_size: int
    meta: dict
    problems: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------- Kineto

def _group(call: K.CommCall, trace: K.KinetoTrace) -> tuple[int, ...] | None:
    """The global ranks of the call's process group (comm rank = index)."""
    if call.group_ranks and len(call.group_ranks) == call.group_size:
        return call.group_ranks
    known = trace.pg_ranks.get(call.pg_name)
    if known and len(known) == call.group_size:
        return known
    if call.rank_start is not None and call.rank_stride:
        return tuple(call.rank_start + i * call.rank_stride for i in range(call.group_size))
    if trace.world_size == call.group_size:
        return tuple(range(call.group_size))
    return None


def _hash(name: str, ranks: tuple[int, ...]) -> int:
    h = hashlib.blake2b(f"{name}|{','.join(map(str, ranks))}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big")


def _rows(call: K.CommCall, n: int, me: int, ranks: tuple[int, ...]) -> list[tuple[str, int, int]]:
    """(NCCL function, bytes per call, root or peer comm rank) of one call, as the plugin tables it."""
    f, sz = NCCL_FUNC[call.name], call.elem_bytes
    if call.name == "barrier":
        return [("AllReduce", 4, -1)]                      # ProcessGroupNCCL: an allreduce of one float
    if f in ("Send", "Recv"):
        peer = ranks.index(call.peer_global) if call.peer_global in ranks else call.rank_arg
        return [(f, call.in_nelems * sz, peer)]
    if f == "AlltoAll":
        split = call.in_split
        if split and len(split) == n and len(set(split)) > 1:   # uneven splits: one Send per peer
            per_row = call.in_nelems // max(sum(split), 1)
            return [("Send", s * per_row * sz, p) for p, s in enumerate(split) if p != me and s]
        return [("AlltoAll", call.in_nelems * sz // max(n, 1), -1)]
    if f == "ReduceScatter":
        return [(f, call.out_nelems * sz, -1)]
    if f == "Scatter":
        return [(f, call.out_nelems * sz, call.rank_arg)]
    return [(f, call.in_nelems * sz, call.rank_arg if f in ROOTED else -1)]


def kineto_profile(traces: list[K.KinetoTrace], graphs: dict[int, nccl_graph.CommGraph] | None = None
                   ) -> tuple[nccl_model.NcclProfile, dict, list[str]]:
    """The NCCL profile of a job's Kineto traces (one per rank), the job's metadata, notes."""
    seen: dict[int, Path] = {}
    for t in traces:
        if t.rank is None:
            raise RankmapError(f"{t.path}: no distributedInfo.rank: not a trace of a torch.distributed job "
                               f"(torch.profiler records it once the process group is up)")
        if t.rank in seen:
            raise RankmapError(f"{t.path}: rank {t.rank} again (also {seen[t.rank]}): give one trace per rank")
        seen[t.rank] = t.path
    if not any(t.calls for t in traces):
        raise RankmapError(f"{traces[0].path}: no {K.PARAM_COMMS} events in "
                           f"{'it' if len(traces) == 1 else f'any of the {len(traces)} traces'}: no process group "
                           f"calls were profiled")
    world = max([t.rank + 1 for t in traces] + [t.world_size or 0 for t in traces])
    t0 = min(t.start_us for t in traces if t.calls)
    comms: dict[int, nccl_model.NcclComm] = {}
    records: list[RankRecord] = []
    problems: list[str] = []
    assumed = algo_calls = 0
    skipped: dict[str, int] = {}
    unresolved: dict[str, int] = {}
    tables: list[dict[tuple[int, int], dict[tuple, list[int]]]] = []
    for i, t in enumerate(traces):
        rows: dict[tuple[int, int], dict[tuple, list[int]]] = {}     # (hash, comm rank) -> row key -> sums
        op_time: dict[str, tuple[int, int]] = {}
        payload: dict[str, int] = {}
        histogram: dict[str, list[int]] = {}
        timeline: dict[int, int] = {}
        for c in t.calls:
            if c.name in NO_PAYLOAD:
                continue
            if c.name not in NCCL_FUNC:
                skipped[c.name] = skipped.get(c.name, 0) + 1
                continue
            ranks = _group(c, t)
            if ranks is None or t.rank not in ranks:
                unresolved[c.pg_name or "?"] = unresolved.get(c.pg_name or "?", 0) + 1
                continue
            h, n, me = _hash(c.pg_name, ranks), len(ranks), ranks.index(t.rank)
            comm = comms.setdefault(h, nccl_model.NcclComm(h, c.pg_desc or c.pg_name, n))
            comm.files[me] = i
            algo = proto = "-"
            if NCCL_FUNC[c.name] not in ("Send", "Recv", "AlltoAll", "Gather", "Scatter"):
                seen_k = t.kernels.get((c.pg_name, c.name, c.in_nelems, c.dtype))
                if seen_k:
                    algo, proto = max(seen_k.items(), key=lambda kv: kv[1])[0]
                else:
                    algo, proto = "RING", "SIMPLE"
                    assumed += 1
                algo_calls += 1
            ns, start = int(c.dur_us * 1000), int((c.ts_us - t0) * 1000)
            for func, nbytes, rp in _rows(c, n, me, ranks):
                acc = rows.setdefault((h, me), {}).setdefault((func, nbytes, algo, proto, rp), [0, 0, start, start])
                acc[0] += 1
                acc[1] += ns
                acc[2], acc[3] = min(acc[2], start), max(acc[3], start)
                op = nccl_model.OPS.get(func, "nccl" + func)
                calls0, ns0 = op_time.get(op, (0, 0))
                op_time[op] = (calls0 + 1, ns0 + ns)
                payload[op] = payload.get(op, 0) + nbytes
                hist = histogram.setdefault(op, [0] * 64)
                hist[min(nbytes.bit_length(), 63)] += 1
                timeline[start // BUCKET_NS] = timeline.get(start // BUCKET_NS, 0) + nbytes
        tables.append(rows)
        records.append(RankRecord(
            path=t.path, version=0, source="nccl", world_rank=t.rank, world_size=world, host=t.host, pid=t.pid,
            start_ns=int(t.start_us * 1000), bucket_ns=BUCKET_NS, elapsed_ns=int((t.end_us - t.start_us) * 1000),
            finalized=True, op_time=op_time, payload=payload, histogram=histogram,
            timeline=[(b, -1, "nccl", v) for b, v in sorted(timeline.items())],
            meta={"nccl.world_rank_from": "distributedInfo"}))
    for rows in tables:
        for (h, me), table in rows.items():
            comms[h].rows[me] = [nccl_model.OpRow(f, b, a, p, ALL_CHANNELS, rp, calls, ns, first, last)
                                 for (f, b, a, p, rp), (calls, ns, first, last) in sorted(table.items())]
    graph_note = "none: no NCCL log of the run given; rings in rank order (pair rows labelled 'model')"
    if graphs:
        anon = {-(k + 1): g for k, g in enumerate(graphs.values())}     # group names are not NCCL's hashes
        got = nccl_graph.match(anon, {h: c.nranks for h, c in comms.items()})
        for h, g in got.items():
            comms[h].graph = g
        graph_note = (f"NCCL's rings and trees of {counted(len(got), 'process group')} of {len(comms)} "
                      f"(matched by size)")
    if assumed:
        problems.append(f"Kineto: {assumed} of {algo_calls} collective calls launched no NCCL kernel the trace "
                        f"names (no GPU activity recorded?): NCCL's RING algorithm assumed for them")
    if skipped:
        problems.append("Kineto: calls rankmap does not pair: " + ", ".join(f"{k} x{v}" for k, v in sorted(skipped.items())))
    if unresolved:
        problems.append("Kineto: calls of process groups whose ranks the trace does not list, left out: " +
                        ", ".join(f"group {k!r} x{v}" for k, v in sorted(unresolved.items())))
    profile = nccl_model.NcclProfile(None, records, [t.rank for t in traces], "distributedInfo", comms, problems)
    versions = sorted({t.nccl_version for t in traces if t.nccl_version})
    meta = {"source": "kineto", "imported_from": [str(t.path) for t in traces], "nccl_graph": graph_note,
            "nccl_algorithm": "from the NCCL kernels' names" if not assumed else
            f"RING assumed for {assumed} of {algo_calls} collective calls (no NCCL kernel in the trace)",
            "nccl_channels": "not in the trace: spread over every ring or tree of NCCL's log",
            "backend": ",".join(sorted({t.backend for t in traces if t.backend})) or "?",
            **({"nccl_version": ",".join(versions)} if versions else {})}
    return profile, meta, problems


def kineto_records(traces: list[K.KinetoTrace], graphs: dict[int, nccl_graph.CommGraph] | None = None) -> Imported:
    """The store's records of a job's Kineto traces: :func:`kineto_profile` through the pair model."""
    profile, meta, problems = kineto_profile(traces, graphs)
    recs = nccl_model.ingest_records(profile)
    return Imported(recs, profile.world_size, meta, problems + [p for r in recs[:1] for p in r.problems
                                                                 if p not in problems])


# ---------------------------------------------------------------------------------------- OTF2

_MPI_NAME = {"BARRIER": "MPI_Barrier", "BCAST": "MPI_Bcast", "GATHER": "MPI_Gather", "GATHERV": "MPI_Gatherv",
             "SCATTER": "MPI_Scatter", "SCATTERV": "MPI_Scatterv", "ALLGATHER": "MPI_Allgather",
             "ALLGATHERV": "MPI_Allgatherv", "ALLTOALL": "MPI_Alltoall", "ALLTOALLV": "MPI_Alltoallv",
             "ALLTOALLW": "MPI_Alltoallw", "ALLREDUCE": "MPI_Allreduce", "REDUCE": "MPI_Reduce",
             "REDUCE_SCATTER": "MPI_Reduce_scatter", "REDUCE_SCATTER_BLOCK": "MPI_Reduce_scatter_block",
             "SCAN": "MPI_Scan", "EXSCAN": "MPI_Exscan"}


def block_bytes(op: str, n: int, me: int, root: int, sent: int, received: int) -> tuple[int, int, bool] | None:
    """(send block, receive block, in place) in bytes of one rank's collective call, from the bytes
    Score-P counted for it; None where OTF2 does not hold enough (the v-collectives).

    Score-P counts as if every rank exchanged with every other: an allreduce / allgather /
    alltoall / reduce_scatter_block of block S sends N x S ((N-1) x S in place), a broadcast's root
    sends N x S and the others receive S, a reduce's or gather's non-roots send S and the root
    receives N x S, a scatter's root sends N x S, a scan's rank me sends (N - me) x S."""
    def split(total: int) -> tuple[int, bool]:
        if n > 1 and total % n and total % (n - 1) == 0:
            return total // (n - 1), True
        return total // max(n, 1), False

    if op == "BARRIER":
        return 0, 0, False
    if op in ("ALLREDUCE", "ALLGATHER", "ALLTOALL", "REDUCE_SCATTER_BLOCK"):
        s, inplace = split(sent)
        return s, s, inplace
    if op == "BCAST":
        s = sent // max(n, 1) if me == root else received
        return s, s, False
    if op in ("REDUCE", "GATHER"):
        if me == root and sent == 0:
            s = received // max(n - 1, 1)
            return s, s, True
        return sent, sent, False
    if op == "SCATTER":
        if me == root:
            s = sent // max(n, 1)
            return s, s, False
        return received, received, False
    if op in ("SCAN", "EXSCAN"):
        left = n - me - (1 if op == "EXSCAN" else 0)
        s = sent // left if left > 0 else (received // me if me else 0)
        return s, s, op == "EXSCAN"
    return None


def otf2_records(trace: O.Otf2Trace, mpi_library: str = "") -> Imported:
    """One MPI record per rank of an OTF2 trace, its point-to-point rows exact, its collectives paired
    by the mirror of ``mpi_library`` (``MPI_Get_library_version``'s text; empty: the model)."""
    n = trace.ranks
    comms = [Communicator(i, name, list(members)) for i, (name, members) in enumerate(trace.comms)]
    p2p: dict[int, dict[tuple[int, str], list[int]]] = {r: {} for r in range(n)}
    tl: dict[int, dict[tuple[int, int, str], int]] = {r: {} for r in range(n)}
    problems: list[str] = []
    bad_peer = 0
    for s in trace.sends:
        members = trace.comms[s.comm][1]
        if not 0 <= s.dst < len(members) or members[s.dst] < 0:
            bad_peer += 1
            continue
        dst = members[s.dst]
        acc = p2p[s.rank].setdefault((dst, "MPI_Send" if s.blocking else "MPI_Isend"), [0, 0])
        acc[0] += s.nbytes
        acc[1] += 1
        key = (s.t_ns // BUCKET_NS, dst, "p2p")
        tl[s.rank][key] = tl[s.rank].get(key, 0) + s.nbytes
    facts: dict[int, dict[tuple, int]] = {r: {} for r in range(n)}
    calls: dict[int, dict[tuple[int, int], int]] = {r: {} for r in range(n)}
    unpaired: dict[str, list[int]] = {}
    for c in trace.collectives:
        members = trace.comms[c.comm][1]
        if c.rank not in members:
            continue
        me, size = members.index(c.rank), len(members)
        got = block_bytes(c.op, size, me, c.root, c.sent, c.received)
        if got is None or c.op not in _MPI_NAME:
            u = unpaired.setdefault(_MPI_NAME.get(c.op, c.op), [0, 0])
            u[0] += 1
            u[1] += c.sent
            continue
        sb, rb, inplace = got
        key = (_MPI_NAME[c.op], c.comm, size, me, max(c.root, 0), sb, rb, FLAG_INPLACE if inplace else 0)
        sig = facts[c.rank].setdefault(key, len(facts[c.rank]) + 1)
        b = (sig, c.t_ns // BUCKET_NS)
        calls[c.rank][b] = calls[c.rank].get(b, 0) + 1
    meta = {"mpi_library": mpi_library} if mpi_library else {}
    hosts = {r: trace.hosts.get(r, "") for r in range(n)}
    node_of = node_index(hosts)
    records = []
    counted_by: dict[str, int] = {}
    for r in range(n):
        rec = RankRecord(
            path=trace.path, version=0, source="mpi", world_rank=r, world_size=n, host=hosts[r], pid=0, start_ns=0,
            bucket_ns=BUCKET_NS, elapsed_ns=trace.end_ns, finalized=True,
            traffic=sorted(TrafficRow(d, "p2p", op, "host", "send", b, m, "call") for (d, op), (b, m) in p2p[r].items()),
            timeline=sorted((b, d, k, v) for (b, d, k), v in tl[r].items()), communicators=list(comms), meta=dict(meta),
            coll_facts=[CollFact(sig, op, comm, size, me, root, sb, 1, rb, 1, flags, "host")
                        for (op, comm, size, me, root, sb, rb, flags), sig in facts[r].items()],
            coll_calls=[(sig, b, k) for (sig, b), k in sorted(calls[r].items())])
        for lab, k in apply(rec, node_of).items():
            counted_by[lab] = counted_by.get(lab, 0) + k
        records.append(rec)
    if bad_peer:
        problems.append(f"OTF2: {bad_peer} sends name a receiver outside their communicator; left out")
    for name, (k, b) in sorted(unpaired.items()):
        problems.append(f"OTF2: {k} calls of {name} ({b} bytes sent by Score-P's count): OTF2 holds no per-rank "
                        f"counts for them, so they are not in the pair matrix")
    lib = Library(meta)
    meta_out = {"source": "otf2", "imported_from": str(trace.path),
                "collectives": f"{lib.note or 'mirror of ' + mpi_library}; calls by label: " +
                               ", ".join(f"{k} {v}" for k, v in sorted(counted_by.items()) if v)}
    return Imported(records, n, meta_out, problems)
