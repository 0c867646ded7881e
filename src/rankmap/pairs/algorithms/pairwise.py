"""The pairwise exchange: ``p - 1`` steps, at step ``i`` a rank sends the block of one peer."""

from __future__ import annotations

from rankmap.pairs.call import Emitter


def exchange(out: Emitter, p: int, r: int, blocks: tuple[int, ...], tsize: int = 1, xor: bool = False) -> None:
    """The peer of step ``i`` is ``r + i`` (Open MPI; MPICH's reduce-scatter), or ``r ^ i`` where
    ``p`` is a power of two and ``xor`` is set (MPICH's alltoall)."""
    use_xor = xor and p & (p - 1) == 0
    for i in range(1, p):
        dst = r ^ i if use_xor else (r + i) % p
        out.send(dst, blocks[dst], tsize)
