"""One node's placement problem in the arrays both node solvers share.

Ranks ``0..n-1`` go onto the node's GPUs, at most ``K`` per GPU. Besides the traffic between them
(``T``), each rank may send ``eout`` and receive ``ein`` bytes off the node; those bytes load the route
from its GPU to that GPU's NIC and the NIC's network up/down link, which are appended to the node's
directed links (columns ``D..D+2*NICs``). Everything is in congestion units (seconds per byte times
bytes), so a link's congestion is the plain sum of the contributions of the rank pairs that use it.

The in-node traffic comes in two terms: ``T`` (peer-to-peer bytes, route ``cpb``) and ``Th``
(host-staged bytes, route ``hcpb``: GPU -> CPU -> GPU, non-zero also for two ranks on one GPU). A
mapping's loads are ``sum_ij T[i,j] cpb[g_i,g_j] + Th[i,j] hcpb[g_i,g_j]`` plus the off-node terms;
:meth:`NodeProblem.terms` lists the in-node terms that carry bytes, so a problem without host-staged
bytes is exactly the one-term problem it always was.

``objective`` (:mod:`rankmap.mapping.objective`) says what the node solvers rank assignments by;
:meth:`NodeProblem.key_of_loads` is the one place that turns a congestion vector into that key.
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from rankmap.errors import RankmapError, counted, verb
from rankmap.mapping.objective import check, key_of_congestion
from rankmap.mapping.platform import NodeModel


@dataclass
class NodeProblem:
    model: NodeModel
    T: np.ndarray  # (n, n) bytes
    eout: np.ndarray  # (n,) bytes sent off the node
    ein: np.ndarray  # (n,) bytes received from off the node
    K: int = 1
    Th: np.ndarray | None = None  # (n, n) host-staged bytes (None: none)
    objective: str = "max"

    def __post_init__(self) -> None:
        check(self.objective)
        self.T = np.asarray(self.T, dtype=float).copy()
        np.fill_diagonal(self.T, 0.0)
        n = self.T.shape[0]
        if self.Th is not None:
            self.Th = np.asarray(self.Th, dtype=float).copy()
            if self.Th.shape != self.T.shape:
                raise ValueError(f"host-staged matrix has shape {self.Th.shape}, traffic {self.T.shape}")
            np.fill_diagonal(self.Th, 0.0)
            if not self.Th.any():
                self.Th = None
        if n > self.model.G * self.K:
            raise RankmapError(
                f"{counted(n, 'rank')} {verb(n, 'does', 'do')} not fit on {counted(self.model.G, 'GPU')} with "
                f"{counted(self.K, 'rank')} per GPU: "
                f"use --ranks-per-gpu {-(-n // self.model.G)} or more GPUs/nodes")

    @property
    def n(self) -> int:
        return self.T.shape[0]

    @property
    def cpb(self) -> np.ndarray:
        """(G, G, D') seconds per byte, network columns zero (GPU pairs stay in the node)."""
        return self.model.padded_cpb

    @property
    def hcpb(self) -> np.ndarray:
        """(G, G, D') seconds per host-staged byte, network columns zero; the diagonal is not zero."""
        return self.model.padded_hcpb

    @property
    def has_host(self) -> bool:
        return self.Th is not None

    @property
    def has_peer(self) -> bool:
        """Whether any in-node byte takes the peer route (False only when all are host-staged)."""
        return self.Th is None or bool(self.T.any())

    def terms(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The in-node (bytes, seconds-per-byte) terms that carry traffic: peer first, then host."""
        res = [(self.T, self.cpb)] if self.has_peer else []
        if self.Th is not None:
            res.append((self.Th, self.hcpb))
        return res

    def projected_terms(self) -> list[tuple[np.ndarray, str]]:
        """:meth:`terms` naming their route tensor in :meth:`projected` (``cpb`` or ``hcpb``)."""
        res = [(self.T, "cpb")] if self.has_peer else []
        if self.Th is not None:
            res.append((self.Th, "hcpb"))
        return res

    @property
    def W(self) -> np.ndarray:
        """(n, n) all in-node bytes, whatever the route (how strongly two ranks are tied)."""
        return self.T if self.Th is None else self.T + self.Th

    @property
    def ext(self) -> tuple[np.ndarray, np.ndarray]:
        """(G, D') seconds per byte of off-node traffic leaving / entering at each GPU."""
        return self.model.padded_ext

    @property
    def has_ext(self) -> bool:
        return bool(self.eout.any() or self.ein.any())

    def unary(self) -> np.ndarray:
        """(n, G, D') congestion each rank's off-node traffic puts on links, per GPU it may take."""
        eo, ei = self.ext
        return self.eout[:, None, None] * eo[None] + self.ein[:, None, None] * ei[None]

    def loads(self, gpu_of: np.ndarray) -> np.ndarray:
        """(D',) congestion of a complete assignment."""
        g = np.asarray(gpu_of)
        eo, ei = self.ext
        # sum_{i,j} T[i,j] * cpb[g_i, g_j] (+ the host-staged term the same way)
        res = np.zeros(self.cpb.shape[2])
        for T, cpb in self.terms():
            res += np.einsum("ij,ijd->d", T, cpb[g[:, None], g[None, :]])
        res += self.eout @ eo[g] + self.ein @ ei[g]
        return res

    @property
    def bw_bytes(self) -> np.ndarray:
        """(D',) bandwidth of every column in bytes/s: congestion x this = bytes on the link."""
        return self.model.bw_bytes

    def projection(self) -> np.ndarray:
        """(D', k + 1): the columns the solvers need, then one linear column.

        For the maximum only links that can ever be the busiest are kept (:func:`undominated`); for the
        average every link a route can use (it counts them). The last column is the linear part of
        the key: the total congestion, or for hop-bytes congestion x bandwidth (bytes per link),
        so ``loads @ projection`` carries everything the objective's key needs. Cached on the model
        per objective and per kind of route the problem's bytes take."""
        ck = ("projection", self.objective, self.has_peer, self.has_host)
        cache = self.model.solver_cache
        if ck not in cache:
            eo, ei = self.ext
            rows = route_rows(self.cpb if self.has_peer else None, eo, ei, self.hcpb if self.has_host else None)
            if self.objective == "avg":
                keep = np.nonzero(rows.any(axis=1))[0]
            else:
                keep = undominated(rows)
            proj = np.zeros((self.cpb.shape[2], len(keep) + 1))
            proj[keep, np.arange(len(keep))] = 1.0
            proj[:, -1] = self.bw_bytes if self.objective == "hop-bytes" else 1.0
            cache[ck] = proj
        return cache[ck]

    def projected(self) -> dict[str, np.ndarray]:
        """The route tensors in the columns of :meth:`projection`: ``cpb``, ``hcpb`` (G, G, k + 1) and
        ``eo``, ``ei`` (G, k + 1). Cached on the model with the projection: on a 64-GPU node one
        product costs a second, and every solve of every node problem needs the same ones."""
        ck = ("projected", self.objective, self.has_peer, self.has_host)
        cache = self.model.solver_cache
        if ck not in cache:
            proj = self.projection()
            eo, ei = self.ext
            cache[ck] = {"cpb": self.cpb @ proj, "hcpb": self.hcpb @ proj, "eo": eo @ proj, "ei": ei @ proj}
        return cache[ck]

    def projected_unary(self) -> np.ndarray:
        """(n, G, k + 1): :meth:`unary` in the projected columns."""
        pr = self.projected()
        return self.eout[:, None, None] * pr["eo"][None] + self.ein[:, None, None] * pr["ei"][None]

    def key_of_loads(self, loads: np.ndarray) -> tuple[float, float]:
        """The objective's (primary, tie-break) of a congestion vector over the D' columns."""
        return key_of_congestion(loads, self.bw_bytes, self.objective)

    def key(self, gpu_of: np.ndarray) -> tuple[float, float]:
        return self.key_of_loads(self.loads(gpu_of))


def route_rows(cpb: np.ndarray | None, eo: np.ndarray, ei: np.ndarray, hcpb: np.ndarray | None) -> np.ndarray:
    """(D', routes): seconds per byte every route puts on every column (``cpb`` None: no peer route)."""
    G = eo.shape[0]
    rows = ([cpb.reshape(G * G, -1)] if cpb is not None else []) + [eo, ei] \
        + ([hcpb.reshape(G * G, -1)] if hcpb is not None else [])
    return np.concatenate(rows, axis=0).T


def undominated(X: np.ndarray) -> np.ndarray:
    """Indices of the columns (rows of ``X``, from :func:`route_rows`) that can be the most congested.

    Link ``a`` is dominated by ``b`` when every route puts at least as much congestion per byte on
    ``b`` as on ``a``: then ``b``'s congestion is never below ``a``'s, whatever the mapping. Of
    identical links one is kept."""
    used = X.any(axis=1)
    idx = np.nonzero(used)[0]
    X = X[idx]
    # b can dominate a only if every route over a also crosses b: count the routes they share (one
    # product; a pairwise test over all routes costs seconds on a 64-GPU node), then test the values
    # on the candidate pairs alone
    U = (X > 0).astype(np.float64)
    cover = U @ U.T >= U.sum(axis=1)[:, None] - 0.5
    le = np.zeros(cover.shape, dtype=bool)  # le[a, b]: a <= b everywhere
    pairs = np.argwhere(cover)
    for lo in range(0, len(pairs), 256):
        a, b = pairs[lo:lo + 256].T
        le[a, b] = (X[a] <= X[b] * (1 + 1e-12)).all(axis=1)
    keep = []
    for a in range(len(idx)):
        dominated = False
        for b in np.nonzero(le[a])[0]:
            if b == a:
                continue
            if not le[b, a] or b < a:  # strictly dominated, or a duplicate of an earlier link
                dominated = True
                break
        if not dominated:
            keep.append(idx[a])
    return np.asarray(keep if keep else idx[:1], dtype=np.int64)
