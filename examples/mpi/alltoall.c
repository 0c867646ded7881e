/* alltoall.c -- MPI_Alltoall then MPI_Alltoallv, ITERS times each.
 * usage: alltoall [BYTES=256] [ITERS=3]
 * MPI_Alltoall: every rank sends BYTES to every other rank (pairwise-exchange model: one row per
 *   peer, payload BYTES*p per call).
 * MPI_Alltoallv: rank i sends BYTES*(1 + (i+j)%3) bytes to rank j (j != i); payload is the sum
 *   over all j including i itself. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int bytes = argc > 1 ? atoi(argv[1]) : 256, iters = argc > 2 ? atoi(argv[2]) : 3;
  char *sb = calloc((size_t)bytes * 3 * p, 1), *rb = calloc((size_t)bytes * 3 * p, 1);
  int *sc = malloc(sizeof(int) * p), *rc = malloc(sizeof(int) * p), *sd = malloc(sizeof(int) * p), *rd = malloc(sizeof(int) * p);
  for (int j = 0, so = 0, ro = 0; j < p; j++) {
    sc[j] = bytes * (1 + (rank + j) % 3); rc[j] = bytes * (1 + (j + rank) % 3);
    sd[j] = so; rd[j] = ro; so += sc[j]; ro += rc[j];
  }
  for (int it = 0; it < iters; it++) {
    MPI_Alltoall(sb, bytes, MPI_CHAR, rb, bytes, MPI_CHAR, MPI_COMM_WORLD);
    MPI_Alltoallv(sb, sc, sd, MPI_CHAR, rb, rc, rd, MPI_CHAR, MPI_COMM_WORLD);
  }
  if (rank == 0) printf("alltoall: %d ranks, %d bytes, %d iterations\n", p, bytes, iters);
  MPI_Finalize();
  return 0;
}
