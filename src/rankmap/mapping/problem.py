"""One node's placement problem in the arrays both node solvers share.

Ranks ``0..n-1`` go onto the node's GPUs, at most ``K`` per GPU. Besides the traffic between them
(``T``), each rank may send ``eout`` and receive ``ein`` bytes off the node; those bytes load the route
from its GPU to that GPU's NIC and the NIC's network up/down link, which are appended to the node's
directed links (columns ``D..D+2*NICs``). Everything is in congestion units (seconds per byte times
bytes), so a link's congestion is the plain sum of the contributions of the rank pairs that use it.
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

    def __post_init__(self) -> None:
        self.T = np.asarray(self.T, dtype=float).copy()
        np.fill_diagonal(self.T, 0.0)
        n = self.T.shape[0]
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
        # sum_{i,j} T[i,j] * cpb[g_i, g_j]
        cp = self.cpb[g[:, None], g[None, :]]  # (n, n, D')
        res = np.einsum("ij,ijd->d", self.T, cp)
        res += self.eout @ eo[g] + self.ein @ ei[g]
        return res

    def key(self, gpu_of: np.ndarray) -> tuple[float, float]:
        l = self.loads(gpu_of)
        return (float(l.max()) if l.size else 0.0, float(l.sum()))
