"""Mirror of Open MPI 4.1's and 5.0's collective selection: coll/tuned's decisions and coll/base's algorithms.

Open MPI runs a blocking collective on an intra-communicator through the highest-priority coll
component that provides it: ``tuned`` (priority 30) for everything it implements, ``basic``
(priority 10) for the rest (gatherv, scatterv, scan, exscan, alltoallw). ``han`` (priority 0 in
4.1, 35 in 5.0) takes bcast, reduce, allreduce, allgather, gather, scatter and barrier, but only on
a communicator whose ranks span more than one node: on a node-local one it disqualifies itself
(``coll_han_module.c``, both releases), so tuned runs there. ``tuned`` picks an algorithm with its
fixed rules (:mod:`.ompi_rules`) unless ``coll_tuned_use_dynamic_rules`` is set, in which case a
rules file (``coll_tuned_dynamic_rules_filename``) and the forced-algorithm MCA parameters
(``coll_tuned_<coll>_algorithm`` with its segment size and fan-outs) come first: 4.1 asks the
rules file, then the forced algorithm; 5.0 the forced algorithm, then the rules file.

What 5.0 changed against 4.1 for what is mirrored here (v4.1.6 against v5.0.x): the fixed rules
(``coll_tuned_decision_fixed.c``) are the same file; allgather gained algorithm 7, sparbit; the
rules file may start with ``rule-file-version-2`` and then carry a fifth number per message size
(max requests); the algorithms of coll/base the mirror follows send the same messages (bruck's
alltoall builds its datatype differently, the same blocks); alltoallv no longer sends empty blocks
(4.1 sends them as messages of 0 bytes) and its pairwise exchange sends a rank's own block through
the PML. Nonblocking collectives are coll/libnbc's, the same schedules in both: :mod:`.ompi_nbc`.

Each algorithm follows ``ompi/mca/coll/base/coll_base_<coll>.c`` of v4.1.x and v5.0.x message
for message: the function gives the messages one rank sends (destination and bytes, one entry per
PML send, counted as the monitoring PML counts them), so the per-pair bytes equal what Open MPI's
own monitoring reports (checked by the conformance probes, :mod:`.probe`,
``tests/test_collectives.py``). Sends a rank makes to itself go through the PML there too and are
kept. The patterns MPICH shares (binomial trees, recursive doubling and halving, ring, Bruck,
pairwise, linear, scatter-allgather) come from :mod:`rankmap.pairs.algorithms`, its trees from
:mod:`rankmap.pairs.algorithms.trees`; what Open MPI alone does (segmented pipelines, the split
binary tree, Rabenseifner, the butterfly, sparbit) is here.

Parameters come from the META the shim wrote: ``cvar.<name>`` (MPI_T control variables) and
``file.coll_tuned_dynamic_rules_filename`` (the rules file's text).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from rankmap.pairs import ompi_nbc
from rankmap.pairs.algorithms import binomial, bruck, doubling, linear, pairwise, ring, scatter_allgather
from rankmap.pairs.algorithms.trees import bmtree, chain, in_order_bintree, kmtree, tree
from rankmap.pairs.call import Call, Emitter
from rankmap.pairs.mirror import Mirrored
from rankmap.pairs.ompi_rules import RULES

#: the Open MPI releases mirrored (major, minor)
RELEASES = ((4, 1), (5, 0))

#: the collectives coll/han provides on a communicator that spans nodes (coll_han_module.c)
HAN = ("allgather", "allreduce", "barrier", "bcast", "gather", "reduce", "scatter")

# tuned's collective ids (enum COLLTYPE of coll_base_functions.h), as in rules files
COLLTYPE = ("allgather", "allgatherv", "allreduce", "alltoall", "alltoallv", "alltoallw", "barrier",
            "bcast", "exscan", "gather", "gatherv", "reduce", "reduce_scatter", "reduce_scatter_block",
            "scan", "scatter", "scatterv")

#: the collectives tuned implements on an intra-communicator (the others come from coll/basic)
TUNED = ("allgather", "allgatherv", "allreduce", "alltoall", "alltoallv", "barrier", "bcast", "gather",
         "reduce", "reduce_scatter", "reduce_scatter_block", "scatter")

#: algorithm names (tuned's enumerations) by number, for labels
ALG_NAMES = {
    "allreduce": ("", "basic_linear", "nonoverlapping", "recursive_doubling", "ring", "segmented_ring",
                  "rabenseifner"),
    "bcast": ("", "basic_linear", "chain", "pipeline", "split_binary_tree", "binary_tree", "binomial",
              "knomial", "scatter_allgather", "scatter_allgather_ring"),
    "reduce": ("", "linear", "chain", "pipeline", "binary", "binomial", "in-order_binary", "rabenseifner"),
    "allgather": ("", "linear", "bruck", "recursive_doubling", "ring", "neighbor", "two_proc", "sparbit"),
    "alltoall": ("", "linear", "pairwise", "modified_bruck", "linear_sync", "two_proc"),
    "alltoallv": ("", "basic_linear", "pairwise"),
    "gather": ("", "basic_linear", "binomial", "linear_sync"),
    "scatter": ("", "basic_linear", "binomial", "linear_nb"),
    "reduce_scatter_block": ("", "basic_linear", "recursive_doubling", "recursive_halving", "butterfly"),
    "allgatherv": ("", "default", "bruck", "ring", "neighbor", "two_proc", "sparbit"),
    "reduce_scatter": ("", "non-overlapping", "recursive_halving", "ring", "butterfly"),
}


# ---------------------------------------------------------------------------------------------
# parameters

@dataclass
class Forced:
    """One collective's forced-algorithm MCA parameters (meaningful with dynamic rules on)."""

    algorithm: int = 0
    segsize: int = 0
    tree_fanout: int = 4
    chain_fanout: int = 4
    max_requests: int = 0


@dataclass
class Params:
    """Everything tuned decides with besides the call itself."""

    #: the Open MPI release whose tuned is mirrored (:data:`RELEASES`)
    release: tuple[int, int] = (4, 1)
    dynamic: bool = False
    forced: dict[str, Forced] = field(default_factory=dict)
    rules: dict[str, list[tuple[int, list[tuple[int, int, int, int]]]]] = field(default_factory=dict)
    knomial_radix: int = 4
    alltoall_max_requests: int = 0
    #: why the mirror does not apply to this job (another coll component wins), or None
    not_tuned: str | None = None
    #: coll/han's priority is above tuned's: han runs :data:`HAN` on communicators across nodes
    han_over_tuned: bool = False
    #: collectives another component runs on the communicator of the call in hand (set per call)
    taken: frozenset[str] = frozenset()
    #: coll/libnbc's control variables (``coll_libnbc_*``): the nonblocking collectives' choice
    libnbc: dict[str, str] = field(default_factory=dict)

    def forced_for(self, coll: str) -> Forced:
        return self.forced.get(coll, Forced())


def _int(v: str | None, default: int = 0) -> int:
    try:
        return int(str(v).strip(), 0)
    except (TypeError, ValueError):
        return default


def _alg_number(coll: str, v: str | None) -> int:
    """A forced-algorithm value: a number, or its enumeration name as MPI_T reports it."""
    if v is None:
        return 0
    s = str(v).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    names = ALG_NAMES.get(coll, ())
    return names.index(s) if s in names else 0


_NUMBER = re.compile(r"-?(?:0[xX][0-9a-fA-F]+|\d+)")


def _rule_tokens(text: str) -> list[tuple[int, bool]]:
    """The numbers of a rules file, each with whether only blanks (spaces, tabs) separate it from
    the number before it (a comment, a line end or other text does not)."""
    body = re.sub(r"#[^\n]*", "\n", text)
    out, last = [], 0
    for m in _NUMBER.finditer(body):
        t = m.group()
        v = int(t, 8) if re.fullmatch(r"0\d+", t) else int(t, 0)
        out.append((v, last > 0 and not body[last:m.start()].strip(" \t")))
        last = m.end()
    return out


def parse_rules_file(text: str, release: tuple[int, int] = (4, 1)
                     ) -> dict[str, list[tuple[int, list[tuple[int, int, int, int]]]]]:
    """tuned's dynamic rules file: numbers only, ``#`` to the end of a line is a comment.

    Layout: number of collectives, then for each: collective id (COLLTYPE), number of communicator
    sizes, then for each: communicator size, number of message sizes, then for each: message size,
    algorithm, topology fan-in/out, segment size. Open MPI 5.0 reads an optional first line
    ``rule-file-version-N``; from version 2 a fifth number on the same line as a message size's
    segment size is its max requests (read and dropped: it orders the sends, it does not change
    them). Returns {collective: [(comm size, [(msg size, alg, faninout, segsize), ...]), ...]}; a
    malformed file gives {} (tuned ignores it entirely).
    """
    version = 1
    if release >= (5, 0):
        m = re.match(r"rule-file-version-(\d+)", text)
        if m:
            version, text = int(m.group(1)), text[m.end():]
    toks = _rule_tokens(text)
    pos = 0

    def nxt() -> int:
        nonlocal pos
        if pos >= len(toks) or toks[pos][0] < 0:
            raise ValueError("rules file ends early or holds a negative number")
        pos += 1
        return toks[pos - 1][0]

    out: dict[str, list] = {}
    try:
        for _ in range(nxt()):
            ci = nxt()
            if ci >= len(COLLTYPE):
                return {}
            coms = []
            for _ in range(nxt()):
                cs, msgs = nxt(), []
                for k in range(nxt()):
                    ms, alg, fan, seg = nxt(), nxt(), nxt(), nxt()
                    if version > 1 and pos < len(toks) and toks[pos][1] and toks[pos][0] >= 0:
                        nxt()                                 # max requests
                    if k == 0 and ms != 0:
                        return {}
                    msgs.append((ms, alg, fan, seg))
                coms.append((cs, msgs))
            out[COLLTYPE[ci]] = coms
    except ValueError:
        return {}
    return out


def params_from_meta(meta: dict[str, str], release: tuple[int, int] = (4, 1)) -> Params:
    """tuned's parameters from the ``cvar.*`` / ``file.*`` META of a rank's record."""
    cv = {k[5:]: v for k, v in meta.items() if k.startswith("cvar.")}
    p = Params(release=release)
    p.dynamic = str(cv.get("coll_tuned_use_dynamic_rules", "0")).strip().lower() in ("1", "true", "yes")
    tf = _int(cv.get("coll_tuned_init_tree_fanout"), 4)
    cf = _int(cv.get("coll_tuned_init_chain_fanout"), 4)
    for coll in COLLTYPE:
        pre = f"coll_tuned_{coll}_algorithm"
        if pre not in cv:
            continue
        p.forced[coll] = Forced(
            algorithm=_alg_number(coll, cv.get(pre)),
            segsize=_int(cv.get(pre + "_segmentsize"), 0),
            tree_fanout=_int(cv.get(pre + "_tree_fanout"), tf),
            chain_fanout=_int(cv.get(pre + "_chain_fanout"), cf),
            max_requests=_int(cv.get(pre + "_max_requests"), 0))
    p.knomial_radix = _int(cv.get("coll_tuned_bcast_algorithm_knomial_radix"), 4)
    p.alltoall_max_requests = _int(cv.get("coll_tuned_alltoall_algorithm_max_requests"), 0)
    text = meta.get("file.coll_tuned_dynamic_rules_filename")
    if p.dynamic and text:
        p.rules = parse_rules_file(text, release)
    p.not_tuned = _other_component(cv)
    p.libnbc = {k: v for k, v in cv.items() if k.startswith("coll_libnbc_")}
    p.han_over_tuned = _selected(cv, "han") and _int(cv.get("coll_han_priority"), 0) > _int(
        cv.get("coll_tuned_priority"), 30)
    return p


def _selected(cv: dict[str, str], comp: str) -> bool:
    """Whether the ``coll`` MCA parameter (a list, or ``^`` and the excluded) lets ``comp`` run."""
    sel = str(cv.get("coll", "")).strip()
    if not sel:
        return True
    names = [s.strip() for s in sel.lstrip("^").split(",") if s.strip()]
    return (comp not in names) if sel.startswith("^") else (comp in names)


def _other_component(cv: dict[str, str]) -> str | None:
    """Why coll/tuned would not run this job's collectives, from the coll priorities and selection
    (coll/han is not among them: it gives way to tuned on a node, see :func:`messages`)."""
    sel = str(cv.get("coll", "")).strip()
    if not _selected(cv, "tuned"):
        return ("coll/tuned excluded by the coll MCA parameter" if sel.startswith("^")
                else f"coll components limited to {sel}")
    tuned = _int(cv.get("coll_tuned_priority"), 30)
    for comp in ("sm", "adapt", "hcoll", "ucc", "cuda", "acoll", "xhc"):
        pr = cv.get(f"coll_{comp}_priority")
        if pr is not None and _int(pr, 0) > tuned:
            return f"coll/{comp} has priority {_int(pr)} over tuned's {tuned}"
    return None


# ---------------------------------------------------------------------------------------------
# decisions

def _lookup(rule, p: int, n: int, commute: bool) -> int:
    while not isinstance(rule, int):
        if isinstance(rule, dict):
            rule = rule["commute" if commute else "noncommute"]
            continue
        var, entries = rule
        if var == "p==":
            rule = next(sub for b, sub in entries if b is None or b == p)
            continue
        v = p if var == "p" else n
        rule = next(sub for b, sub in entries if b is None or v < b)
    return rule


def _decision_size(c: Call) -> int:
    """The message size tuned's fixed decision function of each collective looks at."""
    k = c.kind
    if k in ("allreduce", "bcast", "reduce"):
        return c.scount * c.ssize
    if k in ("alltoall", "allgather"):
        return (c.rsize if c.inplace else c.ssize) * c.scount
    if k == "gather":
        return c.rsize * c.rcount if (c.rank == c.root or c.inplace) else c.ssize * c.scount
    if k == "scatter":
        return c.ssize * c.scount if c.rank == c.root else c.rsize * c.rcount
    if k == "reduce_scatter_block":
        return c.rsize * c.rcount
    if k in ("allgatherv", "reduce_scatter"):
        total = sum(c.vec)
        return total // c.p if k == "allgatherv" else total
    return 0


def _dynamic_size(c: Call) -> int:
    """The message size tuned's dynamic decision looks up in a rules file."""
    k = c.kind
    if k in ("allreduce", "bcast", "reduce"):
        return c.scount * c.ssize
    if k in ("alltoall", "allgather"):
        return c.ssize * c.p * c.scount
    if k == "reduce_scatter_block":
        return c.rsize * c.rcount * c.p
    if k in ("gather", "scatter"):
        return c.ssize * c.scount * c.p
    if k == "reduce_scatter":
        return sum(c.vec)
    if k == "allgatherv":
        return sum(c.vec) // c.p
    return 0


def choose(c: Call, prm: Params) -> tuple[int, int, int, str]:
    """(algorithm, fan-in/out, segment size, how it was chosen) for a tuned collective."""
    if prm.dynamic:
        steps = (_forced_choice, _rules_choice) if prm.release >= (5, 0) else (_rules_choice, _forced_choice)
        for step in steps:
            got = step(c, prm)
            if got is not None:
                return got
    rule = RULES[c.kind]
    return _lookup(rule, c.p, _decision_size(c), c.is_commutative), 0, 0, "fixed rules"


def _rules_choice(c: Call, prm: Params) -> tuple[int, int, int, str] | None:
    """The rules file's entry for the call, if it names an algorithm."""
    coms = prm.rules.get(c.kind)
    if not coms:
        return None
    best = coms[0]
    for com in coms:
        if com[0] > c.p:
            break
        best = com
    msgs = best[1]
    if not msgs:
        return None
    n = _dynamic_size(c)
    hit = msgs[0]
    for m in msgs:
        if m[0] <= n:
            hit = m
        else:
            break
    return (hit[1], hit[2], hit[3], "rules file") if hit[1] else None


def _forced_choice(c: Call, prm: Params) -> tuple[int, int, int, str] | None:
    """The forced algorithm (``coll_tuned_<coll>_algorithm``), if one is set."""
    f = prm.forced_for(c.kind)
    if not f.algorithm:
        return None
    fan = f.chain_fanout if c.kind in ("bcast", "reduce", "reduce_scatter", "reduce_scatter_block",
                                        "scatter") else f.tree_fanout
    return f.algorithm, fan, f.segsize, "forced"


def _through_selected(kind: str, prm: Params) -> None:
    """A tuned algorithm that calls another collective through the communicator's selected
    component: mirrored only while that component is tuned."""
    if kind in prm.taken:
        raise KeyError(kind)


def segcount(segsize: int, tsize: int, count: int) -> int:
    """COLL_BASE_COMPUTED_SEGCOUNT: elements per segment for a segment size in bytes."""
    if tsize and segsize >= tsize and segsize < tsize * count:
        seg = segsize // tsize
        if segsize - seg * tsize > (tsize >> 1):
            seg += 1
        return seg
    return count


def blockcount(count: int, nblocks: int) -> tuple[int, int, int]:
    """COLL_BASE_COMPUTE_BLOCKCOUNT: (split index, early count, late count)."""
    early = late = count // nblocks
    split = count % nblocks
    if split:
        early += 1
    return split, early, late


def _hibit(v: int) -> int:
    return v.bit_length() - 1


def _mirror_perm(x: int, nbits: int) -> int:
    out = 0
    for _ in range(nbits):
        out = (out << 1) | (x & 1)
        x >>= 1
    return out


def _range_sum(a: int, b: int, r: int) -> int:
    if r < a:
        return b - a + 1
    if r > b:
        return 2 * (b - a + 1)
    return 2 * (r - a + 1) + b - r


# ---------------------------------------------------------------------------------------------
# bcast

def _bcast_generic(out: Emitter, rank: int, count: int, ts: int, seg: int, topo: tuple[int, tuple[int, ...]]) -> None:
    """ompi_coll_base_bcast_intra_generic: every segment to every child."""
    parent, kids = topo
    nseg = (count + seg - 1) // seg if seg else 0
    for s in range(nseg):
        n = seg if s < nseg - 1 else count - s * seg
        for k in kids:
            out.send(k, n, ts)


def bcast(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params, count: int | None = None,
          root: int | None = None, ts: int | None = None) -> None:
    count = c.scount if count is None else count
    root = c.root if root is None else root
    ts = c.ssize if ts is None else ts
    p, r = c.p, c.rank
    if p < 2 or count == 0:
        return
    if alg == 1:                                  # basic linear
        return linear.fan_out(out, p, r, root, count, ts)
    seg = segcount(segsize, ts, count)
    if alg == 2:
        return _bcast_generic(out, r, count, ts, seg, chain(fan, p, root, r))
    if alg == 3:
        return _bcast_generic(out, r, count, ts, seg, chain(1, p, root, r))
    if alg == 4:
        return _bcast_split_bintree(out, c, count, ts, segsize, root, prm)
    if alg == 5:
        return _bcast_generic(out, r, count, ts, seg, tree(2, p, root, r))
    if alg == 6:
        return _bcast_generic(out, r, count, ts, seg, bmtree(p, root, r))
    if alg == 7:
        radix = prm.knomial_radix
        if radix < 2:
            return _bcast_generic(out, r, count, ts, seg, bmtree(p, root, r))
        return _bcast_generic(out, r, count, ts, seg, kmtree(p, root, radix, r))
    if alg in (8, 9):
        if count < p:
            return bcast(out, c, 1, 0, 0, prm, count, root, ts)
        return scatter_allgather.bcast(out, p, r, root, count, ts, ring=alg == 9)
    raise KeyError(alg)


def _bcast_split_bintree(out: Emitter, c: Call, count: int, ts: int, segsize: int, root: int, prm: Params) -> None:
    p, r = c.p, c.rank
    counts = [(count + 1) // 2, 0]
    counts[1] = count - counts[0]
    if segsize > 0:
        if segsize < ts:
            segsize = ts
        segc = [segsize // ts, segsize // ts]
        nseg = [-(-counts[0] // segc[0]), -(-counts[1] // segc[1])]
    else:
        segc, nseg = counts[:], [1, 1]
    if counts[0] == 0 or counts[1] == 0 or segsize > counts[0] * ts or segsize > counts[1] * ts:
        return _bcast_generic(out, r, count, ts, segcount(segsize, ts, count), chain(1, p, root, r))
    parent, kids = tree(2, p, root, r)
    lr = ((r + p - root) % p + 1) % 2
    if r == root:
        for s in range(nseg[0]):
            for i, k in enumerate(kids[:2]):
                if s >= nseg[i]:
                    continue
                n = counts[i] - s * segc[i] if s == nseg[i] - 1 else segc[i]
                out.send(k, n, ts)
    elif kids:
        for s in range(1, nseg[lr]):
            for k in kids:
                out.send(k, segc[lr], ts)
        last = counts[lr] - (nseg[lr] - 1) * segc[lr]
        for k in kids:
            out.send(k, last, ts)
    pair = (r + 1) % p if lr == 0 else (r + p - 1) % p
    if p % 2 and r != root:
        out.send(pair, counts[lr], ts)
    elif p % 2 == 0:
        if r == root:
            out.send((root + p - 1) % p, counts[1], ts)
        elif r == (root + p - 1) % p:
            pass                                  # receives the rest from the root
        else:
            out.send(pair, counts[lr], ts)


# ---------------------------------------------------------------------------------------------
# reduce

def _reduce_generic(out: Emitter, rank: int, count: int, ts: int, seg: int, root: int,
                    topo: tuple[int, tuple[int, ...]]) -> None:
    """ompi_coll_base_reduce_generic: each non-root sends its (partial) vector to its parent."""
    parent, kids = topo
    if rank == root or parent < 0:
        return
    nseg = (count + seg - 1) // seg if seg else 0
    for s in range(nseg):
        out.send(parent, seg if s < nseg - 1 else count - s * seg, ts)


def reduce(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params, count: int | None = None,
           root: int | None = None) -> None:
    count = c.scount if count is None else count
    root = c.root if root is None else root
    ts, p, r = c.ssize, c.p, c.rank
    if p < 2 or count == 0:
        return
    seg = segcount(segsize, ts, count)
    if alg == 1:
        return linear.fan_in(out, p, r, root, count, ts)
    if alg == 2:
        return _reduce_generic(out, r, count, ts, seg, root, chain(fan, p, root, r))
    if alg == 3:
        return _reduce_generic(out, r, count, ts, seg, root, chain(1, p, root, r))
    if alg == 4:
        return _reduce_generic(out, r, count, ts, seg, root, tree(2, p, root, r))
    if alg == 5:
        v = (r - root) % p                        # the in-order binomial tree
        parent = (binomial.parent(v) + root) % p if v else -1
        return _reduce_generic(out, r, count, ts, seg, root, (parent, ()))
    if alg == 6:
        io_root = p - 1
        _reduce_generic(out, r, count, ts, seg, io_root, in_order_bintree(p, r))
        if io_root != root and r == io_root:
            out.send(root, count, ts)
        return
    if alg == 7:
        return _reduce_redscat_gather(out, c, count, ts, root)
    raise KeyError(alg)


def _halving_steps(vrank: int, rank: int, count: int, pof2: int, rem: int):
    """The reduce-scatter (recursive halving) phase shared by allreduce and reduce Rabenseifner:
    yields (dest, send count) per step and returns the step arrays."""
    nsteps = _hibit(pof2)
    rindex = [0] * max(nsteps, 1)
    sindex = [0] * max(nsteps, 1)
    rcount = [0] * max(nsteps, 1)
    scount = [0] * max(nsteps, 1)
    sends = []
    step, wsize = 0, count
    mask = 1
    while mask < pof2:
        vdest = vrank ^ mask
        dest = vdest * 2 if vdest < rem else vdest + rem
        if rank < dest:
            rcount[step] = wsize // 2
            scount[step] = wsize - rcount[step]
            sindex[step] = rindex[step] + rcount[step]
        else:
            scount[step] = wsize // 2
            rcount[step] = wsize - scount[step]
            rindex[step] = sindex[step] + scount[step]
        sends.append((dest, scount[step]))
        if step + 1 < nsteps:
            rindex[step + 1] = rindex[step]
            sindex[step + 1] = rindex[step]
            wsize = rcount[step]
            step += 1
        mask <<= 1
    return sends, rindex, sindex, rcount, scount


def _fold_extra_ranks(out: Emitter, r: int, count: int, rem: int, ts: int) -> int:
    """The first step of Rabenseifner's reduce and allreduce (both in Open MPI's ``tuned``): the first
    2 x ``rem`` ranks pair up, odd sends both halves to even, even sends the upper half to odd;
    returns the rank's place among the power-of-two survivors, -1 for a rank that drops out."""
    if r >= 2 * rem:
        return r - rem
    lh = count // 2
    rh = count - lh
    if r % 2:
        out.send(r - 1, lh, ts)
        out.send(r - 1, rh, ts)
        return -1
    out.send(r + 1, rh, ts)
    return r // 2


def _reduce_redscat_gather(out: Emitter, c: Call, count: int, ts: int, root: int) -> None:
    p, r = c.p, c.rank
    nsteps = _hibit(p)
    pof2 = 1 << nsteps
    if pof2 < 2 or count < pof2 or not c.is_commutative:
        if r != root:
            out.send(root, count, ts)
        return
    rem = p - pof2
    vrank = _fold_extra_ranks(out, r, count, rem, ts)
    rcount = [0] * nsteps
    if vrank != -1:
        sends, rindex, sindex, rcount, scount = _halving_steps(vrank, r, count, pof2, rem)
        for dest, n in sends:
            out.send(dest, n, ts)
    vroot = 0
    if root < 2 * rem:
        if root % 2:
            vroot = 0
            if r == root:
                rcount = []
                wsize = count
                for _ in range(nsteps):
                    rcount.append(wsize // 2)
                    wsize //= 2
                vrank = 0
            elif vrank == 0:
                out.send(root, rcount[nsteps - 1], ts)
                vrank = -1
        else:
            vroot = root // 2
    else:
        vroot = root - rem
    if vrank != -1:
        if r == root and root < 2 * rem and root % 2:
            return                                # the root only receives from here on
        step = nsteps - 1
        mask = pof2 >> 1
        while mask > 0:
            vdest = vrank ^ mask
            dest = vdest * 2 if vdest < rem else vdest + rem
            if vdest == 0 and root < 2 * rem and root % 2:
                dest = root
            if (vdest >> step) << step == (vroot >> step) << step:
                out.send(dest, rcount[step], ts)
                break
            step -= 1
            mask >>= 1


# ---------------------------------------------------------------------------------------------
# allreduce

def allreduce(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params) -> None:
    count, ts, p, r = c.scount, c.ssize, c.p, c.rank
    if p < 2 or count == 0:
        return
    if alg == 1:                                  # linear reduce to 0 + linear bcast
        reduce(out, c, 1, 0, 0, prm, count, 0)
        return bcast(out, c, 1, 0, 0, prm, count, 0, ts)
    if alg == 2:                                  # reduce + bcast through the selected component
        _through_selected("reduce", prm)
        _through_selected("bcast", prm)
        sub = Call("reduce", c.form, p, r, 0, count, ts, count, ts, c.inplace, c.commute)
        a, f, s, _ = choose(sub, prm)
        reduce(out, sub, a, f, s, prm)
        subb = Call("bcast", c.form, p, r, 0, count, ts, count, ts)
        a, f, s, _ = choose(subb, prm)
        return bcast(out, subb, a, f, s, prm)
    if alg == 3:
        return doubling.allreduce(out, p, r, count, ts)
    if alg == 4:
        if count < p:
            return doubling.allreduce(out, p, r, count, ts)
        return _allreduce_ring(out, r, p, count, ts)
    if alg == 5:
        seg = segcount(segsize, ts, count)
        if count < p * seg:
            if count < p:
                return doubling.allreduce(out, p, r, count, ts)
            return _allreduce_ring(out, r, p, count, ts)
        return _allreduce_ring_segmented(out, r, p, count, ts, seg)
    if alg == 6:
        nsteps = _hibit(p)
        pof2 = 1 << nsteps
        if count < pof2 or not c.is_commutative:
            return allreduce(out, c, 1, 0, 0, prm)
        rem = p - pof2
        vrank = _fold_extra_ranks(out, r, count, rem, ts)
        if vrank != -1:
            sends, rindex, sindex, rcount, scount = _halving_steps(vrank, r, count, pof2, rem)
            for dest, n in sends:
                out.send(dest, n, ts)
            step = nsteps - 1
            mask = pof2 >> 1
            while mask > 0:
                vdest = vrank ^ mask
                dest = vdest * 2 if vdest < rem else vdest + rem
                out.send(dest, rcount[step], ts)
                step -= 1
                mask >>= 1
        if r < 2 * rem and r % 2 == 0:
            out.send(r + 1, count, ts)
        return
    raise KeyError(alg)


def _allreduce_ring(out: Emitter, r: int, p: int, count: int, ts: int) -> None:
    split, early, late = blockcount(count, p)
    to = (r + 1) % p

    def bc(b: int) -> int:
        return early if b < split else late

    out.send(to, bc(r), ts)
    for k in range(2, p):
        out.send(to, bc((r + p - k + 1) % p), ts)
    for k in range(p - 1):
        out.send(to, bc((r + 1 + p - k) % p), ts)


def _allreduce_ring_segmented(out: Emitter, r: int, p: int, count: int, ts: int, seg: int) -> None:
    phases = count // (p * seg)
    if count % (p * seg) >= p and count % (p * seg) > (p * seg) // 2:
        phases += 1
    split, early, late = blockcount(count, p)
    to = (r + 1) % p

    def bc(b: int) -> int:
        return early if b < split else late

    for ph in range(phases):
        def pc(b: int) -> int:
            s, e, l = blockcount(bc(b), phases)
            return e if ph < s else l
        out.send(to, pc(r), ts)
        for k in range(2, p):
            out.send(to, pc((r + p - k + 1) % p), ts)
    for k in range(p - 1):
        out.send(to, bc((r + 1 + p - k) % p), ts)


# ---------------------------------------------------------------------------------------------
# allgather

def allgather(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params) -> None:
    p, r = c.p, c.rank
    rcount, rs = c.rcount, c.rsize
    if p < 2 or rcount * rs == 0:
        return
    if alg == 1:                                  # gather to 0 + bcast, through the selected component
        _through_selected("gather", prm)
        _through_selected("bcast", prm)
        sc, ss = (rcount, rs) if c.inplace else (c.scount, c.ssize)
        g = Call("gather", c.form, p, r, 0, sc, ss, rcount, rs, c.inplace and r == 0)
        a, f, s, _ = choose(g, prm)
        gather(out, g, a, f, s, prm)
        b = Call("bcast", c.form, p, r, 0, rcount * p, rs, rcount * p, rs)
        a, f, s, _ = choose(b, prm)
        return bcast(out, b, a, f, s, prm)
    if alg == 3 and p & (p - 1):
        alg = 2                                   # recursive doubling needs a power of two
    if alg == 5 and p % 2:
        alg = 4                                   # neighbour exchange needs an even size
    if alg == 2:
        return bruck.allgather(out, p, r, (rcount,) * p, rs)
    if alg == 3:
        return doubling.allgather(out, p, r, (rcount,) * p, rs)
    if alg == 4:
        return ring.allgather(out, p, r, (rcount,) * p, rs)
    if alg == 5:
        even = r % 2 == 0
        nb = [(r + 1) % p, (r - 1) % p] if even else [(r - 1) % p, (r + 1) % p]
        out.send(nb[0], rcount, rs)
        for i in range(1, p // 2):
            out.send(nb[i % 2], 2 * rcount, rs)
        return
    if alg == 6:
        if p != 2:
            return
        sc, ss = (rcount, rs) if c.inplace else (c.scount, c.ssize)
        out.send(r ^ 1, sc, ss)
        return
    if alg == 7 and prm.release >= (5, 0):
        return _allgather_sparbit(out, c)
    raise KeyError(alg)


def _allgather_sparbit(out: Emitter, c: Call) -> None:
    """ompi_coll_base_allgather_intra_sparbit (5.0): see :func:`_sparbit`. It sends ``scount``
    elements of the receive type (``rcount`` in place, where scount means nothing)."""
    n = c.rcount if c.inplace else c.scount
    _sparbit(out, c.p, c.rank, (n * c.rsize,) * c.p, skip_empty=False)


def _sparbit(out: Emitter, p: int, r: int, blocks: tuple[int, ...], skip_empty: bool) -> None:
    """Sparbit (5.0's allgather 7 and allgatherv 6): ceil(log2 p) steps at halving distances, one
    message per block held (block ``r - 2 t d``); a step skips the block of the previous step
    where p's bits say so. allgatherv sends no empty block."""
    steps = math.ceil(math.log(p) / math.log(2))          # as the C code computes it, in doubles
    distance = 1 << (steps - 1)
    last_ignore = (p & -p).bit_length() - 1
    ignore_steps = ((~(p >> last_ignore) | 1) << last_ignore) & 0xFFFFFFFF
    expected = 1
    for _ in range(steps):
        exclusion = 1 if distance & ignore_steps == distance else 0
        for t in range(expected - exclusion):
            b = blocks[(r - 2 * t * distance) % p]
            if b or not skip_empty:
                out.send((r + distance) % p, b)
        distance >>= 1
        expected = (expected << 1) - exclusion


# ---------------------------------------------------------------------------------------------
# allgatherv

def allgatherv(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params) -> None:
    """``c.vec``: the bytes of each rank's block (recvcounts x receive type size)."""
    p, r = c.p, c.rank
    blocks = tuple(c.vec[:p])
    if p < 2 or len(blocks) < p:
        return
    own = blocks[r] if c.inplace else c.scount * c.ssize
    if alg == 1:                                  # gatherv to 0 (basic), bcast of the whole
        _through_selected("bcast", prm)
        if r != 0 and own:
            out.send(0, own)
        b = Call("bcast", c.form, p, r, 0, 1, sum(blocks), 1, sum(blocks))
        a, f, s, _ = choose(b, prm)
        return bcast(out, b, a, f, s, prm)
    if alg == 4 and p % 2:
        alg = 3                                   # neighbour exchange needs an even size
    if alg == 2:
        return bruck.allgather(out, p, r, blocks)
    if alg == 3:
        return ring.allgather(out, p, r, blocks)
    if alg == 4:
        even = r % 2 == 0
        nb = [(r + 1) % p, (r - 1) % p] if even else [(r - 1) % p, (r + 1) % p]
        recv_from = [r, r] if even else [nb[0], nb[0]]
        step = [2, -2] if even else [-2, 2]
        out.send(nb[0], blocks[r])
        send_from = r if even else recv_from[0]
        for i in range(1, p // 2):
            k = i % 2
            recv_from[k] = (recv_from[k] + step[k]) % p
            out.send(nb[k], blocks[send_from] + blocks[send_from + 1])
            send_from = recv_from[k]
        return
    if alg == 5:
        if p == 2:
            out.send(r ^ 1, own)
        return
    if alg == 6 and prm.release >= (5, 0):
        return _sparbit(out, p, r, blocks, skip_empty=True)
    raise KeyError(alg)


# ---------------------------------------------------------------------------------------------
# alltoall

def alltoall(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params) -> None:
    p, r = c.p, c.rank
    if p < 2:
        return
    if c.inplace:                                 # every algorithm: the in-place exchange
        if c.rcount * c.rsize == 0:
            return
        for i in range(1, (p >> 1) + 1):
            right, left = (r + i) % p, (r - i) % p
            if left != right:
                out.send(left, c.rcount, c.rsize)
            out.send(right, c.rcount, c.rsize)
        return
    sc, ss = c.scount, c.ssize
    if alg in (1, 4):                             # linear (persistent sends) / linear_sync
        order = [(r - i) % p for i in range(1, p)]
        for i in order:
            out.send(i, sc, ss)
        return
    if alg == 2:
        return pairwise.exchange(out, p, r, (sc,) * p, ss)
    if alg == 3:
        return bruck.alltoall(out, p, r, sc, ss)
    if alg == 5:
        if p == 2:
            out.send(r ^ 1, sc, ss)
        return
    raise KeyError(alg)


# ---------------------------------------------------------------------------------------------
# gather / scatter

def gather(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params) -> None:
    p, r, root = c.p, c.rank, c.root
    if p < 2:
        return
    if alg == 1:
        return linear.fan_in(out, p, r, root, c.scount, c.ssize)
    if alg == 2:
        return binomial.gather(out, p, r, root, c.scount, c.ssize)
    if alg == 3:                                  # linear_sync: the root sends each rank an empty go-ahead
        if r != root:
            first = segcount(segsize, c.ssize, c.scount)
            out.send(root, first, c.ssize)
            out.send(root, c.scount - first, c.ssize)
        return linear.fan_out(out, p, r, root, 0)
    raise KeyError(alg)


def scatter(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params) -> None:
    p, r, root = c.p, c.rank, c.root
    if p < 2:
        return
    if alg in (1, 3):
        return linear.fan_out(out, p, r, root, c.scount, c.ssize)
    if alg == 2:
        block = c.scount * c.ssize if r == root else c.rcount * c.rsize
        return binomial.scatter(out, p, r, root, block)
    raise KeyError(alg)


# ---------------------------------------------------------------------------------------------
# reduce_scatter_block

def reduce_scatter_block(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params) -> None:
    p, r, rc, ts = c.p, c.rank, c.rcount, c.rsize
    if p < 2 or rc == 0:
        return
    total = rc * p
    if alg == 1:
        _through_selected("reduce", prm)
        _through_selected("scatter", prm)
        red = Call("reduce", c.form, p, r, 0, total, ts, total, ts, c.inplace, c.commute)
        a, f, s, _ = choose(red, prm)
        reduce(out, red, a, f, s, prm)
        sca = Call("scatter", c.form, p, r, 0, rc, ts, rc, ts)
        a, f, s, _ = choose(sca, prm)
        return scatter(out, sca, a, f, s, prm)
    if alg == 3 and not c.is_commutative:
        return reduce_scatter_block(out, c, 1, fan, segsize, prm)
    if alg == 2:
        return doubling.reduce_scatter(out, p, r, (rc,) * p, ts)
    if alg == 3:
        return doubling.reduce_scatter_halving(out, p, r, (rc,) * p, ts)
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    if alg == 4:
        if p & (p - 1) == 0:
            nblocks = total
            mask = 1
            while mask < p:
                nblocks //= 2
                out.send(r ^ mask, nblocks, ts)
                mask <<= 1
            return
        log2 = _hibit(pof2)
        vrank = doubling.fold(out, p, r, total, ts)
        if vrank == -1:
            return
        nblocks, send_index, recv_index = pof2, 0, 0
        mask = 1
        while mask < pof2:
            vpeer = vrank ^ mask
            peer = doubling.survivor(p, vpeer)
            nblocks //= 2
            if vrank & mask == 0:
                send_index += nblocks
            else:
                recv_index += nblocks
            out.send(peer, rc * _range_sum(send_index, send_index + nblocks - 1, rem - 1), ts)
            send_index = recv_index
            mask <<= 1
        vpeer = _mirror_perm(vrank, log2)
        peer = doubling.survivor(p, vpeer)
        if vpeer < rem:
            out.send(peer - 1, rc, ts)
        if vpeer != vrank:
            out.send(peer, rc, ts)
        return
    raise KeyError(alg)


# ---------------------------------------------------------------------------------------------
# reduce_scatter

def reduce_scatter(out: Emitter, c: Call, alg: int, fan: int, segsize: int, prm: Params) -> None:
    """``c.vec``: the bytes of each rank's result block; the algorithms count in elements."""
    p, r, ts = c.p, c.rank, c.ssize or 1
    counts = [v // ts for v in c.vec[:p]]
    total = sum(counts)
    if p < 2 or len(counts) < p:
        return
    if alg == 1:                                  # reduce to 0 + scatterv (basic, linear)
        _through_selected("reduce", prm)
        red = Call("reduce", c.form, p, r, 0, total, ts, total, ts, c.inplace, c.commute)
        a, f, s, _ = choose(red, prm)
        reduce(out, red, a, f, s, prm)
        if r == 0:
            for i in range(1, p):
                if counts[i]:
                    out.send(i, counts[i], ts)
        return
    if alg == 2:
        return _rs_halving(out, p, r, counts, ts)
    if alg == 3:
        out.send((r + 1) % p, counts[(r - 1) % p], ts)
        for k in range(2, p):
            out.send((r + 1) % p, counts[(r - k) % p], ts)
        return
    if alg == 4:
        return _rs_butterfly(out, p, r, counts, ts)
    raise KeyError(alg)


def _rs_halving(out: Emitter, p: int, r: int, counts: list[int], ts: int) -> None:
    """ompi_coll_base_reduce_scatter_intra_basic_recursivehalving: nothing at all for an empty
    vector, and no message for an empty result block."""
    if sum(counts):
        doubling.reduce_scatter_halving(out, p, r, tuple(counts), ts, skip_empty=True)


def _rs_butterfly(out: Emitter, p: int, r: int, counts: list[int], ts: int) -> None:
    """ompi_coll_base_reduce_scatter_intra_butterfly."""
    total = sum(counts)
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    log2 = _hibit(pof2)
    displs = [sum(counts[:i]) for i in range(p)]

    def span(lo: int, hi: int) -> int:             # ompi_sum_counts
        lo = lo * 2 if lo < rem else lo + rem
        hi = hi * 2 + 1 if hi < rem else hi + rem
        return displs[hi] + counts[hi] - displs[lo]

    if r < 2 * rem and r % 2 == 0:
        out.send(r + 1, total, ts)
        return
    vr = r // 2 if r < 2 * rem else r - rem
    nblocks, send_i, recv_i = pof2, 0, 0
    mask = 1
    while mask < pof2:
        vpeer = vr ^ mask
        peer = vpeer * 2 + 1 if vpeer < rem else vpeer + rem
        nblocks //= 2
        if vr & mask == 0:
            send_i += nblocks
        else:
            recv_i += nblocks
        out.send(peer, span(send_i, send_i + nblocks - 1), ts)
        send_i = recv_i
        mask <<= 1
    vpeer = _mirror_perm(vr, log2)
    peer = vpeer * 2 + 1 if vpeer < rem else vpeer + rem
    index = 2 * send_i if send_i < rem else rem + send_i
    if vpeer < rem:
        out.send(peer - 1, counts[index], ts)
        index += 1
    if vpeer != vr:
        out.send(peer, counts[index], ts)


# ---------------------------------------------------------------------------------------------
# the v/w collectives: every algorithm exchanges each block directly

def direct(out: Emitter, c: Call, release: tuple[int, int] = (4, 1), alg: int = 1) -> None:
    """Every block straight to its rank. alltoallv (tuned: ``alg`` 1 basic linear, 2 pairwise):
    4.1 sends every block, an empty one as a message of 0 bytes; 5.0 only non-empty ones, and its
    pairwise exchange sends a rank's own block to itself through the PML. alltoallw and scatterv
    (coll/basic) send the non-empty blocks."""
    p, r = c.p, c.rank
    if c.kind == "alltoallv" and not c.inplace:
        for i, n in enumerate(c.vec[:p]):
            if i != r and (n or release < (5, 0)):
                out.send(i, n)
            elif i == r and n and alg == 2 and release >= (5, 0):
                out.send(i, n)
    elif c.kind in ("alltoallv", "alltoallw") or (c.kind == "scatterv" and r == c.root):
        linear.direct(out, p, r, c.vec)
    elif c.kind == "gatherv" and c.scount * c.ssize:
        linear.fan_in(out, p, r, c.root, c.scount, c.ssize)


IMPLEMENTED = {"bcast": bcast, "reduce": reduce, "allreduce": allreduce, "allgather": allgather,
               "alltoall": alltoall, "gather": gather, "scatter": scatter,
               "reduce_scatter_block": reduce_scatter_block, "allgatherv": allgatherv,
               "reduce_scatter": reduce_scatter}


def _rabenseifner(out: Emitter, c: Call) -> None:
    allreduce(out, c, 6, 0, 0, Params())


def _redscat_gather(out: Emitter, c: Call) -> None:
    _reduce_redscat_gather(out, c, c.scount, c.ssize, c.root)


def messages(c: Call, prm: Params, nodes: tuple[int, ...] | None = None) -> Mirrored | None:
    """The messages rank ``c.rank`` sends for ``c`` under Open MPI 4.1 or 5.0 (``prm.release``),
    and the algorithm's name; None where the mirror does not cover the call (then the model
    applies). ``nodes``: the node of each rank of the communicator (None: one node), for coll/han,
    which runs :data:`HAN` (not mirrored) where they span nodes and its priority is above tuned's."""
    if c.form == "nonblocking":
        return ompi_nbc.messages(c, prm.libnbc, _rabenseifner, _redscat_gather)
    if c.form != "blocking" or prm.not_tuned:
        return None
    if prm.han_over_tuned and nodes is not None and len(set(nodes)) > 1:
        if c.kind in HAN:
            return None
        prm = replace(prm, taken=frozenset(HAN))
    out = Emitter()
    if c.kind == "alltoallv":
        alg, _f, _s, how = choose(c, prm)
        alg = alg if alg in (1, 2) else 1
        direct(out, c, prm.release, alg)
        return Mirrored(list(out.msgs), f"{ALG_NAMES['alltoallv'][alg]} ({how})")
    if c.kind in ("alltoallw", "gatherv", "scatterv"):
        direct(out, c, prm.release)
        return Mirrored(list(out.msgs), "linear")
    fn = IMPLEMENTED.get(c.kind)
    if fn is None:
        return None
    alg, fan, seg, how = choose(c, prm)
    try:
        fn(out, c, alg, fan, seg, prm)
    except KeyError:
        return None
    names = ALG_NAMES.get(c.kind, ())
    return Mirrored(list(out.msgs), f"{names[alg] if alg < len(names) else alg} ({how})")


class OpenMpiMirror:
    """Open MPI's coll/tuned with one job's parameters: the :class:`~rankmap.pairs.mirror.Mirror`
    of Open MPI 4.1 and 5.0."""

    def __init__(self, prm: Params) -> None:
        self.prm = prm
        self.note = f"Open MPI {prm.release[0]}.{prm.release[1]} coll/tuned mirrored"
        if prm.han_over_tuned:
            self.note += f" (coll/han's {', '.join(HAN)} across nodes: the model)"

    def messages(self, c: Call, nodes: tuple[int, ...] | None = None) -> Mirrored | None:
        return messages(c, self.prm, nodes)


def mirror_from_meta(meta: dict[str, str], release: tuple[int, int]) -> tuple[OpenMpiMirror | None, str]:
    """The mirror of a job's META, or None and why not (another coll component runs the job's
    collectives); with the note the profile shows."""
    prm = params_from_meta(meta, release)
    if prm.not_tuned:
        return None, f"Open MPI: {prm.not_tuned}; the model applies"
    m = OpenMpiMirror(prm)
    return m, m.note
