/* pingpong.c -- OSU-style point-to-point figures for the shim overhead benchmark (2 ranks).
 *
 * usage: pingpong [MAX_BYTES=4194304] [SCALE=1] [ROUNDS=20] [SHIM_RANKS=2]
 *        (SCALE multiplies iteration counts; SHIM_RANKS=1: only rank 0 calls the MPI_ entry points in
 *        the "shim" blocks, rank 1 the PMPI_ ones throughout -- which rank's cost a figure pays)
 *
 * Side by side in one run: every figure is measured in ROUNDS rounds; each round runs one block of
 * iterations through the PMPI_ entry points (the MPI library itself: "plain") and one block through
 * the MPI_ entry points (the rankmap shim when it is LD_PRELOADed: "shim"), the order alternating
 * between rounds.  Both ranks switch in lockstep.  Interleaving at this granularity (milliseconds)
 * cancels most of the noise of a shared machine.  Without the shim both columns measure the same.
 *
 * Output (rank 0), medians over the rounds, each line followed by its rounds' own pairs
 * ("pairs <test> <bytes> <plain_1> <shim_1> <plain_2> <shim_2> ..."): a round's two blocks ran back to
 * back, so their difference is the steadiest figure of the shim's cost:
 *   lat  <bytes> <plain us> <shim us>      one-way latency, blocking Send/Recv ping-pong
 *   rate <bytes> <plain msg/s> <shim msg/s> osu_bw / osu_mbw_mr with one pair: windows of 64
 *                                           Isend (sender) and Irecv (receiver) + Waitall, 1-byte ack;
 *                                           MPI_STATUSES_IGNORE (the library then fills no status)
 *   osu  8 <plain msg/s> <shim msg/s>      the same at 8 B with a status array, as osu_mbw_mr and
 *                                           osu_bw pass to MPI_Waitall (reqstat)
 *   self 8 <plain ns> <shim ns>            Sendrecv of 8 bytes to the calling rank itself
 *   allr 8 <plain ns> <shim ns>            MPI_Allreduce of one double over both ranks: a collective
 *                                           on a real communicator (its signature is counted)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64
#define RATE_MAX 262144      /* message rate / bandwidth sizes: 8 B .. 256 KiB, x8 */

typedef struct {
  int (*send)(const void *, int, MPI_Datatype, int, int, MPI_Comm);
  int (*recv)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *);
  int (*isend)(const void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
  int (*irecv)(void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request *);
  int (*waitall)(int, MPI_Request *, MPI_Status *);
  int (*sendrecv)(const void *, int, MPI_Datatype, int, int, void *, int, MPI_Datatype, int, int, MPI_Comm, MPI_Status *);
  int (*allreduce)(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm);
} api_t;

static const api_t API[2] = {
  {PMPI_Send, PMPI_Recv, PMPI_Isend, PMPI_Irecv, PMPI_Waitall, PMPI_Sendrecv, PMPI_Allreduce},   /* plain */
  {MPI_Send, MPI_Recv, MPI_Isend, MPI_Irecv, MPI_Waitall, MPI_Sendrecv, MPI_Allreduce},         /* shim */
};

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int rank, shim_ranks = 2;
/* the entry points of column k (0 plain, 1 shim) on this rank */
static const api_t *api(int k) { return &API[rank < shim_ranks ? k : 0]; }

/* rank 0 prints the rounds' pairs, then the medians of both columns (median() sorts v in place) */
static void report(const char *test, long n, double *v[2], int rounds, int decimals) {
  if (rank != 0) return;
  printf("pairs %s %ld", test, n);
  for (int r = 0; r < rounds; r++) printf(" %.*f %.*f", decimals + 1, v[0][r], decimals + 1, v[1][r]);
  printf("\n%s %ld %.*f %.*f\n", test, n, decimals, median(v[0], rounds), decimals, median(v[1], rounds));
}
static char *buf, *wbuf;

static double lat_block(const api_t *a, long n, int iters) {
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) {
    if (rank == 0) {
      a->send(buf, (int)n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
      a->recv(buf, (int)n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      a->recv(buf, (int)n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      a->send(buf, (int)n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
    }
  }
  return (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);       /* us one-way */
}

static double rate_block(const api_t *a, long n, int windows, MPI_Status *st) {
  MPI_Request rq[WINDOW];
  double t0 = MPI_Wtime();
  for (int w = 0; w < windows; w++) {
    if (rank == 0) {
      for (int k = 0; k < WINDOW; k++) a->isend(buf, (int)n, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &rq[k]);
      a->waitall(WINDOW, rq, st);
      a->recv(buf, 1, MPI_CHAR, 1, 3, MPI_COMM_WORLD, st == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : st);
    } else {
      for (int k = 0; k < WINDOW; k++) a->irecv(wbuf + (size_t)k * (size_t)n, (int)n, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &rq[k]);
      a->waitall(WINDOW, rq, st);
      a->send(buf, 1, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
    }
  }
  return (double)windows * WINDOW / (MPI_Wtime() - t0);  /* messages per second */
}

static double self_block(const api_t *a, int iters) {
  char s[8] = {0}, r[8];
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) a->sendrecv(s, 8, MPI_CHAR, rank, 4, r, 8, MPI_CHAR, rank, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return (MPI_Wtime() - t0) * 1e9 / iters;               /* ns per call */
}

static double allr_block(const api_t *a, int iters) {
  double s = rank, r;
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) a->allreduce(&s, &r, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return (MPI_Wtime() - t0) * 1e9 / iters;               /* ns per call */
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long maxb = argc > 1 ? atol(argv[1]) : 4194304;
  int scale = argc > 2 ? atoi(argv[2]) : 1, rounds = argc > 3 ? atoi(argv[3]) : 20;
  if (argc > 4) shim_ranks = atoi(argv[4]);
  if (size != 2) { if (!rank) fprintf(stderr, "pingpong needs exactly 2 ranks\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
  buf = calloc((size_t)maxb, 1);
  wbuf = calloc((size_t)WINDOW * RATE_MAX, 1);
  double *v[2] = {malloc(sizeof(double) * (size_t)rounds), malloc(sizeof(double) * (size_t)rounds)};

  for (long n = 8; n <= maxb; n *= 2) {
    int iters = (n <= 8192 ? 1000 : n <= 262144 ? 100 : 10) * scale;
    lat_block(api(0), n, iters / 10 + 1);                /* warm-up */
    lat_block(api(1), n, iters / 10 + 1);
    for (int r = 0; r < rounds; r++)
      for (int j = 0; j < 2; j++) { int k = (r + j) % 2; v[k][r] = lat_block(api(k), n, iters); }
    report("lat", n, v, rounds, 4);
  }
  static MPI_Status st[WINDOW];
  for (long n = 8; n <= RATE_MAX && n <= maxb; n *= 8)
    for (int osu = 0; osu <= (n == 8); osu++) {      /* at 8 B also with statuses, as OSU asks */
      MPI_Status *s = osu ? st : MPI_STATUSES_IGNORE;
      int windows = (int)(100 * 8192 / (n > 8192 ? n : 8192)) * scale + 1;
      rate_block(api(0), n, windows / 10 + 1, s);
      rate_block(api(1), n, windows / 10 + 1, s);
      for (int r = 0; r < rounds; r++)
        for (int j = 0; j < 2; j++) { int k = (r + j) % 2; v[k][r] = rate_block(api(k), n, windows, s); }
      report(osu ? "osu" : "rate", n, v, rounds, 0);
    }
  {
    int iters = 20000 * scale;
    for (int r = 0; r < rounds; r++)
      for (int j = 0; j < 2; j++) { int k = (r + j) % 2; v[k][r] = self_block(api(k), iters); }
    report("self", 8, v, rounds, 1);
  }
  {
    int iters = 5000 * scale;
    allr_block(api(0), iters / 10 + 1);
    allr_block(api(1), iters / 10 + 1);
    for (int r = 0; r < rounds; r++)
      for (int j = 0; j < 2; j++) { int k = (r + j) % 2; v[k][r] = allr_block(api(k), iters); }
    report("allr", 8, v, rounds, 1);
  }
  free(buf); free(wbuf); free(v[0]); free(v[1]);
  MPI_Finalize();
  return 0;
}
