"""The shim's entry points come from one specification (native/mpi/calls.spec): its parser,
its variants, and what it generates for each family."""

from __future__ import annotations

import re
import pytest

from rankmap.capture import shim_gen
from rankmap.errors import RankmapError

@pytest.fixture(scope="module")
def spec() -> shim_gen.Spec:
    return shim_gen.load()


def test_every_family_from_one_entry(spec):
    names = {c.name: c for c in spec.calls}
    # one collective entry gives blocking, nonblocking, persistent and their large-count forms
    for n in ("MPI_Bcast", "MPI_Ibcast", "MPI_Bcast_init", "MPI_Bcast_c", "MPI_Ibcast_c", "MPI_Bcast_init_c"):
        assert n in names, n
    assert names["MPI_Ibcast"].params[-1].decl() == "MPI_Request *request"
    assert [p.decl() for p in names["MPI_Bcast_init"].params[-2:]] == ["MPI_Info info", "MPI_Request *request"]
    assert "persist" in names["MPI_Bcast_init"].attrs and "pre" not in names["MPI_Bcast_init"].attrs
    # large-count forms are C only and counted under the operation of their int form
    assert names["MPI_Ibcast_c"].families == ("c",) and names["MPI_Ibcast_c"].op == "MPI_Ibcast"
    assert names["MPI_Ibcast"].families == ("c", "f", "f08")
    assert names["MPI_Alltoallv_c"].params[1].decl() == "const MPI_Count sendcounts[]"
    assert names["MPI_Alltoallv_c"].params[2].decl() == "const MPI_Aint sdispls[]"
    assert names["MPI_Put_c"].params[1].decl() == "MPI_Count origin_count"
    assert names["MPI_Put_c"].params[3].decl() == "int target_rank"
    # (that these are the library's own prototypes is checked by compiling against MPICH 4's mpi.h,
    # where a mismatch is a conflicting-types error: tests/test_shim.py)
    # the new routines
    for n in ("MPI_Mprobe", "MPI_Improbe", "MPI_Mrecv", "MPI_Imrecv", "MPI_Isendrecv", "MPI_Isendrecv_replace",
              "MPI_Psend_init", "MPI_Precv_init", "MPI_Ineighbor_alltoallw", "MPI_Neighbor_alltoallw_init"):
        assert n in names, n
    ops = spec.ops
    assert len(ops) == len(set(ops)) and len(ops) <= 256        # RMREC_MAX_OPS
    assert "MPI_Bcast_c" not in ops and "MPI_Init" not in ops


def test_generated_sources(spec):
    g = shim_gen.generate(spec, None)
    assert set(g) == {"rm_gen.h", "wrap_c.c", "wrap_f.c"}
    c, f = g["wrap_c.c"], g["wrap_f.c"]
    assert len(re.findall(r"^int MPI_\w+\(", c, re.M)) == sum("c" in x.families for x in spec.calls)
    # Fortran: every family member exported under its manglings, f08 under mpi_x_f08_
    assert "RM_F_EXPORT(mpi_ineighbor_alltoallw, MPI_INEIGHBOR_ALLTOALLW)" in f
    assert "RM_F08_EXPORT(mpi_ialltoall_f08_)" in f and "RM_F08_EXPORT(mpi_waitall_f08_)" in f
    # Fortran views: sentinels translated, handles converted, the same accounting as C
    body = f[f.index("static void rmf_mpi_allreduce("):]
    body = body[:body.index("RM_F_EXPORT")]
    assert "const void *sendbuf = rm_fbuf(f_sendbuf);" in body
    assert "MPI_Comm comm = PMPI_Comm_f2c(*f_comm);" in body
    assert "rm_acc_allreduce(OP_MPI_Allreduce, RM_INPLACE(sendbuf, recvbuf), count, datatype, comm)" in body
    assert "rm_acc_allreduce(OP_MPI_Allreduce, RM_INPLACE(sendbuf, recvbuf), count, datatype, comm)" in c
    # declared set: only what the MPI's mpi.h has
    few = shim_gen.generate(spec, {"PMPI_Send", "PMPI_Init"})
    assert re.findall(r"^int (MPI_\w+)\(", few["wrap_c.c"], re.M) == ["MPI_Init", "MPI_Send"]
    assert "RM_HAVE_PMPI_Status_f082c" not in few["rm_gen.h"]


def test_starts_are_declared_in_the_operation_table(spec):
    """calls.spec's "timing: start" entries (the calls that only start a transfer) reach rm_gen.h as
    RM_START_OPS, the list the shim's sampling tells them apart by (shim_core.h, rm_op_start)."""
    h = shim_gen.generate(spec, None)["rm_gen.h"]
    line = next(x for x in h.splitlines() if x.startswith("#define RM_START_OPS(X) "))
    assert line.split(" ", 2)[2].split() == [f"X({op})" for op in (
        "MPI_Isend", "MPI_Ibsend", "MPI_Issend", "MPI_Irsend", "MPI_Irecv", "MPI_Isendrecv",
        "MPI_Isendrecv_replace", "MPI_Imrecv", "MPI_Start", "MPI_Startall")]
    with pytest.raises(RankmapError, match="unknown attribute"):
        shim_gen.parse("MPI_Foo(int x)\n    timeing: start\n")


def test_fast_path_jumps_to_the_library(spec):
    """An entry with "fast" keeps its common untimed call in the entry point, which goes straight
    to the library (as its last act: a jump, no frame), and hands every other call to the full
    wrapper, a function of its own; entries without "fast" are one function as before.  Work
    after the library's call (fast.post, fast.after) is a function of its own too, which the
    entry point jumps to; fast.jump is a second fast path without it."""
    c = shim_gen.generate(spec, None)["wrap_c.c"]
    isend = c[c.index("int MPI_Isend("):]
    isend = isend[:isend.index("\n}\n")]
    lines = isend.split("\n")
    # the fast path first: rm_fast_ok implies capture, so the capture test comes after it
    assert lines[1:6] == ["  if (rm_fast_ok(OP_MPI_Isend)) {",
                          "    if (rm_p2p_send_fast(OP_MPI_Isend, buf, count, datatype, dest, comm)) {",
                          "      RM_SKIP(OP_MPI_Isend)--;",
                          "      return PMPI_Isend(buf, count, datatype, dest, tag, comm, request);", "    }"]
    assert lines[7] == "  if (!RM_CAPTURE) return PMPI_Isend(buf, count, datatype, dest, tag, comm, request);"
    assert isend.rstrip().endswith("return rmw_MPI_Isend(buf, count, datatype, dest, tag, comm, request);")
    full = c[c.index("static __attribute__((noinline)) int rmw_MPI_Isend("):c.index("int MPI_Isend(")]
    assert "RM_T0(OP_MPI_Isend);" in full and "RM_DONE(OP_MPI_Isend, n);" in full
    assert "rma_MPI_Isend" not in c               # nothing after the call: no helper
    # a fast path with work after the call jumps to its helper, which keeps the call's result
    irecv = c[c.index("int MPI_Irecv("):]
    irecv = irecv[:irecv.index("\n}\n")]
    assert "      return rma_MPI_Irecv(buf, count, datatype, source, tag, comm, request);" in irecv
    helper = c[c.index("static __attribute__((noinline)) int rma_MPI_Irecv("):c.index("int MPI_Irecv(")]
    assert helper.split("\n")[1:4] == ["  int rc = PMPI_Irecv(buf, count, datatype, source, tag, comm, request);",
                                       "  if (rc == MPI_SUCCESS) {", "    rm_rq_recv_push(*request);"]
    # ... and its fast.jump goes straight to the library
    jump = irecv[irecv.index("    if (rm_recv_untracked(OP_MPI_Irecv)) {"):].split("\n")
    assert jump[1:3] == ["      RM_SKIP(OP_MPI_Irecv)--;", "      return PMPI_Irecv(buf, count, datatype, source, tag, comm, request);"]
    # a blocking receive without receive rows (the default) and MPI_Sendrecv's send half alike: a
    # ping-pong's receive sets up no frame and does nothing after the library's call
    recv = c[c.index("int MPI_Recv("):]
    recv = recv[:recv.index("\n}\n")].split("\n")
    j = recv.index("    if (rm_recv_untracked(OP_MPI_Recv)) {")
    assert recv[j + 1:j + 3] == ["      RM_SKIP(OP_MPI_Recv)--;",
                                 "      return PMPI_Recv(buf, count, datatype, source, tag, comm, status);"]
    assert recv.index("    if (rm_recv_fast_ok(comm)) {") < j          # the recorded receive's path first
    srecv = c[c.index("int MPI_Sendrecv("):]
    srecv = srecv[:srecv.index("\n}\n")]
    assert "    if (!rm_track_recv && rm_p2p_send_fast(OP_MPI_Sendrecv, sendbuf, sendcount, sendtype, dest, comm)) {" in srecv
    # a collective's fast path ends the collective in progress after the call, whatever it returned;
    # the entry point tries way 0 of the thread's remembered calls ("fast.ways"), an untimed call
    # that misses it the other ways in a function of its own, then the full wrapper; the work after
    # the call is a function of its own too; its persistent form (counted at MPI_Start) has none
    allr = c[c.index("int MPI_Allreduce("):]
    allr = allr[:allr.index("\n}\n")]
    lines = allr[allr.index("if (rm_fast_ok(OP_MPI_Allreduce)) {"):].split("\n")
    call = "PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm)"
    args = "sendbuf, recvbuf, count, datatype, op, comm"
    assert lines[1:6] == [
        "    if (rm_coll_fast(OP_MPI_Allreduce, 0, comm, rm_cf_allreduce(RM_INPLACE(sendbuf, recvbuf), count, datatype))) {",
        "      RM_SKIP(OP_MPI_Allreduce)--;", f"      return rma_MPI_Allreduce({args});", "    }",
        f"    return rmf_MPI_Allreduce({args});"]
    assert allr.rstrip().endswith(f"return rmw_MPI_Allreduce({args});")
    # way 1 in a function of its own (two signatures in turn), the hashed set's ways in another
    way1 = c[c.index("static __attribute__((noinline)) int rmf_MPI_Allreduce("):c.index("int MPI_Allreduce(")]
    assert "if (RM_COLL_LOOKS > 1 && rm_coll_fast(OP_MPI_Allreduce, 1, comm," in way1
    assert f"return rma_MPI_Allreduce({args});" in way1
    assert way1.rstrip().endswith(f"return rmg_MPI_Allreduce({args});\n}}")
    ways = c[c.index("static __attribute__((noinline)) int rmg_MPI_Allreduce("):c.index("int MPI_Allreduce(")]
    ways = ways[:ways.index("static __attribute__((noinline)) int rmf_MPI_Allreduce(")]
    assert "for (int way_ = 2; way_ < RM_COLL_LOOKS; way_++)" in ways
    assert "rm_coll_fast(OP_MPI_Allreduce, way_, comm," in ways and f"return rma_MPI_Allreduce({args});" in ways
    assert ways.rstrip().endswith(f"return rmw_MPI_Allreduce({args});\n}}")
    helper = c[c.index("static __attribute__((noinline)) int rma_MPI_Allreduce("):c.index("int MPI_Allreduce(")]
    assert helper.split("\n")[1:4] == [f"  int rc = {call};", "  rm_t.coll = 0;", "  return rc;"]
    init = c[c.index("int MPI_Allreduce_init("):]
    assert "rm_fast_ok" not in init[:init.index("\n}\n")] and "rmw_MPI_Allreduce_init" not in c
    assert "rmw_MPI_Alltoallv" not in c          # per-peer counts: no fast path
    # a blocking receive's fast path reads the status after the call: it passes one of its own when
    # the caller ignores it (only while receives are recorded), and counts the call whatever the
    # library returned
    recv = c[c.index("static __attribute__((noinline)) int rma_MPI_Recv("):c.index("int MPI_Recv(")].split("\n")
    assert recv[1:10] == ["  uint64_t n = 0;", "  MPI_Status status_own_;",
                          "  if ((rm_track_recv) && status == MPI_STATUS_IGNORE) status = &status_own_;",
                          "  int rc = PMPI_Recv(buf, count, datatype, source, tag, comm, status);",
                          "  if (rc == MPI_SUCCESS) {",
                          "    n = rm_recv_fast_row(OP_MPI_Recv, buf, source, comm, status);", "  }",
                          "  rm_op_fast(OP_MPI_Recv, n);", "  return rc;"]
    entry = c[c.index("int MPI_Recv("):]
    assert "      return rma_MPI_Recv(buf, count, datatype, source, tag, comm, status);" in entry[:entry.index("\n}\n")]


def test_status_of_our_own_only_where_the_accounting_reads_it():
    """A fast path whose work after the call does not read the status passes the caller's as is."""
    text = ("MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status)\n"
            "    post: n = rm_p2p_recv(OP, 0, 0, status);\n    fast: 1\n    fast.after: rm_op_fast(OP, 0);\n")
    c = shim_gen.generate(shim_gen.expand(shim_gen.parse(text)), None)["wrap_c.c"]
    fast = c[c.index("static __attribute__((noinline)) int rma_MPI_Recv("):c.index("return rmw_MPI_Recv(")]
    assert "status_own_" not in fast and "uint64_t n" not in fast
    full = c[c.index("static __attribute__((noinline)) int rmw_MPI_Recv("):c.index("int MPI_Recv(")]
    assert "if (status == MPI_STATUS_IGNORE) status = &status_own_;" in full


@pytest.mark.parametrize("text,msg", [
    ("MPI_Send(int count)\n    bogus: x\n", "calls.spec:2: unknown attribute 'bogus: x'"),
    ("    pre: n = 1;\n", "calls.spec:1: attribute before any prototype"),
    ("MPI_Send(int count, float)\n", "calls.spec:1: cannot read parameter 'float'"),
    ("send(int count)\n", "calls.spec:1: not an MPI routine name: send"),
    ("MPI_Bcast(int count)\n    pre: n = 1;\n    post: x;\n    variants: init\n", "'init' needs exactly one"),
    ("MPI_Send(int count)\n    pre: n = 1;\n    fast.post: x;\n", "calls.spec:1: 'fast.post' without 'fast'"),
    ("MPI_Send(int count)\n    pre: n = 1;\n    fast.after: x;\n", "calls.spec:1: 'fast.after' without 'fast'"),
    ("MPI_Send(int count)\n    pre: n = 1;\n    fast.jump: x\n", "calls.spec:1: 'fast.jump' without 'fast'"),
    ("MPI_Init(int count)\n    plain: yes\n    fast: 1\n", "calls.spec:1: a 'plain' entry has no 'fast' path"),
])
def test_spec_errors_name_the_line(text, msg):
    with pytest.raises(RankmapError, match=re.escape(msg)):
        shim_gen.expand(shim_gen.parse(text))


def test_fortran_view_missing_is_an_error():
    bad = shim_gen.expand(shim_gen.parse("MPI_Startall(int count, MPI_Request array_of_requests[])\n"
                                         "    pre: n = rm_start_all(count, array_of_requests);\n"))
    with pytest.raises(RankmapError, match=r"MPI_Startall: no Fortran view of parameter .*use f_array_of_requests"):
        shim_gen.generate(bad)


def test_cli_writes_sources(tmp_path):
    assert shim_gen.main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rm_gen.h", "wrap_c.c", "wrap_f.c"]
