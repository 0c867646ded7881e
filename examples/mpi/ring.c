/* ring.c -- every rank sends to its right neighbour, ITERS times, with MPI_Isend/MPI_Irecv/MPI_Waitall.
 * usage: ring [BYTES=1024] [ITERS=10] [SLEEP_S=0]   (SLEEP_S: pause before MPI_Finalize)
 * Expected traffic (world size p): T[r][(r+1)%p] = BYTES*ITERS bytes in ITERS messages (MPI_Isend);
 * rank (r+1)%p receives the same from r (MPI_Irecv).  Nothing else (p == 1 sends to itself). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  long bytes = argc > 1 ? atol(argv[1]) : 1024;
  int iters = argc > 2 ? atoi(argv[2]) : 10;
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char *sbuf = calloc((size_t)bytes + 1, 1), *rbuf = calloc((size_t)bytes + 1, 1);
  for (int it = 0; it < iters; it++) {
    MPI_Request req[2];
    MPI_Irecv(rbuf, (int)bytes, MPI_CHAR, (rank - 1 + size) % size, 7, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(sbuf, (int)bytes, MPI_CHAR, (rank + 1) % size, 7, MPI_COMM_WORLD, &req[1]);
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
  }
  if (argc > 3) sleep((unsigned)atoi(argv[3]));
  if (rank == 0) printf("ring: %d ranks, %ld bytes x %d iterations\n", size, bytes, iters);
  free(sbuf); free(rbuf);
  MPI_Finalize();
  return 0;
}
