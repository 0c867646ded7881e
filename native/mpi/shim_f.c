/*
 * shim_f.c -- Fortran (mpif.h / `use mpi`) entry points of the rankmap shim.
 *
 * Each wrapper is exported under the four usual manglings (mpi_send_, mpi_send__, mpi_send,
 * MPI_SEND).  It converts the handles it needs for counting (MPI_Comm_f2c, MPI_Type_f2c, ...),
 * counts exactly as the C wrapper would, then calls the MPI library's own Fortran routine
 * (found with dlsym(RTLD_NEXT)) so that Fortran-only semantics (MPI_IN_PLACE, MPI_BOTTOM,
 * status conversion) stay the library's.  While that call runs, rm_in_f is set, so a library
 * whose Fortran layer calls the C MPI_ symbols (MPICH) is not counted twice, and one that calls
 * PMPI_ directly (Open MPI) is still counted.
 */
#define _GNU_SOURCE
#include "shim_core.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MPI_F_STATUS_SIZE
#define MPI_F_STATUS_SIZE ((int)(sizeof(MPI_Status) / sizeof(MPI_Fint)))
#endif
_Static_assert(sizeof(MPI_Fint) == sizeof(int), "Fortran INTEGER must be a C int");

typedef void (*fv_t)();

static fv_t fresolve(const char *lower) {
  char b[96];
  void *p;
  snprintf(b, sizeof b, "%s_", lower);
  if ((p = dlsym(RTLD_NEXT, b))) return (fv_t)p;
  snprintf(b, sizeof b, "%s__", lower);
  if ((p = dlsym(RTLD_NEXT, b))) return (fv_t)p;
  if ((p = dlsym(RTLD_NEXT, lower))) return (fv_t)p;
  size_t i = 0;
  for (; lower[i] && i < sizeof b - 1; i++) b[i] = (char)toupper((unsigned char)lower[i]);
  b[i] = 0;
  return (fv_t)dlsym(RTLD_NEXT, b);
}

#define REAL(name)                                                     \
  static fv_t real_;                                                   \
  if (!real_) real_ = fresolve(#name);                                 \
  if (!real_) {                                                        \
    fprintf(stderr, "rankmap: %s: the MPI library has no Fortran routine\n", #name); \
    *ierr = MPI_ERR_OTHER;                                             \
    return;                                                            \
  }
#define CALL(...) do { rm_in_f++; real_(__VA_ARGS__); rm_in_f--; } while (0)
#define T0 uint64_t t0_ = rm_tick = rmrec_ticks()
#define DONE(op, n) rmrec_call(rm_R, op, (n), rmrec_ticks() - t0_)

#define FEXPORT(name, NAME)                                                      \
  extern __typeof__(rmf_##name) name##_ __attribute__((alias("rmf_" #name)));    \
  extern __typeof__(rmf_##name) name##__ __attribute__((alias("rmf_" #name)));   \
  extern __typeof__(rmf_##name) name __attribute__((alias("rmf_" #name)));       \
  extern __typeof__(rmf_##name) NAME __attribute__((alias("rmf_" #name)));

typedef MPI_Fint F;
#define C_COMM(c) PMPI_Comm_f2c(*(c))
#define C_TYPE(t) PMPI_Type_f2c(*(t))

/* ---- init / finalize ----------------------------------------------------------------------- */

void rmf_mpi_init(F *ierr) {
  REAL(mpi_init)
  CALL(ierr);
  if (*ierr == MPI_SUCCESS) rm_setup();
}
FEXPORT(mpi_init, MPI_INIT)
void rmf_mpi_init_thread(F *req, F *prov, F *ierr) {
  REAL(mpi_init_thread)
  CALL(req, prov, ierr);
  if (*ierr == MPI_SUCCESS) rm_setup();
}
FEXPORT(mpi_init_thread, MPI_INIT_THREAD)
void rmf_mpi_finalize(F *ierr) {
  REAL(mpi_finalize)
  rm_teardown();
  CALL(ierr);
}
FEXPORT(mpi_finalize, MPI_FINALIZE)

/* mpi_f08 (Open MPI and MPICH name them mpi_init_f08_ ...): only init/finalize are wrapped, so that
 * capture starts; the f08 communication routines are counted where the library implements them
 * through the C MPI_ symbols (MPICH), not where they call PMPI_ (Open MPI).  ierror is OPTIONAL in
 * f08, so it may be NULL. */
static fv_t fresolve_exact(const char *name) { return (fv_t)dlsym(RTLD_NEXT, name); }
#define REAL08(name)                                                   \
  static fv_t real_;                                                   \
  if (!real_) real_ = fresolve_exact(#name);                           \
  if (!real_) { if (ierr) *ierr = MPI_ERR_OTHER; return; }
static void f08_note(void) {
#ifdef OPEN_MPI
  rmrec_meta(rm_R, "warning", "mpi_f08 program under Open MPI: its communication calls bypass the shim "
                              "and are not counted (use mpif.h or `use mpi`)");
#endif
}
void mpi_init_f08_(F *ierr) {
  REAL08(mpi_init_f08_)
  CALL(ierr);
  rm_setup();
  f08_note();
}
void mpi_init_thread_f08_(F *req, F *prov, F *ierr) {
  REAL08(mpi_init_thread_f08_)
  CALL(req, prov, ierr);
  rm_setup();
  f08_note();
}
void mpi_finalize_f08_(F *ierr) {
  REAL08(mpi_finalize_f08_)
  rm_teardown();
  CALL(ierr);
}

/* ---- point-to-point ------------------------------------------------------------------------ */

#define F_SEND(name, NAME, Op)                                                         \
  void rmf_##name(void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *ierr) {   \
    REAL(name)                                                                         \
    if (!RM_CAPTURE) { CALL(buf, count, type, dest, tag, comm, ierr); return; }       \
    T0;                                                                                \
    uint64_t n = rm_p2p_send(Op, buf, *count, C_TYPE(type), *dest, C_COMM(comm));      \
    CALL(buf, count, type, dest, tag, comm, ierr);                                     \
    DONE(Op, n);                                                                       \
  }                                                                                    \
  FEXPORT(name, NAME)
F_SEND(mpi_send, MPI_SEND, OP_MPI_Send)
F_SEND(mpi_bsend, MPI_BSEND, OP_MPI_Bsend)
F_SEND(mpi_ssend, MPI_SSEND, OP_MPI_Ssend)
F_SEND(mpi_rsend, MPI_RSEND, OP_MPI_Rsend)

#define F_ISEND(name, NAME, Op)                                                                \
  void rmf_##name(void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *req, F *ierr) {   \
    REAL(name)                                                                                 \
    if (!RM_CAPTURE) { CALL(buf, count, type, dest, tag, comm, req, ierr); return; }          \
    T0;                                                                                        \
    uint64_t n = rm_p2p_send(Op, buf, *count, C_TYPE(type), *dest, C_COMM(comm));              \
    CALL(buf, count, type, dest, tag, comm, req, ierr);                                        \
    DONE(Op, n);                                                                               \
  }                                                                                            \
  FEXPORT(name, NAME)
F_ISEND(mpi_isend, MPI_ISEND, OP_MPI_Isend)
F_ISEND(mpi_ibsend, MPI_IBSEND, OP_MPI_Ibsend)
F_ISEND(mpi_issend, MPI_ISSEND, OP_MPI_Issend)
F_ISEND(mpi_irsend, MPI_IRSEND, OP_MPI_Irsend)

#define F_SEND_INIT(name, NAME, Op)                                                            \
  void rmf_##name(void *buf, F *count, F *type, F *dest, F *tag, F *comm, F *req, F *ierr) {   \
    REAL(name)                                                                                 \
    if (!RM_CAPTURE) { CALL(buf, count, type, dest, tag, comm, req, ierr); return; }          \
    T0;                                                                                        \
    CALL(buf, count, type, dest, tag, comm, req, ierr);                                        \
    rm_rowset_t *rs = *ierr == MPI_SUCCESS ? rm_rowset_new(Op) : NULL;                         \
    if (rs) {                                                                                  \
      rm_rs = rs;                                                                              \
      rs->payload = rm_p2p_send(Op, buf, *count, C_TYPE(type), *dest, C_COMM(comm));           \
      rm_rs = NULL;                                                                            \
      rm_rq_put(PMPI_Request_f2c(*req), RQ_PSTART, Op, 0, NULL, rs);                           \
    }                                                                                          \
    DONE(Op, 0);                                                                               \
  }                                                                                            \
  FEXPORT(name, NAME)
F_SEND_INIT(mpi_send_init, MPI_SEND_INIT, OP_MPI_Send_init)
F_SEND_INIT(mpi_bsend_init, MPI_BSEND_INIT, OP_MPI_Bsend_init)
F_SEND_INIT(mpi_ssend_init, MPI_SSEND_INIT, OP_MPI_Ssend_init)
F_SEND_INIT(mpi_rsend_init, MPI_RSEND_INIT, OP_MPI_Rsend_init)

/* a received message, from a Fortran status */
static uint64_t f_recv_done(int op, int mem, rm_xl_t *xl, const F *fst) {
  MPI_Status st;
  if (PMPI_Status_f2c(fst, &st) != MPI_SUCCESS) return 0;
  return rm_p2p_recv(op, mem, xl, &st);
}

void rmf_mpi_recv(void *buf, F *count, F *type, F *src, F *tag, F *comm, F *status, F *ierr) {
  REAL(mpi_recv)
  if (!RM_CAPTURE) { CALL(buf, count, type, src, tag, comm, status, ierr); return; }
  F tmp[MPI_F_STATUS_SIZE + 2];
  if (status == MPI_F_STATUS_IGNORE) status = tmp;
  T0;
  CALL(buf, count, type, src, tag, comm, status, ierr);
  uint64_t n = *ierr == MPI_SUCCESS ? f_recv_done(OP_MPI_Recv, rm_mem(buf), rm_comm_xl(C_COMM(comm)), status) : 0;
  DONE(OP_MPI_Recv, n);
}
FEXPORT(mpi_recv, MPI_RECV)

void rmf_mpi_irecv(void *buf, F *count, F *type, F *src, F *tag, F *comm, F *req, F *ierr) {
  REAL(mpi_irecv)
  if (!RM_CAPTURE) { CALL(buf, count, type, src, tag, comm, req, ierr); return; }
  T0;
  CALL(buf, count, type, src, tag, comm, req, ierr);
  if (*ierr == MPI_SUCCESS)
    rm_rq_put(PMPI_Request_f2c(*req), RQ_RECV, OP_MPI_Irecv, rm_mem(buf), rm_comm_xl(C_COMM(comm)), NULL);
  DONE(OP_MPI_Irecv, 0);
}
FEXPORT(mpi_irecv, MPI_IRECV)

void rmf_mpi_recv_init(void *buf, F *count, F *type, F *src, F *tag, F *comm, F *req, F *ierr) {
  REAL(mpi_recv_init)
  if (!RM_CAPTURE) { CALL(buf, count, type, src, tag, comm, req, ierr); return; }
  T0;
  CALL(buf, count, type, src, tag, comm, req, ierr);
  if (*ierr == MPI_SUCCESS)
    rm_rq_put(PMPI_Request_f2c(*req), RQ_PRECV, OP_MPI_Recv_init, rm_mem(buf), rm_comm_xl(C_COMM(comm)), NULL);
  DONE(OP_MPI_Recv_init, 0);
}
FEXPORT(mpi_recv_init, MPI_RECV_INIT)

void rmf_mpi_sendrecv(void *sbuf, F *scount, F *stype, F *dest, F *stag, void *rbuf, F *rcount, F *rtype,
                      F *src, F *rtag, F *comm, F *status, F *ierr) {
  REAL(mpi_sendrecv)
  if (!RM_CAPTURE) { CALL(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, status, ierr); return; }
  F tmp[MPI_F_STATUS_SIZE + 2];
  if (status == MPI_F_STATUS_IGNORE) status = tmp;
  T0;
  MPI_Comm c = C_COMM(comm);
  uint64_t n = rm_p2p_send(OP_MPI_Sendrecv, sbuf, *scount, C_TYPE(stype), *dest, c);
  CALL(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, comm, status, ierr);
  if (*ierr == MPI_SUCCESS) f_recv_done(OP_MPI_Sendrecv, rm_mem(rbuf), rm_comm_xl(c), status);
  DONE(OP_MPI_Sendrecv, n);
}
FEXPORT(mpi_sendrecv, MPI_SENDRECV)

void rmf_mpi_sendrecv_replace(void *buf, F *count, F *type, F *dest, F *stag, F *src, F *rtag, F *comm,
                              F *status, F *ierr) {
  REAL(mpi_sendrecv_replace)
  if (!RM_CAPTURE) { CALL(buf, count, type, dest, stag, src, rtag, comm, status, ierr); return; }
  F tmp[MPI_F_STATUS_SIZE + 2];
  if (status == MPI_F_STATUS_IGNORE) status = tmp;
  T0;
  MPI_Comm c = C_COMM(comm);
  uint64_t n = rm_p2p_send(OP_MPI_Sendrecv_replace, buf, *count, C_TYPE(type), *dest, c);
  CALL(buf, count, type, dest, stag, src, rtag, comm, status, ierr);
  if (*ierr == MPI_SUCCESS) f_recv_done(OP_MPI_Sendrecv_replace, rm_mem(buf), rm_comm_xl(c), status);
  DONE(OP_MPI_Sendrecv_replace, n);
}
FEXPORT(mpi_sendrecv_replace, MPI_SENDRECV_REPLACE)

void rmf_mpi_start(F *req, F *ierr) {
  REAL(mpi_start)
  if (!RM_CAPTURE) { CALL(req, ierr); return; }
  T0;
  uint64_t n = rm_start_one(PMPI_Request_f2c(*req));
  CALL(req, ierr);
  DONE(OP_MPI_Start, n);
}
FEXPORT(mpi_start, MPI_START)

void rmf_mpi_startall(F *count, F *reqs, F *ierr) {
  REAL(mpi_startall)
  if (!RM_CAPTURE) { CALL(count, reqs, ierr); return; }
  T0;
  uint64_t n = 0;
  for (int i = 0; i < *count; i++) n += rm_start_one(PMPI_Request_f2c(reqs[i]));
  CALL(count, reqs, ierr);
  DONE(OP_MPI_Startall, n);
}
FEXPORT(mpi_startall, MPI_STARTALL)

void rmf_mpi_request_free(F *req, F *ierr) {
  REAL(mpi_request_free)
  if (!RM_CAPTURE) { CALL(req, ierr); return; }
  rm_rq_t e;
  int have = rm_rq_get(PMPI_Request_f2c(*req), &e);
  CALL(req, ierr);
  if (have) rm_rq_del(&e);
}
FEXPORT(mpi_request_free, MPI_REQUEST_FREE)

/* ---- completion ------------------------------------------------------------------------------ */

void rmf_mpi_wait(F *req, F *status, F *ierr) {
  REAL(mpi_wait)
  if (!RM_CAPTURE) { CALL(req, status, ierr); return; }
  T0;
  rm_rq_t e;
  F tmp[MPI_F_STATUS_SIZE + 2];
  int have = rm_rq_get(PMPI_Request_f2c(*req), &e);
  if (have && status == MPI_F_STATUS_IGNORE) status = tmp;
  CALL(req, status, ierr);
  if (have && *ierr == MPI_SUCCESS) { MPI_Status st; PMPI_Status_f2c(status, &st); rm_rq_done(&e, &st); }
  DONE(OP_MPI_Wait, 0);
}
FEXPORT(mpi_wait, MPI_WAIT)

void rmf_mpi_test(F *req, F *flag, F *status, F *ierr) {
  REAL(mpi_test)
  if (!RM_CAPTURE) { CALL(req, flag, status, ierr); return; }
  T0;
  rm_rq_t e;
  F tmp[MPI_F_STATUS_SIZE + 2];
  int have = rm_rq_get(PMPI_Request_f2c(*req), &e);
  if (have && status == MPI_F_STATUS_IGNORE) status = tmp;
  CALL(req, flag, status, ierr);
  if (have && *ierr == MPI_SUCCESS && *flag) { MPI_Status st; PMPI_Status_f2c(status, &st); rm_rq_done(&e, &st); }
  DONE(OP_MPI_Test, 0);
}
FEXPORT(mpi_test, MPI_TEST)

/* n Fortran requests: look up the tracked ones before completion */
typedef struct { rm_rq_t *e; char *has; F *st; int k; } fmulti_t;
static void fmulti_get(fmulti_t *m, int n, const F *reqs, F *statuses) {
  m->e = NULL; m->has = NULL; m->st = statuses; m->k = 0;
  if (!rm_rq_count || n <= 0) return;
  m->e = malloc(sizeof(rm_rq_t) * (size_t)n);
  m->has = calloc((size_t)n, 1);
  if (!m->e || !m->has) { free(m->e); free(m->has); m->e = NULL; m->has = NULL; return; }
  for (int i = 0; i < n; i++) m->k += (m->has[i] = (char)rm_rq_get(PMPI_Request_f2c(reqs[i]), &m->e[i]));
  if (m->k && statuses == MPI_F_STATUSES_IGNORE) m->st = malloc(sizeof(F) * (size_t)n * MPI_F_STATUS_SIZE);
  if (!m->st) m->st = statuses;
}
static void fmulti_done(fmulti_t *m, int i, int slot) {
  if (!m->has || !m->has[i] || m->st == MPI_F_STATUSES_IGNORE) return;
  MPI_Status st;
  PMPI_Status_f2c(m->st + (size_t)slot * MPI_F_STATUS_SIZE, &st);
  rm_rq_done(&m->e[i], &st);
}
static void fmulti_free(fmulti_t *m, F *statuses) {
  if (m->st != statuses) free(m->st);
  free(m->e); free(m->has);
}

void rmf_mpi_waitall(F *count, F *reqs, F *statuses, F *ierr) {
  REAL(mpi_waitall)
  if (!RM_CAPTURE) { CALL(count, reqs, statuses, ierr); return; }
  T0;
  fmulti_t m;
  fmulti_get(&m, *count, reqs, statuses);
  CALL(count, reqs, m.st, ierr);
  if (*ierr == MPI_SUCCESS) for (int i = 0; i < *count; i++) fmulti_done(&m, i, i);
  fmulti_free(&m, statuses);
  DONE(OP_MPI_Waitall, 0);
}
FEXPORT(mpi_waitall, MPI_WAITALL)

void rmf_mpi_testall(F *count, F *reqs, F *flag, F *statuses, F *ierr) {
  REAL(mpi_testall)
  if (!RM_CAPTURE) { CALL(count, reqs, flag, statuses, ierr); return; }
  T0;
  fmulti_t m;
  fmulti_get(&m, *count, reqs, statuses);
  CALL(count, reqs, flag, m.st, ierr);
  if (*ierr == MPI_SUCCESS && *flag) for (int i = 0; i < *count; i++) fmulti_done(&m, i, i);
  fmulti_free(&m, statuses);
  DONE(OP_MPI_Testall, 0);
}
FEXPORT(mpi_testall, MPI_TESTALL)

void rmf_mpi_waitany(F *count, F *reqs, F *idx, F *status, F *ierr) {
  REAL(mpi_waitany)
  if (!RM_CAPTURE) { CALL(count, reqs, idx, status, ierr); return; }
  T0;
  fmulti_t m;
  F tmp[MPI_F_STATUS_SIZE + 2];
  fmulti_get(&m, *count, reqs, MPI_F_STATUSES_IGNORE);
  if (m.st != MPI_F_STATUSES_IGNORE) free(m.st);
  m.st = (m.k && status == MPI_F_STATUS_IGNORE) ? tmp : status;
  CALL(count, reqs, idx, m.st, ierr);
  if (*ierr == MPI_SUCCESS && *idx != MPI_UNDEFINED && *idx >= 1) fmulti_done(&m, *idx - 1, 0);
  free(m.e); free(m.has);
  DONE(OP_MPI_Waitany, 0);
}
FEXPORT(mpi_waitany, MPI_WAITANY)

void rmf_mpi_testany(F *count, F *reqs, F *idx, F *flag, F *status, F *ierr) {
  REAL(mpi_testany)
  if (!RM_CAPTURE) { CALL(count, reqs, idx, flag, status, ierr); return; }
  T0;
  fmulti_t m;
  F tmp[MPI_F_STATUS_SIZE + 2];
  fmulti_get(&m, *count, reqs, MPI_F_STATUSES_IGNORE);
  if (m.st != MPI_F_STATUSES_IGNORE) free(m.st);
  m.st = (m.k && status == MPI_F_STATUS_IGNORE) ? tmp : status;
  CALL(count, reqs, idx, flag, m.st, ierr);
  if (*ierr == MPI_SUCCESS && *flag && *idx != MPI_UNDEFINED && *idx >= 1) fmulti_done(&m, *idx - 1, 0);
  free(m.e); free(m.has);
  DONE(OP_MPI_Testany, 0);
}
FEXPORT(mpi_testany, MPI_TESTANY)

#define F_SOME(name, NAME, Op)                                                          \
  void rmf_##name(F *count, F *reqs, F *outcount, F *idx, F *statuses, F *ierr) {       \
    REAL(name)                                                                          \
    if (!RM_CAPTURE) { CALL(count, reqs, outcount, idx, statuses, ierr); return; }     \
    T0;                                                                                 \
    fmulti_t m;                                                                         \
    fmulti_get(&m, *count, reqs, statuses);                                             \
    CALL(count, reqs, outcount, idx, m.st, ierr);                                       \
    if (*ierr == MPI_SUCCESS && *outcount != MPI_UNDEFINED)                             \
      for (int j = 0; j < *outcount; j++) fmulti_done(&m, idx[j] - 1, j);               \
    fmulti_free(&m, statuses);                                                          \
    DONE(Op, 0);                                                                        \
  }                                                                                     \
  FEXPORT(name, NAME)
F_SOME(mpi_waitsome, MPI_WAITSOME, OP_MPI_Waitsome)
F_SOME(mpi_testsome, MPI_TESTSOME, OP_MPI_Testsome)

/* ---- collectives (counts taken from the receive side where MPI_IN_PLACE may hide the send side) ---- */

#define F_COLL(name, NAME, Op, params, acc, ...)                    \
  void rmf_##name params {                                          \
    REAL(name)                                                      \
    if (!RM_CAPTURE) { CALL(__VA_ARGS__); return; }                 \
    T0;                                                             \
    uint64_t n = acc;                                               \
    CALL(__VA_ARGS__);                                              \
    DONE(Op, n);                                                    \
  }                                                                 \
  FEXPORT(name, NAME)

F_COLL(mpi_bcast, MPI_BCAST, OP_MPI_Bcast, (void *b, F *c, F *t, F *root, F *comm, F *ierr),
       rm_acc_bcast(OP_MPI_Bcast, b, *c, C_TYPE(t), *root, C_COMM(comm)), b, c, t, root, comm, ierr)
F_COLL(mpi_reduce, MPI_REDUCE, OP_MPI_Reduce, (void *s, void *r, F *c, F *t, F *op, F *root, F *comm, F *ierr),
       rm_acc_reduce(OP_MPI_Reduce, s, *c, C_TYPE(t), *root, C_COMM(comm)), s, r, c, t, op, root, comm, ierr)
F_COLL(mpi_allreduce, MPI_ALLREDUCE, OP_MPI_Allreduce, (void *s, void *r, F *c, F *t, F *op, F *comm, F *ierr),
       rm_acc_allreduce(OP_MPI_Allreduce, r, *c, C_TYPE(t), C_COMM(comm)), s, r, c, t, op, comm, ierr)
F_COLL(mpi_gather, MPI_GATHER, OP_MPI_Gather, (void *s, F *sc, F *st, void *r, F *rc, F *rt, F *root, F *comm, F *ierr),
       rm_acc_gather(OP_MPI_Gather, s, *sc, C_TYPE(st), *rc, C_TYPE(rt), *root, C_COMM(comm)), s, sc, st, r, rc, rt, root, comm, ierr)
F_COLL(mpi_gatherv, MPI_GATHERV, OP_MPI_Gatherv, (void *s, F *sc, F *st, void *r, F *rcs, F *d, F *rt, F *root, F *comm, F *ierr),
       rm_acc_gatherv(OP_MPI_Gatherv, s, *sc, C_TYPE(st), rcs, C_TYPE(rt), *root, C_COMM(comm)), s, sc, st, r, rcs, d, rt, root, comm, ierr)
F_COLL(mpi_scatter, MPI_SCATTER, OP_MPI_Scatter, (void *s, F *sc, F *st, void *r, F *rc, F *rt, F *root, F *comm, F *ierr),
       rm_acc_scatter(OP_MPI_Scatter, s, *sc, C_TYPE(st), *rc, C_TYPE(rt), *root, C_COMM(comm)), s, sc, st, r, rc, rt, root, comm, ierr)
F_COLL(mpi_scatterv, MPI_SCATTERV, OP_MPI_Scatterv, (void *s, F *scs, F *d, F *st, void *r, F *rc, F *rt, F *root, F *comm, F *ierr),
       rm_acc_scatterv(OP_MPI_Scatterv, s, scs, C_TYPE(st), *rc, C_TYPE(rt), *root, C_COMM(comm)), s, scs, d, st, r, rc, rt, root, comm, ierr)
F_COLL(mpi_allgather, MPI_ALLGATHER, OP_MPI_Allgather, (void *s, F *sc, F *st, void *r, F *rc, F *rt, F *comm, F *ierr),
       rm_acc_allgather(OP_MPI_Allgather, r, *rc, C_TYPE(rt), C_COMM(comm)), s, sc, st, r, rc, rt, comm, ierr)
F_COLL(mpi_allgatherv, MPI_ALLGATHERV, OP_MPI_Allgatherv, (void *s, F *sc, F *st, void *r, F *rcs, F *d, F *rt, F *comm, F *ierr),
       rm_acc_allgatherv(OP_MPI_Allgatherv, r, rcs, C_TYPE(rt), C_COMM(comm)), s, sc, st, r, rcs, d, rt, comm, ierr)
F_COLL(mpi_alltoall, MPI_ALLTOALL, OP_MPI_Alltoall, (void *s, F *sc, F *st, void *r, F *rc, F *rt, F *comm, F *ierr),
       rm_acc_alltoall(OP_MPI_Alltoall, s, *rc, C_TYPE(rt), C_COMM(comm)), s, sc, st, r, rc, rt, comm, ierr)
F_COLL(mpi_alltoallv, MPI_ALLTOALLV, OP_MPI_Alltoallv, (void *s, F *scs, F *sd, F *st, void *r, F *rcs, F *rd, F *rt, F *comm, F *ierr),
       rm_acc_alltoallv(OP_MPI_Alltoallv, s, scs, C_TYPE(st), rcs, C_TYPE(rt), C_COMM(comm)), s, scs, sd, st, r, rcs, rd, rt, comm, ierr)
F_COLL(mpi_reduce_scatter, MPI_REDUCE_SCATTER, OP_MPI_Reduce_scatter, (void *s, void *r, F *rcs, F *t, F *op, F *comm, F *ierr),
       rm_acc_reduce_scatter(OP_MPI_Reduce_scatter, s, rcs, C_TYPE(t), C_COMM(comm)), s, r, rcs, t, op, comm, ierr)
F_COLL(mpi_reduce_scatter_block, MPI_REDUCE_SCATTER_BLOCK, OP_MPI_Reduce_scatter_block, (void *s, void *r, F *rc, F *t, F *op, F *comm, F *ierr),
       rm_acc_reduce_scatter_block(OP_MPI_Reduce_scatter_block, s, *rc, C_TYPE(t), C_COMM(comm)), s, r, rc, t, op, comm, ierr)
F_COLL(mpi_scan, MPI_SCAN, OP_MPI_Scan, (void *s, void *r, F *c, F *t, F *op, F *comm, F *ierr),
       rm_acc_scan(OP_MPI_Scan, s, *c, C_TYPE(t), C_COMM(comm)), s, r, c, t, op, comm, ierr)
F_COLL(mpi_exscan, MPI_EXSCAN, OP_MPI_Exscan, (void *s, void *r, F *c, F *t, F *op, F *comm, F *ierr),
       rm_acc_scan(OP_MPI_Exscan, s, *c, C_TYPE(t), C_COMM(comm)), s, r, c, t, op, comm, ierr)
F_COLL(mpi_barrier, MPI_BARRIER, OP_MPI_Barrier, (F *comm, F *ierr),
       rm_acc_barrier(OP_MPI_Barrier, C_COMM(comm)), comm, ierr)

/* ---- one-sided ------------------------------------------------------------------------------------ */

F_COLL(mpi_put, MPI_PUT, OP_MPI_Put, (void *o, F *oc, F *ot, F *tr, MPI_Aint *td, F *tc, F *tt, F *win, F *ierr),
       rm_acc_rma(OP_MPI_Put, o, rm_tsz(C_TYPE(ot), *oc), NULL, 0, *tr, PMPI_Win_f2c(*win)), o, oc, ot, tr, td, tc, tt, win, ierr)
F_COLL(mpi_get, MPI_GET, OP_MPI_Get, (void *o, F *oc, F *ot, F *tr, MPI_Aint *td, F *tc, F *tt, F *win, F *ierr),
       rm_acc_rma(OP_MPI_Get, NULL, 0, o, rm_tsz(C_TYPE(ot), *oc), *tr, PMPI_Win_f2c(*win)), o, oc, ot, tr, td, tc, tt, win, ierr)
F_COLL(mpi_accumulate, MPI_ACCUMULATE, OP_MPI_Accumulate, (void *o, F *oc, F *ot, F *tr, MPI_Aint *td, F *tc, F *tt, F *op, F *win, F *ierr),
       rm_acc_rma(OP_MPI_Accumulate, o, rm_tsz(C_TYPE(ot), *oc), NULL, 0, *tr, PMPI_Win_f2c(*win)), o, oc, ot, tr, td, tc, tt, op, win, ierr)
