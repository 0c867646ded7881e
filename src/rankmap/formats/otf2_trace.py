"""OTF2 archives (Score-P's traces): the MPI communication of every rank, read with OTF2's own
Python bindings (the optional ``otf2`` package: ``pip install 'rankmap[otf2]'``).

What is read, from the global definitions and every location's events:

* ranks -- the locations of the MPI ``COMM_LOCATIONS`` group, in its order (world rank = index);
  a location outside it (a thread, a GPU stream) counts for the MPI rank of its location group;
* communicators -- each MPI ``Comm``: its group's members as world ranks (comm rank = index);
* ``MpiSend`` / ``MpiIsend`` -- receiver (a rank of the communicator), message length in bytes:
  exact point-to-point traffic;
* ``MpiCollectiveEnd`` -- the operation, communicator, root and the bytes Score-P says the rank
  sent and received (``sizeSent`` / ``sizeReceived``, by its rules: scorep_mpi_coll.h).

This module reads and checks; it knows nothing of pairs (:mod:`rankmap.pairs.imported`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rankmap.errors import RankmapError

#: OTF2's ``OTF2_UNDEFINED_UINT32``: the root of a collective that has none
NO_ROOT = 0xFFFFFFFF


@dataclass(frozen=True)
class Send:
    rank: int            # world rank of the sender
    comm: int            # communicator index (into Otf2Trace.comms)
    dst: int             # receiver: rank in that communicator
    nbytes: int
    blocking: bool       # MpiSend (True) or MpiIsend
    t_ns: int            # since the trace's first timestamp


@dataclass(frozen=True)
class Collective:
    rank: int
    comm: int
    op: str              # OTF2's collective operation name: ALLREDUCE, BCAST, ...
    root: int            # comm rank, or -1
    sent: int
    received: int
    t_ns: int


@dataclass
class Otf2Trace:
    path: Path
    ranks: int
    hosts: dict[int, str]                          # world rank -> its system tree node's name
    comms: list[tuple[str, tuple[int, ...]]]       # (name, members as world ranks)
    sends: list[Send] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    end_ns: int = 0


def bindings():
    """The ``otf2`` module, or the one-line error that says how to get it."""
    try:
        import otf2
    except ImportError:
        raise RankmapError("reading OTF2 archives needs OTF2's Python bindings: pip install 'rankmap[otf2]' "
                           "(PyPI's otf2), or Debian's python3-otf2") from None
    return otf2


def read(path: str | Path) -> Otf2Trace:
    """The MPI events of the OTF2 archive whose anchor file (``traces.otf2``) is ``path`` or lies in
    the directory ``path``."""
    otf2 = bindings()
    p = Path(path)
    anchor = p / "traces.otf2" if p.is_dir() else p
    if not anchor.is_file():
        raise RankmapError(f"{p}: no OTF2 anchor file (traces.otf2) there")
    try:
        return _read(otf2, anchor)
    except RankmapError:
        raise
    except Exception as e:                       # the bindings' errors of a damaged archive
        raise RankmapError(f"{anchor}: not a readable OTF2 archive: {type(e).__name__}: {e}") from None


def _read(otf2, anchor: Path) -> Otf2Trace:
    from otf2.enums import GroupType, Paradigm

    with otf2.reader.open(str(anchor)) as tr:
        defs = tr.definitions
        world = [g for g in defs.groups if g.group_type == GroupType.COMM_LOCATIONS and g.paradigm == Paradigm.MPI]
        if not world:
            raise RankmapError(f"{anchor}: no MPI locations (an OTF2 trace of an MPI program has a COMM_LOCATIONS "
                               f"group of paradigm MPI)")
        members = list(world[0].members)
        rank_of_group = {loc.group: i for i, loc in enumerate(members)}
        rank_of = {loc: i for i, loc in enumerate(members)}
        hosts = {i: getattr(loc.group.system_tree_parent, "name", "") or "" for i, loc in enumerate(members)}
        comm_index: dict[object, int] = {}
        comms: list[tuple[str, tuple[int, ...]]] = []
        for c in defs.comms:
            grp = getattr(c, "group", None)
            if grp is None or getattr(grp, "paradigm", Paradigm.MPI) != Paradigm.MPI:
                continue
            ranks = tuple(rank_of.get(m, rank_of_group.get(getattr(m, "group", None), -1)) for m in grp.members)
            comm_index[c] = len(comms)
            comms.append((str(c.name), ranks))
        res = 1e9 / float(defs.clock_properties.timer_resolution or 1)
        t0 = int(defs.clock_properties.global_offset or 0)
        out = Otf2Trace(anchor, len(members), hosts, comms)
        for loc, ev in tr.events:
            r = rank_of.get(loc, rank_of_group.get(loc.group, -1))
            kind = type(ev).__name__
            if r < 0 or kind not in ("MpiSend", "MpiIsend", "MpiCollectiveEnd"):
                continue
            ci = comm_index.get(ev.communicator)
            if ci is None:
                raise RankmapError(f"{anchor}: a {kind} event of rank {r} names a communicator that is not an MPI "
                                   f"communicator of the definitions")
            t = int((int(ev.time) - t0) * res)
            out.end_ns = max(out.end_ns, t)
            if kind == "MpiCollectiveEnd":
                root = int(ev.root)
                out.collectives.append(Collective(r, ci, str(ev.collective_op).rsplit(".", 1)[-1], -1 if root == NO_ROOT else root,
                                                  int(ev.size_sent), int(ev.size_received), t))
            else:
                out.sends.append(Send(r, ci, int(ev.receiver), int(ev.msg_length), kind == "MpiSend", t))
    return out
