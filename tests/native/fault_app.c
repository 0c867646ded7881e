/* fault_app.c -- the job of the fault matrix (tests/test_faults.py): every 10 ms each rank sends
 * 1000 bytes to its right neighbour (MPI_Isend), ITERS times, then finalises.
 * usage: fault_app ITERS [CRASH_RANK CRASH_AT]: rank CRASH_RANK aborts (SIGABRT, no finalize) at
 * iteration CRASH_AT; the others are stopped by the launcher. */
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iters = argc > 1 ? atoi(argv[1]) : 100;
  int crash_rank = argc > 3 ? atoi(argv[2]) : -1, crash_at = argc > 3 ? atoi(argv[3]) : -1;
  static char sb[1000], rb[1000];
  for (int i = 0; i < iters; i++) {
    if (rank == crash_rank && i == crash_at) abort();
    MPI_Request rq[2];
    MPI_Irecv(rb, 1000, MPI_CHAR, (rank + size - 1) % size, 7, MPI_COMM_WORLD, &rq[0]);
    MPI_Isend(sb, 1000, MPI_CHAR, (rank + 1) % size, 7, MPI_COMM_WORLD, &rq[1]);
    MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    usleep(10000);
  }
  MPI_Finalize();
  return 0;
}
