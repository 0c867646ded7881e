"""What one store write adds: counters summed by the keys the store keeps them under.

A :class:`Batch` takes rank records (:class:`rankmap.store.records.RankCounts`, such as the reader's
``RankRecord``; the store never imports the reader) holding either totals or the *delta* of a few
polls, and sums them by key, so a write carries one row per key that changed, however many flushes it spans.

The timeline keeps a bounded number of rows per sending rank (:func:`timeline_slot`): the newest
:data:`TIMELINE_SLOTS` buckets one by one, the :data:`TIMELINE_SLOTS` slots before them two buckets
wide, then four, ... so a 24 h job at 100 ms buckets needs about 13 x 128 slots per rank and class
instead of 864 000 buckets, and the last minute stays at full resolution.
"""

from __future__ import annotations

from typing import Sequence

from rankmap.store.records import RankCounts

#: slots per timeline level (the newest TIMELINE_SLOTS buckets are kept one by one)
TIMELINE_SLOTS = 128


def level_threshold(level: int, newest: int) -> int:
    """Buckets before this one are kept in slots at least ``2**level`` wide (``level`` >= 1)."""
    w = 1 << level
    return ((newest - (w - 1) * TIMELINE_SLOTS) // w) * w


def timeline_slot(bucket: int, newest: int) -> tuple[int, int]:
    """(width, first bucket) of the slot that holds ``bucket`` when the newest bucket is ``newest``.

    Thresholds are aligned to their width, so a slot never straddles a level boundary and merging
    two slots of one level gives exactly one slot of the next.
    """
    level = 0
    while bucket < level_threshold(level + 1, newest):
        level += 1
    w = 1 << level
    return w, (bucket // w) * w


class Batch:
    """Counters to add to one job, summed by their store keys; ``files`` are the readers' new states."""

    def __init__(self) -> None:
        self.traffic: dict[tuple, list[int]] = {}     # (source, reporter, src, dst, class, op, mem, pair source) -> [bytes, msgs]
        self.ops: dict[tuple, list] = {}              # (rank, source, op) -> [calls, ns, payload, histogram]
        self.timeline: dict[tuple, int] = {}          # (source, src, class, bucket) -> bytes
        self.ranks: dict[tuple, dict] = {}            # (rank, source) -> the ranks row (comm_ns: the delta)
        # name -> (bytes stored before this batch, None when none; bytes stored after; reader state)
        self.files: dict[str, tuple[int | None, int, dict]] = {}
        self.pvars: list[dict] = []                   # MPI_T samples: appended as they are (no key to add on)
        self.newest_bucket = -1

    def __len__(self) -> int:
        return len(self.traffic) + len(self.ops) + len(self.timeline) + len(self.ranks) + len(self.files) + len(self.pvars)

    def add(self, rec: RankCounts, *, timeline: bool = True) -> None:
        """Add one rank record (totals or a delta). Traffic is the rank's *send* rows (src = the rank)
        plus its one-sided *receive* rows (an ``MPI_Get`` moves bytes from the target, which records
        nothing, to the origin)."""
        rank, source = int(rec.world_rank), str(rec.source)
        traffic = self.traffic
        for row in rec.traffic:             # TrafficCount: by position
            peer, klass, op, mem, direction, nbytes, msgs = row[:7]
            ps = row[7] if len(row) > 7 else None
            if direction == "send":
                src, dst = rank, int(peer)
            elif klass == "rma":
                src, dst = int(peer), rank
            else:
                continue
            k = (source, rank, src, dst, str(klass), str(op), str(mem), None if ps is None else str(ps))
            t = traffic.get(k)
            if t is None:
                traffic[k] = [int(nbytes), int(msgs)]
            else:
                t[0] += int(nbytes)
                t[1] += int(msgs)
        hist, op_time, payload = rec.histogram, rec.op_time, rec.payload
        comm_ns = 0
        for op in set(op_time) | set(hist) | set(payload):
            calls, ns = op_time.get(op, (0, 0))
            o = self.ops.setdefault((rank, source, str(op)), [0, 0, 0, []])
            o[0] += int(calls)
            o[1] += int(ns)
            o[2] += int(payload.get(op, 0))
            o[3] = add_histograms(o[3], hist.get(op, []))
            comm_ns += int(ns)
        if timeline:
            tl = self.timeline
            newest = self.newest_bucket
            for b, _peer, klass, v in rec.timeline:
                tk = (source, rank, str(klass), int(b))
                tl[tk] = tl.get(tk, 0) + int(v)
                if b > newest:
                    newest = int(b)
            self.newest_bucket = newest
        self.pvars += pvar_rows(source, rank, rec)
        prev = self.ranks.get((rank, source))
        self.ranks[(rank, source)] = dict(
            host=rec.host, pid=rec.pid, start_ns=rec.start_ns,
            elapsed_ns=max(int(rec.elapsed_ns or 0), prev["elapsed_ns"] if prev else 0),
            comm_ns=comm_ns + (prev["comm_ns"] if prev else 0),
            finalized=bool(rec.finalized) or bool(prev and prev["finalized"]),
            problems=list(rec.problems))

    def file(self, name: str, before: int | None, after: int, state: dict) -> None:
        """A record file read from byte ``before`` (None: from its start, nothing of it stored yet)
        to ``after``; a later call for the same file keeps the first ``before``."""
        first = self.files[name][0] if name in self.files else before
        self.files[name] = (first, after, state)


def pvar_rows(source: str, rank: int, rec: RankCounts) -> list[dict]:
    """The rank's MPI_T performance variable samples as ``pvars`` rows (without the job). A delta
    carries the samples its blocks hold and every variable definition known so far."""
    defs = rec.pvar_defs
    rows = []
    for vid, t_ns, values in rec.pvar_samples:
        d = defs.get(vid)
        if d is None:
            continue
        vals = [v if isinstance(v, int) else float(v) for v in values]
        rows.append({"source": source, "rank": rank, "t_ns": int(t_ns), "name": str(d.name), "class": str(d.cls),
                     "value": float(sum(vals)) if vals else None, "values": vals})
    return rows


def add_histograms(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """Element-wise sum, without trailing empty bins (64 bins, mostly empty, per operation).

    Called for every operation of every rank at every streaming poll: the empty bins are skipped
    and the trailing ones cut at once rather than popped one by one."""
    if len(a) < len(b):
        a, b = b, a
    out = [int(x) for x in a]
    for i, x in enumerate(b):
        if x:
            out[i] += int(x)
    end = len(out)
    while end and out[end - 1] == 0:
        end -= 1
    del out[end:]
    return out
