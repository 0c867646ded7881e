/* coll_memo.c -- collectives that alternate their arguments, on a real communicator (2+ ranks).
 *
 * usage: coll_memo PATTERN [CALLS=4000]
 *
 * One pattern per run, CALLS collective calls in the function pattern_<name> (the unit
 * bench/coll_memo.py counts the shim's instructions in under callgrind):
 *   one        MPI_Allreduce of 1 double on MPI_COMM_WORLD, repeated
 *   counts     MPI_Allreduce of 1 double, then of 2 doubles, alternating (a CG solver's dot
 *              products)
 *   collide    MPI_Allreduce of 1 double and MPI_Scan of 1 double, alternating (operations whose
 *              numbers are equal mod 4, the shim's remembered-signature sets)
 *   comms      MPI_Allreduce of 1 double on MPI_COMM_WORLD and on a duplicate, alternating (a 2-D
 *              decomposition's row and column communicators)
 *   three      MPI_Allreduce of 1, of 2 and of 3 doubles in turn (three signatures of one set)
 *   four       MPI_Allreduce of 1, 2, 3 and 4 doubles in turn (more signatures than a class set's
 *              ways and one more than the three ways per set of an earlier shim)
 *   eight      MPI_Allreduce of 1 to 8 doubles in turn (a molecular-dynamics step's reductions)
 *   sixteen    MPI_Allreduce of 1 to 16 doubles in turn
 * Prints "<pattern> <calls>"; exits with 2 if a result is wrong.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double one[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, sum[16];
static MPI_Comm dup;

__attribute__((noinline)) int pattern_one(int n) {
  for (int i = 0; i < n; i++) MPI_Allreduce(one, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return n;
}
__attribute__((noinline)) int pattern_counts(int n) {
  for (int i = 0; i < n; i += 2) {
    MPI_Allreduce(one, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(one, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  return n;
}
__attribute__((noinline)) int pattern_collide(int n) {
  for (int i = 0; i < n; i += 2) {
    MPI_Allreduce(one, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Scan(one, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  return n;
}
__attribute__((noinline)) int pattern_comms(int n) {
  for (int i = 0; i < n; i += 2) {
    MPI_Allreduce(one, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(one, sum, 1, MPI_DOUBLE, MPI_SUM, dup);
  }
  return n;
}
__attribute__((noinline)) int pattern_three(int n) {
  for (int i = 0; i < n; i += 3) {
    MPI_Allreduce(one, sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(one, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(one, sum, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  return (n + 2) / 3 * 3;
}
static int in_turn(int n, int k) {        /* MPI_Allreduce of 1, 2, ..., k doubles in turn */
  for (int i = 0; i < n; i += k)
    for (int c = 1; c <= k; c++) MPI_Allreduce(one, sum, c, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return (n + k - 1) / k * k;
}
__attribute__((noinline)) int pattern_four(int n) { return in_turn(n, 4); }
__attribute__((noinline)) int pattern_eight(int n) { return in_turn(n, 8); }
__attribute__((noinline)) int pattern_sixteen(int n) { return in_turn(n, 16); }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int p;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  const char *name = argc > 1 ? argv[1] : "one";
  int n = argc > 2 ? atoi(argv[2]) : 4000;
  struct { const char *name; int (*f)(int); } pat[] = {
    {"one", pattern_one}, {"counts", pattern_counts}, {"collide", pattern_collide}, {"comms", pattern_comms},
    {"three", pattern_three}, {"four", pattern_four}, {"eight", pattern_eight}, {"sixteen", pattern_sixteen},
  };
  int done = -1;
  for (size_t k = 0; k < sizeof pat / sizeof pat[0]; k++)
    if (strcmp(name, pat[k].name) == 0) done = pat[k].f(n);
  if (done < 0) {
    fprintf(stderr, "coll_memo: unknown pattern %s\n", name);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int bad = !(sum[0] >= 1 && sum[0] <= p);   /* the last call's result: an allreduce's p, a scan's rank + 1 */
  MPI_Comm_free(&dup);
  MPI_Finalize();
  if (bad) return 2;
  printf("%s %d\n", name, done);
  return 0;
}
