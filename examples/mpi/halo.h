/* halo.h -- periodic N-dimensional halo exchange shared by halo2d.c, halo3d.c and halo4d.c.
 * usage: haloNd [DIMS=auto, e.g. 2x2] [FACE=1024] [ITERS=5] [ORDER=row|col]
 * The grid is MPI_Cart_create(periodic, reorder=0), so world rank = row-major coordinates; with
 * ORDER col, world rank = column-major coordinates (dimension 0 varies fastest: the heaviest
 * dimension, the last, then joins ranks far apart, as in a code that numbers its grid the other way
 * round). Given an ORDER, rank 0 prints "TIME <s>" of the iterations, timed between two barriers.
 * Per iteration and dimension d (0-based), each rank sends FACE*(d+1) bytes to each of its two
 * neighbours along d (minus then plus) and receives the same from them:
 *   T[r][minus_d(r)] += FACE*(d+1), T[r][plus_d(r)] += FACE*(d+1), one message each.
 * (When a dimension has extent 2 both neighbours are the same rank; extent 1: the rank itself.)
 * halo2d/halo3d: MPI_Isend/MPI_Irecv on the Cartesian communicator.
 * halo4d (USE_SUBCOMM): like lattice QCD codes, one MPI_Cart_sub communicator per dimension;
 * the exchange is MPI_Sendrecv on the 1-D sub-communicator, and every ITER ends with an
 * MPI_Allreduce of 8 bytes (one double) on the time-slice communicator (dimensions 0..2 kept). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int halo_main(int argc, char **argv, int nd) {
  MPI_Init(&argc, &argv);
  int rank, size, dims[8] = {0}, periods[8], coords[8];
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1 && strcmp(argv[1], "auto") != 0) {
    char *s = argv[1];
    for (int d = 0; d < nd; d++) { dims[d] = (int)strtol(s, &s, 10); if (*s == 'x') s++; }
  }
  MPI_Dims_create(size, nd, dims);
  long face = argc > 2 ? atol(argv[2]) : 1024;
  int iters = argc > 3 ? atoi(argv[3]) : 5;
  for (int d = 0; d < nd; d++) periods[d] = 1;
  int col = argc > 4 && strcmp(argv[4], "col") == 0;
  MPI_Comm base = MPI_COMM_WORLD, cart;
  if (col) { /* the Cartesian rank of this world rank: its column-major coordinates, row-major */
    int key = 0, w = rank;
    for (int d = 0; d < nd; d++) { coords[d] = w % dims[d]; w /= dims[d]; }
    for (int d = 0; d < nd; d++) key = key * dims[d] + coords[d];
    MPI_Comm_split(MPI_COMM_WORLD, 0, key, &base);
  }
  MPI_Cart_create(base, nd, dims, periods, 0, &cart);
  MPI_Cart_coords(cart, rank, nd, coords);
  char *sb = calloc((size_t)face * nd * 2 + 1, 1), *rb = calloc((size_t)face * nd * 2 + 1, 1);
#ifdef USE_SUBCOMM
  MPI_Comm line[8], slice;
  for (int d = 0; d < nd; d++) {
    int keep[8] = {0};
    keep[d] = 1;
    MPI_Cart_sub(cart, keep, &line[d]);
  }
  int keep3[8] = {1, 1, 1, 0};
  MPI_Cart_sub(cart, keep3, &slice);
#endif
  double t0 = 0;
  if (argc > 4) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }   /* timed only when ORDER is given */
  for (int it = 0; it < iters; it++) {
    for (int d = 0; d < nd; d++) {
      int n = (int)(face * (d + 1)), minus, plus;
#ifdef USE_SUBCOMM
      MPI_Cart_shift(line[d], 0, 1, &minus, &plus);
      MPI_Sendrecv(sb, n, MPI_CHAR, minus, 1, rb, n, MPI_CHAR, plus, 1, line[d], MPI_STATUS_IGNORE);
      MPI_Sendrecv(sb, n, MPI_CHAR, plus, 2, rb, n, MPI_CHAR, minus, 2, line[d], MPI_STATUS_IGNORE);
#else
      MPI_Request rq[4];
      MPI_Cart_shift(cart, d, 1, &minus, &plus);
      MPI_Irecv(rb, n, MPI_CHAR, minus, 1, cart, &rq[0]);
      MPI_Irecv(rb + n, n, MPI_CHAR, plus, 2, cart, &rq[1]);
      MPI_Isend(sb, n, MPI_CHAR, minus, 2, cart, &rq[2]);
      MPI_Isend(sb + n, n, MPI_CHAR, plus, 1, cart, &rq[3]);
      MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
#endif
    }
#ifdef USE_SUBCOMM
    double x = rank, y = 0;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, slice);
#endif
  }
  if (argc > 4) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    if (rank == 0) printf("TIME %.6f\n", t);
  }
  if (rank == 0) {
    printf("halo%dd: dims", nd);
    for (int d = 0; d < nd; d++) printf(" %d", dims[d]);
    printf(", face %ld bytes, %d iterations\n", face, iters);
  }
  free(sb); free(rb);
  MPI_Finalize();
  return 0;
}
