"""What a mirror of an MPI library's collective selection is, whichever library it follows.

A mirror takes one rank's :class:`~rankmap.pairs.call.Call` (and the node of each rank of its
communicator, for node-aware selections) and answers with the messages the library would send
for it, the algorithm it chose, and whether part of the answer had to be modelled (data moved
through shared memory rather than messages); or None where it does not cover the call, and the
model applies. :mod:`.ompi` (Open MPI's coll/tuned) and :mod:`.mpich` (MPICH's CH4 and MPIR
selection) implement it; :class:`~rankmap.pairs.library.Library` picks one from a record's META.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

from rankmap.pairs.call import Call, Msg


class Mirrored(NamedTuple):
    """One rank's messages for one call, as a mirror derives them."""

    msgs: list[Msg]
    #: the algorithm(s) the library chose and how (``ring (fixed rules)``, ``allreduce smp, ...``)
    algorithm: str
    #: part of the call moves data other than by messages: its rows are the model's
    modeled: bool = False


@runtime_checkable
class Mirror(Protocol):
    """A library's collective selection, with the parameters of one job."""

    #: what is mirrored, for the profile's notes (``Open MPI 4.1 coll/tuned mirrored``)
    note: str

    def messages(self, c: Call, nodes: tuple[int, ...] | None = None) -> Mirrored | None:
        """The messages rank ``c.rank`` sends for ``c``; ``nodes``: the node of each rank of the
        call's communicator (None: one node). None where the mirror does not cover the call."""
        ...
