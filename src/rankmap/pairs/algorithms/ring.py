"""The ring: every rank sends to the next one, ``p - 1`` steps, passing on the block it received."""

from __future__ import annotations

from rankmap.pairs.call import Emitter


def allgather(out: Emitter, p: int, r: int, blocks: tuple[int, ...], tsize: int = 1) -> None:
    """Ring allgather(v): first its own block, then each block it got from the rank before."""
    j = r
    for _ in range(1, p):
        out.send((r + 1) % p, blocks[j], tsize)
        j = (j - 1) % p
