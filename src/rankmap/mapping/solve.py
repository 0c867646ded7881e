"""Placement entry point: ranks -> (node, GPU, CPUs, NIC) for one node or many.

One node: branch and bound (seeded by the tabu heuristic on nodes above 8 GPUs) when the node has
at most ``exact_max_gpus`` GPUs, the heuristic alone above that; ``optimal`` is true only when the
search finished, and it proves the optimum of the chosen objective (:mod:`rankmap.mapping.objective`).

Several nodes (:mod:`rankmap.mapping.split`, :mod:`rankmap.mapping.cluster`,
:mod:`rankmap.mapping.refine`), within ``time_budget``:

1. candidate node splits (the default blocks, METIS balanced, METIS packed onto as few nodes as
   possible, METIS with any sizes that fit; METIS's refined by pairwise swaps within 15 % of the
   budget; rings and paths in their order; for nodes above 16 GPUs one recursive bisection of the
   job into its slots), each node of each placed by the node solver, and the
   best kept (30 % of the budget). Above ``SMALL_RANKS`` ranks the splits are first scored with their
   ranks on GPUs in rank order and only the best is placed node by node; nodes there was no time
   for keep rank order;
2. bottleneck refinement: ranks moved or swapped between nodes where that relieves the busiest links,
   each trial kept only if the whole placement gets better (up to 85 %);
3. polish: nodes not yet proven optimal for their ranks are solved again exactly, busiest first
   (up to 93 %);
4. where the refinement ended early (no trial helped) and at least 15 % of the budget is left, the
   next most promising split goes through 1-3 in the time left, and the better of the two is kept.

In every case the answer is compared with the default placement (what the launcher does) and the
default is kept, with a note saying so, when nothing better was found: a placement is never worse
than doing nothing. Among placements as good as the one found, the one that moves the fewest ranks
from the default is preferred (:mod:`rankmap.mapping.moves`), and the default is also kept when the
best placement gains less than ``min_gain`` (relative, on the objective's figures compared in order,
:func:`rankmap.mapping.objective.better`): moving ranks has costs the model does not see. The
placement then says how far the default is from the best one, and is not reported as optimal. The
result carries a lower bound valid for every placement (:mod:`rankmap.mapping.bounds`) and the gap
to it. A multi-node placement is never reported as proven
optimal (the node split is a heuristic); ``info.nodes_proven_optimal`` says how many nodes' shares are.

Host-staged bytes (``Traffic.host``) are routed GPU -> host -> GPU inside a node and through the NICs
across nodes; the node split weighs them by what keeping them in a node saves, which is less than for
peer-to-peer bytes (:func:`rankmap.mapping.split.edge_weights`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from rankmap.errors import RankmapError, counted, dense_limit, verb
from rankmap.mapping import split
from rankmap.mapping.bounds import lower_bound
from rankmap.mapping.cluster import Cluster
from rankmap.mapping.cost import Score, Traffic, as_traffic, default_mapping, evaluate
from rankmap.mapping.moves import fewest_moves, moved
from rankmap.mapping.objective import FIGURES, better, check, gap, score_key
from rankmap.mapping.platform import Platform, gpu_cpus, gpu_numa
from rankmap.mapping.refine import refine
from rankmap.mapping.units import percent

#: a cluster this small gets thorough (exact) node solves everywhere, also in refinement trials
SMALL_RANKS = 128

#: seconds an exact 8-GPU node solve may take on a loaded machine: below this per node and split
#: in the first 30 % of the budget, only the split that scores best in rank order is placed
PER_NODE_SOLVE = 0.01

#: seconds splitting one node above 16 GPUs along its tree takes (64 GPUs: ~8 ms on a quiet machine):
#: where 30 % of the budget does not split every node, the multisection's own GPUs rank its split
LARGE_NODE_SPLIT = 0.01

#: seeds of the recursive-bisection split tried above SMALL_RANKS (each is scored in rank order, one
#: evaluation): on a shuffled 16x8x8 grid into 16 nodes the busiest node's cut went 64-81 by seed
SPLIT_TRIES = 4

#: share of the budget by which the swap refinement of the candidate splits stops (split.candidates)
SWAP_SHARE = 0.15

#: share of the budget that must be left, once the best split is refined, to place one more split
MORE_SPLITS = 0.15

#: the least relative gain worth moving ranks for (``--min-gain``, there in percent): below it the
#: default placement is kept
MIN_GAIN = 0.01

#: which of the objective's figures the least gain must be on (``--min-gain-on``): ``primary`` (the
#: busiest link for ``max``), or ``either`` (the primary, or the tie-break when the primaries are
#: within the least gain of each other: a placement that only lowers the total congestion counts)
GAIN_ON = ("primary", "either")


def default_gain_on(objective: str) -> str:
    """``primary`` for ``max``, whose tie-break (the total congestion) alone is no reason to move
    ranks; ``either`` for ``hop-bytes`` and ``avg``, whose tie-break is the busiest link, the bound
    of the communication time."""
    return "primary" if objective == "max" else "either"


@dataclass
class Placement:
    platform: Platform
    node_of: np.ndarray
    gpu_of: np.ndarray  # GPU position in platform.node.gpus
    score: Score
    default: Score
    optimal: bool
    solver: str
    seconds: float
    info: dict = field(default_factory=dict)
    # how much of the traffic was host-staged, and how much of that the model routed via the host
    staging: dict = field(default_factory=dict)
    objective: str = "max"
    bound: float = 0.0  # lower bound of the objective's primary figure over all placements
    default_kept: bool = False
    notes: list[str] = field(default_factory=list)
    moved: int = 0         # ranks on another node or GPU than the default placement's
    min_gain: float = 0.0  # the least relative gain the placement had to bring to be taken
    # when the default was kept for a gain under min_gain: the best placement's figures, whether it
    # is proven optimal, the ranks it moves and its relative gain on the objective's two figures
    best: dict | None = None
    min_gain_on: str = "primary"  # which figure the least gain had to be on (GAIN_ON)
    gain_on: str | None = None    # the figure the placement taken gains on (None: the default kept)

    @property
    def value(self) -> float:
        """The objective's primary figure of this placement."""
        return score_key(self.score, self.objective)[0]

    @property
    def gap(self) -> float:
        return 0.0 if self.optimal else gap(self.value, self.bound)

    def rank_entry(self, r: int) -> dict:
        m = self.platform.node
        g = int(self.gpu_of[r])
        gpu = m.gpus[g]
        k = m.nic_of[g]
        nic = m.nics[k].id if (m.nics and k is not None) else None
        netdev = None
        if nic:
            # the HCA name (mlx5_0) is what UCX_NET_DEVICES and NCCL_IB_HCA take
            d = m.nics[k]
            netdev = d.attrs.get("hca") or d.name or (str(d.attrs.get("netdev", "")).split(",")[0] or None)
        return {"node": int(self.node_of[r]), "gpu": int(gpu.index), "uuid": gpu.attrs.get("uuid"),
                "cpus": gpu_cpus(m.topo, gpu), "numa": gpu_numa(m.topo, gpu), "nic": nic, "netdev": netdev}


#: dense rank x rank matrices a node's problem holds at once (its traffic, the host part, the search's)
NODE_MATRICES = 4


def check_fit(n: int, platform: Platform, ranks_per_gpu: int) -> None:
    cap = platform.nodes * platform.G * ranks_per_gpu
    if ranks_per_gpu < 1:
        raise RankmapError(f"--ranks-per-gpu must be at least 1, got {ranks_per_gpu}")
    # a node's placement works on the dense matrix of the ranks it holds (T and its host part): a
    # count of ranks per node beyond what that fits in is refused, and never suggested
    per_node = dense_limit(copies=NODE_MATRICES)
    if n > cap:
        need = -(-n // (platform.nodes * platform.G))
        fix = f"pass --ranks-per-gpu {need} or more nodes (--nodes)"
        if need * platform.G > per_node:
            k = max(ranks_per_gpu, per_node // platform.G, 1)
            fix = (f"pass --nodes {-(-n // (platform.G * k))} --ranks-per-gpu {k} or more nodes (this machine's "
                   f"memory holds the placement of at most {counted(per_node, 'rank')} on one node)")
        raise RankmapError(
            f"{counted(n, 'rank')} {verb(n, 'does', 'do')} not fit on {counted(platform.nodes, 'node')} x "
            f"{counted(platform.G, 'GPU')} with {counted(ranks_per_gpu, 'rank')} per GPU: {fix}")
    on_one = -(-n // platform.nodes)
    if min(on_one, platform.G * ranks_per_gpu) > per_node:
        raise RankmapError(f"{counted(n, 'rank')} on {counted(platform.nodes, 'node')} put up to "
                           f"{min(on_one, platform.G * ranks_per_gpu)} on one node, and this machine's memory holds "
                           f"the placement of at most {counted(per_node, 'rank')} on one node: pass "
                           f"--nodes {-(-n // per_node)} or more")


def place(platform: Platform, traffic, *, ranks_per_gpu: int = 1, seed: int = 0, time_budget: float = 10.0,
          exact_max_gpus: int = 16, objective: str = "max", min_gain: float = MIN_GAIN,
          min_gain_on: str | None = None, kahip: str = "auto") -> Placement:
    """``min_gain_on`` (:data:`GAIN_ON`; None: :func:`default_gain_on`): the figure the least gain
    must be on. ``kahip``: ``auto``
    seeds the search with KaHIP's process mapping where KaHIP is installed
    (:mod:`rankmap.mapping.kahipmap`), ``off`` never, ``on`` requires it."""
    t0 = time.perf_counter()
    check(objective)
    use_kahip = _kahip_wanted(kahip)
    if time_budget <= 0:
        raise RankmapError(f"the time budget must be positive, got {time_budget}")
    if not 0 <= min_gain < 1:
        raise RankmapError(f"the least gain must be at least 0 % and under 100 %, got {100 * min_gain:g} %")
    min_gain_on = default_gain_on(objective) if min_gain_on is None else min_gain_on
    if min_gain_on not in GAIN_ON:
        raise RankmapError(f"--min-gain-on must be {' or '.join(GAIN_ON)}, got {min_gain_on!r}")
    tr = as_traffic(traffic)
    n = tr.n
    K = ranks_per_gpu
    check_fit(n, platform, K)
    d_node, d_gpu = default_mapping(n, platform, K)
    default = evaluate(platform, tr, d_node, d_gpu)
    cl = Cluster(platform, tr, K, objective, seed=seed, exact_max_gpus=exact_max_gpus)
    if platform.nodes == 1:
        info, node_bound = _one_node(cl, t0, time_budget, use_kahip)
    else:
        info, node_bound = _many_nodes(cl, t0, time_budget, use_kahip)
    node_of, gpu_of = cl.node_of, cl.gpu_of
    score = evaluate(platform, tr, node_of, gpu_of)
    busy = int(np.count_nonzero(np.bincount(node_of, minlength=platform.nodes)))
    proven = int(cl.proven[np.bincount(node_of, minlength=platform.nodes) > 0].sum())
    optimal = platform.nodes == 1 and proven == busy
    info.update({"nodes_proven_optimal": proven, "nodes_used": busy})
    notes: list[str] = []
    kept = False
    best = None
    gain_on = None
    if not better(score_key(score, objective), score_key(default, objective)):
        # nothing better than what the launcher does: keep it (same figures at worst, fewer moves)
        kept = True
        node_of, gpu_of, score = d_node, d_gpu, default
        notes.append("the default placement is kept: it is already optimal" if optimal else
                     "the default placement is kept: no placement found is better")
    else:
        # of the placements as good as this one, one that moves fewer ranks
        # (at most 5 % of the budget, and done by 99 % of it)
        node_of, gpu_of = fewest_moves(cl, node_of, gpu_of, d_node, d_gpu,
                                       deadline=min(t0 + 0.99 * time_budget,
                                                    time.perf_counter() + 0.05 * time_budget),
                                       proven=optimal)
        score = evaluate(platform, tr, node_of, gpu_of)
        gain_on = _gain_on(score_key(score, objective), score_key(default, objective), objective, min_gain,
                           min_gain_on)
        if gain_on is None:
            best, note = _forgone(score, default, objective, optimal, moved(node_of, gpu_of, d_node, d_gpu),
                                  min_gain, min_gain_on)
            kept = True
            notes.append(note)
            node_of, gpu_of = d_node, d_gpu
    best_value = score_key(score, objective)[0]   # the best placement's, kept or not
    if kept:
        score = default
    bound = lower_bound(platform, tr, K, objective)
    if node_bound is not None:
        bound = max(bound, node_bound)
    if optimal:
        bound = best_value
    bound = min(bound, best_value)
    if best is not None:
        optimal = False     # the default kept is worse than the best placement, if only a little
    solvers = " + ".join(sorted(cl.solvers)) or "trivial"
    solver = solvers if platform.nodes == 1 else f"node split ({info.get('split', '?')}) + {solvers}"
    staging = staging_summary(platform, tr, node_of)
    return Placement(platform, np.asarray(node_of), np.asarray(gpu_of), score, default, optimal, solver,
                     time.perf_counter() - t0, info, staging, objective, bound, kept, notes,
                     moved(node_of, gpu_of, d_node, d_gpu), min_gain, best, min_gain_on, None if kept else gain_on)


def _gain_on(b: tuple[float, float], d: tuple[float, float], objective: str, min_gain: float,
             on: str) -> str | None:
    """The name of the figure on which ``b`` beats the default ``d`` by the least gain, or None.

    ``primary``: the objective's first figure must gain ``min_gain`` (``--min-gain 0``: any better
    placement, the tie-break included); ``either``: lexicographic, the tie-break counting when the
    primaries are within ``min_gain`` of each other."""
    first, second = FIGURES[objective]
    if better(b[:1], d[:1], rel=min_gain):
        return first
    if (on == "either" or min_gain == 0) and better(b, d, rel=min_gain):
        return second
    return None


def _forgone(score: Score, default: Score, objective: str, optimal: bool, moves: int,
             min_gain: float, on: str = "primary") -> tuple[dict, str]:
    """What keeping the default gives up (the best placement's figures, its relative gains on the
    objective's two figures, the ranks it moves) and the note that says so."""
    b, d = score_key(score, objective), score_key(default, objective)
    gains = [(y - x) / y if y > 0 else 0.0 for x, y in zip(b, d)]
    best = {"max_congestion": score.max_congestion, "avg_congestion": score.avg_congestion,
            "total_congestion": score.total_congestion, "hop_bytes": score.hop_bytes, "optimal": bool(optimal),
            "moved_ranks": moves, "gain": gains[0], "tie_break_gain": gains[1]}
    first, second = FIGURES[objective]
    of = "the optimum" if optimal else "the best placement found"
    pct = f"--min-gain {100 * min_gain:g} %"
    if better(b[:1], d[:1]):
        how = f"within {percent(gains[0])} of {of} on {first}, a gain under {pct}"
    elif on == "either" or gains[1] < min_gain:
        how = (f"as good as {of} on {first} and within {percent(max(gains[1], 0.0))} of it on {second}, "
               f"a gain under {pct}")
    else:
        how = (f"as good as {of} on {first}; it gains {percent(gains[1])} on {second} alone, which counts "
               f"only with --min-gain-on either")
    return best, f"the default placement is kept: it is {how}"


def _kahip_wanted(kahip: str) -> bool:
    from rankmap.mapping import kahipmap

    if kahip not in ("auto", "on", "off"):
        raise RankmapError(f"--kahip must be auto, on or off, got {kahip!r}")
    if kahip == "on" and not kahipmap.available():
        raise RankmapError("--kahip on needs KaHIP: pip install 'rankmap[kahip]' (the kahip wheel)")
    return kahip != "off" and kahipmap.available()


def _kahip_seed(cl: Cluster, seconds: float) -> tuple[np.ndarray, np.ndarray, str] | None:
    """KaHIP's mapping of the job (:mod:`rankmap.mapping.kahipmap`) within about ``seconds``."""
    from rankmap.mapping import kahipmap

    return kahipmap.seed_placement(cl.pf, cl.tr, cl.K, cl.objective, seconds, seed=cl.seed)


def _one_node(cl: Cluster, t0: float, budget: float, use_kahip: bool) -> tuple[dict, float | None]:
    deadline = t0 + 0.95 * budget
    cl.set_split(np.zeros(cl.tr.n, dtype=np.int64))
    p = cl.problem(0, np.arange(cl.tr.n))
    start = cl.gpu_of.copy()
    info: dict = {}
    if use_kahip and cl.pf.G > cl.exact_max_gpus:
        # a node too large for the exact search: KaHIP's mapping is one more start
        seeded = _kahip_seed(cl, 0.2 * budget)
        if seeded is not None:
            info["kahip"] = seeded[2]
            if better(p.key(seeded[1]), p.key(start)):
                start = seeded[1]
    g, ok, name, bound = cl.solve(p, max(deadline - time.perf_counter(), 0.01), thorough=True, start=start)
    cl.solvers.add(name)
    cl.assign_node(0, np.arange(cl.tr.n), p, g, ok)
    return info, bound


def _many_nodes(cl: Cluster, t0: float, budget: float, use_kahip: bool) -> tuple[dict, None]:
    small = cl.tr.n <= SMALL_RANKS
    ring = split.chain(cl.tr, cl.pf, cl.K, cl.objective)
    cands = [(name, parts, None) for name, parts in
             split.candidates(cl.tr, cl.pf, cl.K, seed=cl.seed, objective=cl.objective,
                              tries=1 if small else SPLIT_TRIES, deadline=t0 + SWAP_SHARE * budget)]
    if ring is not None:
        cands.append(("chain order", ring[0], ring[1]))
    if cl.pf.G > cl.exact_max_gpus:
        # large nodes: the whole hierarchy in one bisection, a good start where there is no time
        # to split every node along its tree
        ms = split.multisection(cl.tr, cl.pf, cl.K, seed=cl.seed, objective=cl.objective)
        if ms is not None:
            cands.append(("METIS multisection", ms[0], ms[1]))
    info: dict = {}
    if use_kahip:
        # KaHIP's process mapping: one more split, with its GPUs, scored like the others
        seeded = _kahip_seed(cl, 0.15 * budget)
        if seeded is not None:
            info["kahip"] = seeded[2]
            cands.append(("KaHIP", seeded[0], seeded[1]))
    phase1 = t0 + 0.3 * budget
    short = 0.3 * budget < LARGE_NODE_SPLIT * min(cl.pf.nodes, -(-cl.tr.n // cl.cap))
    tried = []
    cache: dict = {}
    scored = []
    for name, parts, gpus in cands:
        cl.set_split(parts, gpus)
        snap, key = cl.snapshot(), cl.key()
        if name == "KaHIP" or (name == "METIS multisection" and not short):
            # ranked by its node split in rank order, like the METIS splits: with its own GPUs it
            # would always look best in rank order and take the time of splits that end better
            # (the multisection's GPUs count only where there is no time to split the nodes)
            cl.set_split(parts)
            key = cl.key()
        scored.append((name, snap, key))
        tried.append({"split": name, "key_in_rank_order": [float(x) for x in key]})
    nodes_used = int(np.count_nonzero(np.bincount(cands[-1][1], minlength=cl.pf.nodes)))
    # the splits by their figures in rank order, most promising first: what is left of the budget
    # once the first is placed and refined goes to the next ones
    ranked = sorted(range(len(scored)), key=lambda i: _sort_key(scored[i][2]))
    if not small or 0.3 * budget < PER_NODE_SOLVE * len(scored) * nodes_used:
        # a large job, or a budget too short to place every split node by node: every split is
        # scored with its ranks on GPUs in rank order, and only the most promising one is placed
        # node by node (the default's own figures are known anyway)
        first = [scored[ranked[0]]]
    else:
        first = scored
    best = None
    for i, (name, snap, _) in enumerate(first):
        cl.restore(snap)
        end = time.perf_counter() + (phase1 - time.perf_counter()) / (len(first) - i)
        solved = _solve_nodes(cl, end, small, cache, split_end=max(end, t0 + 0.85 * budget))
        key = cl.key()
        next(t for t in tried if t["split"] == name).update(key=[float(x) for x in key], nodes_solved=solved)
        if best is None or better(key, best[2]):
            best = (name, cl.snapshot(), key)
    name, snap, _ = best
    cl.restore(snap)
    node_budget = 0.05 if small else 0.01
    moves = refine(cl, t0 + 0.85 * budget, thorough=small, node_budget=node_budget)
    _polish(cl, t0 + 0.93 * budget)
    best = (name, cl.snapshot(), cl.key(), moves)
    done = {name} if len(first) == 1 else {s[0] for s in scored}
    for i in ranked:
        # the refinement stopped early (it found no better trial): the next split gets the time left
        left = t0 + 0.93 * budget - time.perf_counter()
        if left < MORE_SPLITS * budget:
            break
        other, snap, _ = scored[i]
        if other in done:
            continue
        done.add(other)
        cl.restore(snap)
        now = time.perf_counter()
        solved = _solve_nodes(cl, now + 0.35 * left, small, cache, split_end=now + 0.8 * left)
        m2 = refine(cl, now + 0.85 * left, thorough=small, node_budget=node_budget)
        _polish(cl, now + left)
        key = cl.key()
        next(t for t in tried if t["split"] == other).update(key=[float(x) for x in key], nodes_solved=solved)
        if better(key, best[2]):
            best = (other, cl.snapshot(), key, m2)
    name, snap, _, moves = best
    cl.restore(snap)
    return {"split": name, "splits_tried": tried, "refinement_moves": moves, **info}, None


def _sort_key(key: tuple[float, float]) -> tuple[float, float]:
    return (round(key[0], 12), key[1])


def _solve_nodes(cl: Cluster, end: float, thorough: bool, cache: dict, split_end: float | None = None) -> int:
    """Place every node's ranks, busiest nodes first, until ``end``; returns how many were solved.
    Large nodes are first all split along their tree, until ``split_end`` (default ``end``)."""
    order = np.argsort(-cl.loads.max(axis=1), kind="stable")
    todo = [int(u) for u in order if np.any(cl.node_of == u)]
    if cl.pf.G > cl.exact_max_gpus:
        # large nodes: every node split along its tree first (milliseconds a node), so that no node
        # is left in rank order when the searches below run out of time
        for u in todo:
            if time.perf_counter() >= (end if split_end is None else split_end):
                break
            cl.split_node(u)
    done = 0
    for i, u in enumerate(todo):
        left = end - time.perf_counter()
        if left <= 0:
            break
        share = left / (len(todo) - i)
        cl.place_node(u, share, thorough=thorough or share >= 0.05, cache=cache)
        done += 1
    return done


def _polish(cl: Cluster, end: float) -> None:
    """Solve nodes not proven optimal again, exactly, busiest first, while the whole gets no worse."""
    order = np.argsort(-cl.loads.max(axis=1), kind="stable")
    todo = [int(u) for u in order if not cl.proven[u] and np.any(cl.node_of == u)]
    for i, u in enumerate(todo):
        left = end - time.perf_counter()
        if left <= 0.005:
            break
        before = cl.key()
        snap = cl.snapshot()
        cl.place_node(u, min(left / (len(todo) - i) * 2, left, 1.0), thorough=True)
        if better(before, cl.key()):
            cl.restore(snap)


def staging_summary(platform: Platform, tr: Traffic, node_of: np.ndarray) -> dict:
    """Host-staged bytes, and how many of them the model routes via host memory (those within a node;
    host-staged bytes between nodes go through the NICs like the rest)."""
    total = tr.total
    host = tr.host_total
    if tr.host is not None:
        same = node_of[tr.src] == node_of[tr.dst]
        via_host = float(tr.host[same].sum())
    else:
        via_host = 0.0
    res = {"total_bytes": total, "host_staged_bytes": host, "routed_via_host_bytes": via_host,
           "off_node_host_staged_bytes": host - via_host,
           "peer_to_peer_bytes": total - host}
    if host > 0 and platform.node.host_notes:
        res["notes"] = list(platform.node.host_notes)
    return res
