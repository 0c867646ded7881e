/* rma.c -- one-sided traffic, with the window on a reordered communicator so the target rank
 * must be translated through the window's group.
 * usage: rma [COUNT=100] [ITERS=3]
 * sub = MPI_Comm_split(0, key = -rank): sub-rank i is world rank p-1-i.  Window: 4*COUNT doubles.
 * Per iteration, inside MPI_Win_fence epochs, sub-rank i (world r):
 *   MPI_Put        COUNT doubles to sub-rank (i+1)%p       -> rma send 8*COUNT bytes
 *   MPI_Get        COUNT/2 doubles from sub-rank (i+2)%p   -> rma recv 4*COUNT bytes
 *   MPI_Accumulate COUNT doubles (MPI_SUM) to sub-rank (i+p-1)%p -> rma send 8*COUNT bytes */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p, i;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int count = argc > 1 ? atoi(argv[1]) : 100, iters = argc > 2 ? atoi(argv[2]) : 3;
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &sub);
  MPI_Comm_rank(sub, &i);
  double *base, *loc = calloc((size_t)count * 2, sizeof(double));
  MPI_Win win;
  MPI_Win_allocate((MPI_Aint)(4 * count * sizeof(double)), sizeof(double), MPI_INFO_NULL, sub, &base, &win);
  for (int it = 0; it < iters; it++) {
    MPI_Win_fence(0, win);
    MPI_Put(loc, count, MPI_DOUBLE, (i + 1) % p, 0, count, MPI_DOUBLE, win);
    MPI_Get(loc + count, count / 2, MPI_DOUBLE, (i + 2) % p, count, count / 2, MPI_DOUBLE, win);
    MPI_Win_fence(0, win);
    MPI_Accumulate(loc, count, MPI_DOUBLE, (i + p - 1) % p, 2 * count, count, MPI_DOUBLE, MPI_SUM, win);
    MPI_Win_fence(0, win);
  }
  MPI_Win_free(&win);
  MPI_Comm_free(&sub);
  if (rank == 0) printf("rma: %d ranks, %d doubles, %d iterations\n", p, count, iters);
  free(loc);
  MPI_Finalize();
  return 0;
}
