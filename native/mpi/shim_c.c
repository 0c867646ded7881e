/*
 * shim_c.c -- the C MPI entry points of the rankmap shim.  Each wrapper: pass straight through
 * when capture is off; otherwise count (sends at post time, receives at completion from the
 * status), call the PMPI_ routine, and add the call's time and payload to its operation.
 */
#include "shim_core.h"

#include <stdlib.h>
#include <string.h>

#define T0 uint64_t t0_ = rm_tick = rmrec_ticks()
#define DONE(op, n) rmrec_call(rm_R, op, (n), rmrec_ticks() - t0_)

/* ---- init / finalize ----------------------------------------------------------------------- */

int MPI_Init(int *argc, char ***argv) {
  int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) rm_setup();
  return rc;
}
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) rm_setup();
  return rc;
}
int MPI_Finalize(void) {
  rm_teardown();
  return PMPI_Finalize();
}

/* ---- point-to-point --------------------------------------------------------------------------- */

#define SEND_BLOCKING(Name)                                                                        \
  int MPI_##Name(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm) {    \
    if (!RM_CAPTURE) return PMPI_##Name(buf, count, t, dest, tag, comm);                           \
    T0;                                                                                            \
    uint64_t n = rm_p2p_send(OP_MPI_##Name, buf, count, t, dest, comm);                           \
    int rc = PMPI_##Name(buf, count, t, dest, tag, comm);                                          \
    DONE(OP_MPI_##Name, n);                                                                        \
    return rc;                                                                                     \
  }
SEND_BLOCKING(Send)
SEND_BLOCKING(Bsend)
SEND_BLOCKING(Ssend)
SEND_BLOCKING(Rsend)

#define SEND_NONBLOCKING(Name)                                                                     \
  int MPI_##Name(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,      \
                 MPI_Request *req) {                                                               \
    if (!RM_CAPTURE) return PMPI_##Name(buf, count, t, dest, tag, comm, req);                      \
    T0;                                                                                            \
    uint64_t n = rm_p2p_send(OP_MPI_##Name, buf, count, t, dest, comm);                           \
    int rc = PMPI_##Name(buf, count, t, dest, tag, comm, req);                                     \
    DONE(OP_MPI_##Name, n);                                                                        \
    return rc;                                                                                     \
  }
SEND_NONBLOCKING(Isend)
SEND_NONBLOCKING(Ibsend)
SEND_NONBLOCKING(Issend)
SEND_NONBLOCKING(Irsend)

/* persistent sends: the row is stored with the request and counted at each MPI_Start */
#define SEND_INIT(Name)                                                                            \
  int MPI_##Name(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm,      \
                 MPI_Request *req) {                                                               \
    if (!RM_CAPTURE) return PMPI_##Name(buf, count, t, dest, tag, comm, req);                      \
    T0;                                                                                            \
    int rc = PMPI_##Name(buf, count, t, dest, tag, comm, req);                                     \
    rm_rowset_t *rs = rm_rowset_new(OP_MPI_##Name);                                                  \
    if (rc == MPI_SUCCESS && rs) {                                                                 \
      rm_rs = rs;                                                                                  \
      rs->payload = rm_p2p_send(OP_MPI_##Name, buf, count, t, dest, comm);                        \
      rm_rs = NULL;                                                                                \
      rm_rq_put(*req, RQ_PSTART, OP_MPI_##Name, 0, NULL, rs);                                      \
    }                                                                                              \
    DONE(OP_MPI_##Name, 0);                                                                        \
    return rc;                                                                                     \
  }
SEND_INIT(Send_init)
SEND_INIT(Bsend_init)
SEND_INIT(Ssend_init)
SEND_INIT(Rsend_init)

int MPI_Recv_init(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Request *req) {
  if (!RM_CAPTURE) return PMPI_Recv_init(buf, count, t, src, tag, comm, req);
  T0;
  int rc = PMPI_Recv_init(buf, count, t, src, tag, comm, req);
  if (rc == MPI_SUCCESS) rm_rq_put(*req, RQ_PRECV, OP_MPI_Recv_init, rm_mem(buf), rm_comm_xl(comm), NULL);
  DONE(OP_MPI_Recv_init, 0);
  return rc;
}

int MPI_Recv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Status *st) {
  if (!RM_CAPTURE) return PMPI_Recv(buf, count, t, src, tag, comm, st);
  MPI_Status tmp;
  if (st == MPI_STATUS_IGNORE) st = &tmp;
  T0;
  int rc = PMPI_Recv(buf, count, t, src, tag, comm, st);
  uint64_t n = rc == MPI_SUCCESS ? rm_p2p_recv(OP_MPI_Recv, rm_mem(buf), rm_comm_xl(comm), st) : 0;
  DONE(OP_MPI_Recv, n);
  return rc;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Request *req) {
  if (!RM_CAPTURE) return PMPI_Irecv(buf, count, t, src, tag, comm, req);
  T0;
  int rc = PMPI_Irecv(buf, count, t, src, tag, comm, req);
  if (rc == MPI_SUCCESS) rm_rq_put(*req, RQ_RECV, OP_MPI_Irecv, rm_mem(buf), rm_comm_xl(comm), NULL);
  DONE(OP_MPI_Irecv, 0);
  return rc;
}

int MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag, void *rbuf, int rcount,
                 MPI_Datatype rtype, int src, int rtag, MPI_Comm comm, MPI_Status *st) {
  if (!RM_CAPTURE) return PMPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, st);
  MPI_Status tmp;
  if (st == MPI_STATUS_IGNORE) st = &tmp;
  T0;
  uint64_t n = rm_p2p_send(OP_MPI_Sendrecv, sbuf, scount, stype, dest, comm);
  int rc = PMPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, st);
  if (rc == MPI_SUCCESS) rm_p2p_recv(OP_MPI_Sendrecv, rm_mem(rbuf), rm_comm_xl(comm), st);
  DONE(OP_MPI_Sendrecv, n);
  return rc;
}

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype t, int dest, int stag, int src, int rtag,
                         MPI_Comm comm, MPI_Status *st) {
  if (!RM_CAPTURE) return PMPI_Sendrecv_replace(buf, count, t, dest, stag, src, rtag, comm, st);
  MPI_Status tmp;
  if (st == MPI_STATUS_IGNORE) st = &tmp;
  T0;
  uint64_t n = rm_p2p_send(OP_MPI_Sendrecv_replace, buf, count, t, dest, comm);
  int rc = PMPI_Sendrecv_replace(buf, count, t, dest, stag, src, rtag, comm, st);
  if (rc == MPI_SUCCESS) rm_p2p_recv(OP_MPI_Sendrecv_replace, rm_mem(buf), rm_comm_xl(comm), st);
  DONE(OP_MPI_Sendrecv_replace, n);
  return rc;
}

/* ---- persistent start / free ------------------------------------------------------------------- */

uint64_t rm_start_one(MPI_Request r) {
  rm_rq_t e;
  if (!rm_rq_get(r, &e) || e.kind != RQ_PSTART || !e.rs) return 0;
  rm_replay(e.rs);
  return e.rs->payload;
}
int MPI_Start(MPI_Request *req) {
  if (!RM_CAPTURE) return PMPI_Start(req);
  T0;
  uint64_t n = rm_start_one(*req);
  int rc = PMPI_Start(req);
  DONE(OP_MPI_Start, n);
  return rc;
}
int MPI_Startall(int count, MPI_Request reqs[]) {
  if (!RM_CAPTURE) return PMPI_Startall(count, reqs);
  T0;
  uint64_t n = 0;
  for (int i = 0; i < count; i++) n += rm_start_one(reqs[i]);
  int rc = PMPI_Startall(count, reqs);
  DONE(OP_MPI_Startall, n);
  return rc;
}
int MPI_Request_free(MPI_Request *req) {
  if (!RM_CAPTURE) return PMPI_Request_free(req);
  rm_rq_t e;
  int have = rm_rq_get(*req, &e);
  int rc = PMPI_Request_free(req);
  if (have) rm_rq_del(&e);   /* a row set of a persistent request is leaked: tiny, and racing-safe */
  return rc;
}

/* ---- completion --------------------------------------------------------------------------------- */
/* Tracked requests are looked up BEFORE the call (completion frees the handle); statuses are
 * substituted when the caller ignores them and a tracked receive is among the requests. */

int MPI_Wait(MPI_Request *req, MPI_Status *st) {
  if (!RM_CAPTURE) return PMPI_Wait(req, st);
  T0;
  rm_rq_t e;
  MPI_Status tmp;
  int have = rm_rq_get(*req, &e);
  if (have && st == MPI_STATUS_IGNORE) st = &tmp;
  int rc = PMPI_Wait(req, st);
  if (have && rc == MPI_SUCCESS) rm_rq_done(&e, st);
  DONE(OP_MPI_Wait, 0);
  return rc;
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *st) {
  if (!RM_CAPTURE) return PMPI_Test(req, flag, st);
  T0;
  rm_rq_t e;
  MPI_Status tmp;
  int have = rm_rq_get(*req, &e);
  if (have && st == MPI_STATUS_IGNORE) st = &tmp;
  int rc = PMPI_Test(req, flag, st);
  if (have && rc == MPI_SUCCESS && *flag) rm_rq_done(&e, st);
  DONE(OP_MPI_Test, 0);
  return rc;
}

/* lookup of n requests into e[] (has[] flags); returns how many are tracked */
typedef struct { rm_rq_t *e; char *has; MPI_Status *st; rm_rq_t e_s[32]; char has_s[32]; MPI_Status st_s[32]; } multi_t;
static int multi_get(multi_t *m, int n, const MPI_Request reqs[]) {
  m->e = m->e_s; m->has = m->has_s; m->st = NULL;
  if (!rm_rq_count || n <= 0) return 0;
  if (n > 32) {
    m->e = malloc(sizeof(rm_rq_t) * (size_t)n);
    m->has = malloc((size_t)n);
    if (!m->e || !m->has) { free(m->e); free(m->has); m->e = m->e_s; m->has = m->has_s; return 0; }
  }
  return rm_rq_get_n(n, reqs, m->e, m->has);
}
static MPI_Status *multi_status(multi_t *m, int n, MPI_Status *sts) {
  if (sts != MPI_STATUSES_IGNORE) return sts;
  m->st = n <= 32 ? m->st_s : malloc(sizeof(MPI_Status) * (size_t)n);
  return m->st ? m->st : MPI_STATUSES_IGNORE;
}
static void multi_free(multi_t *m) {
  if (m->e != m->e_s) free(m->e);
  if (m->has != m->has_s) free(m->has);
  if (m->st && m->st != m->st_s) free(m->st);
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[]) {
  if (!RM_CAPTURE) return PMPI_Waitall(n, reqs, sts);
  T0;
  multi_t m;
  int k = multi_get(&m, n, reqs);
  MPI_Status *s = k ? multi_status(&m, n, sts) : sts;
  int rc = PMPI_Waitall(n, reqs, s);
  if (k && rc == MPI_SUCCESS && s != MPI_STATUSES_IGNORE) {
    for (int i = 0; i < n; i++) if (m.has[i]) rm_rq_account(&m.e[i], &s[i]);
    rm_rq_release_n(n, m.e, m.has);
  }
  multi_free(&m);
  DONE(OP_MPI_Waitall, 0);
  return rc;
}

int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[]) {
  if (!RM_CAPTURE) return PMPI_Testall(n, reqs, flag, sts);
  T0;
  multi_t m;
  int k = multi_get(&m, n, reqs);
  MPI_Status *s = k ? multi_status(&m, n, sts) : sts;
  int rc = PMPI_Testall(n, reqs, flag, s);
  if (k && rc == MPI_SUCCESS && *flag && s != MPI_STATUSES_IGNORE) {
    for (int i = 0; i < n; i++) if (m.has[i]) rm_rq_account(&m.e[i], &s[i]);
    rm_rq_release_n(n, m.e, m.has);
  }
  multi_free(&m);
  DONE(OP_MPI_Testall, 0);
  return rc;
}

int MPI_Waitany(int n, MPI_Request reqs[], int *idx, MPI_Status *st) {
  if (!RM_CAPTURE) return PMPI_Waitany(n, reqs, idx, st);
  T0;
  multi_t m;
  MPI_Status tmp;
  int k = multi_get(&m, n, reqs);
  if (k && st == MPI_STATUS_IGNORE) st = &tmp;
  int rc = PMPI_Waitany(n, reqs, idx, st);
  if (k && rc == MPI_SUCCESS && *idx != MPI_UNDEFINED && m.has[*idx]) rm_rq_done(&m.e[*idx], st);
  multi_free(&m);
  DONE(OP_MPI_Waitany, 0);
  return rc;
}

int MPI_Testany(int n, MPI_Request reqs[], int *idx, int *flag, MPI_Status *st) {
  if (!RM_CAPTURE) return PMPI_Testany(n, reqs, idx, flag, st);
  T0;
  multi_t m;
  MPI_Status tmp;
  int k = multi_get(&m, n, reqs);
  if (k && st == MPI_STATUS_IGNORE) st = &tmp;
  int rc = PMPI_Testany(n, reqs, idx, flag, st);
  if (k && rc == MPI_SUCCESS && *flag && *idx != MPI_UNDEFINED && m.has[*idx]) rm_rq_done(&m.e[*idx], st);
  multi_free(&m);
  DONE(OP_MPI_Testany, 0);
  return rc;
}

int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]) {
  if (!RM_CAPTURE) return PMPI_Waitsome(n, reqs, outcount, idx, sts);
  T0;
  multi_t m;
  int k = multi_get(&m, n, reqs);
  MPI_Status *s = k ? multi_status(&m, n, sts) : sts;
  int rc = PMPI_Waitsome(n, reqs, outcount, idx, s);
  if (k && rc == MPI_SUCCESS && *outcount != MPI_UNDEFINED && s != MPI_STATUSES_IGNORE)
    for (int j = 0; j < *outcount; j++) if (m.has[idx[j]]) rm_rq_done(&m.e[idx[j]], &s[j]);
  multi_free(&m);
  DONE(OP_MPI_Waitsome, 0);
  return rc;
}

int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int idx[], MPI_Status sts[]) {
  if (!RM_CAPTURE) return PMPI_Testsome(n, reqs, outcount, idx, sts);
  T0;
  multi_t m;
  int k = multi_get(&m, n, reqs);
  MPI_Status *s = k ? multi_status(&m, n, sts) : sts;
  int rc = PMPI_Testsome(n, reqs, outcount, idx, s);
  if (k && rc == MPI_SUCCESS && *outcount != MPI_UNDEFINED && s != MPI_STATUSES_IGNORE)
    for (int j = 0; j < *outcount; j++) if (m.has[idx[j]]) rm_rq_done(&m.e[idx[j]], &s[j]);
  multi_free(&m);
  DONE(OP_MPI_Testsome, 0);
  return rc;
}

/* ---- collectives ---------------------------------------------------------------------------------- */
/* COLL(op, accounting expression, PMPI call): blocking and nonblocking share the accounting. */
#define COLL(op, acc, call)                  \
  if (!RM_CAPTURE) return call;              \
  T0;                                        \
  uint64_t n = acc;                          \
  int rc = call;                             \
  DONE(op, n);                               \
  return rc;

/* persistent collectives (MPI-4): rows stored with the request, counted at each MPI_Start */
#define COLL_INIT(op, acc, call)                                        \
  if (!RM_CAPTURE) return call;                                         \
  T0;                                                                   \
  int rc = call;                                                        \
  rm_rowset_t *rs = rc == MPI_SUCCESS ? rm_rowset_new(op) : NULL;          \
  if (rs) {                                                             \
    rm_rs = rs;                                                         \
    rs->payload = acc;                                                  \
    rm_rs = NULL;                                                       \
    rm_rq_put(*req, RQ_PSTART, op, 0, NULL, rs);                        \
  }                                                                     \
  DONE(op, 0);                                                          \
  return rc;

int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm) {
  COLL(OP_MPI_Bcast, rm_acc_bcast(OP_MPI_Bcast, buf, count, t, root, comm), PMPI_Bcast(buf, count, t, root, comm))
}
int MPI_Ibcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ibcast, rm_acc_bcast(OP_MPI_Ibcast, buf, count, t, root, comm), PMPI_Ibcast(buf, count, t, root, comm, req))
}
int MPI_Reduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, int root, MPI_Comm comm) {
  COLL(OP_MPI_Reduce, rm_acc_reduce(OP_MPI_Reduce, s, count, t, root, comm), PMPI_Reduce(s, r, count, t, o, root, comm))
}
int MPI_Ireduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, int root, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ireduce, rm_acc_reduce(OP_MPI_Ireduce, s, count, t, root, comm), PMPI_Ireduce(s, r, count, t, o, root, comm, req))
}
int MPI_Allreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, MPI_Comm comm) {
  COLL(OP_MPI_Allreduce, rm_acc_allreduce(OP_MPI_Allreduce, s == MPI_IN_PLACE ? r : s, count, t, comm),
       PMPI_Allreduce(s, r, count, t, o, comm))
}
int MPI_Iallreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Iallreduce, rm_acc_allreduce(OP_MPI_Iallreduce, s == MPI_IN_PLACE ? r : s, count, t, comm),
       PMPI_Iallreduce(s, r, count, t, o, comm, req))
}
int MPI_Gather(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, int root, MPI_Comm comm) {
  COLL(OP_MPI_Gather, rm_acc_gather(OP_MPI_Gather, s, sc, st, rc_, rt, root, comm), PMPI_Gather(s, sc, st, r, rc_, rt, root, comm))
}
int MPI_Igather(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Igather, rm_acc_gather(OP_MPI_Igather, s, sc, st, rc_, rt, root, comm), PMPI_Igather(s, sc, st, r, rc_, rt, root, comm, req))
}
int MPI_Gatherv(const void *s, int sc, MPI_Datatype st, void *r, const int rcs[], const int displs[], MPI_Datatype rt, int root, MPI_Comm comm) {
  COLL(OP_MPI_Gatherv, rm_acc_gatherv(OP_MPI_Gatherv, s, sc, st, rcs, rt, root, comm), PMPI_Gatherv(s, sc, st, r, rcs, displs, rt, root, comm))
}
int MPI_Igatherv(const void *s, int sc, MPI_Datatype st, void *r, const int rcs[], const int displs[], MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Igatherv, rm_acc_gatherv(OP_MPI_Igatherv, s, sc, st, rcs, rt, root, comm), PMPI_Igatherv(s, sc, st, r, rcs, displs, rt, root, comm, req))
}
int MPI_Scatter(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, int root, MPI_Comm comm) {
  COLL(OP_MPI_Scatter, rm_acc_scatter(OP_MPI_Scatter, s, sc, st, rc_, rt, root, comm), PMPI_Scatter(s, sc, st, r, rc_, rt, root, comm))
}
int MPI_Iscatter(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Iscatter, rm_acc_scatter(OP_MPI_Iscatter, s, sc, st, rc_, rt, root, comm), PMPI_Iscatter(s, sc, st, r, rc_, rt, root, comm, req))
}
int MPI_Scatterv(const void *s, const int scs[], const int displs[], MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, int root, MPI_Comm comm) {
  COLL(OP_MPI_Scatterv, rm_acc_scatterv(OP_MPI_Scatterv, s, scs, st, rc_, rt, root, comm), PMPI_Scatterv(s, scs, displs, st, r, rc_, rt, root, comm))
}
int MPI_Iscatterv(const void *s, const int scs[], const int displs[], MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, int root, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Iscatterv, rm_acc_scatterv(OP_MPI_Iscatterv, s, scs, st, rc_, rt, root, comm), PMPI_Iscatterv(s, scs, displs, st, r, rc_, rt, root, comm, req))
}
int MPI_Allgather(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm) {
  COLL(OP_MPI_Allgather, rm_acc_allgather(OP_MPI_Allgather, s == MPI_IN_PLACE ? r : s, rc_, rt, comm), PMPI_Allgather(s, sc, st, r, rc_, rt, comm))
}
int MPI_Iallgather(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Iallgather, rm_acc_allgather(OP_MPI_Iallgather, s == MPI_IN_PLACE ? r : s, rc_, rt, comm), PMPI_Iallgather(s, sc, st, r, rc_, rt, comm, req))
}
int MPI_Allgatherv(const void *s, int sc, MPI_Datatype st, void *r, const int rcs[], const int displs[], MPI_Datatype rt, MPI_Comm comm) {
  COLL(OP_MPI_Allgatherv, rm_acc_allgatherv(OP_MPI_Allgatherv, s == MPI_IN_PLACE ? r : s, rcs, rt, comm), PMPI_Allgatherv(s, sc, st, r, rcs, displs, rt, comm))
}
int MPI_Iallgatherv(const void *s, int sc, MPI_Datatype st, void *r, const int rcs[], const int displs[], MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Iallgatherv, rm_acc_allgatherv(OP_MPI_Iallgatherv, s == MPI_IN_PLACE ? r : s, rcs, rt, comm), PMPI_Iallgatherv(s, sc, st, r, rcs, displs, rt, comm, req))
}
int MPI_Alltoall(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm) {
  COLL(OP_MPI_Alltoall, rm_acc_alltoall(OP_MPI_Alltoall, s == MPI_IN_PLACE ? r : s, rc_, rt, comm), PMPI_Alltoall(s, sc, st, r, rc_, rt, comm))
}
int MPI_Ialltoall(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ialltoall, rm_acc_alltoall(OP_MPI_Ialltoall, s == MPI_IN_PLACE ? r : s, rc_, rt, comm), PMPI_Ialltoall(s, sc, st, r, rc_, rt, comm, req))
}
int MPI_Alltoallv(const void *s, const int scs[], const int sd[], MPI_Datatype st, void *r, const int rcs[], const int rd[], MPI_Datatype rt, MPI_Comm comm) {
  COLL(OP_MPI_Alltoallv, rm_acc_alltoallv(OP_MPI_Alltoallv, s, scs, st, rcs, rt, comm), PMPI_Alltoallv(s, scs, sd, st, r, rcs, rd, rt, comm))
}
int MPI_Ialltoallv(const void *s, const int scs[], const int sd[], MPI_Datatype st, void *r, const int rcs[], const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ialltoallv, rm_acc_alltoallv(OP_MPI_Ialltoallv, s, scs, st, rcs, rt, comm), PMPI_Ialltoallv(s, scs, sd, st, r, rcs, rd, rt, comm, req))
}
int MPI_Alltoallw(const void *s, const int scs[], const int sd[], const MPI_Datatype sts[], void *r, const int rcs[], const int rd[], const MPI_Datatype rts[], MPI_Comm comm) {
  COLL(OP_MPI_Alltoallw, rm_acc_alltoallw(OP_MPI_Alltoallw, s, scs, sts, rcs, rts, comm), PMPI_Alltoallw(s, scs, sd, sts, r, rcs, rd, rts, comm))
}
int MPI_Ialltoallw(const void *s, const int scs[], const int sd[], const MPI_Datatype sts[], void *r, const int rcs[], const int rd[], const MPI_Datatype rts[], MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ialltoallw, rm_acc_alltoallw(OP_MPI_Ialltoallw, s, scs, sts, rcs, rts, comm), PMPI_Ialltoallw(s, scs, sd, sts, r, rcs, rd, rts, comm, req))
}
int MPI_Reduce_scatter(const void *s, void *r, const int rcs[], MPI_Datatype t, MPI_Op o, MPI_Comm comm) {
  COLL(OP_MPI_Reduce_scatter, rm_acc_reduce_scatter(OP_MPI_Reduce_scatter, s, rcs, t, comm), PMPI_Reduce_scatter(s, r, rcs, t, o, comm))
}
int MPI_Ireduce_scatter(const void *s, void *r, const int rcs[], MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ireduce_scatter, rm_acc_reduce_scatter(OP_MPI_Ireduce_scatter, s, rcs, t, comm), PMPI_Ireduce_scatter(s, r, rcs, t, o, comm, req))
}
int MPI_Reduce_scatter_block(const void *s, void *r, int rc_, MPI_Datatype t, MPI_Op o, MPI_Comm comm) {
  COLL(OP_MPI_Reduce_scatter_block, rm_acc_reduce_scatter_block(OP_MPI_Reduce_scatter_block, s, rc_, t, comm), PMPI_Reduce_scatter_block(s, r, rc_, t, o, comm))
}
int MPI_Ireduce_scatter_block(const void *s, void *r, int rc_, MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ireduce_scatter_block, rm_acc_reduce_scatter_block(OP_MPI_Ireduce_scatter_block, s, rc_, t, comm), PMPI_Ireduce_scatter_block(s, r, rc_, t, o, comm, req))
}
int MPI_Scan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, MPI_Comm comm) {
  COLL(OP_MPI_Scan, rm_acc_scan(OP_MPI_Scan, s, count, t, comm), PMPI_Scan(s, r, count, t, o, comm))
}
int MPI_Iscan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Iscan, rm_acc_scan(OP_MPI_Iscan, s, count, t, comm), PMPI_Iscan(s, r, count, t, o, comm, req))
}
int MPI_Exscan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, MPI_Comm comm) {
  COLL(OP_MPI_Exscan, rm_acc_scan(OP_MPI_Exscan, s, count, t, comm), PMPI_Exscan(s, r, count, t, o, comm))
}
int MPI_Iexscan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Iexscan, rm_acc_scan(OP_MPI_Iexscan, s, count, t, comm), PMPI_Iexscan(s, r, count, t, o, comm, req))
}
int MPI_Barrier(MPI_Comm comm) {
  COLL(OP_MPI_Barrier, rm_acc_barrier(OP_MPI_Barrier, comm), PMPI_Barrier(comm))
}
int MPI_Ibarrier(MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ibarrier, rm_acc_barrier(OP_MPI_Ibarrier, comm), PMPI_Ibarrier(comm, req))
}

/* neighbour collectives */
int MPI_Neighbor_allgather(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm) {
  COLL(OP_MPI_Neighbor_allgather, rm_acc_neighbor(OP_MPI_Neighbor_allgather, 0, s, sc, NULL, st, NULL, rc_, NULL, rt, NULL, comm),
       PMPI_Neighbor_allgather(s, sc, st, r, rc_, rt, comm))
}
int MPI_Ineighbor_allgather(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ineighbor_allgather, rm_acc_neighbor(OP_MPI_Ineighbor_allgather, 0, s, sc, NULL, st, NULL, rc_, NULL, rt, NULL, comm),
       PMPI_Ineighbor_allgather(s, sc, st, r, rc_, rt, comm, req))
}
int MPI_Neighbor_allgatherv(const void *s, int sc, MPI_Datatype st, void *r, const int rcs[], const int displs[], MPI_Datatype rt, MPI_Comm comm) {
  COLL(OP_MPI_Neighbor_allgatherv, rm_acc_neighbor(OP_MPI_Neighbor_allgatherv, 1, s, sc, NULL, st, NULL, 0, rcs, rt, NULL, comm),
       PMPI_Neighbor_allgatherv(s, sc, st, r, rcs, displs, rt, comm))
}
int MPI_Ineighbor_allgatherv(const void *s, int sc, MPI_Datatype st, void *r, const int rcs[], const int displs[], MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ineighbor_allgatherv, rm_acc_neighbor(OP_MPI_Ineighbor_allgatherv, 1, s, sc, NULL, st, NULL, 0, rcs, rt, NULL, comm),
       PMPI_Ineighbor_allgatherv(s, sc, st, r, rcs, displs, rt, comm, req))
}
int MPI_Neighbor_alltoall(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm) {
  COLL(OP_MPI_Neighbor_alltoall, rm_acc_neighbor(OP_MPI_Neighbor_alltoall, 2, s, sc, NULL, st, NULL, rc_, NULL, rt, NULL, comm),
       PMPI_Neighbor_alltoall(s, sc, st, r, rc_, rt, comm))
}
int MPI_Ineighbor_alltoall(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ineighbor_alltoall, rm_acc_neighbor(OP_MPI_Ineighbor_alltoall, 2, s, sc, NULL, st, NULL, rc_, NULL, rt, NULL, comm),
       PMPI_Ineighbor_alltoall(s, sc, st, r, rc_, rt, comm, req))
}
int MPI_Neighbor_alltoallv(const void *s, const int scs[], const int sd[], MPI_Datatype st, void *r, const int rcs[], const int rd[], MPI_Datatype rt, MPI_Comm comm) {
  COLL(OP_MPI_Neighbor_alltoallv, rm_acc_neighbor(OP_MPI_Neighbor_alltoallv, 3, s, 0, scs, st, NULL, 0, rcs, rt, NULL, comm),
       PMPI_Neighbor_alltoallv(s, scs, sd, st, r, rcs, rd, rt, comm))
}
int MPI_Ineighbor_alltoallv(const void *s, const int scs[], const int sd[], MPI_Datatype st, void *r, const int rcs[], const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ineighbor_alltoallv, rm_acc_neighbor(OP_MPI_Ineighbor_alltoallv, 3, s, 0, scs, st, NULL, 0, rcs, rt, NULL, comm),
       PMPI_Ineighbor_alltoallv(s, scs, sd, st, r, rcs, rd, rt, comm, req))
}
int MPI_Neighbor_alltoallw(const void *s, const int scs[], const MPI_Aint sd[], const MPI_Datatype sts[], void *r, const int rcs[], const MPI_Aint rd[], const MPI_Datatype rts[], MPI_Comm comm) {
  COLL(OP_MPI_Neighbor_alltoallw, rm_acc_neighbor(OP_MPI_Neighbor_alltoallw, 4, s, 0, scs, MPI_DATATYPE_NULL, sts, 0, rcs, MPI_DATATYPE_NULL, rts, comm),
       PMPI_Neighbor_alltoallw(s, scs, sd, sts, r, rcs, rd, rts, comm))
}
int MPI_Ineighbor_alltoallw(const void *s, const int scs[], const MPI_Aint sd[], const MPI_Datatype sts[], void *r, const int rcs[], const MPI_Aint rd[], const MPI_Datatype rts[], MPI_Comm comm, MPI_Request *req) {
  COLL(OP_MPI_Ineighbor_alltoallw, rm_acc_neighbor(OP_MPI_Ineighbor_alltoallw, 4, s, 0, scs, MPI_DATATYPE_NULL, sts, 0, rcs, MPI_DATATYPE_NULL, rts, comm),
       PMPI_Ineighbor_alltoallw(s, scs, sd, sts, r, rcs, rd, rts, comm, req))
}

/* persistent collectives exist from MPI 4.0 on */
#if MPI_VERSION >= 4
int MPI_Bcast_init(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Bcast_init, rm_acc_bcast(OP_MPI_Bcast_init, buf, count, t, root, comm), PMPI_Bcast_init(buf, count, t, root, comm, info, req))
}
int MPI_Reduce_init(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, int root, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Reduce_init, rm_acc_reduce(OP_MPI_Reduce_init, s, count, t, root, comm), PMPI_Reduce_init(s, r, count, t, o, root, comm, info, req))
}
int MPI_Allreduce_init(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Allreduce_init, rm_acc_allreduce(OP_MPI_Allreduce_init, s == MPI_IN_PLACE ? r : s, count, t, comm), PMPI_Allreduce_init(s, r, count, t, o, comm, info, req))
}
int MPI_Gather_init(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, int root, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Gather_init, rm_acc_gather(OP_MPI_Gather_init, s, sc, st, rc_, rt, root, comm), PMPI_Gather_init(s, sc, st, r, rc_, rt, root, comm, info, req))
}
int MPI_Gatherv_init(const void *s, int sc, MPI_Datatype st, void *r, const int rcs[], const int displs[], MPI_Datatype rt, int root, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Gatherv_init, rm_acc_gatherv(OP_MPI_Gatherv_init, s, sc, st, rcs, rt, root, comm), PMPI_Gatherv_init(s, sc, st, r, rcs, displs, rt, root, comm, info, req))
}
int MPI_Scatter_init(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, int root, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Scatter_init, rm_acc_scatter(OP_MPI_Scatter_init, s, sc, st, rc_, rt, root, comm), PMPI_Scatter_init(s, sc, st, r, rc_, rt, root, comm, info, req))
}
int MPI_Scatterv_init(const void *s, const int scs[], const int displs[], MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, int root, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Scatterv_init, rm_acc_scatterv(OP_MPI_Scatterv_init, s, scs, st, rc_, rt, root, comm), PMPI_Scatterv_init(s, scs, displs, st, r, rc_, rt, root, comm, info, req))
}
int MPI_Allgather_init(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Allgather_init, rm_acc_allgather(OP_MPI_Allgather_init, s == MPI_IN_PLACE ? r : s, rc_, rt, comm), PMPI_Allgather_init(s, sc, st, r, rc_, rt, comm, info, req))
}
int MPI_Allgatherv_init(const void *s, int sc, MPI_Datatype st, void *r, const int rcs[], const int displs[], MPI_Datatype rt, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Allgatherv_init, rm_acc_allgatherv(OP_MPI_Allgatherv_init, s == MPI_IN_PLACE ? r : s, rcs, rt, comm), PMPI_Allgatherv_init(s, sc, st, r, rcs, displs, rt, comm, info, req))
}
int MPI_Alltoall_init(const void *s, int sc, MPI_Datatype st, void *r, int rc_, MPI_Datatype rt, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Alltoall_init, rm_acc_alltoall(OP_MPI_Alltoall_init, s == MPI_IN_PLACE ? r : s, rc_, rt, comm), PMPI_Alltoall_init(s, sc, st, r, rc_, rt, comm, info, req))
}
int MPI_Alltoallv_init(const void *s, const int scs[], const int sd[], MPI_Datatype st, void *r, const int rcs[], const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Alltoallv_init, rm_acc_alltoallv(OP_MPI_Alltoallv_init, s, scs, st, rcs, rt, comm), PMPI_Alltoallv_init(s, scs, sd, st, r, rcs, rd, rt, comm, info, req))
}
int MPI_Alltoallw_init(const void *s, const int scs[], const int sd[], const MPI_Datatype sts[], void *r, const int rcs[], const int rd[], const MPI_Datatype rts[], MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Alltoallw_init, rm_acc_alltoallw(OP_MPI_Alltoallw_init, s, scs, sts, rcs, rts, comm), PMPI_Alltoallw_init(s, scs, sd, sts, r, rcs, rd, rts, comm, info, req))
}
int MPI_Reduce_scatter_init(const void *s, void *r, const int rcs[], MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Reduce_scatter_init, rm_acc_reduce_scatter(OP_MPI_Reduce_scatter_init, s, rcs, t, comm), PMPI_Reduce_scatter_init(s, r, rcs, t, o, comm, info, req))
}
int MPI_Reduce_scatter_block_init(const void *s, void *r, int rc_, MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Reduce_scatter_block_init, rm_acc_reduce_scatter_block(OP_MPI_Reduce_scatter_block_init, s, rc_, t, comm), PMPI_Reduce_scatter_block_init(s, r, rc_, t, o, comm, info, req))
}
int MPI_Scan_init(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Scan_init, rm_acc_scan(OP_MPI_Scan_init, s, count, t, comm), PMPI_Scan_init(s, r, count, t, o, comm, info, req))
}
int MPI_Exscan_init(const void *s, void *r, int count, MPI_Datatype t, MPI_Op o, MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Exscan_init, rm_acc_scan(OP_MPI_Exscan_init, s, count, t, comm), PMPI_Exscan_init(s, r, count, t, o, comm, info, req))
}
int MPI_Barrier_init(MPI_Comm comm, MPI_Info info, MPI_Request *req) {
  COLL_INIT(OP_MPI_Barrier_init, rm_acc_barrier(OP_MPI_Barrier_init, comm), PMPI_Barrier_init(comm, info, req))
}
#endif

/* ---- one-sided -------------------------------------------------------------------------------------- */

int MPI_Put(const void *o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Win win) {
  COLL(OP_MPI_Put, rm_acc_rma(OP_MPI_Put, o, rm_tsz(ot, oc), NULL, 0, tr, win), PMPI_Put(o, oc, ot, tr, td, tc, tt, win))
}
int MPI_Rput(const void *o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Win win, MPI_Request *req) {
  COLL(OP_MPI_Rput, rm_acc_rma(OP_MPI_Rput, o, rm_tsz(ot, oc), NULL, 0, tr, win), PMPI_Rput(o, oc, ot, tr, td, tc, tt, win, req))
}
int MPI_Get(void *o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Win win) {
  COLL(OP_MPI_Get, rm_acc_rma(OP_MPI_Get, NULL, 0, o, rm_tsz(ot, oc), tr, win), PMPI_Get(o, oc, ot, tr, td, tc, tt, win))
}
int MPI_Rget(void *o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Win win, MPI_Request *req) {
  COLL(OP_MPI_Rget, rm_acc_rma(OP_MPI_Rget, NULL, 0, o, rm_tsz(ot, oc), tr, win), PMPI_Rget(o, oc, ot, tr, td, tc, tt, win, req))
}
int MPI_Accumulate(const void *o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Op op, MPI_Win win) {
  COLL(OP_MPI_Accumulate, rm_acc_rma(OP_MPI_Accumulate, o, rm_tsz(ot, oc), NULL, 0, tr, win), PMPI_Accumulate(o, oc, ot, tr, td, tc, tt, op, win))
}
int MPI_Raccumulate(const void *o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Op op, MPI_Win win, MPI_Request *req) {
  COLL(OP_MPI_Raccumulate, rm_acc_rma(OP_MPI_Raccumulate, o, rm_tsz(ot, oc), NULL, 0, tr, win), PMPI_Raccumulate(o, oc, ot, tr, td, tc, tt, op, win, req))
}
int MPI_Get_accumulate(const void *o, int oc, MPI_Datatype ot, void *r, int rc_, MPI_Datatype rt, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Op op, MPI_Win win) {
  COLL(OP_MPI_Get_accumulate, rm_acc_rma(OP_MPI_Get_accumulate, o, op == MPI_NO_OP ? 0 : rm_tsz(ot, oc), r, rm_tsz(rt, rc_), tr, win),
       PMPI_Get_accumulate(o, oc, ot, r, rc_, rt, tr, td, tc, tt, op, win))
}
int MPI_Rget_accumulate(const void *o, int oc, MPI_Datatype ot, void *r, int rc_, MPI_Datatype rt, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Op op, MPI_Win win, MPI_Request *req) {
  COLL(OP_MPI_Rget_accumulate, rm_acc_rma(OP_MPI_Rget_accumulate, o, op == MPI_NO_OP ? 0 : rm_tsz(ot, oc), r, rm_tsz(rt, rc_), tr, win),
       PMPI_Rget_accumulate(o, oc, ot, r, rc_, rt, tr, td, tc, tt, op, win, req))
}
int MPI_Fetch_and_op(const void *o, void *r, MPI_Datatype t, int tr, MPI_Aint td, MPI_Op op, MPI_Win win) {
  COLL(OP_MPI_Fetch_and_op, rm_acc_rma(OP_MPI_Fetch_and_op, o, op == MPI_NO_OP ? 0 : rm_tsz(t, 1), r, rm_tsz(t, 1), tr, win),
       PMPI_Fetch_and_op(o, r, t, tr, td, op, win))
}
int MPI_Compare_and_swap(const void *o, const void *c, void *r, MPI_Datatype t, int tr, MPI_Aint td, MPI_Win win) {
  COLL(OP_MPI_Compare_and_swap, rm_acc_rma(OP_MPI_Compare_and_swap, o, rm_tsz(t, 1), r, rm_tsz(t, 1), tr, win),
       PMPI_Compare_and_swap(o, c, r, t, tr, td, win))
}
