/* coll_mix.c -- a mix of collectives at given sizes, to compare collective pair traffic with what
 * the MPI library reports (Open MPI's monitoring) or with the algorithm it was told to use.
 * usage: coll_mix SIZE... (bytes; each a multiple of 8)
 * env:   COLL_MIX_OPS=allreduce,bcast,...  (default: all eight below), COLL_MIX_REPS (default 1)
 * For every size S, in this order: allreduce (S bytes of doubles), allgather, bcast (root
 * k mod p), reduce (root (k+1) mod p), reduce_scatter_block, alltoall, gather (root k mod p),
 * scatter (root (k+1) mod p), where k is the size's index and S the per-rank block of the
 * gathers, scatters and all-to-all.  Blocks of all-to-all kinds are MPI_BYTE, reductions
 * MPI_DOUBLE with MPI_SUM. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int want(const char *ops, const char *name) {
  if (!ops || !*ops) return 1;
  size_t n = strlen(name);
  for (const char *s = ops; (s = strstr(s, name)) != NULL; s += n)
    if ((s == ops || s[-1] == ',') && (s[n] == ',' || s[n] == 0)) return 1;
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const char *ops = getenv("COLL_MIX_OPS");
  int reps = getenv("COLL_MIX_REPS") ? atoi(getenv("COLL_MIX_REPS")) : 1;
  size_t max = 8;
  for (int i = 1; i < argc; i++) if ((size_t)atol(argv[i]) > max) max = (size_t)atol(argv[i]);
  char *a = calloc(max * (size_t)p, 1), *b = calloc(max * (size_t)p, 1);
  if (!a || !b) { fprintf(stderr, "coll_mix: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  for (int k = 1; k < argc; k++) {
    int s = atoi(argv[k]), d = s / 8, root = (k - 1) % p, root2 = k % p;
    for (int it = 0; it < reps; it++) {
      if (want(ops, "allreduce")) MPI_Allreduce(a, b, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (want(ops, "allgather")) MPI_Allgather(a, s, MPI_BYTE, b, s, MPI_BYTE, MPI_COMM_WORLD);
      if (want(ops, "bcast")) MPI_Bcast(a, s, MPI_BYTE, root, MPI_COMM_WORLD);
      if (want(ops, "reduce")) MPI_Reduce(a, b, d, MPI_DOUBLE, MPI_SUM, root2, MPI_COMM_WORLD);
      if (want(ops, "reduce_scatter_block")) MPI_Reduce_scatter_block(a, b, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (want(ops, "alltoall")) MPI_Alltoall(a, s, MPI_BYTE, b, s, MPI_BYTE, MPI_COMM_WORLD);
      if (want(ops, "gather")) MPI_Gather(a, s, MPI_BYTE, b, s, MPI_BYTE, root, MPI_COMM_WORLD);
      if (want(ops, "scatter")) MPI_Scatter(a, s, MPI_BYTE, b, s, MPI_BYTE, root2, MPI_COMM_WORLD);
    }
  }
  if (r == 0) printf("coll_mix: %d ranks, %d sizes\n", p, argc - 1);
  free(a);
  free(b);
  MPI_Finalize();
  return 0;
}
