"""Recursive doubling and halving: partners at distances 1, 2, 4, ... (or the reverse).

A size that is not a power of two is handled one of two ways, and the libraries differ in which:
the first ``2 * rem`` ranks pair up and the even one of each pair sits the exchange out (the
*fold*: both libraries' allreduce and reduce-scatter), or a subtree cut short by the size is
completed afterwards by *fix-up* sends inside it (both libraries' recursive-doubling allgather
and reduce-scatter; MPICH's ``MPIR_Allgather_intra_recursive_doubling``, Open MPI's
``reduce_scatter_block_intra_recursivedoubling``).
"""

from __future__ import annotations

from functools import lru_cache

from rankmap.pairs.call import Emitter


def _pof2(p: int) -> int:
    """The largest power of two not above ``p``."""
    return 1 << (p.bit_length() - 1)


def fold(out: Emitter, p: int, r: int, count: int, tsize: int = 1) -> int:
    """The pairs fold of a size that is not a power of two: of the first ``2 * rem`` ranks each
    even one sends ``count`` elements to the odd one after it and sits the exchange out (-1);
    returns the rank's place among the power-of-two survivors (see :func:`survivor`)."""
    rem = p - _pof2(p)
    if r >= 2 * rem:
        return r - rem
    if r % 2 == 0:
        out.send(r + 1, count, tsize)
        return -1
    return r // 2


def survivor(p: int, place: int) -> int:
    """The rank at ``place`` among the survivors of :func:`fold`."""
    rem = p - _pof2(p)
    return place * 2 + 1 if place < rem else place + rem


def unfold(out: Emitter, p: int, r: int, count: int, tsize: int = 1) -> None:
    """The end of the pairs fold: each odd rank of the first ``2 * rem`` returns ``count``
    elements to the even one that sat out."""
    if r < 2 * (p - _pof2(p)) and r % 2:
        out.send(r - 1, count, tsize)


def allreduce(out: Emitter, p: int, r: int, count: int, tsize: int = 1, extra: str = "pairs") -> None:
    """Recursive-doubling allreduce: the whole vector to each partner.

    ``extra`` says where the ranks beyond the largest power of two go: ``"pairs"`` (both
    libraries, :func:`fold`): of the first ``2 * rem`` ranks each even one sends its vector to the
    odd one after it and gets the result back at the end; ``"upper"`` (the model): each rank above
    the largest power of two sends to the rank that power below it."""
    pof2 = _pof2(p)
    rem = p - pof2
    if extra == "upper":
        if r >= pof2:
            out.send(r - pof2, count, tsize)
            return
        if r + pof2 < p:
            out.send(r + pof2, count, tsize)
        mask = 1
        while mask < pof2:
            out.send(r ^ mask, count, tsize)
            mask <<= 1
        return
    newrank = fold(out, p, r, count, tsize)
    mask = 1
    while mask < pof2 and newrank >= 0:
        out.send(survivor(p, newrank ^ mask), count, tsize)
        mask <<= 1
    unfold(out, p, r, count, tsize)


@lru_cache(maxsize=4096)
def allgather_sends(p: int, blocks: tuple[int, ...]) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Recursive-doubling allgather(v) of ``blocks`` (rank i's contribution) for all ranks at once:
    the (destination, units) each rank sends, fix-ups of sizes that are not a power of two
    included (what a rank passes on depends on what it received)."""
    sends: list[list[tuple[int, int]]] = [[] for _ in range(p)]
    held = list(blocks)
    last = [0] * p
    mask, i = 1, 0
    while mask < p:
        before = held[:]
        for r in range(p):
            dst = r ^ mask
            if dst < p:
                sends[r].append((dst, before[r]))
                last[r] = before[dst]
                held[r] += last[r]
        short = {}
        for r in range(p):
            dst_root, my_root = ((r ^ mask) >> i) << i, (r >> i) << i
            if dst_root + mask > p:
                short[r] = p - my_root - mask
        k, tmp = i, mask >> 1
        while tmp:
            now = []
            for r, done in short.items():
                dst = r ^ tmp
                troot = (r >> k) << k
                if dst > r and r < troot + done and dst >= troot + done:
                    now.append((r, dst, last[r]))
            for src, dst, n in now:
                sends[src].append((dst, n))
                last[dst] = n
                held[dst] += n
            tmp >>= 1
            k -= 1
        mask <<= 1
        i += 1
    return tuple(tuple(s) for s in sends)


def allgather(out: Emitter, p: int, r: int, blocks: tuple[int, ...], tsize: int = 1) -> None:
    """Rank ``r``'s sends of the recursive-doubling allgather(v) (:func:`allgather_sends`)."""
    for dst, n in allgather_sends(p, tuple(blocks))[r]:
        out.send(dst, n, tsize)


def reduce_scatter(out: Emitter, p: int, r: int, counts: tuple[int, ...], tsize: int = 1) -> None:
    """Recursive-doubling reduce-scatter: at each distance a rank sends its partner the blocks
    outside its own subtree; a subtree cut short by the size gets them by fix-ups inside it."""
    def outside(tree_root: int, mask: int) -> int:
        return sum(counts[:min(tree_root, p)]) + sum(counts[tree_root + mask:])

    mask, i = 1, 0
    while mask < p:
        dst = r ^ mask
        dst_root = (dst >> i) << i
        my_root = (r >> i) << i
        if dst < p:
            out.send(dst, outside(my_root, mask), tsize)
        if dst_root + mask > p:
            done = p - my_root - mask
            k, tmp = i, mask >> 1
            while tmp:
                d2 = r ^ tmp
                troot = (r >> k) << k
                if d2 > r and r < troot + done and d2 >= troot + done:
                    out.send(d2, outside(dst_root, mask), tsize)
                tmp >>= 1
                k -= 1
        mask <<= 1
        i += 1


def reduce_scatter_halving(out: Emitter, p: int, r: int, counts: tuple[int, ...], tsize: int = 1,
                           skip_empty: bool = False) -> None:
    """Recursive-halving reduce-scatter over the largest power of two, the first ``2 * rem``
    ranks folded in pairs (even sends its vector to odd, odd returns its result at the end):
    at each halving distance a rank sends the half of the blocks its partner keeps.
    ``skip_empty``: an empty result is not returned (Open MPI's reduce_scatter)."""
    pof2 = _pof2(p)
    rem = p - pof2
    newrank = fold(out, p, r, sum(counts), tsize)
    if newrank != -1:
        merged = []
        for i in range(pof2):
            old = i * 2 + 1 if i < rem else i + rem
            merged.append(counts[old] + counts[old - 1] if old < 2 * rem else counts[old])
        mask = pof2 >> 1
        send_idx = recv_idx = 0
        last_idx = pof2
        while mask > 0:
            partner = newrank ^ mask
            dst = survivor(p, partner)
            if newrank < partner:
                send_idx = recv_idx + mask
                n = sum(merged[send_idx:last_idx])
            else:
                recv_idx = send_idx + mask
                n = sum(merged[send_idx:recv_idx])
            if n:
                out.send(dst, n, tsize)
            send_idx = recv_idx
            last_idx = recv_idx + mask
            mask >>= 1
    if counts[r - 1] or not skip_empty:
        unfold(out, p, r, counts[r - 1], tsize)


def dissemination(out: Emitter, p: int, r: int) -> None:
    """The dissemination barrier: an empty message to the rank 1, 2, 4, ... ahead."""
    mask = 1
    while mask < p:
        out.send((r + mask) % p, 0)
        mask <<= 1
