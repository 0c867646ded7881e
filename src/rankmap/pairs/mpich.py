"""Mirror of MPICH 4.0's collective selection: the CH4 device's compositions and the MPIR algorithms.

A blocking collective in MPICH 4.0 goes ``MPIR_<Coll>`` -> (device collectives on, the default)
``MPID_<Coll>``: the CH4 device picks a *composition* from its selection tree
(:data:`.mpich_rules.CH4_TREE`), which splits the work over the communicator's node-local
sub-communicator and its node-roots sub-communicator or runs it flat. Each part goes to the
network module (``MPIDI_NM_*``, which runs ``MPIR_<Coll>_impl``) or, in builds with the POSIX
shared-memory module, to ``MPIDI_SHM_*`` (POSIX release/gather algorithms or ``MPIR_<Coll>_impl``).
``MPIR_<Coll>_impl`` runs the algorithm ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` forces, falling back
(silently, by default) to the automatic choice when the algorithm's restrictions do not hold; the
automatic choice walks :data:`.mpich_rules.MPIR_TREE`. Builds with the UCX network module and no
``--with-ch4-shmmods`` have no POSIX module (MPICH's configure then defines
``MPIDI_CH4_DIRECT_NETMOD``): everything, node-local traffic included, is UCX messages.

The algorithms follow ``src/mpi/coll/<coll>/<coll>_intra_<algorithm>.c`` of v4.0.x message for
message, in the ranks of the communicator they run on (an :class:`~rankmap.pairs.call.Emitter`
view maps sub-communicator ranks back to the caller's communicator): the patterns Open MPI shares
come from :mod:`rankmap.pairs.algorithms`, those MPICH alone uses are here. Checked against the
UCX messages MPICH sends by the conformance probes (:mod:`.probe`, ``tests/test_collectives.py``).
The POSIX release/gather algorithms move data through a shared buffer, not messages; their pair
rows (root to each rank, each rank to its parent) are a model and make the call's rows ``model``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from rankmap.pairs.algorithms import binomial, bruck, doubling, linear, pairwise, ring, scatter_allgather
from rankmap.pairs.call import Call, Emitter
from rankmap.pairs.mirror import Mirrored
from rankmap.pairs.mpich_rules import CH4_TREE, CVAR_ALGORITHMS, MPIR_TREE, POSIX_TREE, tree_from_json


# ---------------------------------------------------------------------------------------------
# parameters

@dataclass
class Params:
    """What MPICH decides with besides the call itself (from the shim's META)."""

    forced: dict[str, str] = field(default_factory=dict)      # coll -> algorithm name
    device_collectives: str = "percoll"
    per_coll_device: dict[str, bool] = field(default_factory=dict)
    direct_netmod: bool = True          # no POSIX shared-memory module (ch4:ucx default)
    device: str = "ch4"                 # ch4 | ch3
    posix: dict[str, str] = field(default_factory=dict)       # coll -> release_gather | mpir | auto
    threaded: bool = False
    bcast_short: int = 12288
    bcast_long: int = 524288
    bcast_min_procs: int = 8
    gather_vsmall: int = 1024
    alltoall_throttle: int = 32
    mpir_tree: list = field(default_factory=lambda: MPIR_TREE)
    ch4_tree: list = field(default_factory=lambda: CH4_TREE)
    posix_tree: list = field(default_factory=lambda: POSIX_TREE)


def _cvar_name(coll: str, v: str | None) -> str:
    """An ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` value (MPI_T gives its number) -> its name."""
    if v is None:
        return "auto"
    s = str(v).strip()
    names = CVAR_ALGORITHMS.get(coll, [])
    if s.isdigit():
        i = int(s)
        return names[i] if i < len(names) else "auto"
    return s if s in names else "auto"


def params_from_meta(meta: dict[str, str]) -> Params:
    cv = {k[len("cvar.MPIR_CVAR_"):]: v for k, v in meta.items() if k.startswith("cvar.MPIR_CVAR_")}
    p = Params()
    for coll in CVAR_ALGORITHMS:
        key = f"{coll.upper()}_INTRA_ALGORITHM"
        if key in cv:
            p.forced[coll] = _cvar_name(coll, cv[key])
        dev = cv.get(f"{coll.upper()}_DEVICE_COLLECTIVE")
        if dev is not None:
            p.per_coll_device[coll] = str(dev).strip() not in ("0", "false")
    dc = str(cv.get("DEVICE_COLLECTIVES", "percoll")).strip()
    p.device_collectives = {"0": "all", "1": "none", "2": "percoll"}.get(dc, dc)
    for coll in ("bcast", "reduce", "allreduce", "barrier"):
        v = cv.get(f"{coll.upper()}_POSIX_INTRA_ALGORITHM")
        if v is not None:
            s = str(v).strip()
            p.posix[coll] = {"0": "release_gather", "1": "mpir", "2": "auto"}.get(s, s)
    p.bcast_short = int(cv.get("BCAST_SHORT_MSG_SIZE", 12288))
    p.bcast_long = int(cv.get("BCAST_LONG_MSG_SIZE", 524288))
    p.bcast_min_procs = int(cv.get("BCAST_MIN_PROCS", 8))
    p.gather_vsmall = int(cv.get("GATHER_VSMALL_MSG_SIZE", 1024))
    p.alltoall_throttle = int(cv.get("ALLTOALL_THROTTLE", 32))
    lib = meta.get("mpi_library_full", meta.get("mpi_library", ""))
    if "ch3" in lib and "ch4" not in lib:
        p.device = "ch3"
    shm = None
    for tok in lib.replace("\t", " ").split():
        if tok.startswith("--with-ch4-shmmods="):
            shm = tok.split("=", 1)[1]
        elif tok == "--without-ch4-shmmods":
            shm = "none"
    if shm is None:        # configure's default: none with the UCX netmod, posix otherwise
        p.direct_netmod = "ch4:ucx" in lib or "MPICH Device" not in lib
    else:
        p.direct_netmod = shm in ("none", "no")
    p.threaded = meta.get("shim.counters", "").startswith("atomic")
    p.mpir_tree = tree_from_json(meta.get("file.MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"), MPIR_TREE)
    p.ch4_tree = tree_from_json(meta.get("file.MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE"), CH4_TREE)
    p.posix_tree = tree_from_json(meta.get("file.MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE"), POSIX_TREE)
    return p


# ---------------------------------------------------------------------------------------------
# communicators and their node-aware sub-communicators

class Comm:
    """A communicator as MPICH sees it: ``members`` (ranks of the caller's communicator), this
    rank's position ``rank``, the node of each member, and its hierarchy kind."""

    def __init__(self, members: tuple[int, ...], rank: int, nodes: tuple[int, ...], hierarchy: str):
        self.members, self.rank, self.nodes, self.hierarchy = members, rank, nodes, hierarchy
        self.size = len(members)
        self.pof2 = 1 << (self.size.bit_length() - 1)

    @classmethod
    def top(cls, p: int, rank: int, nodes: tuple[int, ...] | None) -> "Comm":
        nodes = nodes if nodes and len(nodes) == p else (0,) * p
        n_nodes = len(set(nodes))
        return cls(tuple(range(p)), rank, nodes, "parent" if n_nodes != p else "flat")

    def _local(self) -> list[int]:
        me = self.nodes[self.rank]
        return [i for i in range(self.size) if self.nodes[i] == me]

    def _external(self) -> list[int]:
        seen: dict[int, int] = {}
        for i in range(self.size):
            seen.setdefault(self.nodes[i], i)
        return list(seen.values())

    @property
    def node_comm(self) -> "Comm | None":
        if self.hierarchy != "parent":
            return None
        loc = self._local()
        if len(loc) < 2:
            return None
        return Comm(tuple(self.members[i] for i in loc), loc.index(self.rank),
                    tuple(self.nodes[i] for i in loc), "node")

    @property
    def node_roots_comm(self) -> "Comm | None":
        if self.hierarchy != "parent":
            return None
        ext = self._external()
        if self.rank not in ext:
            return None
        return Comm(tuple(self.members[i] for i in ext), ext.index(self.rank),
                    tuple(self.nodes[i] for i in ext), "node_roots")

    def intranode_rank(self, r: int) -> int:
        if self.hierarchy != "parent" or self.nodes[r] != self.nodes[self.rank]:
            return -1
        return self._local().index(r)

    def internode_rank(self, r: int) -> int:
        if self.hierarchy != "parent":
            return -1
        ext_nodes = [self.nodes[i] for i in self._external()]
        return ext_nodes.index(self.nodes[r])

    def node_consecutive(self) -> bool:
        seen, last = set(), None
        for n in self.nodes:
            if n != last:
                if n in seen:
                    return False
                seen.add(n)
                last = n
        return True


# ---------------------------------------------------------------------------------------------
# selection trees (src/mpi/coll/src/csel.c)

@dataclass
class Sig:
    """What a selection tree looks at."""

    coll: str
    comm: Comm
    avg_msg_size: int = 0
    total_msg_size: int = 0
    count: int = 0
    commutative: bool = True
    builtin_op: bool = True
    inplace: bool = False
    block_regular: bool = True
    threaded: bool = False


_STATIC = ("comm_type=", "comm_size", "comm_hierarchy=", "is_node_consecutive=", "comm_avg_ppn")


def _holds(cond: str, s: Sig, searching: bool) -> bool:
    """Whether a tree condition holds. ``searching``: evaluated by MPIR_Csel_search rather than
    by the pruning done at communicator creation, which differ in one place: search tests
    ``comm_size<N`` as ``<=``."""
    _, _, val = cond.partition("=")
    c = s.comm
    if cond.endswith("=any"):
        return True
    if cond.startswith("collective="):
        return cond[len("collective="):] == s.coll
    if cond == "comm_type=intra":
        return True
    if cond == "comm_type=inter":
        return False
    if cond.startswith("is_multi_threaded="):
        return s.threaded == (val == "yes")
    if cond == "comm_size=pow2":
        return c.size & (c.size - 1) == 0
    if cond == "comm_size=node_comm_size":
        nc = c.node_comm
        return nc is not None and nc.size == c.size
    if cond.startswith("comm_hierarchy="):
        return val == c.hierarchy
    if cond.startswith("is_commutative="):
        return s.commutative == (val == "yes")
    if cond.startswith("is_op_built_in="):
        return s.builtin_op == (val == "yes")
    if cond.startswith("is_sendbuf_inplace="):
        return s.inplace == (val == "yes")
    if cond.startswith("is_block_regular="):
        return s.block_regular == (val == "yes")
    if cond.startswith("is_node_consecutive="):
        return c.node_consecutive() == (val == "yes")
    if cond == "count<pow2":
        return s.count < c.pof2
    if cond.startswith("comm_avg_ppn<="):
        return c.size <= int(cond[len("comm_avg_ppn<="):]) * len(set(c.nodes))
    for name, value in (("comm_size", c.size), ("avg_msg_size", s.avg_msg_size),
                        ("total_msg_size", s.total_msg_size), ("count", s.count)):
        if cond.startswith(name + "<="):
            return value <= int(cond[len(name) + 2:])
        if cond.startswith(name + "<"):
            bound = int(cond[len(name) + 1:])
            return value <= bound if (searching and name == "comm_size") else value < bound
    return False


def select(tree: list, s: Sig) -> str | None:
    """The leaf (``algorithm=...`` or ``composition=...``) a selection tree gives, or None.

    A tree is a list of siblings: a condition that holds descends into its subtree, one that does
    not moves to the next sibling. MPICH first prunes each collective's tree by the
    communicator's static properties (size, hierarchy, ...) down to the first condition on the
    call itself, then searches the rest call by call; both are mirrored here."""
    for entry in tree:                                # the collective's subtree
        if isinstance(entry, tuple) and entry[0] == f"collective={s.coll}":
            level, i, pruning = entry[1], 0, True
            break
    else:
        level, i, pruning = tree, 0, False
    while i < len(level):
        entry = level[i]
        if isinstance(entry, str):
            return entry.split("=", 1)[1]
        cond, sub = entry
        if pruning and not cond.startswith(_STATIC):
            pruning = False
        if _holds(cond, s, searching=not pruning):
            level, i = sub, 0
        else:
            i += 1
    return None


# ---------------------------------------------------------------------------------------------
# the call: counts and sizes as the MPIR functions see them

@dataclass
class Args:
    coll: str
    count: int = 0          # elements (bcast/reduce/allreduce) or per-rank elements (gathers)
    tsize: int = 1          # bytes per element
    root: int = 0
    rcount: int = 0
    rsize: int = 1
    inplace: bool = False
    commutative: bool = True
    counts: tuple[int, ...] = ()   # reduce_scatter recvcounts / v-collective bytes

    @property
    def nbytes(self) -> int:
        return self.count * self.tsize


def _sig(a: Args, comm: Comm, prm: Params) -> Sig:
    s = Sig(a.coll, comm, commutative=a.commutative, inplace=a.inplace, threaded=prm.threaded)
    n = a.count * a.tsize
    if a.coll in ("bcast", "reduce", "allreduce", "alltoall"):
        s.avg_msg_size = n
    if a.coll in ("bcast", "reduce", "allreduce", "alltoall", "allgather"):
        s.total_msg_size = (a.rcount * a.rsize if a.coll == "allgather" else n) * comm.size
    if a.coll in ("gather", "scatter"):
        s.total_msg_size = n * comm.size
    if a.coll in ("reduce_scatter", "reduce_scatter_block"):
        s.total_msg_size = sum(a.counts) * a.tsize if a.counts else a.rcount * comm.size * a.tsize
        s.block_regular = len(set(a.counts)) <= 1
    if a.coll == "allgatherv":
        s.total_msg_size = sum(a.counts)
    s.count = {"bcast": a.count, "reduce": a.count, "allreduce": a.count, "allgather": a.rcount,
               "reduce_scatter_block": a.rcount, "reduce_scatter": sum(a.counts) if a.counts else 0,
               "allgatherv": sum(a.counts)}.get(a.coll, 0)
    return s


# ---------------------------------------------------------------------------------------------
# entry points: MPIR_<Coll> (device or not), MPID_<Coll> (CH4), MPIR_<Coll>_impl

def mpir_entry(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    """MPIR_<Coll>: the device's collective when device collectives are on for it."""
    dev = prm.device == "ch4" and (prm.device_collectives == "all" or (
        prm.device_collectives == "percoll" and prm.per_coll_device.get(a.coll, True)))
    if dev:
        return mpid(e, comm, a, prm)
    return mpir_impl(e, comm, a, prm)


def nm(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    """MPIDI_NM_mpi_<coll> (UCX and OFI without hcoll): MPIR_<Coll>_impl."""
    mpir_impl(e, comm, a, prm)


def shm(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    """MPIDI_SHM_mpi_<coll>: the network module in direct-netmod builds, else the POSIX module."""
    if prm.direct_netmod:
        return nm(e, comm, a, prm)
    if a.coll in ("bcast", "reduce", "allreduce"):
        choice = prm.posix.get(a.coll, "auto")
        if choice == "auto":
            leaf = select(prm.posix_tree, _sig(a, comm, prm))
            choice = "release_gather" if leaf and "release_gather" in leaf else "mpir"
        if choice == "release_gather" and (a.coll == "bcast" or a.commutative) and not prm.threaded:
            return _release_gather(e, comm, a)
    mpir_impl(e, comm, a, prm)


def _release_gather(e: Emitter, comm: Comm, a: Args) -> None:
    """POSIX release/gather: data through a shared buffer; modelled as root -> every rank
    (bcast) and every rank -> root (reduce), both for allreduce (root 0)."""
    e.modeled = True
    e.names.append("posix release_gather")
    out = e.on(comm.members)
    if a.coll in ("reduce", "allreduce"):
        linear.fan_in(out, comm.size, comm.rank, a.root, a.nbytes)
    if a.coll in ("bcast", "allreduce"):
        linear.fan_out(out, comm.size, comm.rank, a.root, a.nbytes)


def mpid(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    """MPID_<Coll> of CH4: a composition from the CH4 tree; no choice -> MPIR_<Coll>_impl."""
    comp = select(prm.ch4_tree, _sig(a, comm, prm))
    if comp is None:
        return mpir_impl(e, comm, a, prm)
    e.names.append(comp.replace("MPIDI_", "").replace("_intra_composition_", " "))
    kind = comp.rsplit("_", 1)[1]
    fn = COMPOSITIONS.get((a.coll, kind))
    if fn is None:
        return nm(e, comm, a, prm)
    fn(e, comm, a, prm)


def _bcast_alpha(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    nc, nr = comm.node_comm, comm.node_roots_comm
    if nr is None and comm.rank == a.root and nc is not None:
        e.on(comm.members).send(_member(comm, nc, 0), a.nbytes)
    if nr is not None:
        nm(e, nr, Args("bcast", a.count, a.tsize, comm.internode_rank(a.root)), prm)
    if nc is not None:
        shm(e, nc, Args("bcast", a.count, a.tsize, 0), prm)


def _member(comm: Comm, sub: Comm, r: int) -> int:
    """The rank in ``comm`` of rank ``r`` of its sub-communicator ``sub``."""
    return comm.members.index(sub.members[r])


def _bcast_beta(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    nc, nr = comm.node_comm, comm.node_roots_comm
    lr = comm.intranode_rank(a.root)
    if nc is not None and lr > 0:
        shm(e, nc, Args("bcast", a.count, a.tsize, lr), prm)
    if nr is not None:
        nm(e, nr, Args("bcast", a.count, a.tsize, comm.internode_rank(a.root)), prm)
    if nc is not None and lr <= 0:
        shm(e, nc, Args("bcast", a.count, a.tsize, 0), prm)


def _flat_nm(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    nm(e, comm, a, prm)


def _flat_shm(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    shm(e, comm, a, prm)


def _allreduce_alpha(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    _allreduce_smp(e, comm, a, prm, shm, nm)


def _reduce_alpha(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    nc, nr = comm.node_comm, comm.node_roots_comm
    if nc is not None:
        shm(e, nc, Args("reduce", a.count, a.tsize, 0, commutative=a.commutative), prm)
    if nr is not None:
        nm(e, nr, Args("reduce", a.count, a.tsize, 0, inplace=nr.rank == 0, commutative=a.commutative), prm)
    if a.root != 0 and comm.rank == 0:
        e.on(comm.members).send(a.root, a.nbytes)


def _reduce_beta(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    """Also MPIR_Reduce_intra_smp (with MPIR_Reduce on the sub-communicators)."""
    _reduce_smp(e, comm, a, prm, shm, nm)


def _barrier_alpha(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    _barrier_smp(e, comm, a, prm, shm, nm)


COMPOSITIONS = {
    ("barrier", "alpha"): _barrier_alpha, ("barrier", "beta"): _flat_nm,
    ("bcast", "alpha"): _bcast_alpha, ("bcast", "beta"): _bcast_beta, ("bcast", "gamma"): _flat_nm,
    ("allreduce", "alpha"): _allreduce_alpha, ("allreduce", "beta"): _flat_nm,
    ("allreduce", "gamma"): _flat_shm, ("reduce", "alpha"): _reduce_alpha,
    ("reduce", "beta"): _reduce_beta, ("reduce", "gamma"): _flat_nm,
}

#: restrictions of the forced algorithms (coll_algorithms.txt), checked before running them
_RESTRICT = {
    ("bcast", "smp"): "parent", ("allreduce", "smp"): "commutative parent",
    ("allreduce", "reduce_scatter_allgather"): "size-ge-pof2 builtin",
    ("reduce", "smp"): "commutative parent", ("reduce", "reduce_scatter_gather"): "size-ge-pof2 builtin",
    ("allgather", "recursive_doubling"): "pof2", ("allgatherv", "recursive_doubling"): "pof2",
    ("alltoall", "brucks"): "noinplace", ("alltoall", "pairwise"): "noinplace",
    ("alltoall", "pairwise_sendrecv_replace"): "inplace", ("alltoall", "scattered"): "noinplace",
    ("alltoallv", "pairwise_sendrecv_replace"): "inplace", ("alltoallv", "scattered"): "noinplace",
    ("alltoallw", "pairwise_sendrecv_replace"): "inplace", ("alltoallw", "scattered"): "noinplace",
    ("reduce_scatter", "pairwise"): "commutative", ("reduce_scatter", "recursive_halving"): "commutative",
    ("reduce_scatter_block", "noncommutative"): "pof2",
    ("reduce_scatter_block", "pairwise"): "commutative",
    ("reduce_scatter_block", "recursive_halving"): "commutative",
    ("barrier", "smp"): "parent", ("scan", "smp"): "parent consecutive",
}


def _applies(alg: str, comm: Comm, a: Args) -> bool:
    for r in _RESTRICT.get((a.coll, alg), "").split():
        ok = {"parent": comm.hierarchy == "parent", "commutative": a.commutative,
              "size-ge-pof2": a.count >= comm.pof2, "builtin": True,
              "pof2": comm.size == comm.pof2, "inplace": a.inplace, "noinplace": not a.inplace,
              "consecutive": comm.node_consecutive()}[r]
        if not ok:
            return False
    return True


def mpir_impl(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    """MPIR_<Coll>_impl: the forced algorithm if it applies, else the automatic choice."""
    alg = prm.forced.get(a.coll, "auto")
    if alg not in ("auto", "nb") and not _applies(alg, comm, a):
        alg = "auto"
    if alg == "auto":
        leaf = select(prm.mpir_tree, _sig(a, comm, prm))
        alg = _alg_of(leaf, a.coll) if leaf else "auto"
    if alg == "nb":
        raise NotMirrored(f"{a.coll} nb")
    fn = ALGORITHMS.get((a.coll, alg))
    if fn is None:
        raise NotMirrored(f"{a.coll} {alg}")
    e.names.append(f"{a.coll} {alg}")
    fn(e, comm, a, prm)


class NotMirrored(Exception):
    """An algorithm the mirror does not cover: the call's rows come from the model."""


def _alg_of(leaf: str, coll: str) -> str:
    """``MPIR_Allreduce_intra_recursive_doubling`` -> ``recursive_doubling``."""
    for part in ("_intra_", "_allcomm_"):
        if part in leaf:
            return leaf.split(part, 1)[1]
    return leaf


# ---------------------------------------------------------------------------------------------
# MPIR algorithms

def _bcast_binomial(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    if a.nbytes:
        binomial.bcast(e.on(comm.members), comm.size, comm.rank, a.root, a.nbytes)


def _bcast_scatter_rd(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    if a.nbytes:
        scatter_allgather.bcast(e.on(comm.members), comm.size, comm.rank, a.root, a.nbytes)


def _bcast_scatter_ring(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    if a.nbytes:
        scatter_allgather.bcast(e.on(comm.members), comm.size, comm.rank, a.root, a.nbytes, ring=True)


def _bcast_smp(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    n = a.nbytes
    if n == 0:
        return
    nc, nr = comm.node_comm, comm.node_roots_comm
    lr = comm.intranode_rank(a.root)
    if n < prm.bcast_short or comm.size < prm.bcast_min_procs:
        if nc is not None and lr > 0:
            if comm.rank == a.root:
                e.on(comm.members).send(_member(comm, nc, 0), n)
        if nr is not None:
            mpir_entry(e, nr, Args("bcast", a.count, a.tsize, comm.internode_rank(a.root)), prm)
        if nc is not None:
            mpir_entry(e, nc, Args("bcast", a.count, a.tsize, 0), prm)
    elif n < prm.bcast_long and comm.size & (comm.size - 1) == 0:
        if nc is not None and lr > 0:
            mpir_entry(e, nc, Args("bcast", a.count, a.tsize, lr), prm)
        if nr is not None:
            mpir_entry(e, nr, Args("bcast", a.count, a.tsize, comm.internode_rank(a.root)), prm)
        if nc is not None and lr <= 0:
            mpir_entry(e, nc, Args("bcast", a.count, a.tsize, 0), prm)
    else:
        _bcast_scatter_ring(e, comm, a, prm)


def _allreduce_rd(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    doubling.allreduce(e.on(comm.members), comm.size, comm.rank, a.nbytes)


def _cnts(count: int, pof2: int) -> list[int]:
    c = [count // pof2] * pof2
    for i in range(count % pof2):
        c[i] += 1
    return c


def _allreduce_rsa(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    ts, p, r = a.tsize, comm.size, comm.rank
    pof2 = comm.pof2
    out = e.on(comm.members)
    newrank = doubling.fold(out, p, r, a.nbytes)
    if newrank != -1:
        cnts = _cnts(a.count, pof2)
        mask, send_idx, recv_idx, last_idx = 1, 0, 0, pof2
        while mask < pof2:
            nd = newrank ^ mask
            dst = doubling.survivor(p, nd)
            if newrank < nd:
                send_idx = recv_idx + pof2 // (mask * 2)
                sc = sum(cnts[send_idx:last_idx])
            else:
                recv_idx = send_idx + pof2 // (mask * 2)
                sc = sum(cnts[send_idx:recv_idx])
            out.send(dst, sc * ts)
            send_idx = recv_idx
            mask <<= 1
            if mask < pof2:
                last_idx = recv_idx + pof2 // mask
        mask >>= 1
        while mask > 0:
            nd = newrank ^ mask
            dst = doubling.survivor(p, nd)
            if newrank < nd:
                if mask != pof2 // 2:
                    last_idx = last_idx + pof2 // (mask * 2)
                recv_idx = send_idx + pof2 // (mask * 2)
                sc = sum(cnts[send_idx:recv_idx])
            else:
                recv_idx = send_idx - pof2 // (mask * 2)
                sc = sum(cnts[send_idx:last_idx])
            out.send(dst, sc * ts)
            if newrank > nd:
                send_idx = recv_idx
            mask >>= 1
    doubling.unfold(out, p, r, a.nbytes)


def _allreduce_smp(e: Emitter, comm: Comm, a: Args, prm: Params, local=None, remote=None) -> None:
    """MPIR_Allreduce_intra_smp: reduce on the node, allreduce over the node roots, bcast on the
    node; the CH4 alpha composition is the same with SHM/NM for the parts."""
    local = local or mpir_entry
    remote = remote or mpir_entry
    nc, nr = comm.node_comm, comm.node_roots_comm
    if nc is not None:
        local(e, nc, Args("reduce", a.count, a.tsize, 0, commutative=a.commutative), prm)
    if nr is not None:
        remote(e, nr, Args("allreduce", a.count, a.tsize, 0, inplace=True, commutative=a.commutative), prm)
    if nc is not None:
        local(e, nc, Args("bcast", a.count, a.tsize, 0), prm)


def _reduce_binomial(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    """A non-commutative operator is reduced in rank order, towards rank 0, which passes the
    result on to the root."""
    out = e.on(comm.members)
    binomial.reduce(out, comm.size, comm.rank, a.root if a.commutative else 0, a.nbytes)
    if not a.commutative and a.root != 0 and comm.rank == 0:
        out.send(a.root, a.nbytes)


def _reduce_rsg(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    ts, p, r, root = a.tsize, comm.size, comm.rank, a.root
    pof2, rem = comm.pof2, comm.size - comm.pof2
    if r < 2 * rem:
        if r % 2:
            e.on(comm.members).send(r - 1, a.nbytes)
            newrank = -1
        else:
            newrank = r // 2
    else:
        newrank = r - rem
    cnts = _cnts(a.count, pof2)
    send_idx = recv_idx = 0
    last_idx = pof2
    if newrank != -1:
        mask = 1
        while mask < pof2:
            nd = newrank ^ mask
            dst = nd * 2 if nd < rem else nd + rem
            if newrank < nd:
                send_idx = recv_idx + pof2 // (mask * 2)
                sc = sum(cnts[send_idx:last_idx])
            else:
                recv_idx = send_idx + pof2 // (mask * 2)
                sc = sum(cnts[send_idx:recv_idx])
            e.on(comm.members).send(dst, sc * ts)
            send_idx = recv_idx
            mask <<= 1
            if mask < pof2:
                last_idx = recv_idx + pof2 // mask
    if root < 2 * rem:
        if root % 2:
            if r == root:
                newrank, send_idx, last_idx = 0, 0, 2
            elif newrank == 0:
                e.on(comm.members).send(root, cnts[0] * ts)
                newrank = -1
            newroot = 0
        else:
            newroot = root // 2
    else:
        newroot = root - rem
    if newrank != -1:
        j, mask = 0, 1
        while mask < pof2:
            mask <<= 1
            j += 1
        mask >>= 1
        j -= 1
        while mask > 0:
            nd = newrank ^ mask
            dst = nd * 2 if nd < rem else nd + rem
            if nd == 0 and root < 2 * rem and root % 2:
                dst = root
            if newrank < nd:
                if mask != pof2 // 2:
                    last_idx = last_idx + pof2 // (mask * 2)
                recv_idx = send_idx + pof2 // (mask * 2)
                sc = sum(cnts[send_idx:recv_idx])
            else:
                recv_idx = send_idx - pof2 // (mask * 2)
                sc = sum(cnts[send_idx:last_idx])
            if (nd >> j) << j == (newroot >> j) << j:
                e.on(comm.members).send(dst, sc * ts)
                break
            if newrank > nd:
                send_idx = recv_idx
            mask >>= 1
            j -= 1


def _reduce_smp(e: Emitter, comm: Comm, a: Args, prm: Params, local=None, remote=None) -> None:
    """MPIR_Reduce_intra_smp; the CH4 beta composition is the same with SHM/NM for the parts."""
    local = local or mpir_entry
    remote = remote or mpir_entry
    nc, nr = comm.node_comm, comm.node_roots_comm
    lr = comm.intranode_rank(a.root)
    red = lambda root: Args("reduce", a.count, a.tsize, root, commutative=a.commutative)  # noqa: E731
    if nc is not None and lr == -1:
        local(e, nc, red(0), prm)
    if nr is not None:
        remote(e, nr, red(comm.internode_rank(a.root)), prm)
    if nc is not None and lr != -1:
        local(e, nc, red(lr), prm)


def _allgather_brucks(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    bruck.allgather(e.on(comm.members), comm.size, comm.rank, (a.rcount,) * comm.size, a.rsize)


def _allgather_rd(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    doubling.allgather(e.on(comm.members), comm.size, comm.rank, (a.rcount * a.rsize,) * comm.size)


def _allgather_ring(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    ring.allgather(e.on(comm.members), comm.size, comm.rank, (a.rcount,) * comm.size, a.rsize)


def _allgatherv_ring(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    ring.allgather(e.on(comm.members), comm.size, comm.rank, a.counts)


def _allgatherv_brucks(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    bruck.allgather(e.on(comm.members), comm.size, comm.rank, a.counts)


def _allgatherv_rd(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    doubling.allgather(e.on(comm.members), comm.size, comm.rank, a.counts)


def _alltoall_brucks(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    bruck.alltoall(e.on(comm.members), comm.size, comm.rank, a.rcount, a.rsize)


def _alltoall_pairwise(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    pairwise.exchange(e.on(comm.members), comm.size, comm.rank, (a.nbytes,) * comm.size, xor=True)


def _alltoall_sendrecv_replace(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    p, r = comm.size, comm.rank
    for i in range(p):
        for j in range(i, p):
            if r == i and j != i:
                e.on(comm.members).send(j, _block_to(a, j))
            elif r == j and i != j:
                e.on(comm.members).send(i, _block_to(a, i))


def _block_to(a: Args, j: int) -> int:
    """Bytes this rank sends to rank j in an all-to-all kind."""
    if a.counts:
        return a.counts[j]
    return a.rcount * a.rsize if a.inplace else a.count * a.tsize


def _alltoall_scattered(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    p, r = comm.size, comm.rank
    bblock = prm.alltoall_throttle or p
    ii = 0
    while ii < p:
        ss = min(bblock, p - ii)
        for i in range(ss):
            dst = (r - i - ii) % p
            n = _block_to(a, dst)
            if a.coll == "alltoall" or n:
                e.on(comm.members).send(dst, n)
        ii += bblock


def _alltoallv_scattered(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    p, r = comm.size, comm.rank
    bblock = prm.alltoall_throttle or p
    for ii in range(0, p, bblock):
        ss = min(bblock, p - ii)
        for i in range(ss):
            dst = (r + i + ii) % p
            if a.counts[dst]:
                e.on(comm.members).send(dst, a.counts[dst])


def _gather_binomial(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    binomial.gather(e.on(comm.members), comm.size, comm.rank, a.root, a.nbytes)   # this rank's block


def _scatter_binomial(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    block = a.nbytes if comm.rank == a.root else a.rcount * a.rsize
    binomial.scatter(e.on(comm.members), comm.size, comm.rank, a.root, block)


def _linear_v(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    out = e.on(comm.members)
    if a.coll == "gatherv":
        if a.nbytes:
            linear.fan_in(out, comm.size, comm.rank, a.root, a.nbytes)
    elif comm.rank == a.root:
        linear.direct(out, comm.size, comm.rank, a.counts)


def _rs_counts(a: Args, p: int) -> list[int]:
    return list(a.counts) if a.counts else [a.rcount] * p


def _rs_noncommutative(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    p, r = comm.size, comm.rank
    cnt = _rs_counts(a, p)
    size = cnt[0] * p
    log2 = (p - 1).bit_length()
    for k in range(log2):
        size //= 2
        e.on(comm.members).send(r ^ (1 << k), size * a.tsize)


def _rs_pairwise(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    pairwise.exchange(e.on(comm.members), comm.size, comm.rank, tuple(_rs_counts(a, comm.size)), a.tsize)


def _rs_halving(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    doubling.reduce_scatter_halving(e.on(comm.members), comm.size, comm.rank, tuple(_rs_counts(a, comm.size)),
                                    a.tsize)


def _rs_doubling(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    doubling.reduce_scatter(e.on(comm.members), comm.size, comm.rank, tuple(_rs_counts(a, comm.size)), a.tsize)


def _barrier_dissemination(e: Emitter, comm: Comm, a: Args, prm: Params) -> None:
    doubling.dissemination(e.on(comm.members), comm.size, comm.rank)


def _barrier_smp(e: Emitter, comm: Comm, a: Args, prm: Params, local=None, remote=None) -> None:
    """MPIR_Barrier_intra_smp: barrier on the node, over the node roots, then a one-byte bcast on
    the node; the CH4 alpha composition is the same with SHM/NM for the parts."""
    local = local or mpir_entry
    remote = remote or mpir_entry
    nc, nr = comm.node_comm, comm.node_roots_comm
    if nc is not None:
        local(e, nc, Args("barrier"), prm)
    if nr is not None:
        remote(e, nr, Args("barrier"), prm)
    if nc is not None:
        local(e, nc, Args("bcast", 1, 1, 0), prm)


ALGORITHMS = {
    ("bcast", "binomial"): _bcast_binomial,
    ("bcast", "scatter_recursive_doubling_allgather"): _bcast_scatter_rd,
    ("bcast", "scatter_ring_allgather"): _bcast_scatter_ring,
    ("bcast", "smp"): _bcast_smp,
    ("allreduce", "recursive_doubling"): _allreduce_rd,
    ("allreduce", "reduce_scatter_allgather"): _allreduce_rsa,
    ("allreduce", "smp"): _allreduce_smp,
    ("reduce", "binomial"): _reduce_binomial,
    ("reduce", "reduce_scatter_gather"): _reduce_rsg,
    ("reduce", "smp"): _reduce_smp,
    ("allgather", "brucks"): _allgather_brucks,
    ("allgather", "recursive_doubling"): _allgather_rd,
    ("allgather", "ring"): _allgather_ring,
    ("allgatherv", "brucks"): _allgatherv_brucks,
    ("allgatherv", "recursive_doubling"): _allgatherv_rd,
    ("allgatherv", "ring"): _allgatherv_ring,
    ("alltoall", "brucks"): _alltoall_brucks,
    ("alltoall", "pairwise"): _alltoall_pairwise,
    ("alltoall", "pairwise_sendrecv_replace"): _alltoall_sendrecv_replace,
    ("alltoall", "scattered"): _alltoall_scattered,
    ("alltoallv", "scattered"): _alltoallv_scattered,
    ("alltoallv", "pairwise_sendrecv_replace"): _alltoall_sendrecv_replace,
    ("alltoallw", "scattered"): _alltoallv_scattered,
    ("alltoallw", "pairwise_sendrecv_replace"): _alltoall_sendrecv_replace,
    ("gather", "binomial"): _gather_binomial,
    ("scatter", "binomial"): _scatter_binomial,
    ("gatherv", "linear"): _linear_v,
    ("scatterv", "linear"): _linear_v,
    ("reduce_scatter", "noncommutative"): _rs_noncommutative,
    ("reduce_scatter", "pairwise"): _rs_pairwise,
    ("reduce_scatter", "recursive_halving"): _rs_halving,
    ("reduce_scatter", "recursive_doubling"): _rs_doubling,
    ("reduce_scatter_block", "noncommutative"): _rs_noncommutative,
    ("reduce_scatter_block", "pairwise"): _rs_pairwise,
    ("reduce_scatter_block", "recursive_halving"): _rs_halving,
    ("reduce_scatter_block", "recursive_doubling"): _rs_doubling,
    ("barrier", "dissemination"): _barrier_dissemination,
    ("barrier", "smp"): _barrier_smp,
}


# ---------------------------------------------------------------------------------------------
# the call

def _args(c: Call) -> Args:
    k = c.kind
    a = Args(k, c.scount, c.ssize, c.root, c.rcount, c.rsize, c.inplace, c.is_commutative)
    if k in ("allgather", "alltoall"):
        a.count, a.tsize = (c.rcount, c.rsize) if c.inplace else (c.scount, c.ssize)
    if k == "gather" and c.rank == c.root:
        a.count, a.tsize = c.rcount, c.rsize
    if k in ("reduce_scatter", "reduce_scatter_block"):
        a.tsize = c.rsize
        if k == "reduce_scatter":
            a.counts = tuple(v // max(c.rsize, 1) for v in c.vec[:c.p])
    if k in ("allgatherv", "gatherv", "scatterv"):
        a.counts = tuple(c.vec[:c.p])
    if k in ("alltoallv", "alltoallw"):
        a.counts = tuple(c.vec[:c.p])
    return a


def messages(c: Call, prm: Params, nodes: tuple[int, ...] | None = None) -> Mirrored | None:
    """The messages rank ``c.rank`` sends for ``c`` under MPICH 4.0, a description of the
    algorithms, and whether a part had to be modelled; None where the mirror does not cover the
    call (nonblocking and persistent forms, scan/exscan, the ``nb`` algorithms)."""
    if c.form != "blocking" or c.kind in ("scan", "exscan"):
        return None
    comm = Comm.top(c.p, c.rank, nodes)
    e = Emitter()
    try:
        mpir_entry(e, comm, _args(c), prm)
    except NotMirrored:
        return None
    return Mirrored(list(e.msgs), ", ".join(dict.fromkeys(e.names)), e.modeled)


#: the MPICH releases mirrored (major, minor)
RELEASES = ((4, 0),)


class MpichMirror:
    """MPICH's selection with one job's parameters: the :class:`~rankmap.pairs.mirror.Mirror` of
    MPICH 4.0."""

    note = "MPICH 4.0 selection mirrored"

    def __init__(self, prm: Params) -> None:
        self.prm = prm

    def messages(self, c: Call, nodes: tuple[int, ...] | None = None) -> Mirrored | None:
        return messages(c, self.prm, nodes)


def mirror_from_meta(meta: dict[str, str], release: tuple[int, int]) -> tuple[MpichMirror, str]:
    """The mirror of a job's META, with the note the profile shows."""
    m = MpichMirror(params_from_meta(meta))
    return m, m.note
