/* argv_app.c -- the job of the hostile-path tests (tests/test_hostile_paths.py): rank 0 prints each
 * of its arguments as ARG[...] (so the test sees them arrive unchanged), and every rank sends
 * 1000 bytes to its right neighbour once per argument (so the record shows the job ran whole). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0)
    for (int i = 1; i < argc; i++) printf("ARG[%s]\n", argv[i]);
  fflush(stdout);
  static char sb[1000], rb[1000];
  for (int i = 1; i < argc; i++) {
    MPI_Request rq[2];
    MPI_Irecv(rb, 1000, MPI_CHAR, (rank + size - 1) % size, 3, MPI_COMM_WORLD, &rq[0]);
    MPI_Isend(sb, 1000, MPI_CHAR, (rank + 1) % size, 3, MPI_COMM_WORLD, &rq[1]);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  }
  MPI_Finalize();
  return 0;
}
