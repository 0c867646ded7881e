"""The trees of Open MPI's ``coll_base_topo.c`` other than the binomial one, for one rank:
(parent or -1, children), ranks of the communicator. Its segmented algorithms (bcast and reduce
over a chain, a pipeline, a binary or k-nomial tree) walk them; the in-order binomial tree of its
gather, scatter and reduce is :mod:`.binomial`.
"""

from __future__ import annotations

from functools import lru_cache

#: MAXTREEFANOUT of coll_base_topo.h: the widest chain
MAXTREEFANOUT = 32


def _next_pow2(v: int) -> int:
    """opal_next_poweroftwo: the smallest power of two strictly greater than v (1 for 0)."""
    n = 1
    while n <= v:
        n <<= 1
    return n


def _pown(fanout: int, num: int) -> int:
    if num < 0:
        return 0
    return fanout ** num


def _level(fanout: int, rank: int) -> int:
    level, num = 0, 0
    while num <= rank:
        num += _pown(fanout, level)
        level += 1
    return level - 1


@lru_cache(maxsize=65536)
def tree(fanout: int, p: int, root: int, rank: int) -> tuple[int, tuple[int, ...]]:
    """ompi_coll_base_topo_build_tree: the n-ary tree (fanout 2: tuned's binary tree)."""
    if p < 2:
        return -1, ()
    s = (rank - root) % p
    level = _level(fanout, s)
    delta = _pown(fanout, level)
    kids = []
    for i in range(fanout):
        child = s + delta * (i + 1)
        if child >= p:
            break
        kids.append((child + root) % p)
    slimit = (_pown(fanout, level) - 1) // (fanout - 1) if fanout > 1 else level
    sparent = s
    if sparent < fanout:
        sparent = 0
    else:
        while sparent >= slimit:
            sparent -= delta // fanout
    parent = -1 if s == 0 else (sparent + root) % p
    return parent, tuple(kids)


@lru_cache(maxsize=65536)
def bmtree(p: int, root: int, rank: int) -> tuple[int, tuple[int, ...]]:
    """ompi_coll_base_topo_build_bmtree."""
    index = (rank - root) % p
    mask = _next_pow2(index)
    parent = -1
    if rank != root:
        remote = (index ^ (mask >> 1)) + root
        parent = remote - p if remote >= p else remote
    kids = []
    while mask < p:
        remote = index ^ mask
        if remote >= p:
            break
        remote += root
        kids.append(remote - p if remote >= p else remote)
        mask <<= 1
    return parent, tuple(kids)


@lru_cache(maxsize=65536)
def kmtree(p: int, root: int, radix: int, rank: int) -> tuple[int, tuple[int, ...]]:
    """ompi_coll_base_topo_build_kmtree."""
    vrank = (rank - root) % p
    parent, mask = -1, 1
    while mask < p:
        if vrank % (radix * mask):
            parent = (vrank // (radix * mask) * (radix * mask) + root) % p
            break
        mask *= radix
    mask //= radix
    kids = []
    while mask > 0:
        for r in range(1, radix):
            child = vrank + mask * r
            if child < p:
                kids.append((child + root) % p)
        mask //= radix
    return parent, tuple(kids)


@lru_cache(maxsize=65536)
def chain(fanout: int, p: int, root: int, rank: int) -> tuple[int, tuple[int, ...]]:
    """ompi_coll_base_topo_build_chain."""
    fanout = min(max(fanout, 1), MAXTREEFANOUT)
    if p - 1 < fanout:
        fanout = p - 1
    s = (rank - root) % p
    if fanout == 1:
        parent = -1 if s == 0 else (s - 1 + root) % p
        kids = () if s + 1 >= p else ((s + 1 + root) % p,)
        return parent, kids
    if p == 1:
        return -1, ()
    maxchainlen = (p - 1) // fanout
    if (p - 1) % fanout:
        maxchainlen += 1
        mark = (p - 1) % fanout
    else:
        mark = fanout + 1
    if s != 0:
        if s - 1 < mark * maxchainlen:
            column = (s - 1) // maxchainlen
            head = 1 + column * maxchainlen
            length = maxchainlen
        else:
            column = mark + (s - 1 - mark * maxchainlen) // (maxchainlen - 1)
            head = mark * maxchainlen + 1 + (column - mark) * (maxchainlen - 1)
            length = maxchainlen - 1
        parent = 0 if s == head else s - 1
        if s == head + length - 1 or s + 1 >= p:
            kids: tuple[int, ...] = ()
        else:
            kids = ((s + 1 + root) % p,)
        return (parent + root) % p, kids
    kids_l = [(root + 1) % p]
    for i in range(1, fanout):
        nxt = kids_l[i - 1] + maxchainlen
        if i > mark:
            nxt -= 1
        kids_l.append(nxt % p)
    return -1, tuple(kids_l)


@lru_cache(maxsize=65536)
def in_order_bintree(p: int, rank: int) -> tuple[int, tuple[int, ...]]:
    """ompi_coll_base_topo_build_in_order_bintree (rooted at p - 1)."""
    size, myrank, parent_of_me, delta = p, rank, -1, 0
    parent = size - 1
    kids: tuple[int, ...] = ()
    while True:
        rightsize = size >> 1
        lchild = rchild = -1
        if size - 1 > 0:
            lchild = parent - 1
            if lchild > 0:
                rchild = rightsize - 1
        if myrank == parent:
            kids = tuple(c + delta for c in (lchild, rchild) if c >= 0)
            break
        if myrank > rchild:
            if myrank == lchild:
                parent_of_me = parent + delta
            size = size - rightsize - 1
            delta += rightsize
            myrank -= rightsize
            parent = size - 1
        else:
            if myrank == rchild:
                parent_of_me = parent + delta
            size = rightsize
            parent = rchild
    return parent_of_me, kids
