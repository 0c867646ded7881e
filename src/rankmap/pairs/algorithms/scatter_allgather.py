"""The large-message bcast of both libraries: a binomial scatter of ``ceil(total / p)`` pieces,
then an allgather of the pieces among the ranks relative to the root (Open MPI's
``bcast_intra_scatter_allgather`` and ``_ring``, MPICH's
``MPIR_Bcast_intra_scatter_recursive_doubling_allgather`` and ``_ring_allgather``)."""

from __future__ import annotations

from rankmap.pairs.algorithms import binomial, doubling, ring as ring_
from rankmap.pairs.call import Emitter


def bcast(out: Emitter, p: int, r: int, root: int, total: int, tsize: int = 1, ring: bool = False) -> None:
    """Rank ``r``'s sends: its part of the scatter, then a ring (``ring``) or recursive-doubling
    allgather of the pieces (piece ``v`` is the one relative rank ``v`` got)."""
    scattered, _ = binomial.scatter_for_bcast(p, root, total)
    for dst, n in scattered[r]:
        out.send(dst, n, tsize)
    piece = (total + p - 1) // p
    share = tuple(max(0, min(piece, total - v * piece)) for v in range(p))
    relative = out.on(tuple((v + root) % p for v in range(p)))
    (ring_.allgather if ring else doubling.allgather)(relative, p, (r - root) % p, share, tsize)
