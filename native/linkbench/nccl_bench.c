/*
 * nccl_bench.c -- NCCL collectives and send/recv, and the same collectives through MPI on the same
 * GPUs, for `rankmap bench nccl`.  NCCL and the CUDA runtime are loaded with dlopen: no build
 * dependency on either.
 *
 * Two builds of this one file:
 *   plain (cc)           one process drives every GPU (ncclCommInitAll), like nccl-tests -g N;
 *   -DRM_WITH_MPI (mpicc) one process per GPU under an MPI launcher (ncclCommInitRank, the unique
 *                        id broadcast over MPI), and the MPI collectives on the same device buffers:
 *                        handed to MPI when it is CUDA-aware, else staged through pinned host memory.
 *
 * Sizes, times and bandwidths follow nccl-tests' definitions: float32, sum, out of place; "size"
 * is the larger of the send and receive bytes of one rank; time = host clock around `iters`
 * back-to-back operations and the stream synchronisation, divided by `iters`, averaged over the
 * ranks; rankmap turns that into algbw = size / time and busbw = algbw x the operation's factor.
 * After each timed size the receive buffer is checked against the known result (every rank sends
 * rank + 1 in every element).
 */
#define _GNU_SOURCE
#ifdef RM_WITH_MPI
#include <mpi.h>
#include "mpi_aware.h"
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_out.h"
#include "bench_util.h"
#include "cudart_dl.h"

#define MAX_LOCAL 64

/* ---------------------------------------------------------------------- the NCCL ABI used here */
typedef void *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

struct nccl {
  void *lib;
  int (*GetVersion)(int *);
  int (*GetUniqueId)(ncclUniqueId *);
  int (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  int (*CommInitAll)(ncclComm_t *, int, const int *);
  int (*CommDestroy)(ncclComm_t);
  int (*AllReduce)(const void *, void *, size_t, int, int, ncclComm_t, rmc_stream);
  int (*AllGather)(const void *, void *, size_t, int, ncclComm_t, rmc_stream);
  int (*ReduceScatter)(const void *, void *, size_t, int, int, ncclComm_t, rmc_stream);
  int (*Broadcast)(const void *, void *, size_t, int, int, ncclComm_t, rmc_stream);
  int (*Reduce)(const void *, void *, size_t, int, int, int, ncclComm_t, rmc_stream);
  int (*Send)(const void *, size_t, int, int, ncclComm_t, rmc_stream);
  int (*Recv)(void *, size_t, int, int, ncclComm_t, rmc_stream);
  int (*GroupStart)(void);
  int (*GroupEnd)(void);
  const char *(*GetErrorString)(int);
};

static int nccl_load(struct nccl *n, const char *path, char *why, size_t nwhy) {
  memset(n, 0, sizeof *n);
  if (!(n->lib = rmc_open(path, "NCCL", why, nwhy))) return -1;
#define NSYM(field, name) RMC_DLSYM(n->lib, n->field, name, path, why, nwhy)
  NSYM(GetVersion, "ncclGetVersion");
  NSYM(GetUniqueId, "ncclGetUniqueId");
  NSYM(CommInitRank, "ncclCommInitRank");
  NSYM(CommInitAll, "ncclCommInitAll");
  NSYM(CommDestroy, "ncclCommDestroy");
  NSYM(AllReduce, "ncclAllReduce");
  NSYM(AllGather, "ncclAllGather");
  NSYM(ReduceScatter, "ncclReduceScatter");
  NSYM(Broadcast, "ncclBroadcast");
  NSYM(Reduce, "ncclReduce");
  NSYM(Send, "ncclSend");
  NSYM(Recv, "ncclRecv");
  NSYM(GroupStart, "ncclGroupStart");
  NSYM(GroupEnd, "ncclGroupEnd");
  NSYM(GetErrorString, "ncclGetErrorString");
#undef NSYM
  return 0;
}

/* ---------------------------------------------------------------------- state */
enum { O_ALLREDUCE, O_ALLGATHER, O_REDSCAT, O_BCAST, O_REDUCE, O_ALLTOALL, O_SENDRECV, O_N };
static const char *ONAME[O_N] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall",
                                 "sendrecv"};

static struct rmc C;
static struct nccl N;
static int have_nccl;
#ifdef RM_WITH_MPI
static int world = 1;
#endif
static int nlocal = 1, nranks = 1;         /* GPUs this process drives; ranks of the communicator */
static struct {
  int dev, rank;
  ncclComm_t comm;
  rmc_stream s;
  float *sbuf, *rbuf;
} L[MAX_LOCAL];
static float *hs, *hr;                     /* pinned staging for MPI without CUDA support */

static size_t min_size = 8, max_size = (size_t)128 << 20, mpi_max = (size_t)64 << 20;
static double factor = 2;
static int iters = 20, warmup = 5, trials = 5, want_gpus = 0, check = 1, mpi_ops = 1;
static char ops[256] = "all", cudart[1024] = "", ncclpath[1024] = "", aware_opt[16] = "auto";

static void nck(int e, const char *call) {
  if (e) rmb_die(call, e, N.GetErrorString ? N.GetErrorString(e) : "NCCL error");
}
#define NC(x) nck((x), #x)

static void parse(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) rmb_usage("option %s needs a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--min-size")) min_size = (size_t)rmb_option(a, v, 1);
    else if (!strcmp(a, "--max-size")) max_size = (size_t)rmb_option(a, v, 1);
    else if (!strcmp(a, "--step-factor")) factor = rmb_option(a, v, 1.01);
    else if (!strcmp(a, "--iters")) iters = (int)rmb_option(a, v, 1);
    else if (!strcmp(a, "--warmup")) warmup = (int)rmb_option(a, v, 0);
    else if (!strcmp(a, "--trials")) trials = (int)rmb_option(a, v, 1);
    else if (!strcmp(a, "--gpus")) want_gpus = (int)rmb_option(a, v, 0);
    else if (!strcmp(a, "--check")) check = (int)rmb_option(a, v, 0);
    else if (!strcmp(a, "--ops")) snprintf(ops, sizeof ops, "%s", v);
    else if (!strcmp(a, "--cudart")) snprintf(cudart, sizeof cudart, "%s", v);
    else if (!strcmp(a, "--nccl")) snprintf(ncclpath, sizeof ncclpath, "%s", v);
    else if (!strcmp(a, "--mpi-ops")) mpi_ops = (int)rmb_option(a, v, 0);
    else if (!strcmp(a, "--mpi-max-size")) mpi_max = (size_t)rmb_option(a, v, 0);
    else if (!strcmp(a, "--cuda-aware")) snprintf(aware_opt, sizeof aware_opt, "%s", v);
    else rmb_usage("unknown option %s", a);
  }
  if (trials > 64) rmb_usage("--trials larger than %s", "64");
  if (min_size > max_size) rmb_usage("--min-size is larger than --max-size%s", "");
  if (strcmp(aware_opt, "auto") && strcmp(aware_opt, "yes") && strcmp(aware_opt, "no"))
    rmb_usage("--cuda-aware takes auto, yes or no, not %s", aware_opt);
  for (int o = 0, any = 0; o <= O_N; o++) {
    if (o == O_N) {
      if (!any) rmb_usage("--ops names no known operation: %s", ops);
      break;
    }
    any |= rmb_listed(ops, ONAME[o]);
  }
}

/* ---------------------------------------------------------------------- sizes, as nccl-tests counts them */
struct shape {
  size_t count;      /* elements passed to the call (per peer for all_gather/alltoall/reduce_scatter) */
  size_t sbytes;     /* bytes each rank sends from */
  size_t rbytes;     /* bytes each rank receives into */
  size_t size;       /* the reported size: max(sbytes, rbytes) */
};

static struct shape shape_of(int op, size_t size) {
  struct shape s = {0, 0, 0, 0};
  size_t n = (size_t)nranks, count = size / sizeof(float);
  size_t per = (count / n) & ~(size_t)3;            /* 16-byte aligned blocks per rank */
  switch (op) {
    case O_ALLGATHER: s.count = per; s.sbytes = per * 4; s.rbytes = per * 4 * n; break;
    case O_REDSCAT: s.count = per; s.sbytes = per * 4 * n; s.rbytes = per * 4; break;
    case O_ALLTOALL: s.count = per; s.sbytes = s.rbytes = per * 4 * n; break;
    default: s.count = count; s.sbytes = s.rbytes = count * 4; break;
  }
  s.size = s.sbytes > s.rbytes ? s.sbytes : s.rbytes;
  return s;
}

/* ---------------------------------------------------------------------- NCCL */
static void nccl_issue(int op, int l, const struct shape *s) {
  ncclComm_t c = L[l].comm;
  rmc_stream st = L[l].s;
  float *sb = L[l].sbuf, *rb = L[l].rbuf;
  int r = L[l].rank;
  switch (op) {
    case O_ALLREDUCE: NC(N.AllReduce(sb, rb, s->count, NCCL_FLOAT32, NCCL_SUM, c, st)); break;
    case O_ALLGATHER: NC(N.AllGather(sb, rb, s->count, NCCL_FLOAT32, c, st)); break;
    case O_REDSCAT: NC(N.ReduceScatter(sb, rb, s->count, NCCL_FLOAT32, NCCL_SUM, c, st)); break;
    case O_BCAST: NC(N.Broadcast(sb, rb, s->count, NCCL_FLOAT32, 0, c, st)); break;
    case O_REDUCE: NC(N.Reduce(sb, rb, s->count, NCCL_FLOAT32, NCCL_SUM, 0, c, st)); break;
    case O_ALLTOALL:
      NC(N.GroupStart());
      for (int p = 0; p < nranks; p++) {
        NC(N.Send(sb + (size_t)p * s->count, s->count, NCCL_FLOAT32, p, c, st));
        NC(N.Recv(rb + (size_t)p * s->count, s->count, NCCL_FLOAT32, p, c, st));
      }
      NC(N.GroupEnd());
      break;
    case O_SENDRECV:
      NC(N.GroupStart());
      NC(N.Send(sb, s->count, NCCL_FLOAT32, (r + 1) % nranks, c, st));
      NC(N.Recv(rb, s->count, NCCL_FLOAT32, (r + nranks - 1) % nranks, c, st));
      NC(N.GroupEnd());
      break;
  }
}

static void nccl_once(int op, const struct shape *s) {
  if (nlocal > 1) NC(N.GroupStart());
  for (int l = 0; l < nlocal; l++) {
    if (nlocal > 1) CU(C.SetDevice(L[l].dev));
    nccl_issue(op, l, s);
  }
  if (nlocal > 1) NC(N.GroupEnd());
}

static void sync_all(void) {
  for (int l = 0; l < nlocal; l++) CU(C.StreamSynchronize(L[l].s));
}

/* ---------------------------------------------------------------------- MPI on the same GPUs */
#ifdef RM_WITH_MPI
static int aware;

static void mpi_once(int op, const struct shape *s) {
  int r = rmb_rank, n = nranks, cnt = (int)s->count;
  float *sb = aware ? L[0].sbuf : hs, *rb = aware ? L[0].rbuf : hr;
  size_t in = s->sbytes, out = s->rbytes;
  if (op == O_BCAST) {
    in = r == 0 ? s->sbytes : 0;
    out = r == 0 ? 0 : s->rbytes;
  }
  if (op == O_REDUCE && r != 0) out = 0;
  if (!aware && in) CU(C.Memcpy(hs, L[0].sbuf, in, RMC_D2H));
  switch (op) {
    case O_ALLREDUCE: MP(MPI_Allreduce(sb, rb, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)); break;
    case O_ALLGATHER: MP(MPI_Allgather(sb, cnt, MPI_FLOAT, rb, cnt, MPI_FLOAT, MPI_COMM_WORLD)); break;
    case O_REDSCAT: MP(MPI_Reduce_scatter_block(sb, rb, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)); break;
    case O_BCAST: MP(MPI_Bcast(r == 0 ? sb : rb, cnt, MPI_FLOAT, 0, MPI_COMM_WORLD)); break;
    case O_REDUCE: MP(MPI_Reduce(sb, rb, cnt, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD)); break;
    case O_ALLTOALL: MP(MPI_Alltoall(sb, cnt, MPI_FLOAT, rb, cnt, MPI_FLOAT, MPI_COMM_WORLD)); break;
    case O_SENDRECV:
      MP(MPI_Sendrecv(sb, cnt, MPI_FLOAT, (r + 1) % n, 21, rb, cnt, MPI_FLOAT, (r + n - 1) % n, 21, MPI_COMM_WORLD,
                      MPI_STATUS_IGNORE));
      break;
  }
  if (!aware && out) CU(C.Memcpy(L[0].rbuf, hr, out, RMC_H2D));
}
#endif

/* ---------------------------------------------------------------------- checks */
static float expect(int op, int rank, size_t idx, size_t count) {
  float total = (float)nranks * (float)(nranks + 1) / 2.0f;
  switch (op) {
    case O_ALLREDUCE: case O_REDSCAT: case O_REDUCE: return total;
    case O_ALLGATHER: case O_ALLTOALL: return (float)(idx / count + 1);   /* block p came from rank p */
    case O_BCAST: return 1.0f;
    default: return (float)((rank + nranks - 1) % nranks + 1);          /* sendrecv: from the left */
  }
}

static void check_result(int op, const struct shape *s, const char *lib) {
  if (!check) return;
  for (int l = 0; l < nlocal; l++) {
    int r = L[l].rank;
    if (op == O_REDUCE && r != 0) continue;
    if (op == O_BCAST && r == 0 && strcmp(lib, "nccl")) continue;      /* MPI_Bcast leaves the root's rbuf */
    size_t n = s->rbytes / sizeof(float);
    size_t idx[8];
    int k = 0;
    idx[k++] = 0;
    idx[k++] = n / 2;
    idx[k++] = n - 1;
    if (op == O_ALLGATHER || op == O_ALLTOALL)
      for (int p = 1; p < nranks && k < 8; p++) idx[k++] = (size_t)p * s->count;
    CU(C.SetDevice(L[l].dev));
    for (int i = 0; i < k; i++) {
      float got = 0;
      CU(C.Memcpy(&got, L[l].rbuf + idx[i], sizeof got, RMC_D2H));
      float want = expect(op, r, idx[i], s->count);
      if (got != want) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s %s %zu B: rank %d element %zu is %g, expected %g", lib, ONAME[op], s->size, r,
                 idx[i], (double)got, (double)want);
        rmb_die("result check", -1, msg);
      }
    }
  }
}

/* ---------------------------------------------------------------------- timing */
static void emit(int op, const char *lib, const char *buffer, const struct shape *s, int it, const long long *ns) {
  if (rmb_rank != 0) return;
  rmb_line l;
  rmb_begin(&l, "result");
  rmb_str(&l, "op", ONAME[op]);
  rmb_str(&l, "library", lib);
  rmb_str(&l, "buffer", buffer);
  rmb_int(&l, "size", (long long)s->size);
  rmb_int(&l, "count", (long long)s->count);
  rmb_int(&l, "ranks", nranks);
  rmb_int(&l, "iters", it);
  rmb_ints(&l, "ns", ns, trials);
  rmb_end(&l);
}

static long long average_over_processes(long long mine) {
#ifdef RM_WITH_MPI
  long long sum = 0;
  MP(MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
  return sum / world;
#else
  return mine;
#endif
}

static void barrier(void) {
#ifdef RM_WITH_MPI
  MP(MPI_Barrier(MPI_COMM_WORLD));
#endif
}

static void clear_recv(size_t bytes) {
  for (int l = 0; l < nlocal; l++) {
    CU(C.SetDevice(L[l].dev));
    CU(C.Memset(L[l].rbuf, 0, bytes));
    CU(C.DeviceSynchronize());
  }
}

static void bench_nccl(int op) {
  long long ns[64];
  for (double sz = (double)min_size; sz <= (double)max_size; sz *= factor) {
    struct shape s = shape_of(op, (size_t)sz);
    if (s.count == 0) continue;
    clear_recv(s.rbytes);
    for (int w = 0; w < warmup; w++) nccl_once(op, &s);
    sync_all();
    for (int t = 0; t < trials; t++) {
      barrier();
      long long t0 = rmb_now_ns();
      for (int i = 0; i < iters; i++) nccl_once(op, &s);
      sync_all();
      ns[t] = average_over_processes(rmb_now_ns() - t0);
    }
    check_result(op, &s, "nccl");
    emit(op, "nccl", "device", &s, iters, ns);
  }
}

#ifdef RM_WITH_MPI
static void bench_mpi(int op) {
  long long ns[64];
  for (double sz = (double)min_size; sz <= (double)max_size && sz <= (double)mpi_max; sz *= factor) {
    struct shape s = shape_of(op, (size_t)sz);
    if (s.count == 0) continue;
    clear_recv(s.rbytes);
    for (int w = 0; w < (warmup < 2 ? warmup : 2); w++) mpi_once(op, &s);
    for (int t = 0; t < trials; t++) {
      barrier();
      long long t0 = rmb_now_ns();
      for (int i = 0; i < iters; i++) mpi_once(op, &s);
      ns[t] = average_over_processes(rmb_now_ns() - t0);
    }
    check_result(op, &s, "mpi");
    emit(op, "mpi", aware ? "device" : "device-staged", &s, iters, ns);
  }
}
#endif

/* ---------------------------------------------------------------------- main */
static void fill_send(size_t bytes) {
  size_t n = bytes / sizeof(float);
  float *tmp = malloc(bytes ? bytes : 1);
  if (!tmp) rmb_die("malloc", -1, "no host memory to fill the send buffers");
  for (int l = 0; l < nlocal; l++) {
    float v = (float)(L[l].rank + 1);
    for (size_t i = 0; i < n; i++) tmp[i] = v;
    CU(C.SetDevice(L[l].dev));
    CU(C.Memcpy(L[l].sbuf, tmp, bytes, RMC_H2D));
  }
  free(tmp);
}

int main(int argc, char **argv) {
#ifdef RM_WITH_MPI
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rmb_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
#endif
  parse(argc, argv);
  char why[1024] = "", nwhy[1024] = "";
  int count = 0, ok = rmc_load(&C, cudart, why, sizeof why) == 0;
  if (ok) {
    rmb_cuda_error = C.GetErrorString;
    int e = C.GetDeviceCount(&count);
    if (e || count == 0) {
      snprintf(why, sizeof why, "no CUDA device: %s", e ? C.GetErrorString(e) : "cudaGetDeviceCount says 0");
      ok = 0;
    }
  }
#ifdef RM_WITH_MPI
  int all_ok = 0;
  MP(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!all_ok && ok) snprintf(why, sizeof why, "another process has no CUDA device");
  ok = all_ok;
#endif
  if (!ok) {
    if (rmb_rank == 0) rmb_error("cuda", -1, why);
#ifdef RM_WITH_MPI
    MPI_Finalize();
#endif
    return RMB_EXIT_NO_GPU;
  }
  have_nccl = nccl_load(&N, ncclpath, nwhy, sizeof nwhy) == 0;
#ifdef RM_WITH_MPI
  int all_nccl = 0;
  MP(MPI_Allreduce(&have_nccl, &all_nccl, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  have_nccl = all_nccl;
  char how[512];
  int detected = rm_cuda_aware(how, sizeof how);
  aware = !strcmp(aware_opt, "yes") ? 1 : !strcmp(aware_opt, "no") ? 0 : detected;
  MPI_Comm node;
  int local = 0;
  MP(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rmb_rank, MPI_INFO_NULL, &node));
  MP(MPI_Comm_rank(node, &local));
  MP(MPI_Comm_free(&node));
  nlocal = 1;
  nranks = world;
  L[0].dev = local % count;
  L[0].rank = rmb_rank;
#else
  nlocal = want_gpus > 0 && want_gpus < count ? want_gpus : count;
  if (nlocal > MAX_LOCAL) nlocal = MAX_LOCAL;
  nranks = nlocal;
  for (int l = 0; l < nlocal; l++) {
    L[l].dev = l;
    L[l].rank = l;
  }
#endif
  int ver = 0;
  if (have_nccl) N.GetVersion(&ver);
  if (rmb_rank == 0) {
    int rt = 0, dv = 0;
    C.RuntimeGetVersion(&rt);
    C.DriverGetVersion(&dv);
    rmb_line l;
    rmb_begin(&l, "info");
    rmb_str(&l, "program", "nccl");
    rmb_int(&l, "format", RMB_FORMAT);
#ifdef RM_WITH_MPI
    rmb_str(&l, "mode", "mpi");
    rmb_int(&l, "cuda_aware", aware);
    rmb_int(&l, "cuda_aware_detected", detected);
    rmb_str(&l, "cuda_aware_how", how);
#else
    rmb_str(&l, "mode", "single-process");
#endif
    rmb_int(&l, "ranks", nranks);
    rmb_int(&l, "nccl_version", ver);
    rmb_int(&l, "cuda_runtime", rt);
    rmb_int(&l, "cuda_driver", dv);
    rmb_int(&l, "devices", count);
    rmb_end(&l);
    if (!have_nccl) rmb_skip("nccl", "%s", nwhy);
    if (nranks == 1) rmb_note("one rank: collectives move no data between GPUs");
  }

  /* devices, streams, buffers */
  for (int l = 0; l < nlocal; l++) {
    CU(C.SetDevice(L[l].dev));
    CU(C.StreamCreateWithFlags(&L[l].s, RMC_STREAM_NON_BLOCKING));
    CU(C.Malloc((void **)&L[l].sbuf, max_size));
    CU(C.Malloc((void **)&L[l].rbuf, max_size));
  }
  fill_send(max_size);
#ifdef RM_WITH_MPI
  char pci[32] = "";
  if (C.DeviceGetPCIBusId(pci, sizeof pci, L[0].dev) != 0) pci[0] = 0;
  char *all = rmb_rank == 0 ? malloc((size_t)world * 32) : NULL;
  int *devs = rmb_rank == 0 ? malloc((size_t)world * sizeof(int)) : NULL;
  MP(MPI_Gather(pci, 32, MPI_CHAR, all, 32, MPI_CHAR, 0, MPI_COMM_WORLD));
  MP(MPI_Gather(&L[0].dev, 1, MPI_INT, devs, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (rmb_rank == 0) {
    for (int r = 0; r < world; r++) {
      rmb_line l;
      rmb_begin(&l, "rank");
      rmb_int(&l, "rank", r);
      rmb_int(&l, "gpu", devs[r]);
      rmb_str(&l, "pci", all + (size_t)r * 32);
      rmb_end(&l);
    }
  }
  free(all);
  free(devs);
  if (!aware && mpi_ops) {
    size_t hb = mpi_max < max_size ? mpi_max : max_size;
    CU(C.MallocHost((void **)&hs, hb ? hb : 1));
    CU(C.MallocHost((void **)&hr, hb ? hb : 1));
  }
#else
  for (int l = 0; l < nlocal && rmb_rank == 0; l++) {
    char pci[32] = "";
    if (C.DeviceGetPCIBusId(pci, sizeof pci, L[l].dev) != 0) pci[0] = 0;
    rmb_line ln;
    rmb_begin(&ln, "rank");
    rmb_int(&ln, "rank", l);
    rmb_int(&ln, "gpu", L[l].dev);
    rmb_str(&ln, "pci", pci);
    rmb_end(&ln);
  }
#endif

  if (have_nccl) {
#ifdef RM_WITH_MPI
    ncclUniqueId id;
    if (rmb_rank == 0) NC(N.GetUniqueId(&id));
    MP(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    CU(C.SetDevice(L[0].dev));
    NC(N.CommInitRank(&L[0].comm, nranks, id, rmb_rank));
#else
    ncclComm_t comms[MAX_LOCAL];
    int devlist[MAX_LOCAL];
    for (int l = 0; l < nlocal; l++) devlist[l] = L[l].dev;
    NC(N.CommInitAll(comms, nlocal, devlist));
    for (int l = 0; l < nlocal; l++) L[l].comm = comms[l];
#endif
  }

  for (int op = 0; op < O_N; op++) {
    if (!rmb_listed(ops, ONAME[op])) continue;
    if (have_nccl) bench_nccl(op);
#ifdef RM_WITH_MPI
    if (mpi_ops) bench_mpi(op);
#endif
  }

  if (have_nccl)
    for (int l = 0; l < nlocal; l++) NC(N.CommDestroy(L[l].comm));
  for (int l = 0; l < nlocal; l++) {
    CU(C.SetDevice(L[l].dev));
    CU(C.Free(L[l].sbuf));
    CU(C.Free(L[l].rbuf));
    CU(C.StreamDestroy(L[l].s));
  }
  if (hs) CU(C.FreeHost(hs));
  if (hr) CU(C.FreeHost(hr));
  if (rmb_rank == 0) {
    rmb_line l;
    rmb_begin(&l, "info");
    rmb_str(&l, "done", "nccl");
    rmb_end(&l);
  }
#ifdef RM_WITH_MPI
  MPI_Finalize();
#endif
  return 0;
}
