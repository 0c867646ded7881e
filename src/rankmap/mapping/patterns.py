"""Synthetic traffic matrices of common communication patterns (bytes, dense ``n x n``).

Used by the tests, the benchmarks and ``rankmap demo`` when no real profile can be taken. Halo
exchanges use a periodic grid whose dimensions come from a balanced factorisation of ``n`` (what
``MPI_Dims_create`` does), so a 4-D halo of 8 ranks is 2x2x2x1 and of 16 ranks 2x2x2x2.
"""

from __future__ import annotations

import itertools

import numpy as np


def dims_create(n: int, ndims: int) -> list[int]:
    """Balanced factorisation of ``n`` into ``ndims`` factors, largest first (as MPI_Dims_create)."""
    dims = [1] * ndims
    m = n
    p = 2
    primes: list[int] = []
    while p * p <= m:
        while m % p == 0:
            primes.append(p)
            m //= p
        p += 1
    if m > 1:
        primes.append(m)
    for f in sorted(primes, reverse=True):
        i = int(np.argmin(dims))
        dims[i] *= f
    return sorted(dims, reverse=True)


def ring(n: int, nbytes: float = 1e8, bidirectional: bool = True) -> np.ndarray:
    T = np.zeros((n, n))
    for r in range(n):
        T[r, (r + 1) % n] += nbytes
        if bidirectional:
            T[r, (r - 1) % n] += nbytes
    np.fill_diagonal(T, 0)
    return T


def rings(n: int, count: int = 2, interleaved: bool = False, nbytes: float = 1e8) -> np.ndarray:
    """``count`` independent bidirectional rings (several jobs' worth of traffic in one): over
    consecutive blocks of ranks, or ``interleaved`` (ring ``k`` over ranks ``k, k + count, ...``,
    which the default blocks cut)."""
    T = np.zeros((n, n))
    for k in range(count):
        members = np.arange(k, n, count) if interleaved else np.array_split(np.arange(n), count)[k]
        if len(members) > 1:
            T[np.ix_(members, members)] += ring(len(members), nbytes)
    return T


def halo(n: int, ndims: int, nbytes: float = 1e8, dims: list[int] | None = None,
         weights: list[float] | None = None) -> np.ndarray:
    """Periodic nearest-neighbour exchange on an ``ndims``-D grid (row-major rank order).

    ``weights`` scales each dimension's face size (anisotropic sub-domains, as in lattice QCD codes).
    """
    dims = dims or dims_create(n, ndims)
    w = weights or [1.0 + 0.5 * i for i in range(ndims)]
    T = np.zeros((n, n))
    strides = [int(np.prod(dims[i + 1:])) for i in range(ndims)]
    for coords in itertools.product(*[range(d) for d in dims]):
        r = sum(c * s for c, s in zip(coords, strides))
        for i, d in enumerate(dims):
            if d == 1:
                continue
            for step in (-1, 1):
                c = list(coords)
                c[i] = (c[i] + step) % d
                q = sum(x * s for x, s in zip(c, strides))
                if q != r:
                    T[r, q] += nbytes * w[i]
    return T


def alltoall(n: int, nbytes: float = 1e7) -> np.ndarray:
    T = np.full((n, n), nbytes)
    np.fill_diagonal(T, 0)
    return T


def random_sparse(n: int, degree: int = 3, seed: int = 0, nbytes: float = 1e8) -> np.ndarray:
    rng = np.random.default_rng(seed)
    T = np.zeros((n, n))
    for r in range(n):
        for q in rng.choice([x for x in range(n) if x != r], size=min(degree, n - 1), replace=False):
            T[r, q] += nbytes * rng.uniform(0.1, 1.0)
    return T


def tree(n: int, nbytes: float = 1e8) -> np.ndarray:
    """Binary-tree reduction and broadcast: each rank exchanges with its parent."""
    T = np.zeros((n, n))
    for r in range(1, n):
        p = (r - 1) // 2
        T[r, p] += nbytes
        T[p, r] += nbytes
    return T


def master_worker(n: int, nbytes: float = 1e8, result_share: float = 0.25) -> np.ndarray:
    """Rank 0 hands work to every other rank and collects a smaller result from each."""
    T = np.zeros((n, n))
    T[0, 1:] = nbytes
    T[1:, 0] = nbytes * result_share
    return T


def butterfly(n: int, nbytes: float = 1e8, halving: bool = True) -> np.ndarray:
    """Recursive doubling: at stage ``k`` rank ``r`` exchanges with ``r xor 2**k`` (partners past
    ``n`` are skipped). With ``halving`` each stage sends half the previous (a reduce-scatter);
    without it every stage sends the same (an allreduce by recursive doubling)."""
    T = np.zeros((n, n))
    k, size = 1, float(nbytes)
    while k < n:
        for r in range(n):
            q = r ^ k
            if q < n:
                T[r, q] += size
        k <<= 1
        if halving:
            size /= 2
    return T


def transpose(rows: list[int], nbytes: float = 1e8, columns: float = 0.0) -> np.ndarray:
    """Pencil transpose: ranks in consecutive row groups of the given (possibly uneven) lengths, an
    all-to-all inside every row (each rank sends ``nbytes`` in total, split evenly among its row);
    ``columns`` > 0 adds the second transpose among ranks with the same position in their rows, each
    sending ``columns`` bytes in total."""
    n = int(sum(rows))
    T = np.zeros((n, n))
    column = np.zeros(n, dtype=np.int64)
    start = 0
    for length in rows:
        members = np.arange(start, start + length)
        column[members] = np.arange(length)
        if length > 1:
            T[np.ix_(members, members)] += nbytes / (length - 1)
        start += length
    if columns > 0:
        for c in np.unique(column):
            members = np.nonzero(column == c)[0]
            if len(members) > 1:
                T[np.ix_(members, members)] += columns / (len(members) - 1)
    np.fill_diagonal(T, 0)
    return T


def suite(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The patterns placement is tested and benchmarked on."""
    return {
        "ring": ring(n),
        "halo2d": halo(n, 2),
        "halo3d": halo(n, 3),
        "halo4d": halo(n, 4),
        "alltoall": alltoall(n),
        "random": random_sparse(n, 3, seed),
        "tree": tree(n),
        "master-worker": master_worker(n),
        # a 2-D halo on a grid of unequal sides with faces of very different sizes
        "halo-uneven": halo(n, 2, dims=uneven_dims(n), weights=[1.0, 6.0]),
        "butterfly": butterfly(n),
        "transpose": transpose(uneven_rows(n), columns=2.5e7),
        "random-dense": random_sparse(n, max(1, n // 2), seed + 1),
    }


def two_node_suite() -> dict[str, np.ndarray]:
    """Patterns of 12 to 16 ranks that put a two-node split to the test: pencil transposes whose rows
    fit on one node only when the split is uneven, rings the default blocks keep or cut, butterflies
    and a master-worker job."""
    return {
        "transpose 4+4+4": transpose([4, 4, 4]),
        "transpose 5+4+3": transpose([5, 4, 3]),
        "transpose 7+5": transpose([7, 5]),
        "transpose 6+6+4, columns": transpose([6, 6, 4], columns=3e7),
        "two rings 12": rings(12),
        "two rings 16": rings(16),
        "interleaved rings 16": rings(16, interleaved=True),
        "butterfly 12": butterfly(12),
        "butterfly 16": butterfly(16),
        "butterfly 16, flat": butterfly(16, halving=False),
        "master-worker 12": master_worker(12),
    }


def uneven_dims(n: int) -> list[int]:
    """A two-factor grid as far from square as ``n`` allows (largest factor at most n/2): 8 -> 4x2."""
    best = [n, 1]
    for a in range(2, n):
        if n % a == 0 and a <= n // 2:
            best = [n // a, a]
            break
    return best


def uneven_rows(n: int) -> list[int]:
    """Rows of unequal length summing to ``n``: half the ranks, then the rest in two (8 -> 4, 2, 2)."""
    if n < 3:
        return [n]
    rest = n - n // 2
    return [n // 2, rest - rest // 2, rest // 2]
