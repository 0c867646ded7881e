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
    }
