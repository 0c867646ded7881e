/* split_comm.c -- traffic inside sub-communicators must be reported in world ranks.
 * usage: split_comm [BYTES=300] [ITERS=4]
 * MPI_Comm_split(color = rank % 2, key = -rank): members of a colour in DESCENDING world order.
 * In each sub-communicator of m ranks, sub-rank i sends BYTES*(color+1) bytes to sub-rank
 * (i+1)%m with MPI_Sendrecv, ITERS times; then sub-rank 0 (the highest world rank of the colour)
 * broadcasts 64 bytes (MPI_Bcast, binomial model) once. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int bytes = argc > 1 ? atoi(argv[1]) : 300, iters = argc > 2 ? atoi(argv[2]) : 4;
  int color = rank % 2, sr, m;
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, color, -rank, &sub);
  MPI_Comm_rank(sub, &sr);
  MPI_Comm_size(sub, &m);
  int n = bytes * (color + 1);
  char *sb = calloc((size_t)n + 64, 1), *rb = calloc((size_t)n + 64, 1);
  for (int it = 0; it < iters; it++)
    MPI_Sendrecv(sb, n, MPI_CHAR, (sr + 1) % m, 0, rb, n, MPI_CHAR, (sr - 1 + m) % m, 0, sub, MPI_STATUS_IGNORE);
  MPI_Bcast(sb, 64, MPI_CHAR, 0, sub);
  MPI_Comm_free(&sub);
  if (rank == 0) printf("split_comm: %d ranks\n", p);
  free(sb); free(rb);
  MPI_Finalize();
  return 0;
}
