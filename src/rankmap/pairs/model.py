"""The fallback: one fixed algorithm per collective, for libraries the mirrors do not cover.

Used where neither the library's own accounting nor a mirror of its selection is available
(nonblocking and persistent collectives, MPI libraries other than Open MPI 4.1 and MPICH 4.0,
Open MPI jobs whose collectives another coll component runs). The choices are the common ones of
MPICH's and Open MPI's defaults; rows from here are labelled ``model``. docs/collective-models.md
lists them.
"""

from __future__ import annotations

from rankmap.pairs.call import Call, Emitter, Msg

SMALL_BYTES = 65536


def _lowbit(v: int) -> int:
    return v & -v


def _binomial(out: Emitter, c: Call, n: int, toward_root: bool, subtree: bool) -> None:
    """Binomial tree rooted at c.root: parent sends n (or, for gather/scatter, n per rank of the
    child's subtree) to each child; toward_root reverses the edges."""
    p, vr = c.p, (c.rank - c.root) % c.p
    if toward_root:
        if vr:
            low = _lowbit(vr)
            out.send((vr - low + c.root) % p, n * (min(low, p - vr) if subtree else 1))
        return
    mask = 1
    while mask < p and not vr & mask:
        mask <<= 1
    mask >>= 1
    while mask > 0:
        child = vr + mask
        if child < p:
            out.send((child + c.root) % p, n * (min(mask, p - child) if subtree else 1))
        mask >>= 1


def _recursive_doubling(out: Emitter, c: Call, n: int) -> None:
    p, me = c.p, c.rank
    p2 = 1 << (p.bit_length() - 1)
    if me >= p2:
        out.send(me - p2, n)
        return
    if me + p2 < p:
        out.send(me + p2, n)
    mask = 1
    while mask < p2:
        out.send(me ^ mask, n)
        mask <<= 1


def messages(c: Call) -> list[Msg]:
    """The messages rank ``c.rank`` sends for ``c`` under the model (docs/collective-models.md)."""
    out = Emitter()
    p, me, k = c.p, c.rank, c.kind
    if p < 2:
        return []
    if k == "bcast":
        _binomial(out, c, c.scount * c.ssize, False, False)
    elif k == "reduce":
        _binomial(out, c, c.scount * c.ssize, True, False)
    elif k == "gather":
        n = c.rcount * c.rsize if me == c.root else c.scount * c.ssize
        _binomial(out, c, n, True, True)
    elif k == "scatter":
        n = c.scount * c.ssize if me == c.root else c.rcount * c.rsize
        _binomial(out, c, n, False, True)
    elif k == "allreduce":
        n = c.scount * c.ssize
        if n < SMALL_BYTES or c.scount < p:
            _recursive_doubling(out, c, n)
        else:
            chunk = [c.scount // p + (1 if i < c.scount % p else 0) for i in range(p)]
            sent = 2 * c.scount - chunk[(me + 1) % p] - chunk[(me + 2) % p]
            out.send((me + 1) % p, sent, c.ssize)
    elif k == "allgather":
        n = c.rcount * c.rsize
        if p & (p - 1) == 0 and n * p < SMALL_BYTES:
            mask = 1
            while mask < p:
                out.send(me ^ mask, n * mask)
                mask <<= 1
        else:
            out.send((me + 1) % p, n * (p - 1))
    elif k == "allgatherv":
        v = c.vec[:p]
        out.send((me + 1) % p, sum(v) - v[(me + 1) % p])
    elif k in ("alltoall",):
        n = c.rcount * c.rsize
        for i in range(p):
            if i != me:
                out.send(i, n)
    elif k in ("alltoallv", "alltoallw", "scatterv"):
        if k != "scatterv" or me == c.root:
            for i, b in enumerate(c.vec[:p]):
                if i != me and b:
                    out.send(i, b)
    elif k == "gatherv":
        if me != c.root:
            out.send(c.root, c.scount * c.ssize)
    elif k == "reduce_scatter_block":
        out.send((me + 1) % p, c.rcount * c.rsize * (p - 1))
    elif k == "reduce_scatter":
        v = c.vec[:p]
        out.send((me + 1) % p, sum(v) - v[me])
    elif k in ("scan", "exscan"):
        mask = 1
        while mask < p:
            if me ^ mask < p:
                out.send(me ^ mask, c.scount * c.ssize)
            mask <<= 1
    elif k == "barrier":
        mask = 1
        while mask < p:
            out.send((me + mask) % p, 0)
            mask <<= 1
    return [m for m in out.msgs if m.nbytes or k == "barrier"]
