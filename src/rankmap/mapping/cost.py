"""The congestion cost model: traffic routed over directed links, scored the NVTAGS way.

Each rank pair's bytes follow the hardware route between the GPUs (and nodes) the mapping gives them;
the bytes every *directed* link carries are its **load**, and load / (GB/s x 1e9) is its
**congestion** in seconds: how long the link alone needs for its share. The largest congestion is a
lower bound on the job's communication time (the busiest link cannot finish sooner), so a mapping is
ranked by

1. maximum congestion (the bound itself),
2. total congestion, the sum over all directed links (equivalently: byte-seconds of link time used),
3. hop-bytes (bytes times directed links crossed: the loads summed over links).

:mod:`rankmap.mapping.objective` names the other orders a user may ask for (``--objective``).

The **average** congestion over used links (the figure NVTAGS reports) is computed and shown too, but
it is not a ranking key: it drops when traffic is spread onto *more* links even if every byte then
travels further, and it is not monotone as a partial mapping grows, so no bound can prune with it.
The total is its monotone twin: for a fixed number of used links they order mappings the same way.

Bytes the profile marks as staged through host memory (``mem = host``) take the host-staged route of
:mod:`rankmap.mapping.platform` inside a node (GPU -> its CPU -> [CPU interconnect] -> CPU -> GPU, also
when both ranks share a GPU); every other byte (device, managed, unknown, or a source that does not
say) takes the peer route. Off the node both kinds leave through the NIC as before: an MPI without
CUDA support sends from host memory over the same NIC, and the in-node part of that path is the GPU's
NIC route either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankmap.mapping.platform import Platform

#: relative tolerance under which two congestion values count as equal (floating-point sums)
REL_EPS = 1e-9


@dataclass(frozen=True)
class Traffic:
    """Sparse traffic matrix: ``bytes[i]`` sent from ``src[i]`` to ``dst[i]`` (no self pairs, no zeros).

    ``host[i]`` (at most ``bytes[i]``) is the part of those bytes that was staged through host memory,
    or ``None`` when the source does not say where buffers lived: then every byte is peer-to-peer,
    exactly as for a matrix with no host part. ``bytes`` is always the total, so whatever ignores
    memory kinds (the node split, off-node traffic) reads it unchanged.
    """

    n: int
    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    host: np.ndarray | None = None

    @classmethod
    def from_dense(cls, T: np.ndarray, host: np.ndarray | None = None) -> "Traffic":
        """``T`` all bytes, ``host`` the host-staged part of them (same shape, or None)."""
        T = np.asarray(T, dtype=float)
        if T.ndim != 2 or T.shape[0] != T.shape[1]:
            raise ValueError(f"traffic matrix must be square, got shape {T.shape}")
        T = T.copy()
        np.fill_diagonal(T, 0.0)
        s, d = np.nonzero(T > 0)
        h = None
        if host is not None:
            H = np.asarray(host, dtype=float)
            if H.shape != T.shape:
                raise ValueError(f"host-staged matrix has shape {H.shape}, traffic {T.shape}")
            h = H[s, d]
            off = H.copy()
            np.fill_diagonal(off, 0.0)
            if np.any(off < 0) or np.any(off[T <= 0] != 0) or np.any(h > T[s, d] * (1 + 1e-12)):
                raise ValueError("host-staged bytes must lie between 0 and the pair's total")
            h = np.minimum(h, T[s, d])
            if not h.any():
                h = None
        return cls(T.shape[0], s.astype(np.int64), d.astype(np.int64), T[s, d], h)

    @classmethod
    def from_triples(cls, n: int, src, dst, nbytes, host=None) -> "Traffic":
        """Rows of (src, dst, bytes); ``host`` per row: the host-staged bytes of that row (or None)."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        b = np.asarray(nbytes, dtype=float)
        hb = None if host is None else np.asarray(host, dtype=float)
        keep = (src != dst) & (b > 0)
        src, dst, b = src[keep], dst[keep], b[keep]
        # merge duplicates so that every pair appears once
        key = src * n + dst
        uniq, inv = np.unique(key, return_inverse=True)
        h = None
        if hb is not None:
            h = np.bincount(inv, weights=hb[keep], minlength=len(uniq))
            if not h.any():
                h = None
        return cls(n, uniq // n, uniq % n, np.bincount(inv, weights=b, minlength=len(uniq)), h)

    def dense(self) -> np.ndarray:
        T = np.zeros((self.n, self.n))
        np.add.at(T, (self.src, self.dst), self.bytes)
        return T

    def dense_host(self) -> np.ndarray:
        """(n, n) host-staged bytes (zeros when the source did not say)."""
        H = np.zeros((self.n, self.n))
        if self.host is not None:
            np.add.at(H, (self.src, self.dst), self.host)
        return H

    def symmetric_edges(self, scale: int = 1_000_000, peer_weight: float = 1.0,
                        host_weight: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The undirected traffic graph as integer edge weights, for graph partitioners and mappers.

        Returns ``(u, v, w)`` with both directions of every edge, sorted by ``u`` then ``v``; ``w`` is
        the bytes of both directions together (peer-to-peer bytes times ``peer_weight`` plus
        host-staged bytes times ``host_weight``), scaled so the heaviest edge weighs ``scale`` and none
        weighs less than 1 (METIS and Scotch take integer weights; ratios are kept to ~1/scale).
        """
        n = self.n
        key = np.concatenate([self.src * n + self.dst, self.dst * n + self.src])
        uniq, inv = np.unique(key, return_inverse=True)
        b = self.bytes * peer_weight
        if self.host is not None:
            b = (self.bytes - self.host) * peer_weight + self.host * host_weight
        w = np.bincount(inv, weights=np.concatenate([b, b]))
        if len(w) == 0:
            return uniq, uniq, uniq
        wi = np.maximum(1, np.round(w / w.max() * scale)).astype(np.int64)
        return uniq // n, uniq % n, wi

    @property
    def total(self) -> float:
        return float(self.bytes.sum())

    @property
    def host_total(self) -> float:
        return float(self.host.sum()) if self.host is not None else 0.0


def as_traffic(T) -> Traffic:
    return T if isinstance(T, Traffic) else Traffic.from_dense(T)


@dataclass
class Score:
    """A mapping's figures. Congestions are seconds; loads are bytes per directed link."""

    max_congestion: float
    avg_congestion: float
    total_congestion: float
    hop_bytes: float
    loads: np.ndarray
    congestion: np.ndarray

    @property
    def key(self) -> tuple[float, float, float]:
        return (self.max_congestion, self.total_congestion, self.hop_bytes)

    @property
    def time_bound(self) -> float:
        """Predicted communication time lower bound (seconds): the busiest link's congestion."""
        return self.max_congestion


def evaluate(platform: Platform, traffic, node_of, gpu_of) -> Score:
    """Score a mapping given per-rank node and GPU position arrays."""
    return score_loads(platform.bw, route_loads(platform, traffic, node_of, gpu_of))


def route_loads(platform: Platform, traffic, node_of, gpu_of, group=None, groups: int = 1) -> np.ndarray:
    """The bytes every directed link of ``platform`` carries when rank r runs on node ``node_of[r]``,
    GPU position ``gpu_of[r]``: the one routing rule of rankmap, which every figure of a link's bytes
    (the solvers' scores, the dashboard's link views, the ledger, the multi-node view) comes from.

    Peer-to-peer bytes take the GPU pair's route (none between ranks on one GPU); host-staged bytes
    (``traffic.host``) the route up to the host and down again, also between ranks on one GPU;
    off-node bytes the GPUs' NIC routes and the NICs' network links.

    Returns ``(n_links,)`` loads; with ``group`` (a group number in ``range(groups)`` per row of
    ``traffic``, say its sender) ``(groups, n_links)``: each group's rows routed on their own, in one
    pass (a route is fixed, so the groups' loads add up to the whole's).
    """
    tr = as_traffic(traffic)
    node_of = np.asarray(node_of, dtype=np.int64)
    gpu_of = np.asarray(gpu_of, dtype=np.int64)
    grp = np.zeros(len(tr.bytes), dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
    m = platform.node
    G, D, N = m.G, m.D, platform.nodes
    nn = len(m.nic_bw)
    s, t, b = tr.src, tr.dst, tr.bytes
    un, vn, gs, gt = node_of[s], node_of[t], gpu_of[s], gpu_of[t]
    local = np.zeros((groups * N, D))
    row = grp * N + un                     # the (group, node) whose links a row's in-node bytes load
    same_node = un == vn
    bp = b if tr.host is None else b - tr.host  # peer-routed part
    intra = same_node & (gs != gt)
    if tr.host is not None:
        intra &= bp > 0
    _spread(local, row[intra], gs[intra] * G + gt[intra], bp[intra], G * G, m.inc.reshape(G * G, D))
    if tr.host is not None:
        # host-staged in-node bytes: via the host, also between ranks that share a GPU
        hs = same_node & (tr.host > 0)
        _spread(local, row[hs], gs[hs] * G + gt[hs], tr.host[hs], G * G, m.hinc.reshape(G * G, D))
    off = un != vn
    net = np.zeros((groups, 2 * N * nn))
    if off.any():
        bo = b[off]
        _spread(local, row[off], gs[off], bo, G, m.ext_out_inc)
        _spread(local, grp[off] * N + vn[off], gt[off], bo, G, m.ext_in_inc)
        nic = np.asarray([k if k is not None else 0 for k in m.nic_of], dtype=np.int64)
        np.add.at(net, (grp[off], 2 * (un[off] * nn + nic[gs[off]])), bo)       # up to the switch
        np.add.at(net, (grp[off], 2 * (vn[off] * nn + nic[gt[off]]) + 1), bo)   # down from it
    loads = np.concatenate([local.reshape(groups, N * D), net], axis=1)
    return loads[0] if group is None else loads


def _spread(out: np.ndarray, row: np.ndarray, col: np.ndarray, w: np.ndarray, cols: int, table: np.ndarray) -> None:
    """``out[row] += w x table[col]`` summed over the rows given: the bytes ``w`` summed per (row,
    column) first, over only the rows present (a job's ranks, not every node of a machine), then
    spread over the links by the incidence ``table`` in one product."""
    if not len(w):
        return
    rows, inv = np.unique(row, return_inverse=True)
    W = np.bincount(inv * cols + col, weights=w, minlength=len(rows) * cols).reshape(len(rows), cols)
    out[rows] += W @ table.astype(float)


def score_loads(bw: np.ndarray, loads: np.ndarray) -> Score:
    """The figures of a per-link load vector (bytes); hop-bytes is the loads summed, since every
    directed link a byte crosses carries it once."""
    cong = loads / (bw * 1e9)
    used = loads > 0
    mx = float(cong.max()) if cong.size else 0.0
    avg = float(cong[used].mean()) if used.any() else 0.0
    return Score(mx, avg, float(cong.sum()), float(loads.sum()), loads, cong)


def default_mapping(n: int, platform: Platform, ranks_per_gpu: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """What launchers do without rankmap, the baseline of every "before": ranks in blocks of G*K per
    node, and within a node local rank ``l`` on GPU ``l mod G``."""
    G, K = platform.G, ranks_per_gpu
    r = np.arange(n)
    per_node = G * K
    node = r // per_node
    local = r % per_node
    return node, local % G
