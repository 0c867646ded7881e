/* nbc_tags_app.c -- nonblocking collectives whose messages mostly go out after the starting call.
 * usage: nbc_tags_app ITERS
 * Each of ITERS rounds: MPI_Iallreduce (125 doubles) then MPI_Wait; MPI_Ibcast (4096 B, root
 * round % size) then MPI_Test until done; MPI_Iallgather (1000 B per rank) on a duplicate of
 * MPI_COMM_WORLD, made after the first round (Open MPI 4.1 creates it with nonblocking
 * allreduces of its own, on tags the program never sees), then MPI_Waitall. */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int n = argc > 1 ? atoi(argv[1]) : 5, p, r;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  double a[125] = {0}, b[125];
  char *c = calloc(4096, 1), *g = calloc(1000 * (size_t)p, 1), *mine = calloc(1000, 1);
  MPI_Comm d = MPI_COMM_NULL;
  for (int i = 0; i < n; i++) {
    MPI_Request q;
    MPI_Iallreduce(a, b, 125, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    if (i == 0) MPI_Comm_dup(MPI_COMM_WORLD, &d);
    MPI_Ibcast(c, 4096, MPI_BYTE, i % p, MPI_COMM_WORLD, &q);
    for (int done = 0; !done;) MPI_Test(&q, &done, MPI_STATUS_IGNORE);
    MPI_Iallgather(mine, 1000, MPI_BYTE, g, 1000, MPI_BYTE, d, &q);
    MPI_Waitall(1, &q, MPI_STATUSES_IGNORE);
  }
  MPI_Comm_free(&d);
  free(c); free(g); free(mine);
  MPI_Finalize();
  return 0;
}
