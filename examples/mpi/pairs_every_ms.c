/* pairs_every_ms.c -- every rank sends BYTES to every other rank once per period, ITERS times:
 * a steady all-to-all stream, the load of a job that talks all the time (rankmap's ingest benchmark).
 * usage: pairs_every_ms [BYTES=1024] [ITERS=1000] [PERIOD_US=1000] [EXIT=0]
 * Expected traffic (world size p): T[i][j] = BYTES*ITERS bytes in ITERS messages (MPI_Isend) for
 * every i != j; nothing else.  Each round: MPI_Irecv from and MPI_Isend to every peer, MPI_Waitall,
 * then sleep to the next period boundary (a slow round is not made up).  EXIT is the exit status
 * after MPI_Finalize (to check that a launcher's status comes through). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int bytes = argc > 1 ? atoi(argv[1]) : 1024, iters = argc > 2 ? atoi(argv[2]) : 1000;
  long period_us = argc > 3 ? atol(argv[3]) : 1000;
  int code = argc > 4 ? atoi(argv[4]) : 0;
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  char *sb = calloc((size_t)bytes + 1, 1), *rb = calloc((size_t)bytes * p + 1, 1);
  MPI_Request *req = malloc(sizeof(MPI_Request) * 2 * p);
  double t0 = now(), next = t0;
  for (int it = 0; it < iters; it++) {
    int n = 0;
    for (int j = 0; j < p; j++) {
      if (j == rank) continue;
      MPI_Irecv(rb + (size_t)j * bytes, bytes, MPI_CHAR, j, 11, MPI_COMM_WORLD, &req[n++]);
      MPI_Isend(sb, bytes, MPI_CHAR, j, 11, MPI_COMM_WORLD, &req[n++]);
    }
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    next += period_us * 1e-6;
    double left = next - now();
    if (left > 0) {
      struct timespec ts = { (time_t)left, (long)((left - (time_t)left) * 1e9) };
      nanosleep(&ts, NULL);
    } else {
      next = now();
    }
  }
  double took = now() - t0;
  if (rank == 0) printf("pairs_every_ms: %d ranks, %d bytes to each peer x %d rounds in %.3f s\n", p, bytes, iters, took);
  free(sb); free(rb); free(req);
  MPI_Finalize();
  return code;
}
