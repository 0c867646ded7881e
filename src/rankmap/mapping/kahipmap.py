"""KaHIP's process mapping as a seed of the placement, where KaHIP is installed (optional).

KaHIP (the ``kahip`` wheel on PyPI, ``pip install 'rankmap[kahip]'``) maps a task graph onto a
hierarchy of processing elements given as arities and distances (``4:16:16`` and ``1:10:100``),
minimising the distance-weighted bytes; its multisection along the hierarchy is the state of the art
for that sum. rankmap minimises the busiest link first, which KaHIP does not see, so KaHIP's mapping is
only a *start*: it enters the node split as one more candidate (and a large node's search as one more
start), scored by rankmap's cost model beside the others and refined like them: it is taken only
where it scores better. The default path does not need it. The time it takes comes out of the
budget the searches get.

What the wheel holds (3.25): a Python module ``kahip`` whose one entry is ``kaffpa`` (partitioning,
no mapping), and beside it, in the environment's ``lib/``, ``libkahip.so`` with the C function
``process_mapping()``; the mapping is reached through that library with ctypes.

The hierarchy is read from the platform: the node's switch tree (:func:`rankmap.mapping.multilevel.gpu_tree`)
when it is uniform, else the node as one level, then the nodes. Distances are what the objective
charges a byte between two GPUs meeting at that level: the route cost (seconds per byte, both ways
averaged) for the congestion objectives, the links crossed for hop-bytes. KaHIP's result, asked for
one rank per element, may put two ranks on one element; such a rank moves to a free element of the
smallest group around it that has one, which KaHIP's balance keeps possible.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import time
from pathlib import Path

import numpy as np

from rankmap.mapping.cost import Traffic
from rankmap.mapping.multilevel import gpu_tree, leaves
from rankmap.mapping.platform import Platform

MODES = {"fast": 0, "eco": 1, "strong": 2}

#: seconds per rank and edge (undirected) each mode took on a loaded 2-core machine (the slowest
#: seen: a 3-D grid and a random geometric graph of 1024 ranks onto 4:16:16, random and uneven
#: all-to-all traffic of 512-4096 ranks onto 8:N), for choosing the strongest mode that fits the
#: share of the budget given to it; none fits: no seed. KaHIP's time follows the edges: an uneven
#: all-to-all of 512 ranks in groups of 256 (65 000 edges) took 7, 16 and 39 s
SECONDS_PER_ELEMENT = {"strong": 2.5e-3, "eco": 6e-4, "fast": 1.5e-4}


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """KaHIP's C library from the ``kahip`` wheel, or None when it is not installed."""
    spec = importlib.util.find_spec("kahip")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))).parent
    for cand in (root / "lib" / "libkahip.so", root.parents[2] / "lib" / "libkahip.so"):
        if cand.exists():
            try:
                lib = ctypes.CDLL(str(cand))
            except OSError:
                continue
            if lib.kahip_sizeof_idx() != 4:
                return None  # a 64-bit index build: not the layout declared below
            P = ctypes.POINTER(ctypes.c_int)
            lib.process_mapping.argtypes = [P, P, P, P, P, P, P, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_double), ctypes.c_bool, ctypes.c_int, P, P, P]
            lib.process_mapping.restype = None
            return lib
    return None


def available() -> bool:
    return library() is not None


def hierarchy(pf: Platform, objective: str, K: int = 1) -> tuple[list[int], list[int]]:
    """(arities, integer distances) of the platform for KaHIP, innermost first; ``K`` ranks per GPU
    make the innermost level ``K`` slots of one GPU (distance 0 apart: no link between them)."""
    m = pf.node
    hop = objective == "hop-bytes"
    cost = (m.inc.sum(axis=2).astype(float) if hop else m.cpb.sum(axis=2))
    cost = 0.5 * (cost + cost.T)
    if hop:
        off = float((m.ext_out_inc.sum(axis=1) + m.ext_in_inc.sum(axis=1)).mean() + 2)
    else:
        nic = np.asarray([k if k is not None else 0 for k in m.nic_of])
        off = float((m.ext_out.sum(axis=1) + m.ext_in.sum(axis=1)).mean() + (2 / (m.nic_bw[nic] * 1e9)).mean())
    arities: list[int] = []
    dists: list[float] = []
    labels = [np.arange(m.G)]           # group of every GPU at each level, the GPUs themselves first
    for groups, arity in (_uniform_levels(gpu_tree(m)) or [([list(range(m.G))], m.G)]):
        lab = np.empty(m.G, dtype=np.int64)
        for i, gr in enumerate(groups):
            lab[gr] = i
        # the pairs that meet at this level: one group here, different groups a level below
        meet = (lab[:, None] == lab[None, :]) & (labels[-1][:, None] != labels[-1][None, :])
        labels.append(lab)
        arities.append(arity)
        dists.append(float(cost[meet].mean()) if meet.any() else off)
    if pf.nodes > 1:
        arities.append(pf.nodes)
        dists.append(off)
    if K > 1:
        arities.insert(0, K)
        dists.insert(0, min(dists) / 10)
    scale = 1000.0 / max(dists)
    di = [max(1, int(round(d * scale))) for d in dists]
    for i in range(1, len(di)):
        di[i] = max(di[i], di[i - 1] + 1)   # KaHIP wants distances growing outwards
    return arities, di


def _uniform_levels(tree: dict) -> list[tuple[list[list[int]], int]] | None:
    """The tree's levels bottom-up as (groups of GPUs, children per group), or None when the groups
    of a level differ in their number of children (KaHIP's hierarchy is uniform)."""
    levels = []
    layer = [tree]
    while layer[0]["children"]:
        counts = {len(t["children"]) for t in layer}
        if len(counts) != 1 or any(not t["children"] for t in layer):
            return None
        levels.append(([t["gpus"] for t in layer], counts.pop()))
        layer = [k for t in layer for k in t["children"]]
    if any(len(t["gpus"]) != len(layer[0]["gpus"]) for t in layer):
        return None
    # leaves hold the GPUs of the innermost level; a leaf of several GPUs is one more level
    out = []
    if len(layer[0]["gpus"]) > 1:
        out.append(([t["gpus"] for t in layer], len(layer[0]["gpus"])))
    return out + levels[::-1]


def choose_mode(size: int, seconds: float) -> str | None:
    """The strongest mode expected to finish a graph of ``size`` ranks plus edges within ``seconds``
    (None: not even fast)."""
    for mode in ("strong", "eco", "fast"):
        if size * SECONDS_PER_ELEMENT[mode] <= seconds:
            return mode
    return None


def process_mapping(tr: Traffic, arities: list[int], distances: list[int], *, mode: str = "eco",
                    seed: int = 0) -> np.ndarray:
    """Element (0 .. prod(arities) - 1, KaHIP's numbering: innermost level fastest) of every rank,
    one rank per element; ``tr.n`` must equal the number of elements."""
    lib = library()
    if lib is None:
        raise RuntimeError("KaHIP is not installed")
    n = tr.n
    slots = int(np.prod(arities))
    if n != slots:
        raise ValueError(f"{n} ranks for {slots} elements")
    us, ud, wi = tr.symmetric_edges(scale=1000)
    wi = np.maximum(1, np.round(wi * min(1.0, 2e9 / max(float(wi.sum()), 1.0)))).astype(np.int32)
    xadj = np.searchsorted(us, np.arange(n + 1)).astype(np.int32)
    I32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)  # noqa: E731
    P = lambda a: a.ctypes.data_as(ctypes.POINTER(ctypes.c_int))  # noqa: E731
    vw, adj, w = I32(np.ones(n)), I32(ud), I32(wi)
    hier, dist = I32(arities), I32(distances)
    part = np.zeros(n, dtype=np.int32)
    nn, cut, qap = ctypes.c_int(n), ctypes.c_int(0), ctypes.c_int(0)
    imb = ctypes.c_double(0.0)
    lib.process_mapping(ctypes.byref(nn), P(vw), P(xadj), P(w), P(adj), P(hier), P(dist), len(arities),
                        MODES[mode], 0, ctypes.byref(imb), True, int(seed), ctypes.byref(cut), ctypes.byref(qap),
                        P(part))
    return repair(part.astype(np.int64), arities)


def repair(pe: np.ndarray, arities: list[int]) -> np.ndarray:
    """One rank per element: a rank on a taken element moves to a free element of the smallest
    group around it that has one (groups of level ``j``: elements ``e // prod(arities[:j])``)."""
    slots = int(np.prod(arities))
    pe = pe.copy()
    taken = np.zeros(slots, dtype=bool)
    extra = []
    for r in range(len(pe)):
        if 0 <= pe[r] < slots and not taken[pe[r]]:
            taken[pe[r]] = True
        else:
            extra.append(r)
    sizes = np.cumprod([1] + list(arities))
    for r in extra:
        e = int(min(max(pe[r], 0), slots - 1))
        for size in sizes[1:]:
            lo = (e // size) * size
            free = np.nonzero(~taken[lo:lo + size])[0]
            if len(free):
                pe[r] = lo + int(free[0])
                taken[pe[r]] = True
                break
    return pe


def seed_placement(pf: Platform, tr: Traffic, K: int, objective: str, seconds: float,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray, str] | None:
    """KaHIP's mapping of the whole job as (node, GPU position) per rank and a label, or None when
    KaHIP is not installed, the job does not fill whole nodes, or ``seconds`` is too short for KaHIP."""
    if not available():
        return None
    cap = pf.G * K
    if tr.n % cap or tr.n // cap > pf.nodes or tr.n < 2:
        return None
    used = tr.n // cap
    arities, dists = hierarchy(Platform(pf.node, used), objective, K)
    mode = choose_mode(tr.n + len(tr.src) // 2, seconds)
    if mode is None:
        return None
    t0 = time.perf_counter()
    pe = process_mapping(tr, arities, dists, mode=mode, seed=seed)
    slot = _slot_of_element(pf, arities, K)[pe]
    label = f"KaHIP {mode} ({':'.join(map(str, arities))}, {':'.join(map(str, dists))}; {time.perf_counter() - t0:.2f} s)"
    return slot // cap, (slot % cap) // K, label


def _slot_of_element(pf: Platform, arities: list[int], K: int) -> np.ndarray:
    """Node slot (node * G * K + GPU position * K + k) of each KaHIP element: the GPUs of the node's
    groups, innermost first, in the order of :func:`rankmap.mapping.multilevel.gpu_tree`."""
    levels = _uniform_levels(gpu_tree(pf.node))
    order = np.arange(pf.G) if levels is None else np.asarray(leaves(gpu_tree(pf.node)))
    per_node = pf.G * K
    elems = int(np.prod(arities))
    e = np.arange(elems)
    node, local = e // per_node, e % per_node
    gpu = order[local // K] if K > 1 else order[local]
    return node * per_node + (gpu * K + local % K if K > 1 else gpu)

