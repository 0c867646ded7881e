"""Mirror of Open MPI 4.1's and 5.0's nonblocking collectives: coll/libnbc's schedules.

Open MPI runs ``MPI_I<coll>`` on an intra-communicator through coll/libnbc (priority 10; tuned
and basic provide no nonblocking forms, coll/adapt's ibcast/ireduce have priority 0). libnbc
builds one schedule per call (``ompi/mca/coll/libnbc/nbc_i<coll>.c``) and its progress engine
posts the schedule's sends through the PML, so the monitoring PML sees each of them. Its choice
of schedule is a few lines of code per collective, the same in v4.1.x and v5.0.x, and can be
forced with ``coll_libnbc_i<coll>_algorithm`` (META ``cvar.*``):

* iallreduce: binomial (reduce up and broadcast down the swap-rooted binomial trees) for fewer than
  4 ranks, below 64 KiB, non-commutative operators or ``MPI_IN_PLACE``; otherwise Rabenseifner's
  reduce-scatter + allgather when the count reaches the largest power of two not above ``p``,
  else the ring;
* ibcast: linear up to 4 ranks, else binomial (``coll_libnbc_ibcast_skip_dt_decision``, true by
  default, leaves out the size-dependent chain);
* ireduce: Rabenseifner's reduce-scatter + gather for commutative operators on more than 2 ranks
  with a count at least that power of two; binomial above 4 ranks, below 64 KiB or for
  non-commutative operators; else a chain of 8 KiB fragments;
* iallgather, igather, iscatter: linear; ialltoall: linear (in place: the pairwise exchange).

libnbc's trees put the root at relative rank 0 by swapping ranks 0 and ``root`` (``RANK2VRANK``),
not by rotation. Each function gives the messages rank ``c.rank`` sends, one entry per send.
"""

from __future__ import annotations

from rankmap.pairs.algorithms import binomial, linear
from rankmap.pairs.call import Call, Emitter
from rankmap.pairs.mirror import Mirrored

#: the forced-algorithm enumerations of coll/libnbc (coll_libnbc_component.c), by number
ALG_NAMES = {
    "allreduce": ("ignore", "ring", "binomial", "rabenseifner", "recursive_doubling"),
    "bcast": ("ignore", "linear", "binomial", "chain", "knomial"),
    "reduce": ("ignore", "chain", "binomial", "rabenseifner"),
    "allgather": ("ignore", "linear", "recursive_doubling"),
}

#: the nonblocking collectives mirrored
COVERED = ("allreduce", "bcast", "reduce", "allgather", "alltoall", "gather", "scatter")

SMALL = 65536


def _swap(x: int, root: int) -> int:
    """RANK2VRANK / VRANK2RANK: ranks 0 and ``root`` trade places (an involution)."""
    return root if x == 0 else 0 if x == root else x


def _ceil_log2(p: int) -> int:
    return (p - 1).bit_length()


def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def forced(cvars: dict[str, str], kind: str) -> int:
    """``coll_libnbc_i<kind>_algorithm`` as a number (MPI_T gives an enumeration's item name)."""
    v = str(cvars.get(f"coll_libnbc_i{kind}_algorithm", "0")).strip()
    if v.lstrip("-").isdigit():
        return int(v)
    names = ALG_NAMES.get(kind, ())
    return names.index(v) if v in names else 0


def _reduce_up(out: Emitter, p: int, r: int, root: int, count: int, ts: int) -> None:
    """The reduce half of libnbc's binomial schedules: relative rank v sends its (partial)
    vector to v minus its lowest set bit."""
    v = _swap(r, root)
    if v:
        out.send(_swap(binomial.parent(v), root), count, ts)


def _bcast_down(out: Emitter, p: int, r: int, root: int, count: int, ts: int) -> None:
    """libnbc's binomial broadcast: relative rank v sends to v + 2**k for every 2**k above v."""
    v = _swap(r, root)
    for k in range(_ceil_log2(p)):
        if (1 << k) > v and v + (1 << k) < p:
            out.send(_swap(v + (1 << k), root), count, ts)


def _allreduce_ring(out: Emitter, p: int, r: int, count: int, ts: int) -> None:
    """allred_sched_ring: 2(p - 1) rounds to r + 1, round k sends segment (r + 1 - k) mod p."""
    if count == 0:
        return
    seg = [count // p + (1 if i < count % p else 0) for i in range(p)]
    for k in range(2 * p - 2):
        out.send((r + 1) % p, seg[(r + 1 - k) % p], ts)


def _allreduce_doubling(out: Emitter, p: int, r: int, count: int, ts: int) -> None:
    """allred_sched_recursivedoubling: the pairs fold, the whole vector at each distance."""
    pof2 = _pof2(p)
    rem = p - pof2
    if r < 2 * rem:
        if r % 2 == 0:
            out.send(r + 1, count, ts)
            return
        vr = r >> 1
    else:
        vr = r - rem
    d = 1
    while d < pof2:
        peer = vr ^ d
        out.send(peer * 2 + 1 if peer < rem else peer + rem, count, ts)
        d <<= 1
    if r < 2 * rem:
        out.send(r - 1, count, ts)


def allreduce(out: Emitter, c: Call, alg: int, rabenseifner) -> str:
    p, r, n, ts = c.p, c.rank, c.scount, c.ssize
    pof2 = _pof2(p)
    if alg == 0:
        if p < 4 or n * ts < SMALL or not c.is_commutative or c.inplace:
            alg = 2
        elif n >= pof2:
            alg = 3
        else:
            alg = 1
    elif alg == 3 and not (n >= pof2 and c.is_commutative):
        alg = 1
    elif alg not in (1, 2, 4):
        alg = 1
    if alg == 2:                       # reduce to 0 up the tree, broadcast down
        _reduce_up(out, p, r, 0, n, ts)
        _bcast_down(out, p, r, 0, n, ts)
    elif alg == 3:                     # the same messages as tuned's Rabenseifner
        rabenseifner(out, c)
    elif alg == 4:
        _allreduce_doubling(out, p, r, n, ts)
    else:
        _allreduce_ring(out, p, r, n, ts)
    return ALG_NAMES["allreduce"][alg]


def bcast(out: Emitter, c: Call, alg: int) -> str:
    p, r, n = c.p, c.rank, c.scount
    if alg == 0:
        alg = 1 if p <= 4 else 2
    if alg == 1:
        linear.fan_out(out, p, r, c.root, n, c.ssize)
    elif alg == 2:
        _bcast_down(out, p, r, c.root, n, c.ssize)
    elif alg == 3:
        _chain(out, p, r, c.root, n, c.ssize, 16384, down=True)
    elif alg == 4:
        raise KeyError(alg)                # knomial: not mirrored
    else:
        alg = 1
        linear.fan_out(out, p, r, c.root, n, c.ssize)
    return ALG_NAMES["bcast"][alg]


def _chain(out: Emitter, p: int, r: int, root: int, count: int, ts: int, frag: int, down: bool) -> None:
    """bcast_sched_chain / red_sched_chain: fragments of ``frag`` bytes along the swap-rooted
    chain, down it (bcast: v to v + 1) or up it (reduce: v to v - 1)."""
    if count == 0:
        return
    v = _swap(r, root)
    nfrag = count * ts // frag + (1 if (count * ts) % frag else 0)
    fc = count // nfrag
    dst = v + 1 if down else v - 1
    if (down and v == p - 1) or (not down and v == 0):
        return
    for f in range(nfrag):
        out.send(_swap(dst, root), count - fc * f if f == nfrag - 1 else fc, ts)


def reduce(out: Emitter, c: Call, alg: int, redscat_gather) -> str:
    p, r, n, ts = c.p, c.rank, c.scount, c.ssize
    pof2 = _pof2(p)
    rs_ok = c.is_commutative and p > 2 and n >= pof2
    if alg == 0:
        alg = 3 if rs_ok else 2 if (p > 4 or n * ts < SMALL or not c.is_commutative) else 1
    elif alg == 3 and not rs_ok:
        alg = 1
    elif alg not in (1, 2):
        alg = 1
    if alg == 3:
        redscat_gather(out, c)
    elif alg == 2:
        vroot = c.root if c.is_commutative else 0
        _reduce_up(out, p, r, vroot, n, ts)
        if vroot != c.root and r == 0:
            out.send(c.root, n, ts)
    else:
        _chain(out, p, r, c.root, n, ts, 16384 // 2, down=False)
    return ALG_NAMES["reduce"][alg]


def allgather(out: Emitter, c: Call, alg: int) -> str:
    p, r = c.p, c.rank
    n, ts = c.rcount, c.rsize
    if alg == 2 and p & (p - 1) == 0:
        d = 1
        while d < p:
            out.send(r ^ d, n * d, ts)
            d <<= 1
        return "recursive_doubling"
    for i in range(p):
        if i != r:
            out.send(i, n, ts)
    return "linear"


def alltoall(out: Emitter, c: Call) -> str:
    p, r = c.p, c.rank
    if c.inplace:
        for i in range(1, (p + 1) // 2):
            out.send((r + i) % p, c.rcount, c.rsize)
            out.send((r - i) % p, c.rcount, c.rsize)
        if p % 2 == 0:
            out.send((r + p // 2) % p, c.rcount, c.rsize)
        return "inplace"
    for i in range(p):
        if i != r:
            out.send(i, c.scount, c.ssize)
    return "linear"


def messages(c: Call, cvars: dict[str, str], rabenseifner, redscat_gather) -> Mirrored | None:
    """The messages rank ``c.rank`` sends for the nonblocking call ``c`` under libnbc; None for
    what is not mirrored. ``rabenseifner(out, call)`` and ``redscat_gather(out, call)`` are
    tuned's allreduce and reduce algorithms of the same messages (:mod:`.ompi`)."""
    if c.kind not in COVERED:
        return None
    out = Emitter()
    if c.p < 2:
        return Mirrored([], "noop")
    alg = forced(cvars, c.kind)
    try:
        if c.kind == "allreduce":
            name = allreduce(out, c, alg, rabenseifner)
        elif c.kind == "bcast":
            name = bcast(out, c, alg)
        elif c.kind == "reduce":
            name = reduce(out, c, alg, redscat_gather)
        elif c.kind == "allgather":
            name = allgather(out, c, alg)
        elif c.kind == "alltoall":
            name = alltoall(out, c)
        elif c.kind == "gather":
            linear.fan_in(out, c.p, c.rank, c.root, c.scount, c.ssize)
            name = "linear"
        else:
            linear.fan_out(out, c.p, c.rank, c.root, c.scount, c.ssize)
            name = "linear"
    except KeyError:
        return None
    how = "forced" if alg else "libnbc's choice"
    return Mirrored(list(out.msgs), f"{name} (libnbc, {how})")
