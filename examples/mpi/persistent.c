/* persistent.c -- persistent requests: MPI_Send_init/MPI_Recv_init to both ring neighbours,
 * then ITERS rounds of MPI_Startall + MPI_Waitall, then MPI_Request_free.
 * usage: persistent [BYTES=2048] [ITERS=7]
 * T[r][(r+1)%p] += BYTES*ITERS and T[r][(r-1+p)%p] += 2*BYTES*ITERS (ITERS messages each,
 * operation MPI_Send_init); receives are rows of MPI_Recv_init. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int bytes = argc > 1 ? atoi(argv[1]) : 2048, iters = argc > 2 ? atoi(argv[2]) : 7;
  int right = (rank + 1) % p, left = (rank - 1 + p) % p;
  char *sb = calloc((size_t)bytes * 3, 1), *rb = calloc((size_t)bytes * 3, 1);
  MPI_Request rq[4];
  MPI_Recv_init(rb, bytes, MPI_CHAR, left, 1, MPI_COMM_WORLD, &rq[0]);
  MPI_Recv_init(rb + bytes, 2 * bytes, MPI_CHAR, right, 2, MPI_COMM_WORLD, &rq[1]);
  MPI_Send_init(sb, bytes, MPI_CHAR, right, 1, MPI_COMM_WORLD, &rq[2]);
  MPI_Send_init(sb + bytes, 2 * bytes, MPI_CHAR, left, 2, MPI_COMM_WORLD, &rq[3]);
  for (int it = 0; it < iters; it++) {
    MPI_Startall(4, rq);
    MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
  }
  for (int i = 0; i < 4; i++) MPI_Request_free(&rq[i]);
  if (rank == 0) printf("persistent: %d ranks, %d bytes, %d iterations\n", p, bytes, iters);
  MPI_Finalize();
  return 0;
}
