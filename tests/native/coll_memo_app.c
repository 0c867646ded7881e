/* coll_memo_app.c -- collective calls the shim holds in a thread's memory before its table.
 *
 * A thread's repeated collective (same arguments) is counted in the thread's own entry and added
 * to the shared table when its timeline bucket changes, when another signature takes the entry,
 * or when the record is flushed.  Each phase checks one of those ways out:
 *   A. MPI_Allreduce of 1 int over MPI_COMM_WORLD in three groups of 3, 4 and 5 calls, each group
 *      after a sleep of 250 ms (RANKMAP_BUCKET_MS=100: a new bucket each); inside the second group
 *      two calls of 2 ints take the entry and give it back (so the first signature's group counts
 *      1 + 3 = 4 and the second signature 2);
 *   B. a thread of its own makes 7 MPI_Bcast of 1 int through a duplicate of MPI_COMM_WORLD and
 *      exits; the main thread waits for it (MPI_THREAD_SERIALIZED) and makes no further Bcast;
 *   C. with argument "crash": 9 MPI_Reduce of 1 int to root 0, a sleep of 3 flush intervals
 *      (RANKMAP_FLUSH_MS=100), then every rank exits without MPI_Finalize (exit code 3).
 * Run on 2 or more ranks. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static MPI_Comm twin;

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static void *bcasts(void *arg) {
  (void)arg;
  int v = 1;
  for (int i = 0; i < 7; i++) MPI_Bcast(&v, 1, MPI_INT, 0, twin);
  return NULL;
}

int main(int argc, char **argv) {
  int provided, me;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int in[2] = {1, 2}, out[2];

  /* A */
  const int group[3] = {3, 4, 5};
  for (int g = 0; g < 3; g++) {
    MPI_Barrier(MPI_COMM_WORLD);
    sleep_ms(250);
    for (int i = 0; i < group[g]; i++) {
      MPI_Allreduce(in, out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      if (g == 1 && i == 0) {
        MPI_Allreduce(in, out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(in, out, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      }
    }
  }

  /* B */
  MPI_Comm_dup(MPI_COMM_WORLD, &twin);
  if (provided >= MPI_THREAD_SERIALIZED) {
    pthread_t t;
    pthread_create(&t, NULL, bcasts, NULL);
    pthread_join(t, NULL);
  } else {
    bcasts(NULL);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* C */
  if (argc > 1 && strcmp(argv[1], "crash") == 0) {
    for (int i = 0; i < 9; i++) MPI_Reduce(in, out, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    sleep_ms(300);
    printf("exit without finalize\n");
    fflush(stdout);
    _exit(3);
  }
  MPI_Comm_free(&twin);
  if (me == 0) printf("done (thread level %d)\n", provided);
  MPI_Finalize();
  return 0;
}
