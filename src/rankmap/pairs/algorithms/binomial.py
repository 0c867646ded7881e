"""The binomial tree of both libraries and the model: rank ``v`` (relative to the root) hangs
under ``v`` minus its lowest set bit, and a parent serves its children largest subtree first.

Open MPI calls it the in-order binomial tree (``ompi_coll_base_topo_build_in_order_bmtree``:
gather, scatter, reduce), MPICH walks it with a mask in ``MPIR_*_intra_binomial`` and
``MPII_Scatter_for_bcast``.
"""

from __future__ import annotations

from functools import lru_cache

from rankmap.pairs.call import Emitter


def children(p: int, v: int) -> list[int]:
    """The children of relative rank ``v`` in a tree of ``p`` ranks, the largest subtree first."""
    mask = 1
    while mask < p and not v & mask:
        mask <<= 1
    mask >>= 1
    out = []
    while mask > 0:
        if v + mask < p:
            out.append(v + mask)
        mask >>= 1
    return out


def parent(v: int) -> int:
    """The parent of relative rank ``v`` > 0."""
    return v - (v & -v)


def subtree(p: int, v: int) -> int:
    """The ranks of the subtree of relative rank ``v`` (itself included)."""
    return p - v if v == 0 else min(v & -v, p - v)


def bcast(out: Emitter, p: int, r: int, root: int, count: int, tsize: int = 1) -> None:
    """Every parent sends the whole vector to each child."""
    v = (r - root) % p
    for child in children(p, v):
        out.send((child + root) % p, count, tsize)


def scatter(out: Emitter, p: int, r: int, root: int, block: int, tsize: int = 1) -> None:
    """Every parent sends each child the blocks of the child's subtree."""
    v = (r - root) % p
    for child in children(p, v):
        out.send((child + root) % p, block * subtree(p, child), tsize)


def gather(out: Emitter, p: int, r: int, root: int, block: int, tsize: int = 1) -> None:
    """Every rank but the root sends its parent the blocks of its subtree."""
    v = (r - root) % p
    if v:
        out.send((parent(v) + root) % p, block * subtree(p, v), tsize)


def reduce(out: Emitter, p: int, r: int, root: int, count: int, tsize: int = 1) -> None:
    """Every rank but the root sends its parent the (partly reduced) vector."""
    v = (r - root) % p
    if v:
        out.send((parent(v) + root) % p, count, tsize)


@lru_cache(maxsize=4096)
def scatter_for_bcast(p: int, root: int, total: int) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """The scatter phase of a scatter-allgather bcast of ``total`` units, for all ranks at once:
    (the (destination, units) each rank sends, the units each rank holds after it). The vector is
    cut into ``ceil(total / p)`` pieces and a rank passes on what it received beyond its own
    subtree's share, so what it sends depends on what it got: the ranks are walked from the root
    down (MPICH's ``MPII_Scatter_for_bcast``, Open MPI's ``bcast_intra_scatter_allgather``)."""
    piece = (total + p - 1) // p
    sends: list[list[tuple[int, int]]] = [[] for _ in range(p)]
    held = [0] * p
    got = [0] * p
    for r in sorted(range(p), key=lambda x: bin((x - root) % p).count("1")):
        v = (r - root) % p
        if r == root:
            held[r] = total
        else:
            held[r] = 0 if total - v * piece <= 0 else got[r]
        for child in children(p, v):
            n = held[r] - piece * (child - v)
            if n > 0:
                dst = (child + root) % p
                sends[r].append((dst, n))
                got[dst] = n
                held[r] -= n
    return tuple(tuple(s) for s in sends), tuple(held)
