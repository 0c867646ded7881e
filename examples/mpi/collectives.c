/* collectives.c -- one call of each blocking collective with known logical payloads.
 * usage: collectives [N=1000]   (N bytes = N/8 doubles where doubles are used; N multiple of 8)
 * Logical payload per call (see docs/collective-models.md), p = world size:
 *   MPI_Bcast N (root 0) | MPI_Reduce N (root p-1) | MPI_Allreduce N (small) and 100000*8 (large)
 *   MPI_Gather N per rank (root 0) | MPI_Scatter N per rank (root 0) | MPI_Allgather N
 *   MPI_Allgatherv own block N*(r+1) | MPI_Alltoall N*p | MPI_Reduce_scatter_block N*p
 *   MPI_Scan N | MPI_Exscan N | MPI_Barrier 0 | MPI_Ibcast N then MPI_Wait */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int n = argc > 1 ? atoi(argv[1]) : 1000, d = n / 8;
  size_t big = 100000;
  double *a = calloc(big * p + (size_t)n * p * 2, sizeof(double)), *b = calloc(big * p + (size_t)n * p * 2, sizeof(double));
  MPI_Bcast(a, n, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Reduce(a, b, d, MPI_DOUBLE, MPI_SUM, p - 1, MPI_COMM_WORLD);
  MPI_Allreduce(a, b, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(a, b, (int)big, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Gather(a, n, MPI_CHAR, b, n, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Scatter(a, n, MPI_CHAR, b, n, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Allgather(a, n, MPI_CHAR, b, n, MPI_CHAR, MPI_COMM_WORLD);
  int *rc = malloc(sizeof(int) * p), *dp = malloc(sizeof(int) * p);
  for (int i = 0, o = 0; i < p; i++) { rc[i] = n * (i + 1); dp[i] = o; o += rc[i]; }
  MPI_Allgatherv(a, n * (r + 1), MPI_CHAR, b, rc, dp, MPI_CHAR, MPI_COMM_WORLD);
  MPI_Alltoall(a, n, MPI_CHAR, b, n, MPI_CHAR, MPI_COMM_WORLD);
  MPI_Reduce_scatter_block(a, b, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Scan(a, b, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Exscan(a, b, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Request rq;
  MPI_Ibcast(a, n, MPI_CHAR, 0, MPI_COMM_WORLD, &rq);
  MPI_Wait(&rq, MPI_STATUS_IGNORE);
  if (r == 0) printf("collectives: %d ranks, N=%d\n", p, n);
  MPI_Finalize();
  return 0;
}
