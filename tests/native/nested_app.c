/* nested_app.c -- completion calls made by the program's own code while the library runs a
 * completion call: a generalized request's query function, an error handler.
 *
 * Two ranks: rank 1 sends 8-byte messages, rank 0 receives them.  A batch is W receives after a
 * generalized request (already complete), completed by MPI_Waitall, MPI_Testall, MPI_Waitsome or
 * MPI_Waitany; the library calls the request's query function inside that call, and the function
 * does one of (NEST_*):
 *   WAIT       MPI_Wait on a receive of the batch (rq[2])
 *   WAITALL    MPI_Waitall on two receives of the batch (rq[2], rq[3])
 *   TEST       MPI_Test on a receive of the batch
 *   WAIT_POST  MPI_Wait on a receive of the batch, then MPI_Irecv of one more message (completed
 *              after the batch)
 *   OUTSIDE    MPI_Wait on a receive posted before the batch but not in it, then MPI_Irecv of one
 *              more message
 * The first four complete a request of the batch behind the library's back: Open MPI 4.1 reads
 * the request array again after the query function and finds it null; MPICH 4.0 keeps its own
 * pointers and fails on the freed request, so `batch` runs them (Open MPI) and `outside` runs
 * OUTSIDE only.  Each batch is followed by ROUNDS windows of W receives completed by MPI_Waitall.
 * `errh` instead: a user error handler, on the communicator and on MPI_COMM_WORLD, that completes
 * with MPI_Wait the receives still pending when the library reports a receive too short for its
 * message (MPICH: MPI_ERR_PENDING after the failed one), in MPI_Waitall, MPI_Testall,
 * MPI_Waitsome, MPI_Wait; each followed by the ordinary windows too.  `multiple`: run under
 * MPI_THREAD_MULTIPLE.  Rank 1 prints "sent <messages> <bytes>", rank 0 "done". */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "windows.h"

#define W 4
#define ROUNDS 5
enum { NEST_WAIT, NEST_WAITALL, NEST_TEST, NEST_WAIT_POST, NEST_OUTSIDE, NEST_KINDS };

static int me;
static long sent_msgs, sent_bytes;
static MPI_Request *nest_rq, outside, extra;
static char extra_buf[8];
static int nest_kind;

static void send(int bytes, int tag, MPI_Comm comm, int to) {
  char b[16] = {0};
  MPI_Send(b, bytes, MPI_BYTE, to, tag, comm);
  sent_msgs++;
  sent_bytes += bytes;
}

static int query_fn(void *x, MPI_Status *st) {
  (void)x;
  if (nest_rq) {                      /* once per batch (MPICH calls it more than once) */
    MPI_Request *rq = nest_rq;
    nest_rq = NULL;
    int flag = 0;
    switch (nest_kind) {
    case NEST_WAIT: MPI_Wait(&rq[2], MPI_STATUS_IGNORE); break;
    case NEST_WAITALL: MPI_Waitall(2, &rq[2], MPI_STATUSES_IGNORE); break;
    case NEST_TEST: while (!flag) MPI_Test(&rq[2], &flag, MPI_STATUS_IGNORE); break;
    case NEST_WAIT_POST:
      MPI_Wait(&rq[2], MPI_STATUS_IGNORE);
      MPI_Irecv(extra_buf, 8, MPI_BYTE, 1, 9, MPI_COMM_WORLD, &extra);
      break;
    case NEST_OUTSIDE:
      MPI_Wait(&outside, MPI_STATUS_IGNORE);
      MPI_Irecv(extra_buf, 8, MPI_BYTE, 1, 9, MPI_COMM_WORLD, &extra);
      break;
    }
  }
  MPI_Status_set_elements(st, MPI_BYTE, 0);
  MPI_Status_set_cancelled(st, 0);
  st->MPI_SOURCE = MPI_UNDEFINED;
  st->MPI_TAG = MPI_UNDEFINED;
  return MPI_SUCCESS;
}
static int free_fn(void *x) { (void)x; return MPI_SUCCESS; }
static int cancel_fn(void *x, int done) { (void)x; (void)done; return MPI_SUCCESS; }

static void ordinary(void) {
  ordinary_windows(me, W, ROUNDS);
  if (me == 1) sent_msgs += W * ROUNDS, sent_bytes += 8 * W * ROUNDS;
}

static void batch(int kind, int call) {
  if (me == 1) {
    if (kind == NEST_OUTSIDE) send(8, 8, MPI_COMM_WORLD, 0);
    for (int k = 0; k < W; k++) send(8, 1 + k, MPI_COMM_WORLD, 0);
    if (kind >= NEST_WAIT_POST) send(8, 9, MPI_COMM_WORLD, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    return;
  }
  char b[W][8], o[8];
  MPI_Request rq[W + 1];
  MPI_Status st[W + 1];
  int flag = 0, out = 0, idx[W + 1], at;
  if (kind == NEST_OUTSIDE) MPI_Irecv(o, 8, MPI_BYTE, 1, 8, MPI_COMM_WORLD, &outside);
  for (int k = 0; k < W; k++) MPI_Irecv(b[k], 8, MPI_BYTE, 1, 1 + k, MPI_COMM_WORLD, &rq[k + 1]);
  MPI_Grequest_start(query_fn, free_fn, cancel_fn, NULL, &rq[0]);
  MPI_Grequest_complete(rq[0]);
  MPI_Barrier(MPI_COMM_WORLD);          /* every message has arrived or is on its way */
  nest_rq = rq;
  nest_kind = kind;
  switch (call) {
  case 0: MPI_Waitall(W + 1, rq, st); break;
  case 1: do MPI_Testall(W + 1, rq, &flag, st); while (!flag); break;
  case 2: MPI_Waitsome(W + 1, rq, &out, idx, st); break;
  case 3: MPI_Waitany(W + 1, rq, &at, st); break;
  }
  nest_rq = NULL;
  for (int k = 0; k <= W; k++)
    if (rq[k] != MPI_REQUEST_NULL) MPI_Wait(&rq[k], MPI_STATUS_IGNORE);
  if (kind >= NEST_WAIT_POST) MPI_Wait(&extra, MPI_STATUS_IGNORE);
}

static MPI_Request *eh_rq;
static void handler(MPI_Comm *comm, int *code, ...) {
  (void)comm; (void)code;
  MPI_Request *rq = eh_rq;
  eh_rq = NULL;
  if (rq)
    for (int k = 0; k < 3; k++)
      if (rq[k] != MPI_REQUEST_NULL) MPI_Wait(&rq[k], MPI_STATUS_IGNORE);
}

static void errh(void) {
  MPI_Comm rev;
  MPI_Errhandler eh;
  MPI_Comm_create_errhandler(handler, &eh);
  MPI_Comm_split(MPI_COMM_WORLD, 0, 1 - me, &rev);     /* rank 0 of rev is world rank 1 */
  MPI_Comm_set_errhandler(rev, eh);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
  for (int c = 0; c < 4; c++) {
    if (me == 1) {
      send(8, 1, rev, 1);
      send(16, 2, rev, 1);             /* too long for its receive */
      send(8, 3, rev, 1);
      MPI_Barrier(MPI_COMM_WORLD);
    } else {
      char b[3][8];
      MPI_Request rq[3];
      MPI_Status st[3];
      int flag = 0, out = 0, idx[3], rc = MPI_SUCCESS;
      for (int k = 0; k < 3; k++) MPI_Irecv(b[k], 8, MPI_BYTE, 0, 1 + k, rev, &rq[k]);
      MPI_Barrier(MPI_COMM_WORLD);
      eh_rq = rq;
      switch (c) {
      case 0: MPI_Waitall(3, rq, st); break;
      case 1: do rc = MPI_Testall(3, rq, &flag, st); while (rc == MPI_SUCCESS && !flag); break;
      case 2: MPI_Waitsome(3, rq, &out, idx, st); break;
      case 3: MPI_Wait(&rq[1], st); break;
      }
      eh_rq = NULL;
      for (int k = 0; k < 3; k++)
        if (rq[k] != MPI_REQUEST_NULL) MPI_Wait(&rq[k], MPI_STATUS_IGNORE);
    }
    ordinary();
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_free(&rev);
  MPI_Errhandler_free(&eh);
}

int main(int argc, char **argv) {
  int provided, multiple = 0, first = NEST_WAIT, eh = 0;
  for (int a = 1; a < argc; a++) {
    multiple |= !strcmp(argv[a], "multiple");
    eh |= !strcmp(argv[a], "errh");
    if (!strcmp(argv[a], "outside")) first = NEST_OUTSIDE;
  }
  MPI_Init_thread(&argc, &argv, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (eh) errh();
  else
    for (int kind = first; kind < NEST_KINDS; kind++)
      for (int call = 0; call < 4; call++) {
        batch(kind, call);
        ordinary();
      }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1) printf("sent %ld %ld\n", sent_msgs, sent_bytes);
  if (me == 0) printf("done\n");
  MPI_Finalize();
  return 0;
}
