/* A slow first call: rank 1 sleeps SLEEP_MS before its first MPI call, so rank 0's first call after
 * MPI_Init (an MPI_Barrier) waits that long; then N quick barriers.  The shim times a thread's first
 * call for certain, so it must count it once (weight 1), not as a sampled call (2^bits times).
 * usage: first_call_app SLEEP_MS N       prints "done" */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
  int ms = argc > 1 ? atoi(argv[1]) : 300, n = argc > 2 ? atoi(argv[2]) : 1000, rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 1) {
    struct timespec d = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < n; i++) MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  if (rank == 0) printf("done\n");
  return 0;
}
