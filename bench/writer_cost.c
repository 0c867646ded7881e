/* writer_cost.c -- cost of the record writer's hot path, no MPI.
 * build: cc -O2 -std=gnu11 -Inative/common bench/writer_cost.c native/common/rmrec.c -o writer_cost -lpthread
 * usage: writer_cost [N=10000000]   (writes into $TMPDIR/rankmap-writer-cost)
 * Prints ns per rmrec_traffic_at (one row, 4 peers round robin), per rmrec_call, and per
 * "intercepted call" as the MPI shim does it: two rmrec_ticks() + one traffic row + one call;
 * then us per rmrec_flush of a 16-rank job's rows (15 peers changed since the last flush, the
 * default table of 262144 slots): the work every rank's flush thread does once a second. */
#include "rmrec.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 10000000;
  const char *tmp = getenv("TMPDIR");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/rankmap-writer-cost", tmp ? tmp : "/tmp");
  rmrec_t *c = rmrec_open(dir, "mpi", 0, 4);
  if (!c) return 1;
  int op = rmrec_op(c, "MPI_Send");
  for (int rep = 0; rep < 3; rep++) {
    double t0 = now();
    for (long i = 0; i < n; i++) rmrec_traffic_at(c, (int)(i & 3), RMREC_P2P, op, RMREC_MEM_HOST, RMREC_SEND, 8, 1, (uint64_t)i);
    double t1 = now();
    for (long i = 0; i < n; i++) rmrec_call(c, op, 8, 5);
    double t2 = now();
    for (long i = 0; i < n; i++) {
      uint64_t a = rmrec_ticks();
      rmrec_traffic_at(c, (int)(i & 3), RMREC_P2P, op, RMREC_MEM_HOST, RMREC_SEND, 8, 1, a);
      rmrec_call(c, op, 8, rmrec_ticks() - a);
    }
    double t3 = now();
    printf("traffic row %.1f ns   call %.1f ns   intercepted call (2 ticks + row + call) %.1f ns\n",
           (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9, (t3 - t2) / n * 1e9);
  }
  rmrec_close(c);
  snprintf(dir, sizeof dir, "%s/rankmap-writer-cost-flush", tmp ? tmp : "/tmp");
  rmrec_t *f = rmrec_open(dir, "mpi", 0, 16);
  if (!f) return 1;
  op = rmrec_op(f, "MPI_Isend");
  for (int rep = 0; rep < 3; rep++) {
    int flushes = 200;
    double t0 = now();
    for (int k = 0; k < flushes; k++) {
      for (int p = 1; p < 16; p++) rmrec_traffic_at(f, p, RMREC_P2P, op, RMREC_MEM_HOST, RMREC_SEND, 1024, 1, rmrec_ticks());
      rmrec_flush(f);
    }
    printf("flush of 15 changed rows %.1f us\n", (now() - t0) / flushes * 1e6);
  }
  rmrec_close(f);
  return 0;
}
