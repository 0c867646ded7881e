/* fast_path_app.c -- the traffic the shim's entry points count on their fast path (an untimed
 * MPI_Send, MPI_Isend or MPI_Irecv whose accounting is all cached) and on their full path alike.
 * A test runs it once with every call timed (RANKMAP_SAMPLE=1: no call takes the fast path) and
 * once as usual, with 1 ms timeline buckets, and compares the records.
 *
 * Ring of p >= 2 ranks: nxt = me + 1, prv = me - 1 (mod p).  ROUNDS rounds, 1 ms apart (so the
 * timeline's bucket changes under the cached cells), each:
 *   W  a window of 16 MPI_Irecv from prv and 16 MPI_Isend of 24 B to nxt on MPI_COMM_WORLD, plus
 *      one MPI_Irecv from MPI_PROC_NULL, one MPI_Waitall           Isend 16 x 24 B, Irecv 16 x 24 B
 *   D  the same window of 8 B messages on a duplicate of MPI_COMM_WORLD      Isend / Irecv 16 x 8 B
 *   B  one MPI_Send of 40 B to nxt and an MPI_Recv from prv on the duplicate     Send / Recv 40 B
 *   S  every 4th round, a window of 4 MPI_Irecv / MPI_Isend of 24 B on a split of the duplicate
 *      made that round and freed after it (a new communicator each time: its translation and the
 *      remembered sends must not outlive it)                               Isend / Irecv 4 x 24 B
 * Exits with 2 if a message's content is wrong (the shim must not disturb the library).
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 40
#define WIN 16

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int nxt = (me + 1) % p, prv = (me + p - 1) % p, bad = 0;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
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
    /* S: a communicator made and freed this round */
    if (r % 4 == 0) {
      MPI_Comm s;
      MPI_Comm_split(dup, 0, me, &s);
      for (int k = 0; k < 4; k++) MPI_Irecv(rb[k], 24, MPI_CHAR, prv, k, s, &rq[k]);
      for (int k = 0; k < 4; k++) MPI_Isend(sb[k], 24, MPI_CHAR, nxt, k, s, &rq[4 + k]);
      MPI_Waitall(8, rq, MPI_STATUSES_IGNORE);
      MPI_Comm_free(&s);
    }
    usleep(1000);
  }
  MPI_Comm_free(&dup);
  MPI_Finalize();
  return bad ? 2 : 0;
}
