/* recv_edge_app.c -- receives the shim must count exactly, in orders and shapes that step off its
 * fast path (requests completed in posting order).  Two ranks, each the other's peer q; every
 * pattern is done by both at once.
 * usage: recv_edge_app [multiple]   (multiple: MPI_Init_thread(MPI_THREAD_MULTIPLE))
 *
 * Receives from q (operation MPI_Irecv unless said), bytes / messages:
 *   A  8 receives completed by one MPI_Waitall in reverse posting order, 10*(k+1) B     360 / 8
 *   B  MPI_ANY_SOURCE, posted 1000 B, 7 B arrive                                         7 / 1
 *   C  MPI_PROC_NULL + MPI_Wait                                                          0 / 0
 *   D  MPI_Testany, MPI_Testsome, MPI_Waitany, MPI_Waitsome: 4 receives of 3 B each and
 *      one from MPI_PROC_NULL per call, called until all are done                      48 / 16
 *   E  3000 receives pending at once, 1 B each, MPI_Waitall(MPI_STATUSES_IGNORE)     3000 / 3000
 *   F  one receive pending throughout (5 B, matched at the end) while 2500 others of
 *      2 B are posted and completed one by one                                      5005 / 2501
 *   G  MPI_Waitall over 4 sends, then 4 receives (6 B each)                             24 / 4
 *   H  MPI_Testall before anything was sent (flag 0), then MPI_Waitall, 9 B each        18 / 2
 *   I  a receive cancelled (MPI_Cancel + MPI_Wait): no row                               0 / 0
 *   J  3 rounds of MPI_Waitall over a persistent receive (MPI_Recv_init, 4 B) and an
 *      MPI_Irecv (4 B)                                                      Irecv 12 / 3, Recv_init 12 / 3
 *   K  30 rounds of 300 receives of 1 B completed by one MPI_Waitall (windows that go round the end
 *      of the shim's receive log)                                                     9000 / 9000
 * Exits with 2 if the library did not do as meant (H's flag set, I not cancelled).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char sb[4096], rb[4096];

static void send_n(int n, int bytes, int q, int tag) {
  for (int k = 0; k < n; k++) MPI_Send(sb, bytes, MPI_CHAR, q, tag, MPI_COMM_WORLD);
}

/* D: one of the four "some/any" completion calls until every request is done */
static void some_any(int which, int q) {
  MPI_Request rq[5];
  int tag = 300 + which;
  for (int k = 0; k < 4; k++) MPI_Irecv(rb + 8 * k, 3, MPI_CHAR, q, tag, MPI_COMM_WORLD, &rq[k]);
  MPI_Irecv(rb + 64, 3, MPI_CHAR, MPI_PROC_NULL, tag, MPI_COMM_WORLD, &rq[4]);
  send_n(4, 3, q, tag);
  int left = 5;
  while (left > 0) {
    int idx, flag = 0, out = 0, ids[5];
    MPI_Status st[5];
    switch (which) {
    case 0: MPI_Testany(5, rq, &idx, &flag, &st[0]); if (flag && idx != MPI_UNDEFINED) left--; break;
    case 1: MPI_Testsome(5, rq, &out, ids, st); if (out != MPI_UNDEFINED) left -= out; break;
    case 2: MPI_Waitany(5, rq, &idx, MPI_STATUS_IGNORE); if (idx != MPI_UNDEFINED) left--; break;
    default: MPI_Waitsome(5, rq, &out, ids, MPI_STATUSES_IGNORE); if (out != MPI_UNDEFINED) left -= out;
    }
    if (out == MPI_UNDEFINED || (which == 2 && idx == MPI_UNDEFINED)) break;
  }
}

int main(int argc, char **argv) {
  int provided = 0;
  if (argc > 1 && !strcmp(argv[1], "multiple")) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  else MPI_Init(&argc, &argv);
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  int q = 1 - r;
  static MPI_Request rq[3000];
  MPI_Request sq[3000];
  MPI_Status st;

  /* A: reverse order */
  for (int k = 0; k < 8; k++) MPI_Irecv(rb + 64 * k, 10 * (k + 1), MPI_CHAR, q, 100 + k, MPI_COMM_WORLD, &rq[7 - k]);
  for (int k = 0; k < 8; k++) MPI_Isend(sb, 10 * (k + 1), MPI_CHAR, q, 100 + k, MPI_COMM_WORLD, &sq[k]);
  MPI_Waitall(8, rq, MPI_STATUSES_IGNORE);
  MPI_Waitall(8, sq, MPI_STATUSES_IGNORE);

  /* B: wildcard, short */
  MPI_Irecv(rb, 1000, MPI_CHAR, MPI_ANY_SOURCE, 200, MPI_COMM_WORLD, &rq[0]);
  MPI_Send(sb, 7, MPI_CHAR, q, 200, MPI_COMM_WORLD);
  MPI_Wait(&rq[0], MPI_STATUS_IGNORE);

  /* C: PROC_NULL */
  MPI_Irecv(rb, 10, MPI_CHAR, MPI_PROC_NULL, 250, MPI_COMM_WORLD, &rq[0]);
  MPI_Wait(&rq[0], &st);

  /* D */
  for (int w = 0; w < 4; w++) some_any(w, q);

  /* E: many pending */
  for (int k = 0; k < 3000; k++) MPI_Irecv(rb + k, 1, MPI_CHAR, q, 400, MPI_COMM_WORLD, &rq[k]);
  for (int k = 0; k < 3000; k++) MPI_Isend(sb, 1, MPI_CHAR, q, 400, MPI_COMM_WORLD, &sq[k]);
  MPI_Waitall(3000, rq, MPI_STATUSES_IGNORE);
  MPI_Waitall(3000, sq, MPI_STATUSES_IGNORE);

  /* F: one long-lived receive under churn */
  MPI_Request longlived;
  MPI_Irecv(rb + 3000, 5, MPI_CHAR, q, 500, MPI_COMM_WORLD, &longlived);
  for (int k = 0; k < 2500; k++) {
    MPI_Irecv(rb, 2, MPI_CHAR, q, 501, MPI_COMM_WORLD, &rq[0]);
    MPI_Send(sb, 2, MPI_CHAR, q, 501, MPI_COMM_WORLD);
    MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
  }
  MPI_Send(sb, 5, MPI_CHAR, q, 500, MPI_COMM_WORLD);
  MPI_Wait(&longlived, MPI_STATUS_IGNORE);

  /* G: sends first in the array */
  for (int k = 0; k < 4; k++) MPI_Irecv(rb + 8 * k, 6, MPI_CHAR, q, 600, MPI_COMM_WORLD, &rq[4 + k]);
  for (int k = 0; k < 4; k++) MPI_Isend(sb, 6, MPI_CHAR, q, 600, MPI_COMM_WORLD, &rq[k]);
  MPI_Status sts[8];
  MPI_Waitall(8, rq, sts);

  /* H: Testall before anything was sent */
  int flag = 1;
  for (int k = 0; k < 2; k++) MPI_Irecv(rb + 16 * k, 9, MPI_CHAR, q, 700, MPI_COMM_WORLD, &rq[k]);
  MPI_Testall(2, rq, &flag, MPI_STATUSES_IGNORE);
  if (flag) { fprintf(stderr, "recv_edge_app: MPI_Testall completed receives nobody sent\n"); return 2; }
  MPI_Barrier(MPI_COMM_WORLD);
  send_n(2, 9, q, 700);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);

  /* I: cancelled */
  MPI_Irecv(rb, 10, MPI_CHAR, q, 800, MPI_COMM_WORLD, &rq[0]);
  MPI_Cancel(&rq[0]);
  MPI_Wait(&rq[0], &st);
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  if (!cancelled) { fprintf(stderr, "recv_edge_app: the receive was not cancelled\n"); return 2; }
  MPI_Barrier(MPI_COMM_WORLD);

  /* J: persistent and nonblocking in one array */
  MPI_Request pj[2];
  MPI_Recv_init(rb, 4, MPI_CHAR, q, 900, MPI_COMM_WORLD, &pj[0]);
  for (int k = 0; k < 3; k++) {
    MPI_Start(&pj[0]);
    MPI_Irecv(rb + 8, 4, MPI_CHAR, q, 901, MPI_COMM_WORLD, &pj[1]);
    MPI_Send(sb, 4, MPI_CHAR, q, 900, MPI_COMM_WORLD);
    MPI_Send(sb, 4, MPI_CHAR, q, 901, MPI_COMM_WORLD);
    MPI_Waitall(2, pj, MPI_STATUSES_IGNORE);
  }
  MPI_Request_free(&pj[0]);

  /* K: windows round the end of the log */
  for (int round = 0; round < 30; round++) {
    for (int k = 0; k < 300; k++) MPI_Irecv(rb + k, 1, MPI_CHAR, q, 1000, MPI_COMM_WORLD, &rq[k]);
    for (int k = 0; k < 300; k++) MPI_Isend(sb, 1, MPI_CHAR, q, 1000, MPI_COMM_WORLD, &sq[k]);
    MPI_Waitall(300, rq, MPI_STATUSES_IGNORE);
    MPI_Waitall(300, sq, MPI_STATUSES_IGNORE);
  }

  MPI_Finalize();
  return 0;
}
