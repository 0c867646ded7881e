/* neighbors.c -- neighbourhood collectives on a process topology: what a stencil code written with
 * MPI-3's MPI_Neighbor_allgather / MPI_Neighbor_alltoall does, and what Open MPI's coll/monitoring
 * (loaded with its monitoring PML) cannot run: 4.1 and 5.0 die in it with SIGFPE.
 *
 * usage: neighbors [TOPO=cart] [BYTES=1024] [ITERS=10] [FORM=blocking]
 *   TOPO cart   a 2-D Cartesian grid of MPI_Dims_create's shape, periodic in dimension 0 only
 *               (an edge rank has MPI_PROC_NULL for a neighbour in dimension 1);
 *        graph  a distributed graph (MPI_Dist_graph_create_adjacent): rank i sends to i+1 and i+2
 *               (mod p) and receives from i-1 and i-2, as OSU's neighbourhood benchmarks build theirs.
 * Each iteration: one MPI_Neighbor_allgather of BYTES (every out-neighbour gets the same block) and one
 * MPI_Neighbor_alltoall of BYTES per neighbour (block k to out-neighbour k); FORM nonblocking: the same
 * through MPI_Ineighbor_allgather / MPI_Ineighbor_alltoall, each completed by MPI_Wait.
 * Expected traffic, sender's view: for every out-neighbour entry that is not MPI_PROC_NULL,
 * 2 x BYTES x ITERS bytes in 2 x ITERS messages (a neighbour named twice -- both sides of a periodic
 * dimension of size 2 -- gets twice that).  Rank 0 prints one line per rank's out-neighbours:
 *   neighbors: rank R sends to N1 N2 ...      (-1: MPI_PROC_NULL)
 * so a test can sum what each pair should carry. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  const char *topo = argc > 1 ? argv[1] : "cart";
  int bytes = argc > 2 ? atoi(argv[2]) : 1024, iters = argc > 3 ? atoi(argv[3]) : 10;
  int nonblocking = argc > 4 && strcmp(argv[4], "nonblocking") == 0;
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm nc;
  int nout = 0, *out = NULL;
  if (strcmp(topo, "graph") == 0) {
    int src[2] = {(rank - 1 + p) % p, (rank - 2 + 2 * p) % p}, dst[2] = {(rank + 1) % p, (rank + 2) % p};
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, src, MPI_UNWEIGHTED, 2, dst, MPI_UNWEIGHTED,
                                   MPI_INFO_NULL, 0, &nc);
    nout = 2;
    out = malloc(sizeof(int) * 2);
    memcpy(out, dst, sizeof dst);
  } else {
    int dims[2] = {0, 0}, periods[2] = {1, 0};
    MPI_Dims_create(p, 2, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &nc);
    nout = 4;
    out = malloc(sizeof(int) * 4);
    for (int d = 0; d < 2; d++) MPI_Cart_shift(nc, d, 1, &out[2 * d], &out[2 * d + 1]);   /* ranks of nc = world */
  }
  char *sb = calloc((size_t)bytes * (size_t)nout + 1, 1), *rb = calloc((size_t)bytes * (size_t)nout + 1, 1);
  for (int it = 0; it < iters; it++) {
    if (nonblocking) {
      MPI_Request rq;
      MPI_Ineighbor_allgather(sb, bytes, MPI_CHAR, rb, bytes, MPI_CHAR, nc, &rq);
      MPI_Wait(&rq, MPI_STATUS_IGNORE);
      MPI_Ineighbor_alltoall(sb, bytes, MPI_CHAR, rb, bytes, MPI_CHAR, nc, &rq);
      MPI_Wait(&rq, MPI_STATUS_IGNORE);
    } else {
      MPI_Neighbor_allgather(sb, bytes, MPI_CHAR, rb, bytes, MPI_CHAR, nc);
      MPI_Neighbor_alltoall(sb, bytes, MPI_CHAR, rb, bytes, MPI_CHAR, nc);
    }
  }
  int *all = rank == 0 ? malloc(sizeof(int) * (size_t)(nout * p)) : NULL;
  MPI_Gather(out, nout, MPI_INT, all, nout, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < p; r++) {
      printf("neighbors: rank %d sends to", r);
      for (int k = 0; k < nout; k++) printf(" %d", all[r * nout + k] == MPI_PROC_NULL ? -1 : all[r * nout + k]);
      printf("\n");
    }
    printf("neighbors: %s, %s, %d ranks, %d bytes x %d iterations\n", topo, nonblocking ? "nonblocking" : "blocking",
           p, bytes, iters);
  }
  free(all); free(sb); free(rb); free(out);
  MPI_Comm_free(&nc);
  MPI_Finalize();
  return 0;
}
