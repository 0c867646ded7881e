/* windows.h -- the ordinary traffic the edge-case test programs end each round with: `rounds`
 * windows of `w` 8-byte receives on MPI_COMM_WORLD, posted by world rank 0 (from rank 1, tags 10..)
 * and completed by MPI_Waitall.  The library gives them request handles it just released, so a
 * receive whose entry the shim left behind, or released twice, shows in their counts. */
#ifndef RANKMAP_TEST_WINDOWS_H
#define RANKMAP_TEST_WINDOWS_H
#include <mpi.h>

static void ordinary_windows(int me, int w, int rounds) {
  char b[w][8];
  MPI_Request rq[w];
  for (int r = 0; r < rounds; r++) {
    if (me == 0) {
      for (int k = 0; k < w; k++) MPI_Irecv(b[k], 8, MPI_BYTE, 1, 10 + k, MPI_COMM_WORLD, &rq[k]);
      MPI_Waitall(w, rq, MPI_STATUSES_IGNORE);
    } else {
      for (int k = 0; k < w; k++) MPI_Send(b[k], 8, MPI_BYTE, 0, 10 + k, MPI_COMM_WORLD);
    }
  }
}
#endif
