/* errors_app.c -- receives that fail under MPI_ERRORS_RETURN, then ordinary traffic.
 *
 * Two ranks.  Rank 1 sends, rank 0 receives.  Each failing round posts receives on a communicator
 * whose ranks run in reverse order, one of them with a buffer too small for its message
 * (MPI_ERR_TRUNCATE), and completes them with one of MPI_Waitall, MPI_Testall, MPI_Waitsome,
 * MPI_Waitany, MPI_Wait; the library reports the error and the other receives complete.  Each
 * round is followed by ROUNDS ordinary windows of W receives on MPI_COMM_WORLD, completed by
 * MPI_Waitall, whose request handles the library takes from the ones just released: a receive
 * the shim did not release after the error would take a later receive's place and count it from
 * the wrong peer.
 * Prints "rc <call> <error class>" per failing round (rank 0) and "done". */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "windows.h"

#define W 4
#define ROUNDS 20

static MPI_Comm rev;
static int me;

/* rank 1: the messages of one failing round: 8, 16 (too long for its receive), 8 bytes, to world
 * rank 0 (rank 1 of rev) */
static void send_failing_round(void) {
  char b[16] = {0};
  MPI_Send(b, 8, MPI_BYTE, 1, 1, rev);
  MPI_Send(b, 16, MPI_BYTE, 1, 2, rev);
  MPI_Send(b, 8, MPI_BYTE, 1, 3, rev);
}

static void report(const char *call, int rc) {
  int cls = rc;
  MPI_Error_class(rc, &cls);
  printf("rc %s %s\n", call, cls == MPI_SUCCESS ? "success" : cls == MPI_ERR_IN_STATUS ? "in_status"
                                 : cls == MPI_ERR_TRUNCATE ? "truncate" : "other");
  fflush(stdout);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_split(MPI_COMM_WORLD, 0, 1 - me, &rev);   /* rank 0 of rev is world rank 1 */
  MPI_Comm_set_errhandler(rev, MPI_ERRORS_RETURN);
  const char *calls[] = {"Waitall", "Testall", "Waitsome", "Waitany", "Wait"};
  for (int c = 0; c < 5; c++) {
    if (me == 1) {
      send_failing_round();
    } else {
      char b[3][8];
      MPI_Request rq[3];
      MPI_Status st[3];
      for (int k = 0; k < 3; k++) MPI_Irecv(b[k], 8, MPI_BYTE, 0, 1 + k, rev, &rq[k]);
      MPI_Barrier(MPI_COMM_WORLD);    /* every message has arrived or is on its way */
      int rc = MPI_SUCCESS, flag = 0, out = 0, idx[3], at;
      switch (c) {
      case 0: rc = MPI_Waitall(3, rq, st); break;
      case 1: do rc = MPI_Testall(3, rq, &flag, st); while (rc == MPI_SUCCESS && !flag); break;
      case 2: rc = MPI_Waitsome(3, rq, &out, idx, st); break;
      case 3: rc = MPI_Waitany(3, rq, &at, st); break;
      case 4: rc = MPI_Wait(&rq[1], st); break;
      }
      report(calls[c], rc);
      /* whatever is still pending completes one by one (each succeeds or has failed already) */
      for (int k = 0; k < 3; k++)
        if (rq[k] != MPI_REQUEST_NULL) MPI_Wait(&rq[k], MPI_STATUS_IGNORE);
    }
    if (me == 1) MPI_Barrier(MPI_COMM_WORLD);
    ordinary_windows(me, W, ROUNDS);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) printf("done\n");
  MPI_Comm_free(&rev);
  MPI_Finalize();
  return 0;
}
