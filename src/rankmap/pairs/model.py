"""The fallback: one fixed algorithm per collective, for libraries the mirrors do not cover.

Used where neither the library's own accounting nor a mirror of its selection is available
(persistent collectives, MPICH's nonblocking ones, MPI libraries other than Open MPI 4.1 and MPICH 4.0,
Open MPI jobs whose collectives another coll component runs). The choices are the common ones of
MPICH's and Open MPI's defaults; rows from here are labelled ``model``. docs/collective-models.md
lists them.
"""

from __future__ import annotations

from rankmap.pairs.algorithms import binomial, doubling, linear
from rankmap.pairs.call import Call, Emitter, Msg

SMALL_BYTES = 65536


def messages(c: Call) -> list[Msg]:
    """The messages rank ``c.rank`` sends for ``c`` under the model (docs/collective-models.md)."""
    out = Emitter()
    p, me, k = c.p, c.rank, c.kind
    if p < 2:
        return []
    if k == "bcast":
        binomial.bcast(out, p, me, c.root, c.scount * c.ssize)
    elif k == "reduce":
        binomial.reduce(out, p, me, c.root, c.scount * c.ssize)
    elif k == "gather":
        binomial.gather(out, p, me, c.root, c.rcount * c.rsize if me == c.root else c.scount * c.ssize)
    elif k == "scatter":
        binomial.scatter(out, p, me, c.root, c.scount * c.ssize if me == c.root else c.rcount * c.rsize)
    elif k == "allreduce":
        n = c.scount * c.ssize
        if n < SMALL_BYTES or c.scount < p:
            doubling.allreduce(out, p, me, n, extra="upper")
        else:
            chunk = [c.scount // p + (1 if i < c.scount % p else 0) for i in range(p)]
            sent = 2 * c.scount - chunk[(me + 1) % p] - chunk[(me + 2) % p]
            out.send((me + 1) % p, sent, c.ssize)
    elif k == "allgather":
        n = c.rcount * c.rsize
        if p & (p - 1) == 0 and n * p < SMALL_BYTES:
            doubling.allgather(out, p, me, (n,) * p)
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
            linear.direct(out, p, me, c.vec)
    elif k == "gatherv":
        linear.fan_in(out, p, me, c.root, c.scount * c.ssize)
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
        doubling.dissemination(out, p, me)
    return [m for m in out.msgs if m.nbytes or k == "barrier"]
