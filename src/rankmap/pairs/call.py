"""One collective call as the shim recorded it, and the messages an algorithm sends for it.

The shim writes each distinct collective signature once (COLLFACTS blocks, docs/record-format.md)
with the number of calls per timeline bucket. A :class:`Call` is that signature in the units the
libraries decide with: element counts and type sizes, ranks within the communicator. The mirrors
and the model turn it into :class:`Msg` lists through an :class:`Emitter`: what this rank sends to
whom, one entry per message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

#: operation name (without ``MPI_``, the ``I`` of nonblocking and ``_init`` of persistent forms)
#: -> collective kind
KINDS = ("bcast", "reduce", "allreduce", "gather", "gatherv", "scatter", "scatterv", "allgather",
         "allgatherv", "alltoall", "alltoallv", "alltoallw", "reduce_scatter", "reduce_scatter_block",
         "scan", "exscan", "barrier")

FLAG_INPLACE, FLAG_COMMUTE, FLAG_COMMUTE_KNOWN, FLAG_LIBRARY = 1, 2, 4, 8


def kind_of(operation: str) -> tuple[str | None, str]:
    """``MPI_Iallreduce`` -> (``allreduce``, ``nonblocking``); ``MPI_Bcast_init`` -> (``bcast``,
    ``persistent``); anything that is not one of :data:`KINDS` -> (None, ...)."""
    name = operation[4:].lower() if operation.startswith("MPI_") else operation.lower()
    form = "blocking"
    if name.endswith("_init"):
        name, form = name[:-5], "persistent"
    if name not in KINDS and name.startswith("i") and name[1:] in KINDS:
        name, form = name[1:], "nonblocking"
    return (name if name in KINDS else None), form


@dataclass(frozen=True)
class Call:
    """A collective call on one rank: ``p`` ranks, this one is ``rank`` (communicator ranks).

    ``scount``/``ssize`` and ``rcount``/``rsize`` are the send and receive element counts and type
    sizes in bytes as passed (for the reductions both are the vector); ``vec`` holds per-rank bytes
    for the v/w collectives (alltoallv/w: what this rank sends to each rank, then what it receives).
    ``commute`` is None when the shim did not know the operator.
    """

    kind: str
    form: str
    p: int
    rank: int
    root: int = 0
    scount: int = 0
    ssize: int = 0
    rcount: int = 0
    rsize: int = 0
    inplace: bool = False
    commute: bool | None = None
    vec: tuple[int, ...] = field(default=())

    @property
    def is_commutative(self) -> bool:
        """Unknown operators count as commutative: MPI's predefined ones are."""
        return True if self.commute is None else self.commute


@dataclass(frozen=True)
class Msg:
    """One message this rank sends: to ``dst`` (a communicator rank), ``nbytes`` bytes."""

    dst: int
    nbytes: int


class Emitter:
    """The messages one rank sends for a call, in the order the algorithm posts them: the one
    sink every algorithm of :mod:`rankmap.pairs.algorithms`, both mirrors and the model write to.

    An algorithm sends in the ranks of the communicator it runs on. A library that splits a
    collective over sub-communicators (MPICH's node-aware compositions) runs each part on
    ``on(members)``: a view that writes to the same messages, its ranks mapped to the caller's
    communicator through ``members``. ``names`` collects the algorithms that ran; ``modeled`` is
    set when a part moves data other than by messages and had to be modelled.
    """

    __slots__ = ("msgs", "names", "_members", "_flags")

    def __init__(self) -> None:
        self.msgs: list[Msg] = []
        self.names: list[str] = []
        self._members: tuple[int, ...] | None = None
        self._flags = {"modeled": False}        # shared with the views

    def send(self, dst: int, count: int, tsize: int = 1) -> None:
        """``count`` elements of ``tsize`` bytes to ``dst`` (a rank of this emitter's communicator)."""
        if self._members is not None:
            dst = self._members[dst]
        self.msgs.append(Msg(int(dst), int(count) * int(tsize)))

    def on(self, members: Sequence[int]) -> "Emitter":
        """A view whose rank i is rank ``members[i]`` of this one: a sub-communicator's ranks, or
        ranks relative to a root."""
        view = Emitter.__new__(Emitter)
        view.msgs, view.names, view._flags = self.msgs, self.names, self._flags
        mine = self._members
        view._members = tuple(members) if mine is None else tuple(mine[m] for m in members)
        return view

    @property
    def modeled(self) -> bool:
        return self._flags["modeled"]

    @modeled.setter
    def modeled(self, value: bool) -> None:
        self._flags["modeled"] = bool(value)
