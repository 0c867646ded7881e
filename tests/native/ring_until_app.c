/* ring_until_app.c -- a ring (every rank sends BYTES to its right neighbour ITERS times) that waits
 * before MPI_Finalize until the file GO exists or MAX_S seconds have passed: a test that watches a
 * running job ends the job when it has seen what it looks for, not after a fixed sleep that a
 * loaded machine can use up before the watcher sees anything.
 * usage: ring_until_app BYTES ITERS GO MAX_S */
#include <mpi.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc < 5) MPI_Abort(MPI_COMM_WORLD, 2);
  long bytes = atol(argv[1]);
  int iters = atoi(argv[2]), rank, size;
  double max_s = atof(argv[4]);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char *sbuf = calloc((size_t)bytes + 1, 1), *rbuf = calloc((size_t)bytes + 1, 1);
  for (int it = 0; it < iters; it++) {
    MPI_Request req[2];
    MPI_Irecv(rbuf, (int)bytes, MPI_CHAR, (rank - 1 + size) % size, 7, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(sbuf, (int)bytes, MPI_CHAR, (rank + 1) % size, 7, MPI_COMM_WORLD, &req[1]);
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
  }
  struct timespec t0, t, step = {0, 50 * 1000 * 1000};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    if (access(argv[3], F_OK) == 0) break;
    nanosleep(&step, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 < max_s);
  free(sbuf); free(rbuf);
  MPI_Finalize();
  return 0;
}
