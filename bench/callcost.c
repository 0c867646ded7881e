/* callcost.c -- what the shim adds per intercepted call, in one process (no peer, no wire).
 *
 * usage: callcost [ITERS=20000] [ROUNDS=15]
 *
 * Each pattern runs through the PMPI_ entry points (the library alone) and through the MPI_ entry
 * points (the shim, when LD_PRELOADed), in alternating rounds; the output is the median ns per
 * pattern of each, in the thread's CPU time (CLOCK_THREAD_CPUTIME_ID): time the process spends
 * descheduled on a shared machine does not count.  Under valgrind --tool=callgrind the functions plain_<pattern> and
 * shim_<pattern> are the units whose inclusive instruction counts bench/shim_overhead.py compares
 * (--callgrind): instructions do not depend on the machine's load.
 *
 * Patterns (to MPI_COMM_SELF, 8 bytes; calls per iteration in brackets):
 *   rate   64 x MPI_Irecv, 64 x MPI_Isend, MPI_Waitall of 128   [129]
 *   pair   MPI_Irecv, MPI_Send, MPI_Wait                         [3]
 *   coll   MPI_Allreduce of one double                           [1]
 *   lat    MPI_Send, MPI_Recv (eager: the send completes at once)  [2]
 *          -- the two calls of a ping-pong's one way, osu_latency's critical path (Open MPI
 *          only: MPICH's blocking send to its own rank waits for the receive, so it never returns)
 *   floor  no shim: "rate" through PMPI_ plus the least an exact receive row needs (floor_rate
 *          below), against the plain "rate" -- a lower bound for recording receives
 * Output lines: <pattern> <calls per iteration> <plain ns/iter> <shim ns/iter>
 * (for floor: <plain rate ns/iter> <floor_rate ns/iter>)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define W 64

typedef struct {
  int (*send)(const void *, int, MPI_Datatype, int, int, MPI_Comm);
  int (*wait)(MPI_Request *, MPI_Status *);
  int (*isend)(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
  int (*irecv)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
  int (*waitall)(int, MPI_Request *, MPI_Status *);
  int (*allreduce)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
  int (*recv)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *);
} api_t;

static const api_t PLAIN = {PMPI_Send, PMPI_Wait, PMPI_Isend, PMPI_Irecv, PMPI_Waitall, PMPI_Allreduce, PMPI_Recv};
static const api_t SHIM = {MPI_Send, MPI_Wait, MPI_Isend, MPI_Irecv, MPI_Waitall, MPI_Allreduce, MPI_Recv};

static char sbuf[8 * W], rbuf[8 * W];

static void rate(const api_t *a, int iters) {
  MPI_Request rq[2 * W];
  for (int i = 0; i < iters; i++) {
    for (int k = 0; k < W; k++) a->irecv(rbuf + 8 * k, 8, MPI_CHAR, 0, k, MPI_COMM_SELF, &rq[k]);
    for (int k = 0; k < W; k++) a->isend(sbuf + 8 * k, 8, MPI_CHAR, 0, k, MPI_COMM_SELF, &rq[W + k]);
    a->waitall(2 * W, rq, MPI_STATUSES_IGNORE);
  }
}
static void pair(const api_t *a, int iters) {
  MPI_Request rq;
  for (int i = 0; i < iters; i++) {
    a->irecv(rbuf, 8, MPI_CHAR, 0, 1, MPI_COMM_SELF, &rq);
    a->send(sbuf, 8, MPI_CHAR, 0, 1, MPI_COMM_SELF);
    a->wait(&rq, MPI_STATUS_IGNORE);
  }
}
static void lat(const api_t *a, int iters) {
  for (int i = 0; i < iters; i++) {
    a->send(sbuf, 8, MPI_CHAR, 0, 1, MPI_COMM_SELF);
    a->recv(rbuf, 8, MPI_CHAR, 0, 1, MPI_COMM_SELF, MPI_STATUS_IGNORE);
  }
}
/* The floor of exact receive rows: the library alone, asked for the statuses (what MPI_Waitall
 * costs more when it must fill them), plus the bookkeeping no exact row can do without -- each
 * receive's request and world-rank translation noted at posting, matched against the completion
 * call's array in posting order, its source and length read from the status (a cancelled one is
 * no message) and summed per world peer.  None of the rest of the shim (capture check, call
 * counters and timing, memory kind, lookups by handle, the log's upkeep) is in it. */
static struct { MPI_Request req; const int *w; } fl_note[W];
static const int fl_world[1] = {0};        /* MPI_COMM_SELF rank 0 -> world rank (this process) */
static unsigned long long fl_bytes, fl_msgs;
static long long fl_count(const MPI_Status *st) {
#if defined(OPEN_MPI)
  return st->_cancelled ? -1 : (long long)st->_ucount;
#elif defined(MPICH_NUMVERSION) || defined(MPICH_VERSION)
  return st->count_hi_and_cancelled & 1 ? -1
       : (long long)((((unsigned long long)(unsigned)st->count_hi_and_cancelled >> 1) << 32) | (unsigned)st->count_lo);
#else
  int n = 0;
  return PMPI_Get_count(st, MPI_BYTE, &n) == MPI_SUCCESS ? n : -1;
#endif
}
static void floor_rate(int iters) {
  MPI_Request rq[2 * W];
  static MPI_Status st[2 * W];
  for (int i = 0; i < iters; i++) {
    for (int k = 0; k < W; k++) {
      PMPI_Irecv(rbuf + 8 * k, 8, MPI_CHAR, 0, k, MPI_COMM_SELF, &rq[k]);
      fl_note[k].req = rq[k];
      fl_note[k].w = fl_world;
    }
    for (int k = 0; k < W; k++) PMPI_Isend(sbuf + 8 * k, 8, MPI_CHAR, 0, k, MPI_COMM_SELF, &rq[W + k]);
    int found = 0;
    while (found < W && rq[found] == fl_note[found].req) found++;
    PMPI_Waitall(2 * W, rq, st);
    for (int k = 0; k < found; k++) {
      int src = st[k].MPI_SOURCE;
      long long c = src >= 0 ? fl_count(&st[k]) : -1;
      if (c < 0 || fl_note[k].w[src] < 0) continue;
      fl_bytes += (unsigned long long)c;
      fl_msgs++;
    }
  }
}

static void coll(const api_t *a, int iters) {
  double x = 1, y;
  for (int i = 0; i < iters; i++) a->allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_SELF);
}

/* the units callgrind measures: not inlined, one per pattern and side */
#define UNIT(p, side, api) __attribute__((noinline)) void side##_##p(int iters) { p(&api, iters); }
UNIT(rate, plain, PLAIN) UNIT(rate, shim, SHIM)
UNIT(pair, plain, PLAIN) UNIT(pair, shim, SHIM)
UNIT(coll, plain, PLAIN) UNIT(coll, shim, SHIM)
UNIT(lat, plain, PLAIN) UNIT(lat, shim, SHIM)
__attribute__((noinline)) void floor_unit(int iters) { floor_rate(iters); }

static double cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int iters = argc > 1 ? atoi(argv[1]) : 20000, rounds = argc > 2 ? atoi(argv[2]) : 15;
  struct { const char *name; int calls, div; void (*f[2])(int); } pat[] = {
    {"rate", 2 * W + 1, W, {plain_rate, shim_rate}},
    {"pair", 3, 1, {plain_pair, shim_pair}},
    {"coll", 1, 1, {plain_coll, shim_coll}},
#if defined(OPEN_MPI)
    {"lat", 2, 1, {plain_lat, shim_lat}},
#endif
    {"floor", 2 * W + 1, W, {plain_rate, floor_unit}},
  };
  double *v[2] = {malloc(sizeof(double) * (size_t)rounds), malloc(sizeof(double) * (size_t)rounds)};
  for (size_t p = 0; p < sizeof pat / sizeof pat[0]; p++) {
    int n = iters / pat[p].div + 1;
    pat[p].f[0](n / 10 + 1);
    pat[p].f[1](n / 10 + 1);
    for (int r = 0; r < rounds; r++)
      for (int j = 0; j < 2; j++) {
        int k = (r + j) % 2;
        double t0 = cpu_ns();
        pat[p].f[k](n);
        v[k][r] = (cpu_ns() - t0) / n;
      }
    qsort(v[0], (size_t)rounds, sizeof(double), cmp);
    qsort(v[1], (size_t)rounds, sizeof(double), cmp);
    printf("%s %d %.1f %.1f\n", pat[p].name, pat[p].calls, v[0][rounds / 2], v[1][rounds / 2]);
  }
  free(v[0]); free(v[1]);
  MPI_Finalize();
  return 0;
}
