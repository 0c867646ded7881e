/*
 * shim_core.h -- internals shared by the rankmap PMPI shim's translation units:
 * capture state, communicator/window rank translation, request tracking, memory kind,
 * and the accounting helpers that both the C and the Fortran wrappers call.
 */
#ifndef RANKMAP_SHIM_CORE_H
#define RANKMAP_SHIM_CORE_H

#include <mpi.h>
#include <stdint.h>
#include "rmrec.h"

#define RM_TLS __thread __attribute__((tls_model("initial-exec")))

/* Everything declared below is internal to the shim: hidden, so it is reached without the GOT or
 * PLT (the MPI_ and Fortran entry points keep the default visibility mpi.h gives them). */
#pragma GCC visibility push(hidden)

/* Every operation name the shim records; the id of OP_x equals its rmrec id. */
#define RM_OPS(X) \
  X(MPI_Send) X(MPI_Bsend) X(MPI_Ssend) X(MPI_Rsend) \
  X(MPI_Isend) X(MPI_Ibsend) X(MPI_Issend) X(MPI_Irsend) \
  X(MPI_Recv) X(MPI_Irecv) X(MPI_Sendrecv) X(MPI_Sendrecv_replace) \
  X(MPI_Send_init) X(MPI_Bsend_init) X(MPI_Ssend_init) X(MPI_Rsend_init) X(MPI_Recv_init) \
  X(MPI_Start) X(MPI_Startall) X(MPI_Request_free) \
  X(MPI_Wait) X(MPI_Waitall) X(MPI_Waitany) X(MPI_Waitsome) \
  X(MPI_Test) X(MPI_Testall) X(MPI_Testany) X(MPI_Testsome) \
  X(MPI_Bcast) X(MPI_Reduce) X(MPI_Allreduce) X(MPI_Gather) X(MPI_Gatherv) \
  X(MPI_Scatter) X(MPI_Scatterv) X(MPI_Allgather) X(MPI_Allgatherv) \
  X(MPI_Alltoall) X(MPI_Alltoallv) X(MPI_Alltoallw) X(MPI_Reduce_scatter) \
  X(MPI_Reduce_scatter_block) X(MPI_Scan) X(MPI_Exscan) X(MPI_Barrier) \
  X(MPI_Ibcast) X(MPI_Ireduce) X(MPI_Iallreduce) X(MPI_Igather) X(MPI_Igatherv) \
  X(MPI_Iscatter) X(MPI_Iscatterv) X(MPI_Iallgather) X(MPI_Iallgatherv) \
  X(MPI_Ialltoall) X(MPI_Ialltoallv) X(MPI_Ialltoallw) X(MPI_Ireduce_scatter) \
  X(MPI_Ireduce_scatter_block) X(MPI_Iscan) X(MPI_Iexscan) X(MPI_Ibarrier) \
  X(MPI_Bcast_init) X(MPI_Reduce_init) X(MPI_Allreduce_init) X(MPI_Gather_init) X(MPI_Gatherv_init) \
  X(MPI_Scatter_init) X(MPI_Scatterv_init) X(MPI_Allgather_init) X(MPI_Allgatherv_init) \
  X(MPI_Alltoall_init) X(MPI_Alltoallv_init) X(MPI_Alltoallw_init) X(MPI_Reduce_scatter_init) \
  X(MPI_Reduce_scatter_block_init) X(MPI_Scan_init) X(MPI_Exscan_init) X(MPI_Barrier_init) \
  X(MPI_Neighbor_allgather) X(MPI_Neighbor_allgatherv) X(MPI_Neighbor_alltoall) \
  X(MPI_Neighbor_alltoallv) X(MPI_Neighbor_alltoallw) \
  X(MPI_Ineighbor_allgather) X(MPI_Ineighbor_allgatherv) X(MPI_Ineighbor_alltoall) \
  X(MPI_Ineighbor_alltoallv) X(MPI_Ineighbor_alltoallw) \
  X(MPI_Put) X(MPI_Get) X(MPI_Accumulate) X(MPI_Get_accumulate) X(MPI_Fetch_and_op) \
  X(MPI_Compare_and_swap) X(MPI_Rput) X(MPI_Rget) X(MPI_Raccumulate) X(MPI_Rget_accumulate)

enum {
#define RM_ENUM(n) OP_##n,
  RM_OPS(RM_ENUM)
#undef RM_ENUM
  OP__COUNT
};

/* Capture state.  rm_on: capture active (Init done, RANKMAP_RUN_DIR set, not finalized).
 * rm_single: the MPI library provides less than MPI_THREAD_MULTIPLE, so MPI calls never overlap
 * and the shim's counters and request table need no locked instructions.
 * Per thread, in one block (one TLS base for all three):
 *   in_f: inside a Fortran wrapper that already counted; C wrappers then pass through;
 *   rs: row set being filled (persistent requests), see rm_emit;
 *   tick: rmrec_ticks() at entry of the current wrapper (the timeline's time of its rows). */
typedef struct rm_rowset rm_rowset_t;
typedef struct { int in_f; rm_rowset_t *rs; uint64_t tick; } rm_tls_t;
extern RM_TLS rm_tls_t rm_t;
#define rm_in_f (rm_t.in_f)
#define rm_rs (rm_t.rs)
#define rm_tick (rm_t.tick)
extern rmrec_t *rm_R;
extern int rm_on, rm_single;
extern int rm_wrank, rm_wsize;
#define RM_CAPTURE (__builtin_expect(rm_on, 1) && !rm_in_f)

/* rank translation of one communicator (or window): world rank of each (remote) rank */
typedef struct { int size, me, inter; int *w; } rm_xl_t;
rm_xl_t *rm_comm_xl(MPI_Comm comm);
rm_xl_t *rm_win_xl(MPI_Win win);
static inline int rm_world(const rm_xl_t *x, int r) {
  if (r < 0 || !x || r >= x->size) return -1;
  return x->w ? x->w[r] : r;
}

void rm_setup(void);      /* after PMPI_Init*: open the writer */
void rm_teardown(void);   /* before PMPI_Finalize: final flush */

int rm_mem(const void *buf);                              /* RMREC_MEM_* */

/* Sizes of the predefined datatypes (never freed, so safe to cache), filled once at setup and
 * read-only afterwards: a hit costs a hash and a compare instead of a PMPI_Type_size call. */
#define RM_TS_SLOTS 128
typedef struct { MPI_Datatype t; int size; } rm_ts_t;
extern rm_ts_t rm_ts_tab[RM_TS_SLOTS];
static inline unsigned rm_ts_slot(MPI_Datatype t) {
  uint64_t k = 0;
  __builtin_memcpy(&k, &t, sizeof t < 8 ? sizeof t : 8);
  return (unsigned)((k * 0x9E3779B97F4A7C15ull) >> 57);   /* 7 bits = RM_TS_SLOTS */
}
static inline uint64_t rm_tsz(MPI_Datatype t, int count) {
  if (count <= 0 || t == MPI_DATATYPE_NULL) return 0;
  const rm_ts_t *e = &rm_ts_tab[rm_ts_slot(t)];
  int s = 0;
  if (e->size > 0 && e->t == t) s = e->size;
  else PMPI_Type_size(t, &s);
  return (uint64_t)(s > 0 ? s : 0) * (uint64_t)count;
}

/* Rows are either recorded at once, or (while rm_rs is set, for persistent requests) stored
 * in a row set that MPI_Start replays. */
typedef struct { int peer, klass, op, mem, dir; uint64_t bytes; } rm_row_t;
struct rm_rowset { int n, cap; int start_op; uint64_t payload; rm_row_t *rows; };
void rm_emit(int peer, int klass, int op, int mem, int dir, uint64_t bytes, uint64_t msgs);
void rm_replay(const rm_rowset_t *rs);
rm_rowset_t *rm_rowset_new(int start_op);
uint64_t rm_start_one(MPI_Request r);   /* counts a persistent send/collective at MPI_Start */

/* request tracking */
enum { RQ_RECV = 1, RQ_PRECV = 2, RQ_PSTART = 3 };
typedef struct { uint64_t key, seq; int kind, op, mem; rm_xl_t *xl; rm_rowset_t *rs; } rm_rq_t;
extern volatile int rm_rq_count;
void rm_rq_put(MPI_Request req, int kind, int op, int mem, rm_xl_t *xl, rm_rowset_t *rs);
int  rm_rq_get(MPI_Request req, rm_rq_t *out);
void rm_rq_del(const rm_rq_t *e);
void rm_rq_done(const rm_rq_t *e, const MPI_Status *st);  /* a tracked request completed */
/* batch forms for the multi-request completions: one lock for n requests */
int  rm_rq_get_n(int n, const MPI_Request *reqs, rm_rq_t *e, char *has);   /* returns # tracked */
void rm_rq_account(const rm_rq_t *e, const MPI_Status *st);               /* count, keep entry */
void rm_rq_release_n(int n, const rm_rq_t *e, const char *sel);           /* drop completed RQ_RECV */

/* accounting: each returns the logical payload in bytes */
uint64_t rm_p2p_send(int op, const void *buf, int count, MPI_Datatype t, int dest, MPI_Comm comm);
uint64_t rm_p2p_recv(int op, int mem, rm_xl_t *xl, const MPI_Status *st);

uint64_t rm_acc_bcast(int op, const void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm);
uint64_t rm_acc_reduce(int op, const void *sbuf, int count, MPI_Datatype t, int root, MPI_Comm comm);
uint64_t rm_acc_allreduce(int op, const void *sbuf, int count, MPI_Datatype t, MPI_Comm comm);
uint64_t rm_acc_gather(int op, const void *sbuf, int scount, MPI_Datatype st, int rcount, MPI_Datatype rt, int root, MPI_Comm comm);
uint64_t rm_acc_gatherv(int op, const void *sbuf, int scount, MPI_Datatype st, const int *rcounts, MPI_Datatype rt, int root, MPI_Comm comm);
uint64_t rm_acc_scatter(int op, const void *sbuf, int scount, MPI_Datatype st, int rcount, MPI_Datatype rt, int root, MPI_Comm comm);
uint64_t rm_acc_scatterv(int op, const void *sbuf, const int *scounts, MPI_Datatype st, int rcount, MPI_Datatype rt, int root, MPI_Comm comm);
uint64_t rm_acc_allgather(int op, const void *sbuf, int rcount, MPI_Datatype rt, MPI_Comm comm);
uint64_t rm_acc_allgatherv(int op, const void *sbuf, const int *rcounts, MPI_Datatype rt, MPI_Comm comm);
uint64_t rm_acc_alltoall(int op, const void *sbuf, int rcount, MPI_Datatype rt, MPI_Comm comm);
uint64_t rm_acc_alltoallv(int op, const void *sbuf, const int *scounts, MPI_Datatype st, const int *rcounts, MPI_Datatype rt, MPI_Comm comm);
uint64_t rm_acc_alltoallw(int op, const void *sbuf, const int *scounts, const MPI_Datatype *sts, const int *rcounts, const MPI_Datatype *rts, MPI_Comm comm);
uint64_t rm_acc_reduce_scatter(int op, const void *sbuf, const int *rcounts, MPI_Datatype t, MPI_Comm comm);
uint64_t rm_acc_reduce_scatter_block(int op, const void *sbuf, int rcount, MPI_Datatype t, MPI_Comm comm);
uint64_t rm_acc_scan(int op, const void *sbuf, int count, MPI_Datatype t, MPI_Comm comm);
uint64_t rm_acc_barrier(int op, MPI_Comm comm);
/* neighbour collectives: kind 0 allgather, 1 allgatherv, 2 alltoall, 3 alltoallv, 4 alltoallw */
uint64_t rm_acc_neighbor(int op, int kind, const void *sbuf, int scount, const int *scounts, MPI_Datatype st,
                         const MPI_Datatype *sts, int rcount, const int *rcounts, MPI_Datatype rt,
                         const MPI_Datatype *rts, MPI_Comm comm);
/* one-sided: origin-side rows (send = origin->target, recv = target->origin) */
uint64_t rm_acc_rma(int op, const void *obuf, uint64_t sent, const void *rbuf, uint64_t got, int target, MPI_Win win);

#pragma GCC visibility pop

#endif
