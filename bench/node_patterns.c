/* node_patterns.c -- communication patterns whose time depends on which ranks share a node.
 * usage: node_patterns PATTERN [BYTES=1048576] [ITERS=10]
 * Every pattern runs one untimed iteration (connections made), then ITERS timed ones between two
 * barriers; rank 0 prints "TIME <seconds>" (MPI_Wtime: under SimGrid's smpirun the simulated time).
 * PATTERN (per iteration; "both ways" = each rank of the pair sends the bytes to the other):
 *   halo3d, halo4d      periodic halo on MPI_Dims_create's grid, dimension d sends BYTES*(d+1)/ND
 *                       to each of its two neighbours, ranks numbered in row-major order (the
 *                       heaviest dimension, the last, has stride 1: consecutive ranks);
 *   halo3d-cm, halo4d-cm   the same grid numbered in column-major order: the heaviest dimension has
 *                       the largest stride, so ranks in blocks cut it;
 *   alltoallv           MPI_Alltoallv, uneven: BYTES to rank r ^ (size/2), BYTES/16 to every other;
 *   ring-shuffled       a ring over the ranks in a fixed shuffled order, BYTES both ways between
 *                       ring neighbours (MPI_Isend/MPI_Irecv). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *sb, *rb;

static void exchange(int n, const int *peer, const long *len) {
  MPI_Request rq[32];
  int k = 0;
  long off = 0;
  for (int i = 0; i < n; i++) {
    MPI_Irecv(rb + off, (int)len[i], MPI_CHAR, peer[i], i, MPI_COMM_WORLD, &rq[k++]);
    off += len[i];
  }
  for (int i = 0; i < n; i++) {
    /* the tag of the matching receive: the peer lists this rank at the mirrored position */
    int tag = (i % 2 == 0) ? i + 1 : i - 1;
    MPI_Isend(sb, (int)len[i], MPI_CHAR, peer[i], tag, MPI_COMM_WORLD, &rq[k++]);
  }
  MPI_Waitall(k, rq, MPI_STATUSES_IGNORE);
}

/* halo neighbours: for dimension d the minus then the plus neighbour, row-major or column-major */
static int halo_peers(int rank, int size, int nd, int colmajor, long bytes, int *peer, long *len) {
  int dims[8] = {0}, c[8], stride[8];
  MPI_Dims_create(size, nd, dims);
  for (int d = 0, s = 1; d < nd; d++) {
    int dd = colmajor ? d : nd - 1 - d;   /* row-major: the last dimension has stride 1 */
    stride[dd] = s;
    s *= dims[dd];
  }
  for (int d = 0; d < nd; d++) c[d] = (rank / stride[d]) % dims[d];
  int n = 0;
  for (int d = 0; d < nd; d++) {
    if (dims[d] == 1) continue;
    for (int step = -1; step <= 1; step += 2) {
      int x = (c[d] + step + dims[d]) % dims[d];
      peer[n] = rank + (x - c[d]) * stride[d];
      len[n] = bytes * (d + 1) / nd;
      n++;
    }
  }
  return n;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  const char *pat = argc > 1 ? argv[1] : "halo3d";
  long bytes = argc > 2 ? atol(argv[2]) : 1048576;
  int iters = argc > 3 ? atoi(argv[3]) : 10, rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int peer[32], n = 0, a2a = 0;
  long len[32];
  int *sc = NULL, *sd = NULL;
  if (!strncmp(pat, "halo3d", 6) || !strncmp(pat, "halo4d", 6)) {
    n = halo_peers(rank, size, pat[4] - '0', strstr(pat, "-cm") != NULL, bytes, peer, len);
  } else if (!strcmp(pat, "ring-shuffled")) {
    int *order = malloc(sizeof(int) * size), at = 0;
    for (int i = 0; i < size; i++) order[i] = i;
    unsigned s = 12345;   /* the same shuffle on every rank (a small LCG) */
    for (int i = size - 1; i > 0; i--) {
      s = s * 1103515245u + 12345u;
      int j = (int)((s >> 8) % (unsigned)(i + 1)), t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    for (int i = 0; i < size; i++) if (order[i] == rank) at = i;
    peer[0] = order[(at - 1 + size) % size];
    peer[1] = order[(at + 1) % size];
    len[0] = len[1] = bytes;
    n = 2;
    free(order);
  } else if (!strcmp(pat, "alltoallv")) {
    a2a = 1;
    sc = calloc(size, sizeof(int));
    sd = calloc(size, sizeof(int));
    for (int q = 0; q < size; q++) sc[q] = q == rank ? 0 : (q == (rank ^ (size / 2)) ? (int)bytes : (int)(bytes / 16));
  } else {
    if (rank == 0) fprintf(stderr, "node_patterns: unknown pattern %s\n", pat);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  long total = 0;
  for (int i = 0; i < n; i++) total += len[i];
  if (a2a) total = 2 * bytes;
  sb = calloc((size_t)(a2a ? bytes : total) + 1, 1);
  rb = calloc((size_t)(a2a ? (long)size * bytes : total) + 1, 1);
  int *rc = NULL, *rd = NULL;
  if (a2a) {
    rc = calloc(size, sizeof(int));
    rd = calloc(size, sizeof(int));
    /* what rank q sends here: the same rule seen from q */
    for (int q = 0; q < size; q++) rc[q] = q == rank ? 0 : (rank == (q ^ (size / 2)) ? (int)bytes : (int)(bytes / 16));
    for (int q = 1; q < size; q++) rd[q] = rd[q - 1] + rc[q - 1];
    for (int q = 0; q < size; q++) sd[q] = 0;   /* every block from the same send buffer */
  }
  double t0 = 0;
  for (int it = -1; it < iters; it++) {
    if (it == 0) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
    }
    if (a2a) MPI_Alltoallv(sb, sc, sd, MPI_CHAR, rb, rc, rd, MPI_CHAR, MPI_COMM_WORLD);
    else exchange(n, peer, len);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime() - t0;
  if (rank == 0) printf("TIME %.6f\n", t);
  free(sb); free(rb); free(sc); free(sd); free(rc); free(rd);
  MPI_Finalize();
  return 0;
}
