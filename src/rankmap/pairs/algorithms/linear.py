"""Direct sends: the root to every rank, every rank to the root, every block to its rank."""

from __future__ import annotations

from rankmap.pairs.call import Emitter


def fan_out(out: Emitter, p: int, r: int, root: int, count: int, tsize: int = 1) -> None:
    """The root sends ``count`` elements to every other rank (linear bcast and scatter)."""
    if r == root:
        for i in range(p):
            if i != r:
                out.send(i, count, tsize)


def fan_in(out: Emitter, p: int, r: int, root: int, count: int, tsize: int = 1) -> None:
    """Every rank but the root sends ``count`` elements to it (linear reduce and gather)."""
    if r != root:
        out.send(root, count, tsize)


def direct(out: Emitter, p: int, r: int, blocks: tuple[int, ...]) -> None:
    """Every non-empty block (bytes) to its rank, none to itself (alltoallv/w, scatterv's root)."""
    for i, n in enumerate(blocks[:p]):
        if i != r and n:
            out.send(i, n)
