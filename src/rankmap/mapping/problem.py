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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping.platform import NodeModel


@dataclass
class NodeProblem:
    model: NodeModel
    T: np.ndarray  # (n, n) bytes
    eout: np.ndarray  # (n,) bytes sent off the node
    ein: np.ndarray  # (n,) bytes received from off the node
    K: int = 1
    Th: np.ndarray | None = None  # (n, n) host-staged bytes (None: none)

    def __post_init__(self) -> None:
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
                f"{n} ranks do not fit on {self.model.G} GPUs with {self.K} rank(s) per GPU: "
                f"use --ranks-per-gpu {-(-n // self.model.G)} or more GPUs/nodes")

    @property
    def n(self) -> int:
        return self.T.shape[0]

    @cached_property
    def cpb(self) -> np.ndarray:
        """(G, G, D') seconds per byte, network columns zero (GPU pairs stay in the node)."""
        m = self.model
        nn = len(m.nic_bw)
        out = np.zeros((m.G, m.G, m.D + 2 * nn))
        out[:, :, : m.D] = m.cpb
        return out

    @cached_property
    def hcpb(self) -> np.ndarray:
        """(G, G, D') seconds per host-staged byte, network columns zero; the diagonal is not zero."""
        m = self.model
        out = np.zeros((m.G, m.G, m.D + 2 * len(m.nic_bw)))
        out[:, :, : m.D] = m.hcpb
        return out

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

    @property
    def W(self) -> np.ndarray:
        """(n, n) all in-node bytes, whatever the route (how strongly two ranks are tied)."""
        return self.T if self.Th is None else self.T + self.Th

    @cached_property
    def ext(self) -> tuple[np.ndarray, np.ndarray]:
        """(G, D') seconds per byte of off-node traffic leaving / entering at each GPU."""
        m = self.model
        nn = len(m.nic_bw)
        eo = np.zeros((m.G, m.D + 2 * nn))
        ei = np.zeros_like(eo)
        eo[:, : m.D] = m.ext_out
        ei[:, : m.D] = m.ext_in
        for g in range(m.G):
            k = m.nic_of[g] or 0
            eo[g, m.D + 2 * k] = 1.0 / (m.nic_bw[k] * 1e9)
            ei[g, m.D + 2 * k + 1] = 1.0 / (m.nic_bw[k] * 1e9)
        return eo, ei

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

    def key(self, gpu_of: np.ndarray) -> tuple[float, float]:
        l = self.loads(gpu_of)
        return (float(l.max()) if l.size else 0.0, float(l.sum()))
