"""Bruck's concatenation: at distances 1, 2, 4, ... a rank sends all it holds (allgather) or the
blocks whose index has that bit (alltoall); no power of two needed."""

from __future__ import annotations

from rankmap.pairs.call import Emitter


def allgather(out: Emitter, p: int, r: int, blocks: tuple[int, ...], tsize: int = 1) -> None:
    """Bruck allgather(v) (Open MPI's ``allgather_intra_bruck``, MPICH's ``*_intra_brucks``): to
    the rank ``2**k`` behind, what it holds so far; the last step only the blocks still missing."""
    dist, held = 1, blocks[r]
    while dist <= p // 2:
        out.send((r - dist) % p, held, tsize)
        held += sum(blocks[(r + dist + i) % p] for i in range(dist))
        dist *= 2
    rest = p - dist
    if rest:
        out.send((r - dist) % p, sum(blocks[(r + i) % p] for i in range(rest)), tsize)


def alltoall(out: Emitter, p: int, r: int, block: int, tsize: int = 1) -> None:
    """Bruck alltoall: to the rank ``2**k`` ahead, every block whose index has bit ``k``."""
    dist = 1
    while dist < p:
        out.send((r + dist) % p, block * sum(1 for i in range(1, p) if i & dist), tsize)
        dist <<= 1
