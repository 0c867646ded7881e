"""Write OTF2 archives of known MPI programs with OTF2's own Python bindings, for the import's tests.

Score-P is not installed where the tests run, so the events are those Score-P would record for the
program, written from its known communication pattern: one location per rank ("Master thread"
of location group "MPI Rank r" under a system tree node per host), the MPI ``COMM_LOCATIONS``
group in rank order, ``MPI_COMM_WORLD`` as a ``COMM_GROUP`` of ranks, ``MpiIsend`` for every
``MPI_Isend`` (receiver, tag, bytes, request id) with its ``MpiIsendComplete``, ``MpiIrecv`` for the
receives, and every collective as ``MpiCollectiveBegin``/``MpiCollectiveEnd`` with Score-P's byte
counts (written here from scorep_mpi_coll.h's rules, independently of rankmap's inverse of them).
"""

from __future__ import annotations

from pathlib import Path

#: Score-P's (sent, received) bytes for rank ``me`` of ``n`` in a collective of block S, root ``root``
def scorep_bytes(op: str, n: int, me: int, root: int, s: int) -> tuple[int, int]:
    if op in ("ALLREDUCE", "ALLGATHER", "ALLTOALL", "REDUCE_SCATTER_BLOCK"):
        return n * s, n * s
    if op == "BCAST" or op == "SCATTER":
        return (n * s, s) if me == root else (0, s)
    if op in ("REDUCE", "GATHER"):
        return (s, n * s) if me == root else (s, 0)
    if op == "BARRIER":
        return 0, 0
    raise ValueError(op)


def ring_events(n: int, nbytes: int, iters: int) -> dict[int, list[tuple]]:
    """examples/mpi/ring.c: every rank MPI_Isend's ``nbytes`` to its right neighbour ``iters`` times."""
    return {r: [ev for it in range(iters) for ev in (("irecv", 1000 * it, (r - 1) % n, nbytes),
                                                     ("isend", 1000 * it + 10, (r + 1) % n, nbytes))]
            for r in range(n)}


def coll_mix_events(n: int, sizes: list[int]) -> dict[int, list[tuple]]:
    """examples/mpi/coll_mix.c with the given sizes (one repetition, all eight collectives)."""
    out: dict[int, list[tuple]] = {r: [] for r in range(n)}
    t = 0
    for k, s in enumerate(sizes, start=1):
        root, root2 = (k - 1) % n, k % n
        for op, rt in (("ALLREDUCE", -1), ("ALLGATHER", -1), ("BCAST", root), ("REDUCE", root2),
                       ("REDUCE_SCATTER_BLOCK", -1), ("ALLTOALL", -1), ("GATHER", root), ("SCATTER", root2)):
            t += 1000
            for r in range(n):
                sent, recv = scorep_bytes(op, n, r, rt, s)
                out[r].append(("coll", t, op, rt, sent, recv))
    return out


def write(path: Path, n: int, events: dict[int, list[tuple]], host: str = "node0") -> Path:
    """The archive ``path`` (a directory; its anchor file is ``path/traces.otf2``)."""
    import otf2
    from otf2.enums import CollectiveOp, GroupType, LocationType, Paradigm

    with otf2.writer.open(str(path), timer_resolution=1_000_000_000) as tr:
        d = tr.definitions
        node = d.system_tree_node(host)
        groups = [d.location_group(f"MPI Rank {r}", system_tree_parent=node) for r in range(n)]
        locs = [d.location("Master thread", type=LocationType.CPU_THREAD, group=g) for g in groups]
        d.group("MPI_COMM_WORLD locations", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group("MPI_COMM_WORLD", group_type=GroupType.COMM_GROUP,
                                                        paradigm=Paradigm.MPI, members=list(range(n))))
        for r, loc in enumerate(locs):
            w = tr.event_writer_from_location(loc)
            req = 0
            for ev in events.get(r, []):
                kind, t = ev[0], ev[1]
                if kind == "isend":
                    req += 1
                    w.mpi_isend(t, ev[2], world, 7, ev[3], req)
                    w.mpi_isend_complete(t + 5, req)
                elif kind == "irecv":
                    req += 1
                    w.mpi_irecv_request(t, req)
                    w.mpi_irecv(t + 5, ev[2], world, 7, ev[3], req)
                elif kind == "coll":
                    _, _, op, root, sent, recv = ev
                    w.mpi_collective_begin(t)
                    w.mpi_collective_end(t + 5, getattr(CollectiveOp, op), world,
                                         0xFFFFFFFF if root < 0 else root, sent, recv)
    return path
