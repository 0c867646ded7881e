/*
 * mpi_bench.c -- MPI latency, bandwidth, bidirectional bandwidth and collectives, for
 * `rankmap bench mpi -- <launcher>`.  Built with the MPI's own mpicc; CUDA is loaded at run time.
 *
 * Buffers ("buffer" of each result):
 *   host           page-aligned host memory;
 *   device         device memory handed to MPI (only when the MPI is CUDA-aware);
 *   device-staged  device memory the program copies through pinned host memory around each MPI
 *                  call (cudaMemcpy D2H, MPI on the host copy, cudaMemcpy H2D): what an
 *                  application does with an MPI that is not CUDA-aware;
 *   device-ipc     rankmap's own path: each rank maps the peer's receive buffer with CUDA IPC
 *                  (handles exchanged over MPI) and copies into it with the copy engine; a 0-byte
 *                  MPI message then tells the peer the data is there.  Point-to-point only.
 * Point-to-point tests run between ranks 0 and 1 in the OSU way: latency = half the round trip of
 * a ping-pong; bandwidth = a window of messages then a 0-byte acknowledgement; bidirectional =
 * both ranks send a window at once.  Collectives time `iters` calls on every rank.
 * Results carry raw nanoseconds; rankmap computes microseconds and GB/s (bench_out.h).
 */
#define _GNU_SOURCE
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_out.h"
#include "bench_util.h"
#include "cudart_dl.h"
#include "mpi_aware.h"

enum { B_HOST, B_DEVICE, B_STAGED, B_IPC, B_N };
static const char *BNAME[B_N] = {"host", "device", "device-staged", "device-ipc"};
enum { T_LAT, T_BW, T_BIBW, T_ALLREDUCE, T_BCAST, T_REDUCE, T_ALLGATHER, T_ALLTOALL, T_REDSCAT, T_BARRIER, T_N };
static const char *TNAME[T_N] = {"latency", "bw", "bibw", "allreduce", "bcast", "reduce", "allgather",
                                 "alltoall", "reduce_scatter", "barrier"};
#define TAG_MSG 11
#define TAG_ACK 12
#define TAG_DONE 13
#define MAX_WINDOW 256

static int rank, nprocs;
static MPI_Comm pair = MPI_COMM_NULL;       /* ranks 0 and 1 */

/* options */
static size_t min_size = 8, max_size = (size_t)64 << 20, coll_max = (size_t)16 << 20;
static int trials = 3, window = 64;
static size_t max_window_bytes = (size_t)64 << 20;
static double lat_budget = 1 << 30, bw_budget = 4.0 * (1 << 30), coll_budget = 1 << 30;
static int max_lat_iters = 1000, max_bw_iters = 100, max_coll_iters = 1000;
static char tests[512] = "all", buffers[256] = "host,device,device-staged,device-ipc", cudart[1024] = "";
static char aware_opt[16] = "auto";

/* state */
static struct rmc C;
static int have_cuda;                       /* every rank has a GPU and the runtime */
static int aware;                           /* the MPI takes device pointers */
static int ipc_ok;                          /* ranks 0 and 1 mapped each other's buffers */
static int gpu = -1;
static rmc_stream S;
static char *h_s, *h_r;                     /* host buffers (max_size) */
static char *d_s, *d_r;                     /* device buffers (max_size) */
static char *st_s, *st_r;                   /* pinned staging (max(max_size, max_window_bytes)) */
static char *peer_r;                        /* the peer's d_r, mapped through CUDA IPC */
static char *hc_s, *hc_r, *dc_s, *dc_r, *stc_s, *stc_r;   /* collective buffers (coll_max * nprocs) */
static char zero;

static void parse(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) rmb_usage("option %s needs a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--min-size")) min_size = (size_t)rmb_option(a, v, 1);
    else if (!strcmp(a, "--max-size")) max_size = (size_t)rmb_option(a, v, 1);
    else if (!strcmp(a, "--coll-max-size")) coll_max = (size_t)rmb_option(a, v, 0);
    else if (!strcmp(a, "--trials")) trials = (int)rmb_option(a, v, 1);
    else if (!strcmp(a, "--window")) window = (int)rmb_option(a, v, 1);
    else if (!strcmp(a, "--max-window-bytes")) max_window_bytes = (size_t)rmb_option(a, v, 1);
    else if (!strcmp(a, "--latency-budget")) lat_budget = rmb_option(a, v, 1);
    else if (!strcmp(a, "--bw-budget")) bw_budget = rmb_option(a, v, 1);
    else if (!strcmp(a, "--coll-budget")) coll_budget = rmb_option(a, v, 1);
    else if (!strcmp(a, "--max-latency-iters")) max_lat_iters = (int)rmb_option(a, v, 1);
    else if (!strcmp(a, "--max-bw-iters")) max_bw_iters = (int)rmb_option(a, v, 1);
    else if (!strcmp(a, "--max-coll-iters")) max_coll_iters = (int)rmb_option(a, v, 1);
    else if (!strcmp(a, "--tests")) snprintf(tests, sizeof tests, "%s", v);
    else if (!strcmp(a, "--buffers")) snprintf(buffers, sizeof buffers, "%s", v);
    else if (!strcmp(a, "--cudart")) snprintf(cudart, sizeof cudart, "%s", v);
    else if (!strcmp(a, "--cuda-aware")) snprintf(aware_opt, sizeof aware_opt, "%s", v);
    else rmb_usage("unknown option %s", a);
  }
  if (window > MAX_WINDOW) rmb_usage("--window larger than %s", "256");
  if (trials > 64) rmb_usage("--trials larger than %s", "64");
  if (min_size > max_size) rmb_usage("--min-size is larger than --max-size%s", "");
  if (strcmp(aware_opt, "auto") && strcmp(aware_opt, "yes") && strcmp(aware_opt, "no"))
    rmb_usage("--cuda-aware takes auto, yes or no, not %s", aware_opt);
}

static int clampi(double x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : (int)x; }

static int window_for(size_t size) {
  size_t w = max_window_bytes / (size ? size : 1);
  if (w < 1) w = 1;
  return (int)(w < (size_t)window ? w : (size_t)window);
}

/* ---------------------------------------------------------------------- point-to-point */
static void lat_send(int b, size_t n, int peer) {
  switch (b) {
    case B_HOST: MP(MPI_Send(h_s, (int)n, MPI_BYTE, peer, TAG_MSG, pair)); break;
    case B_DEVICE: MP(MPI_Send(d_s, (int)n, MPI_BYTE, peer, TAG_MSG, pair)); break;
    case B_STAGED:
      CU(C.Memcpy(st_s, d_s, n, RMC_D2H));
      MP(MPI_Send(st_s, (int)n, MPI_BYTE, peer, TAG_MSG, pair));
      break;
    case B_IPC:
      CU(C.MemcpyAsync(peer_r, d_s, n, RMC_DEFAULT, S));
      CU(C.StreamSynchronize(S));
      MP(MPI_Send(&zero, 0, MPI_BYTE, peer, TAG_DONE, pair));
      break;
  }
}

static void lat_recv(int b, size_t n, int peer) {
  switch (b) {
    case B_HOST: MP(MPI_Recv(h_r, (int)n, MPI_BYTE, peer, TAG_MSG, pair, MPI_STATUS_IGNORE)); break;
    case B_DEVICE: MP(MPI_Recv(d_r, (int)n, MPI_BYTE, peer, TAG_MSG, pair, MPI_STATUS_IGNORE)); break;
    case B_STAGED:
      MP(MPI_Recv(st_r, (int)n, MPI_BYTE, peer, TAG_MSG, pair, MPI_STATUS_IGNORE));
      CU(C.Memcpy(d_r, st_r, n, RMC_H2D));
      break;
    case B_IPC: MP(MPI_Recv(&zero, 0, MPI_BYTE, peer, TAG_DONE, pair, MPI_STATUS_IGNORE)); break;
  }
}

static long long run_latency(int b, size_t n, int iters, int skip) {
  int peer = 1 - rank;
  long long t0 = 0;
  MP(MPI_Barrier(pair));
  for (int i = 0; i < iters + skip; i++) {
    if (i == skip) t0 = rmb_now_ns();
    if (rank == 0) {
      lat_send(b, n, peer);
      lat_recv(b, n, peer);
    } else {
      lat_recv(b, n, peer);
      lat_send(b, n, peer);
    }
  }
  return rmb_now_ns() - t0;
}

static long long run_bw(int b, size_t n, int w, int iters, int skip) {
  MPI_Request req[MAX_WINDOW];
  long long t0 = 0;
  MP(MPI_Barrier(pair));
  for (int i = 0; i < iters + skip; i++) {
    if (i == skip) t0 = rmb_now_ns();
    if (rank == 0) {
      if (b == B_IPC) {
        for (int k = 0; k < w; k++) CU(C.MemcpyAsync(peer_r, d_s, n, RMC_DEFAULT, S));
        CU(C.StreamSynchronize(S));
        MP(MPI_Send(&zero, 0, MPI_BYTE, 1, TAG_DONE, pair));
      } else {
        for (int k = 0; k < w; k++) {
          char *buf = b == B_HOST ? h_s : b == B_DEVICE ? d_s : st_s + (size_t)k * n;
          if (b == B_STAGED) CU(C.Memcpy(buf, d_s, n, RMC_D2H));
          MP(MPI_Isend(buf, (int)n, MPI_BYTE, 1, TAG_MSG, pair, &req[k]));
        }
        MP(MPI_Waitall(w, req, MPI_STATUSES_IGNORE));
      }
      MP(MPI_Recv(&zero, 0, MPI_BYTE, 1, TAG_ACK, pair, MPI_STATUS_IGNORE));
    } else {
      if (b == B_IPC) {
        MP(MPI_Recv(&zero, 0, MPI_BYTE, 0, TAG_DONE, pair, MPI_STATUS_IGNORE));
      } else {
        for (int k = 0; k < w; k++) {
          char *buf = b == B_HOST ? h_r : b == B_DEVICE ? d_r : st_r + (size_t)k * n;
          MP(MPI_Irecv(buf, (int)n, MPI_BYTE, 0, TAG_MSG, pair, &req[k]));
        }
        MP(MPI_Waitall(w, req, MPI_STATUSES_IGNORE));
        if (b == B_STAGED)
          for (int k = 0; k < w; k++) CU(C.Memcpy(d_r, st_r + (size_t)k * n, n, RMC_H2D));
      }
      MP(MPI_Send(&zero, 0, MPI_BYTE, 0, TAG_ACK, pair));
    }
  }
  return rmb_now_ns() - t0;
}

static long long run_bibw(int b, size_t n, int w, int iters, int skip) {
  MPI_Request req[2 * MAX_WINDOW];
  int peer = 1 - rank;
  long long t0 = 0;
  MP(MPI_Barrier(pair));
  for (int i = 0; i < iters + skip; i++) {
    if (i == skip) t0 = rmb_now_ns();
    if (b == B_IPC) {
      for (int k = 0; k < w; k++) CU(C.MemcpyAsync(peer_r, d_s, n, RMC_DEFAULT, S));
      CU(C.StreamSynchronize(S));
      MP(MPI_Sendrecv(&zero, 0, MPI_BYTE, peer, TAG_DONE, &zero, 0, MPI_BYTE, peer, TAG_DONE, pair,
                      MPI_STATUS_IGNORE));
      continue;
    }
    for (int k = 0; k < w; k++) {
      char *buf = b == B_HOST ? h_r : b == B_DEVICE ? d_r : st_r + (size_t)k * n;
      MP(MPI_Irecv(buf, (int)n, MPI_BYTE, peer, TAG_MSG, pair, &req[k]));
    }
    for (int k = 0; k < w; k++) {
      char *buf = b == B_HOST ? h_s : b == B_DEVICE ? d_s : st_s + (size_t)k * n;
      if (b == B_STAGED) CU(C.Memcpy(buf, d_s, n, RMC_D2H));
      MP(MPI_Isend(buf, (int)n, MPI_BYTE, peer, TAG_MSG, pair, &req[w + k]));
    }
    MP(MPI_Waitall(2 * w, req, MPI_STATUSES_IGNORE));
    if (b == B_STAGED)
      for (int k = 0; k < w; k++) CU(C.Memcpy(d_r, st_r + (size_t)k * n, n, RMC_H2D));
  }
  return rmb_now_ns() - t0;
}

/* The receive buffer's first and last byte after a run must be the peer's send pattern. */
static unsigned char fill_of(int r) { return r == 0 ? 0xA5 : 0x5A; }

static void set_bytes(int b, char *host, char *dev, size_t n, int value) {
  if (b == B_HOST) {
    memset(host, value, n);
  } else {
    CU(C.Memset(dev, value, n));
    CU(C.DeviceSynchronize());     /* cudaMemset may return before it is done; the peer writes next */
  }
}

static void check_received(int b, size_t n, const char *test) {
  unsigned char first = 0, last = 0;
  if (b == B_HOST) {
    first = (unsigned char)h_r[0];
    last = (unsigned char)h_r[n - 1];
  } else {
    CU(C.Memcpy(&first, d_r, 1, RMC_D2H));
    CU(C.Memcpy(&last, d_r + n - 1, 1, RMC_D2H));
  }
  unsigned char want = fill_of(1 - rank);
  if (first != want || last != want) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s %s %zu B: received bytes 0x%02x..0x%02x, the peer sent 0x%02x", test, BNAME[b], n,
             first, last, want);
    rmb_die("data check", -1, msg);
  }
}

static void emit(const char *test, int b, size_t size, int iters, int w, const long long *ns, const long long *mn,
                 const long long *mx) {
  rmb_line l;
  rmb_begin(&l, "result");
  rmb_str(&l, "benchmark", test);
  rmb_str(&l, "buffer", BNAME[b]);
  rmb_int(&l, "size", (long long)size);
  rmb_int(&l, "iters", iters);
  if (w) rmb_int(&l, "window", w);
  rmb_int(&l, "ranks", nprocs);
  rmb_ints(&l, "ns", ns, trials);
  if (mn) rmb_ints(&l, "ns_min", mn, trials);
  if (mx) rmb_ints(&l, "ns_max", mx, trials);
  rmb_end(&l);
}

static void pt2pt(int t, int b) {
  long long ns[64];
  for (size_t n = min_size; n <= max_size; n *= 2) {
    int iters, skip, w = 0;
    if (t == T_LAT) {
      iters = clampi(lat_budget / (double)n, 10, max_lat_iters);
      skip = iters / 10 > 2 ? iters / 10 : 2;
    } else {
      w = window_for(n);
      iters = clampi(bw_budget / ((double)n * w), 5, max_bw_iters);
      skip = iters / 10 > 1 ? iters / 10 : 1;
    }
    if (rank < 2) {
      if (t == T_LAT) set_bytes(b, h_r, d_r, n, 0);
      for (int k = 0; k < trials; k++) {
        if (t == T_LAT) ns[k] = run_latency(b, n, iters, skip);
        else if (t == T_BW) ns[k] = run_bw(b, n, w, iters, skip);
        else ns[k] = run_bibw(b, n, w, iters, skip);
      }
      if (t == T_LAT) check_received(b, n, TNAME[t]);
      if (rank == 0) emit(TNAME[t], b, n, iters, w, ns, NULL, NULL);
    }
    MP(MPI_Barrier(MPI_COMM_WORLD));
  }
}

/* ---------------------------------------------------------------------- collectives */
/* Bytes copied in (device -> host) and out (host -> device) around one staged call. */
static void staged_bytes(int t, size_t n, size_t *in, size_t *out) {
  size_t all = n * (size_t)nprocs;
  *in = *out = 0;
  switch (t) {
    case T_ALLREDUCE: *in = n; *out = n; break;
    case T_BCAST: if (rank == 0) *in = n; else *out = n; break;
    case T_REDUCE: *in = n; if (rank == 0) *out = n; break;
    case T_ALLGATHER: *in = n; *out = all; break;
    case T_ALLTOALL: *in = all; *out = all; break;
    case T_REDSCAT: *in = all; *out = n; break;
    default: break;
  }
}

static void one_coll(int t, int b, size_t n) {
  char *s = b == B_HOST ? hc_s : b == B_DEVICE ? dc_s : stc_s;
  char *r = b == B_HOST ? hc_r : b == B_DEVICE ? dc_r : stc_r;
  size_t in = 0, out = 0;
  if (b == B_STAGED) {
    staged_bytes(t, n, &in, &out);
    if (in) CU(C.Memcpy(stc_s, dc_s, in, RMC_D2H));
  }
  int count = (int)(n / sizeof(float)), bytes = (int)n;
  switch (t) {
    case T_ALLREDUCE: MP(MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)); break;
    case T_BCAST: MP(MPI_Bcast(rank == 0 ? s : r, bytes, MPI_BYTE, 0, MPI_COMM_WORLD)); break;
    case T_REDUCE: MP(MPI_Reduce(s, r, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD)); break;
    case T_ALLGATHER: MP(MPI_Allgather(s, bytes, MPI_BYTE, r, bytes, MPI_BYTE, MPI_COMM_WORLD)); break;
    case T_ALLTOALL: MP(MPI_Alltoall(s, bytes, MPI_BYTE, r, bytes, MPI_BYTE, MPI_COMM_WORLD)); break;
    case T_REDSCAT: MP(MPI_Reduce_scatter_block(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)); break;
    case T_BARRIER: MP(MPI_Barrier(MPI_COMM_WORLD)); break;
    default: break;
  }
  if (b == B_STAGED && out) CU(C.Memcpy(dc_r, stc_r, out, RMC_H2D));
}

static void collective(int t, int b) {
  long long ns[64], mn[64], mx[64];
  int reduces = t == T_ALLREDUCE || t == T_REDUCE || t == T_REDSCAT;
  size_t lo = t == T_BARRIER ? 0 : min_size, hi = t == T_BARRIER ? 0 : coll_max;
  for (size_t n = lo; n <= hi; n = n ? n * 2 : 1) {
    if (reduces && n < sizeof(float)) continue;        /* no whole float to reduce */
    int iters = clampi(coll_budget / (double)(n ? n : 1), 10, max_coll_iters);
    int skip = iters / 10 > 2 ? iters / 10 : 2;
    for (int k = 0; k < trials; k++) {
      long long t0 = 0;
      for (int i = 0; i < iters + skip; i++) {
        if (i == skip) {
          MP(MPI_Barrier(MPI_COMM_WORLD));
          t0 = rmb_now_ns();
        }
        one_coll(t, b, n);
      }
      long long mine = rmb_now_ns() - t0, sum = 0, lo_ns = 0, hi_ns = 0;
      MP(MPI_Reduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
      MP(MPI_Reduce(&mine, &lo_ns, 1, MPI_LONG_LONG, MPI_MIN, 0, MPI_COMM_WORLD));
      MP(MPI_Reduce(&mine, &hi_ns, 1, MPI_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD));
      ns[k] = sum / nprocs;
      mn[k] = lo_ns;
      mx[k] = hi_ns;
    }
    if (rank == 0) emit(TNAME[t], b, n, iters, 0, ns, mn, mx);
    if (n == 0) break;
  }
}

/* ---------------------------------------------------------------------- setup */
static void *host_alloc(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, n ? n : 1) != 0) rmb_die("posix_memalign", -1, "out of host memory");
  memset(p, 0, n);
  return p;
}

/* Load CUDA, pick this rank's GPU (local rank modulo GPUs), agree on whether all ranks have one. */
static void setup_cuda(char *why, size_t nwhy) {
  int mine = 0;
  why[0] = 0;
  if (!strcmp(cudart, "none") || !cudart[0]) {
    snprintf(why, nwhy, "no CUDA runtime library found (device buffers need libcudart)");
  } else if (rmc_load(&C, cudart, why, nwhy) == 0) {
    rmb_cuda_error = C.GetErrorString;
    int count = 0, e = C.GetDeviceCount(&count);
    if (e != 0 || count == 0) {
      snprintf(why, nwhy, "no CUDA device: %s", e ? C.GetErrorString(e) : "cudaGetDeviceCount says 0");
    } else {
      MPI_Comm node;
      int local = 0;
      MP(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
      MP(MPI_Comm_rank(node, &local));
      MP(MPI_Comm_free(&node));
      gpu = local % count;
      e = C.SetDevice(gpu);
      if (e) snprintf(why, nwhy, "cudaSetDevice(%d): %s", gpu, C.GetErrorString(e));
      else mine = 1;
    }
  }
  int all = 0;
  MP(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  /* tell rank 0 why (the first rank without a GPU says it) */
  int first_bad = mine ? nprocs : rank, who = 0;
  MP(MPI_Allreduce(&first_bad, &who, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!all && who != 0) {
    if (rank == who) MP(MPI_Send(why, (int)nwhy, MPI_CHAR, 0, 99, MPI_COMM_WORLD));
    if (rank == 0) MP(MPI_Recv(why, (int)nwhy, MPI_CHAR, who, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  }
  have_cuda = all;
}

/* Map each other's device receive buffer (ranks 0 and 1); 1 if both sides succeeded. */
static int setup_ipc(char *why, size_t nwhy) {
  struct { int ok; char why[256]; rmc_ipc_handle h; } me, peer;
  int mine = 1;
  why[0] = 0;
  if (rank < 2) {
    memset(&me, 0, sizeof me);
    int e = C.IpcGetMemHandle(&me.h, d_r);
    me.ok = e == 0;
    if (e) snprintf(me.why, sizeof me.why, "rank %d: cudaIpcGetMemHandle: %s", rank, C.GetErrorString(e));
    MP(MPI_Sendrecv(&me, sizeof me, MPI_BYTE, 1 - rank, TAG_MSG, &peer, sizeof peer, MPI_BYTE, 1 - rank, TAG_MSG,
                    pair, MPI_STATUS_IGNORE));
    if (!me.ok || !peer.ok) {
      snprintf(why, nwhy, "%s", me.ok ? peer.why : me.why);
      mine = 0;
    } else {
      e = C.IpcOpenMemHandle((void **)&peer_r, peer.h, RMC_IPC_LAZY_PEER);
      if (e) {
        snprintf(why, nwhy, "rank %d: cudaIpcOpenMemHandle: %s", rank, C.GetErrorString(e));
        mine = 0;
        peer_r = NULL;
      }
    }
  }
  int all = 0;
  MP(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!all && rank < 2) {   /* rank 0 reports rank 1's reason when only rank 1 failed */
    char other[512] = "";
    MP(MPI_Sendrecv(why, (int)sizeof other, MPI_CHAR, 1 - rank, TAG_ACK, other, (int)sizeof other, MPI_CHAR, 1 - rank,
                    TAG_ACK, pair, MPI_STATUS_IGNORE));
    if (!why[0]) snprintf(why, nwhy, "%s", other);
  }
  if (!all && peer_r) {
    C.IpcCloseMemHandle(peer_r);
    peer_r = NULL;
  }
  return all;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  rmb_rank = rank;
  parse(argc, argv);
  MP(MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair));

  char lib[MPI_MAX_LIBRARY_VERSION_STRING], how[512], why_cuda[512], why_ipc[512] = "";
  int len = 0;
  MPI_Get_library_version(lib, &len);
  for (char *p = lib; *p; p++)
    if (*p == '\n' || *p == '\t') *p = ' ';
  int detected = rm_cuda_aware(how, sizeof how);
  aware = !strcmp(aware_opt, "yes") ? 1 : !strcmp(aware_opt, "no") ? 0 : detected;
  setup_cuda(why_cuda, sizeof why_cuda);

  /* the buffers */
  size_t stage = max_size > max_window_bytes ? max_size : max_window_bytes;
  size_t cbytes = coll_max * (size_t)nprocs;
  int want_coll = 0;
  for (int t = T_ALLREDUCE; t < T_N; t++) want_coll |= rmb_listed(tests, TNAME[t]);
  h_s = host_alloc(max_size);
  h_r = host_alloc(max_size);
  memset(h_s, fill_of(rank), max_size);
  if (want_coll) {
    hc_s = host_alloc(cbytes);
    hc_r = host_alloc(cbytes);
  }
  int run_b[B_N] = {0};
  run_b[B_HOST] = rmb_listed(buffers, "host");
  if (have_cuda) {
    CU(C.StreamCreateWithFlags(&S, RMC_STREAM_NON_BLOCKING));
    CU(C.Malloc((void **)&d_s, max_size));
    CU(C.Malloc((void **)&d_r, max_size));
    CU(C.Memset(d_s, fill_of(rank), max_size));
    CU(C.DeviceSynchronize());
    CU(C.MallocHost((void **)&st_s, stage));
    CU(C.MallocHost((void **)&st_r, stage));
    if (want_coll) {
      CU(C.Malloc((void **)&dc_s, cbytes ? cbytes : 1));
      CU(C.Malloc((void **)&dc_r, cbytes ? cbytes : 1));
      CU(C.MallocHost((void **)&stc_s, cbytes ? cbytes : 1));
      CU(C.MallocHost((void **)&stc_r, cbytes ? cbytes : 1));
    }
    run_b[B_DEVICE] = aware && rmb_listed(buffers, "device");
    run_b[B_STAGED] = rmb_listed(buffers, "device-staged");
    if (rmb_listed(buffers, "device-ipc") && nprocs >= 2) run_b[B_IPC] = ipc_ok = setup_ipc(why_ipc, sizeof why_ipc);
  }

  /* what this run is */
  int pcis_n = 32;
  char pci[32] = "";
  if (have_cuda && C.DeviceGetPCIBusId(pci, pcis_n, gpu) != 0) pci[0] = 0;
  char host[MPI_MAX_PROCESSOR_NAME];
  int hl = 0;
  MPI_Get_processor_name(host, &hl);
  char *all_pci = rank == 0 ? malloc((size_t)nprocs * 32) : NULL;
  char *all_host = rank == 0 ? malloc((size_t)nprocs * MPI_MAX_PROCESSOR_NAME) : NULL;
  int *all_gpu = rank == 0 ? malloc((size_t)nprocs * sizeof(int)) : NULL;
  MP(MPI_Gather(pci, 32, MPI_CHAR, all_pci, 32, MPI_CHAR, 0, MPI_COMM_WORLD));
  MP(MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all_host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD));
  MP(MPI_Gather(&gpu, 1, MPI_INT, all_gpu, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (rank == 0) {
    rmb_line l;
    int rt = 0, dv = 0;
    if (have_cuda) {
      C.RuntimeGetVersion(&rt);
      C.DriverGetVersion(&dv);
    }
    rmb_begin(&l, "info");
    rmb_str(&l, "program", "mpi");
    rmb_int(&l, "format", RMB_FORMAT);
    rmb_str(&l, "mpi", lib);
    rmb_int(&l, "ranks", nprocs);
    rmb_int(&l, "cuda_aware", aware);
    rmb_int(&l, "cuda_aware_detected", detected);
    rmb_str(&l, "cuda_aware_how", how);
    rmb_int(&l, "cuda", have_cuda);
    rmb_int(&l, "cuda_runtime", rt);
    rmb_int(&l, "cuda_driver", dv);
    rmb_end(&l);
    for (int r = 0; r < nprocs; r++) {
      rmb_begin(&l, "rank");
      rmb_int(&l, "rank", r);
      rmb_str(&l, "host", all_host + (size_t)r * MPI_MAX_PROCESSOR_NAME);
      rmb_int(&l, "gpu", all_gpu[r]);
      rmb_str(&l, "pci", all_pci + (size_t)r * 32);
      rmb_end(&l);
    }
    if (!have_cuda && (rmb_listed(buffers, "device") || rmb_listed(buffers, "device-staged") || rmb_listed(buffers, "device-ipc")))
      rmb_skip("device buffers", "%s", why_cuda);
    if (have_cuda && rmb_listed(buffers, "device") && !aware)
      rmb_skip("device", "the MPI is not CUDA-aware (%s): device buffers go through host staging instead", how);
    if (have_cuda && rmb_listed(buffers, "device-ipc") && !run_b[B_IPC])
      rmb_skip("device-ipc", "%s", nprocs < 2 ? "needs two ranks" : why_ipc);
    if (nprocs < 2) rmb_skip("point-to-point", "needs two ranks, the job has one");
    else if (nprocs > 2) rmb_note("point-to-point tests run between ranks 0 and 1; ranks 2-%d wait", nprocs - 1);
    if (have_cuda && nprocs >= 2 && all_gpu[0] == all_gpu[1] && !strcmp(all_host, all_host + MPI_MAX_PROCESSOR_NAME))
      rmb_note("ranks 0 and 1 share GPU %d: device-to-device figures do not cross a GPU link", all_gpu[0]);
  }
  free(all_pci);
  free(all_host);
  free(all_gpu);

  for (int t = 0; t < T_N; t++) {
    if (!rmb_listed(tests, TNAME[t])) continue;
    for (int b = 0; b < B_N; b++) {
      if (!run_b[b]) continue;
      if (t <= T_BIBW) {
        if (nprocs >= 2) pt2pt(t, b);
      } else if (b != B_IPC && (t != T_BARRIER || b == B_HOST)) {
        collective(t, b);
      }
    }
  }

  if (peer_r) CU(C.IpcCloseMemHandle(peer_r));
  MP(MPI_Barrier(MPI_COMM_WORLD));
  if (have_cuda) {
    CU(C.Free(d_s));
    CU(C.Free(d_r));
    CU(C.FreeHost(st_s));
    CU(C.FreeHost(st_r));
    if (want_coll) {
      CU(C.Free(dc_s));
      CU(C.Free(dc_r));
      CU(C.FreeHost(stc_s));
      CU(C.FreeHost(stc_r));
    }
    CU(C.StreamDestroy(S));
  }
  free(h_s);
  free(h_r);
  free(hc_s);
  free(hc_r);
  if (rank == 0) {
    rmb_line l;
    rmb_begin(&l, "info");
    rmb_str(&l, "done", "mpi");
    rmb_end(&l);
  }
  if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
  MPI_Finalize();
  return 0;
}
