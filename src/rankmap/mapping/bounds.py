"""Lower bounds on the objective that hold for every placement, so an answer can state its gap.

A search cut short by its time budget returns the best placement found so far; the gap
``(value - bound) / value`` says how far from optimal it can at most be. The bounds are simple
and always valid:

* ``max``: every byte a rank sends leaves its GPU over one of the directed links out of that GPU (or,
  on a node with no NIC route, over the network uplink), and every byte it receives comes in over one
  of the links into it. So the busiest link carries at least ``bytes / (sum of those links' GB/s)``
  for the best GPU a rank could get. With ``K`` ranks per GPU, the peer-to-peer bytes to its ``K - 1``
  heaviest partners may stay on the GPU and are not counted (host-staged ones still cross its link
  to the host and back);
* ``hop-bytes``: every pair's bytes cross at least the fewest links any two GPUs of the node are
  apart (for its kind of byte; none for peer bytes between ranks that may share a GPU);
* ``avg``: the total congestion's bound (every pair's bytes on the cheapest route of their kind)
  spread over every link of the platform.

An exact node search that finished is its own bound (gap 0); one cut short also knows the bound at
its root, and the better of the two is reported.
"""

from __future__ import annotations

import numpy as np

from rankmap.mapping.cost import Traffic
from rankmap.mapping.platform import Platform


def lower_bound(pf: Platform, tr: Traffic, K: int, objective: str) -> float:
    m = pf.node
    G = m.G
    host = tr.host if tr.host is not None else np.zeros_like(tr.bytes)
    peer = tr.bytes - host
    if objective == "max":
        out_bw, in_bw = _gpu_cut_bw(m)
        sent = _spread(tr.n, tr.src, tr.dst, peer, host, K)
        got = _spread(tr.n, tr.dst, tr.src, peer, host, K)
        b = max(float(sent.max(initial=0.0)) / (out_bw.max() * 1e9), float(got.max(initial=0.0)) / (in_bw.max() * 1e9))
        return b
    off = ~np.eye(G, dtype=bool)
    if objective == "hop-bytes":
        w_peer, w_host = m.inc.sum(axis=2).astype(float), m.hinc.sum(axis=2).astype(float)
    else:
        w_peer, w_host = m.cpb.sum(axis=2), m.hcpb.sum(axis=2)
    least_peer = float(w_peer[off].min()) if (G > 1 and K == 1) else 0.0
    least_host = float(w_host[off].min()) if (G > 1 and K == 1) else float(w_host.min())
    if pf.nodes > 1:
        # a pair may also sit on two nodes: its bytes then cross at least the network links
        net = 2.0 if objective == "hop-bytes" else 2.0 / (m.nic_bw.max() * 1e9)
        least_peer, least_host = min(least_peer, net), min(least_host, net)
    total = float(peer.sum()) * least_peer + float(host.sum()) * least_host
    if objective == "hop-bytes":
        return total
    return total / max(pf.n_links, 1)


def _spread(n: int, a: np.ndarray, b: np.ndarray, peer: np.ndarray, host: np.ndarray, K: int) -> np.ndarray:
    """Per rank ``a``: bytes that must cross its GPU's boundary (its K-1 heaviest peer partners may share it)."""
    total = np.bincount(a, weights=peer + host, minlength=n)
    if K <= 1 or len(a) == 0:
        return total
    o = np.lexsort((-peer, a))
    a_s, p_s = a[o], peer[o]
    first = np.searchsorted(a_s, a_s, side="left")
    rank_in = np.arange(len(a_s)) - first
    keep = rank_in < K - 1
    return total - np.bincount(a_s[keep], weights=p_s[keep], minlength=n)


def _gpu_cut_bw(m) -> tuple[np.ndarray, np.ndarray]:
    """GB/s of the modelled directed links out of / into each GPU (plus the network link where a
    GPU's off-node bytes reach the network directly)."""
    G = m.G
    ids = {g.id: i for i, g in enumerate(m.gpus)}
    out = np.zeros(G)
    inn = np.zeros(G)
    for d, (li, direction) in enumerate(m.dlinks):
        link = m.topo.links[li]
        src, dst = (link.a, link.b) if direction == 0 else (link.b, link.a)
        if src in ids:
            out[ids[src]] += m.bw[d]
        if dst in ids:
            inn[ids[dst]] += m.bw[d]
    for g in range(G):
        k = m.nic_of[g] if m.nic_of[g] is not None else 0
        if not m.ext_out_inc[g].any():
            out[g] += m.nic_bw[k]
        if not m.ext_in_inc[g].any():
            inn[g] += m.nic_bw[k]
    out[out == 0] = np.inf
    inn[inn == 0] = np.inf
    return out, inn
