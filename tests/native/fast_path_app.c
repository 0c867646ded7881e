/* fast_path_app.c -- the traffic the shim's entry points count on their fast path (an untimed
 * MPI_Send, MPI_Isend, MPI_Irecv, MPI_Recv, MPI_Sendrecv(_replace) or collective whose accounting
 * is all cached) and on their full path alike.
 * A test runs it once with every call timed (RANKMAP_SAMPLE=1: no call takes the fast path) and
 * once as usual, with 1 ms timeline buckets, and compares the records.
 *
 * Ring of p >= 2 ranks: nxt = me + 1, prv = me - 1 (mod p).  ROUNDS rounds, 1 ms apart (so the
 * timeline's bucket changes under the cached cells), each:
 *   W  a window of 16 MPI_Irecv from prv and 16 MPI_Isend of 24 B to nxt on MPI_COMM_WORLD, plus
 *      one MPI_Irecv from MPI_PROC_NULL, one MPI_Waitall           Isend 16 x 24 B, Irecv 16 x 24 B
 *   D  the same window of 8 B messages on a duplicate of MPI_COMM_WORLD      Isend / Irecv 16 x 8 B
 *   B  one MPI_Send of 40 B to nxt and an MPI_Recv from prv on the duplicate     Send / Recv 40 B
 *   P  blocking pairs: MPI_Sendrecv of 16 B to nxt from prv on MPI_COMM_WORLD x2 (status ignored),
 *      MPI_Sendrecv_replace of 12 B x2 on a communicator of the ranks in reverse order (status
 *      asked; its ranks must be translated), an MPI_Recv from MPI_PROC_NULL, and an MPI_Send of
 *      20 B to nxt with an MPI_Recv from MPI_ANY_SOURCE (the status names prv)
 *                               Sendrecv 2 x 16 B, Sendrecv_replace 2 x 12 B, Send / Recv 20 B
 *   S  every 4th round, a window of 4 MPI_Irecv / MPI_Isend of 24 B on a split of the duplicate
 *      made that round and freed after it (a new communicator each time: its translation and the
 *      remembered sends must not outlive it)                               Isend / Irecv 4 x 24 B
 *   C  collectives (the fast path of those without per-peer counts), each call R = 4 times in a
 *      row: MPI_Allreduce of 1 double on MPI_COMM_WORLD x3, in place x1, on the duplicate x2, on
 *      MPI_COMM_SELF x1 (no facts); MPI_Iallreduce x1; MPI_Bcast of 2 ints from root r % 2 x2;
 *      MPI_Reduce of 3 ints to root 0 (in place at the root in odd rounds); MPI_Allgather,
 *      MPI_Alltoall of 1 int; MPI_Gather to root 1 and MPI_Scatter from root 0 of 2 ints;
 *      MPI_Reduce_scatter_block of 1 int; MPI_Scan and MPI_Exscan of 1 int; MPI_Barrier x2; and
 *      once every 4th round an MPI_Allreduce on the round's split
 * Then E: ER = 4 rounds of EN = 5 MPI_Allreduce of 2 doubles on MPI_COMM_WORLD, 25 ms apart.
 * Exits with 2 if a message's content or a collective's result is wrong (the shim must not
 * disturb the library).
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 40
#define WIN 16
#define ER 4
#define EN 5

/* C: one round's collectives, each call repeated R times in a row (the first of a repeat may
 * take the full path, the rest the fast path); nonzero if a result is wrong */
#define R 4
static int collectives(int r, int me, int p, MPI_Comm dup) {
  int bad = 0;
  double one = 1, sum = 0;
  for (int k = 0; k < 3 * R; k++) {
    MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    bad |= sum != p;
  }
  for (int k = 0; k < R; k++) {
    sum = 1;
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    bad |= sum != p;
  }
  for (int k = 0; k < 2 * R; k++) MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, dup);
  for (int k = 0; k < R; k++) MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_SELF);
  bad |= sum != 1;
  for (int k = 0; k < R; k++) {
    MPI_Request rq;
    MPI_Iallreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &rq);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    bad |= sum != p;
  }
  int b2[2] = {r, r + 1};
  for (int k = 0; k < 2 * R; k++) MPI_Bcast(b2, 2, MPI_INT, r % 2, MPI_COMM_WORLD);
  bad |= b2[0] != r;
  for (int k = 0; k < R; k++) {
    int v3[3] = {1, 2, 3}, s3[3] = {0, 0, 0};
    if (r % 2 && me == 0) {
      memcpy(s3, v3, sizeof v3);
      MPI_Reduce(MPI_IN_PLACE, s3, 3, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    } else
      MPI_Reduce(v3, s3, 3, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    bad |= me == 0 && s3[2] != 3 * p;
  }
  int mine = me, all[64], two[2] = {me, me}, g[128], sc[128], ones[64], got = 0, u = 1;
  for (int i = 0; i < p; i++) ones[i] = 1;
  for (int k = 0; k < R; k++) {
    MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    bad |= all[p - 1] != p - 1;
  }
  for (int k = 0; k < R; k++) {
    for (int i = 0; i < p; i++) sc[i] = i;
    MPI_Alltoall(sc, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    bad |= all[p - 1] != me;
  }
  for (int k = 0; k < R; k++) {
    MPI_Gather(two, 2, MPI_INT, g, 2, MPI_INT, 1, MPI_COMM_WORLD);
    bad |= me == 1 && g[2 * p - 1] != p - 1;
  }
  for (int k = 0; k < R; k++) {
    for (int i = 0; i < 2 * p; i++) sc[i] = i / 2;
    MPI_Scatter(sc, 2, MPI_INT, two, 2, MPI_INT, 0, MPI_COMM_WORLD);
    bad |= two[1] != me;
  }
  for (int k = 0; k < R; k++) {
    MPI_Reduce_scatter_block(ones, &got, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    bad |= got != p;
  }
  for (int k = 0; k < R; k++) {
    MPI_Scan(&u, &got, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    bad |= got != me + 1;
  }
  for (int k = 0; k < R; k++) {
    MPI_Exscan(&u, &got, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    bad |= me > 0 && got != me;
  }
  for (int k = 0; k < 2 * R; k++) MPI_Barrier(MPI_COMM_WORLD);
  return bad;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int nxt = (me + 1) % p, prv = (me + p - 1) % p, bad = 0;
  MPI_Comm dup, rev;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_split(MPI_COMM_WORLD, 0, p - me, &rev);      /* rank p - 1 - me */
  static char sb[WIN][24], rb[WIN + 1][24], b40[2][40];
  MPI_Request rq[2 * WIN + 1];
  for (int r = 0; r < ROUNDS; r++) {
    for (int k = 0; k < WIN; k++) memset(sb[k], (r + k) & 0x7f, 24);
    /* W: world, 24 B, and a receive from MPI_PROC_NULL in the window */
    for (int k = 0; k < WIN; k++) MPI_Irecv(rb[k], 24, MPI_CHAR, prv, k, MPI_COMM_WORLD, &rq[k]);
    MPI_Irecv(rb[WIN], 24, MPI_CHAR, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &rq[2 * WIN]);
    for (int k = 0; k < WIN; k++) MPI_Isend(sb[k], 24, MPI_CHAR, nxt, k, MPI_COMM_WORLD, &rq[WIN + k]);
    MPI_Waitall(2 * WIN + 1, rq, MPI_STATUSES_IGNORE);
    for (int k = 0; k < WIN; k++) bad |= rb[k][23] != (char)((r + k) & 0x7f);
    /* D: the duplicate, 8 B */
    for (int k = 0; k < WIN; k++) MPI_Irecv(rb[k], 8, MPI_CHAR, prv, k, dup, &rq[k]);
    for (int k = 0; k < WIN; k++) MPI_Isend(sb[k], 8, MPI_CHAR, nxt, k, dup, &rq[WIN + k]);
    MPI_Waitall(2 * WIN, rq, MPI_STATUSES_IGNORE);
    /* B: blocking */
    memset(b40[0], r & 0x7f, 40);
    if (me % 2 == 0) {
      MPI_Send(b40[0], 40, MPI_CHAR, nxt, 99, dup);
      MPI_Recv(b40[1], 40, MPI_CHAR, prv, 99, dup, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(b40[1], 40, MPI_CHAR, prv, 99, dup, MPI_STATUS_IGNORE);
      MPI_Send(b40[0], 40, MPI_CHAR, nxt, 99, dup);
    }
    bad |= b40[1][39] != (char)(r & 0x7f);
    /* P: blocking pairs */
    static char s16[16], r16[16], b12[12], b20[20];
    MPI_Status st;
    for (int k = 0; k < 2; k++) {
      memset(s16, (r + k) & 0x7f, 16);
      MPI_Sendrecv(s16, 16, MPI_CHAR, nxt, 7, r16, 16, MPI_CHAR, prv, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      bad |= r16[15] != (char)((r + k) & 0x7f);
    }
    for (int k = 0; k < 2; k++) {
      memset(b12, me, 12);
      MPI_Sendrecv_replace(b12, 12, MPI_CHAR, p - 1 - nxt, 8, p - 1 - prv, 8, rev, &st);
      bad |= b12[11] != (char)prv || st.MPI_SOURCE != p - 1 - prv;
    }
    MPI_Recv(b20, 20, MPI_CHAR, MPI_PROC_NULL, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (me % 2 == 0) {
      MPI_Send(b40[0], 20, MPI_CHAR, nxt, 9, MPI_COMM_WORLD);
      MPI_Recv(b20, 20, MPI_CHAR, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &st);
    } else {
      MPI_Recv(b20, 20, MPI_CHAR, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &st);
      MPI_Send(b40[0], 20, MPI_CHAR, nxt, 9, MPI_COMM_WORLD);
    }
    bad |= st.MPI_SOURCE != prv || b20[19] != (char)(r & 0x7f);
    /* S: a communicator made and freed this round */
    if (r % 4 == 0) {
      MPI_Comm s;
      MPI_Comm_split(dup, 0, me, &s);
      for (int k = 0; k < 4; k++) MPI_Irecv(rb[k], 24, MPI_CHAR, prv, k, s, &rq[k]);
      for (int k = 0; k < 4; k++) MPI_Isend(sb[k], 24, MPI_CHAR, nxt, k, s, &rq[4 + k]);
      MPI_Waitall(8, rq, MPI_STATUSES_IGNORE);
      double one = 1, sum = 0;
      MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, s);
      bad |= sum != p;
      MPI_Comm_free(&s);
    }
    bad |= collectives(r, me, p, dup);
    usleep(1000);
  }
  /* E: one signature alone, ER rounds of EN calls 25 ms apart: each round's calls in their own
   * timeline bucket, however long the fast path's remembered bucket was current.  An untimed call
   * counts in the bucket its thread saw last, which the flush thread moves on at each boundary:
   * the gap leaves it ~24 ms to wake on a loaded machine (every call timed, the gap alone counts) */
  for (int r = 0; r < ER; r++) {
    double two[2] = {1, 1}, s2[2];
    for (int k = 0; k < EN; k++) MPI_Allreduce(two, s2, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    bad |= s2[1] != p;
    usleep(25000);
  }
  MPI_Comm_free(&dup);
  MPI_Comm_free(&rev);
  MPI_Finalize();
  return bad ? 2 : 0;
}
