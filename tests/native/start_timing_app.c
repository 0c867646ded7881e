/* Many starts, few completions: each round posts W receives from itself and W sends to itself,
 * then one MPI_Waitall.  The shim times the starts (MPI_Irecv, MPI_Isend) from a gap count of their
 * own, more sparsely than the other calls; the record's shim.timed meta says how many of each kind
 * were timed.
 * usage: start_timing_app ROUNDS       prints "done" */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define W 64

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 1024;
  static char sbuf[8 * W], rbuf[8 * W];
  MPI_Request rq[2 * W];
  MPI_Init(&argc, &argv);
  for (int i = 0; i < rounds; i++) {
    for (int k = 0; k < W; k++) MPI_Irecv(rbuf + 8 * k, 8, MPI_CHAR, 0, k, MPI_COMM_SELF, &rq[k]);
    for (int k = 0; k < W; k++) MPI_Isend(sbuf + 8 * k, 8, MPI_CHAR, 0, k, MPI_COMM_SELF, &rq[W + k]);
    MPI_Waitall(2 * W, rq, MPI_STATUSES_IGNORE);
  }
  MPI_Finalize();
  printf("done\n");
  return 0;
}
