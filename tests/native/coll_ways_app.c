/* coll_ways_app.c -- collectives that alternate their arguments, counted exactly and remembered.
 *
 * A thread remembers its collective signatures in sets of ways (shim_core.h, rm_coll_memo_t):
 * codes that alternate two, three or eight signatures of one operation must find them all there
 * (its class set and the hashed sets), and every
 * call must still reach the record in its round's timeline buckets.  ROUNDS rounds, 250 ms apart
 * (run with RANKMAP_BUCKET_MS=10: each round in buckets of its own, far from the next round's),
 * each of five phases of N pairs of calls, the two signatures of a pair alternating call by call,
 * a sixth of N triples and a seventh of N runs of eight:
 *   counts  MPI_Allreduce of 1 double and of 2 doubles on MPI_COMM_WORLD (one operation)
 *   collide MPI_Allreduce of 3 doubles and MPI_Scan of 1 double (operations whose numbers are
 *           equal mod 4: one set)
 *   comms   MPI_Allreduce of 4 doubles on MPI_COMM_WORLD and on a duplicate
 *   bcast   MPI_Bcast of 1 int from root 0 and MPI_Barrier (equal mod 4 too)
 *   self    MPI_Allreduce of 1 double on MPI_COMM_SELF and on a duplicate of it (no facts: the
 *           arguments alone are remembered)
 *   three   MPI_Allreduce of 5, of 6 and of 7 doubles in turn (three signatures of one set)
 *   eight   MPI_Allreduce of 8, 9, ..., 15 doubles in turn (a molecular-dynamics step's reductions:
 *           more signatures of one operation than its class set holds)
 * Exits with 2 if a result is wrong.  Run on 2 or more ranks. */
#include <mpi.h>
#include <time.h>

#define ROUNDS 6
#define N 20

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, p, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm dup, self2;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_dup(MPI_COMM_SELF, &self2);
  double one[15] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, sum[15];
  for (int r = 0; r < ROUNDS; r++) {
    for (int k = 0; k < N; k++) {
      MPI_Allreduce(one, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      bad |= sum[0] != p;
      MPI_Allreduce(one, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      bad |= sum[1] != p;
    }
    for (int k = 0; k < N; k++) {
      MPI_Allreduce(one, sum, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      bad |= sum[2] != p;
      MPI_Scan(one, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      bad |= sum[0] != me + 1;
    }
    for (int k = 0; k < N; k++) {
      MPI_Allreduce(one, sum, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      bad |= sum[3] != p;
      MPI_Allreduce(one, sum, 4, MPI_DOUBLE, MPI_SUM, dup);
      bad |= sum[3] != p;
    }
    for (int k = 0; k < N; k++) {
      int v = me == 0 ? r + k : -1;
      MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD);
      bad |= v != r + k;
      MPI_Barrier(MPI_COMM_WORLD);
    }
    for (int k = 0; k < N; k++) {
      MPI_Allreduce(one, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_SELF);
      MPI_Allreduce(one, sum + 1, 1, MPI_DOUBLE, MPI_SUM, self2);
      bad |= sum[0] != 1 || sum[1] != 1;
    }
    for (int k = 0; k < N; k++)
      for (int c = 5; c <= 7; c++) {
        MPI_Allreduce(one, sum, c, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        bad |= sum[c - 1] != p;
      }
    for (int k = 0; k < N; k++)
      for (int c = 8; c <= 15; c++) {
        MPI_Allreduce(one, sum, c, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        bad |= sum[c - 1] != p;
      }
    struct timespec t = {0, 250 * 1000000L};
    nanosleep(&t, NULL);
  }
  MPI_Comm_free(&self2);
  MPI_Comm_free(&dup);
  MPI_Finalize();
  return bad ? 2 : 0;
}
