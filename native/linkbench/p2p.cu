/*
 * p2p.cu -- GPU-pair and host<->device bandwidth and latency, for `rankmap bench p2p`.
 *
 * Method (the one nvbandwidth uses, written anew here):
 *   - every timed copy is queued behind a gate: a one-thread kernel that spins on a flag in pinned
 *     host memory.  The host enqueues the gate, the warm-up copies, a start event, `loops` copies
 *     and a stop event on each stream taking part, and only then opens the gate, so the cost of
 *     enqueueing never shows in the measurement;
 *   - time is taken with CUDA events on the stream that does the copies; several samples are
 *     reported raw (nanoseconds) and rankmap takes their median; GB = 1e9 bytes;
 *   - a copy-engine (CE) copy runs on the copy engine of the GPU whose stream issues it: "write"
 *     = the source GPU pushes, "read" = the destination GPU pulls; an SM copy is a kernel on
 *     that GPU;
 *   - bidirectional: a second stream copies the other way at the same time (it waits on the first
 *     stream's start event); each direction is timed on its own stream;
 *   - every sample is checked: the destination is filled with one pattern, the source with
 *     another, and after the copies the destination must hold the source's pattern;
 *   - pageable host memory cannot be queued behind a gate (the driver stages it through the host
 *     while the call runs), so pageable copies are synchronous cudaMemcpy calls timed on the host.
 * The gate gives up after --gate-timeout seconds (the sample then fails loudly, it never hangs).
 *
 * Output: one JSON object per line (bench_out.h): info, device, peer, result, note, skip, error.
 * Every CUDA call is checked; a failure writes an error record naming the call and the test.
 */
#include <cuda_runtime.h>

#include <ctype.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_out.h"
#include "bench_util.h"

#define MAX_DEV 64
#define THREADS 512

static char g_ctx[256] = "setup";

static void ck(cudaError_t e, const char *call, int line) {
  if (e == cudaSuccess) return;
  char what[600];
  char msg[300];
  snprintf(what, sizeof what, "%s [%s] (p2p.cu:%d)", call, g_ctx, line);
  snprintf(msg, sizeof msg, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
  rmb_error(what, (long long)e, msg);
  exit(RMB_EXIT_FAILED);
}
#define CK(x) ck((x), #x, __LINE__)
#define CK_LAUNCH() ck(cudaGetLastError(), "kernel launch", __LINE__)

static void fail(const char *what, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char w[400];
  snprintf(w, sizeof w, "%s [%s]", what, g_ctx);
  rmb_error(w, -1, msg);
  exit(RMB_EXIT_FAILED);
}

/* ------------------------------------------------------------------------------- kernels */
__device__ __forceinline__ unsigned long long global_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* The gate: spin until the host opens it (or give up and say so). */
__global__ void gate_kernel(volatile int *open, volatile int *timed_out, unsigned long long timeout_ns) {
  unsigned long long t0 = global_ns();
  while (*open == 0) {
    if (global_ns() - t0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
}

__device__ __forceinline__ unsigned pattern(size_t i, unsigned seed) {
  unsigned x = (unsigned)i * 2654435761u ^ seed ^ (unsigned)(i >> 32) * 40503u;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  return x;
}

__global__ void fill_kernel(unsigned *p, size_t n, unsigned seed) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p[i] = pattern(i, seed);
}

__global__ void check_kernel(const unsigned *p, size_t n, unsigned seed, unsigned long long *bad) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  unsigned long long mine = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    mine += p[i] != pattern(i, seed);
  if (mine) atomicAdd(bad, mine);
}

/* SM copy: each thread moves 8 x 16 bytes per round, loads first, so that many reads are in
 * flight over a remote link; cg loads/stores keep the data out of L1. */
__global__ void __launch_bounds__(THREADS, 2) copy_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 7 * stride < n; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = __ldcg(src + i + k * stride);
#pragma unroll
    for (int k = 0; k < 8; k++) __stcg(dst + i + k * stride, v[k]);
  }
  for (; i < n; i += stride) __stcg(dst + i, __ldcg(src + i));
}

/* Pointer chase: one thread follows `steps` dependent loads through a chain in another GPU's memory. */
__global__ void chase_kernel(const unsigned long long *start, long long steps, unsigned long long *sink) {
  const volatile unsigned long long *p = (const volatile unsigned long long *)start;
  for (long long i = 0; i < steps; i++) p = (const volatile unsigned long long *)(*p);
  *sink = (unsigned long long)p;
}

/* ------------------------------------------------------------------------------- options */
struct Opts {
  size_t size = (size_t)512 << 20;     /* bytes per copy */
  int loops = 16;                      /* copies per sample */
  int warmup = 4;                      /* copies before the start event */
  int samples = 3;
  int pageable_loops = 4;
  int lat_copies = 100;                /* small copies per latency sample (a stream holds about 1000 queued
                                          operations: more behind the gate would block the host) */
  size_t lat_bytes = 8;
  long long chase_steps = 100000;
  size_t chase_bytes = (size_t)64 << 20;
  double gate_timeout_s = 20.0;
  char tests[512] = "all";
  char devices[256] = "";              /* comma list of CUDA device indices; "" = all */
};
static Opts O;

static const char *ALL_TESTS[] = {"ce_write", "ce_read", "ce_bidir_write", "ce_bidir_read", "sm_write",
                                  "sm_read", "sm_bidir", "latency_ce", "latency_sm", "h2d_pinned",
                                  "d2h_pinned", "h2d_pageable", "d2h_pageable", NULL};

static int want(const char *t) { return rmb_listed(O.tests, t); }

static long long parse_int(const char *opt, const char *v, long long lo) {
  double x = rmb_option(opt, v, (double)lo);
  if (x != (double)(long long)x) rmb_usage("not a whole number: %s", opt);
  return (long long)x;
}

static void parse_args(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) rmb_usage("option %s needs a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--size")) O.size = (size_t)parse_int(a, v, 16);
    else if (!strcmp(a, "--loops")) O.loops = (int)parse_int(a, v, 1);
    else if (!strcmp(a, "--warmup")) O.warmup = (int)parse_int(a, v, 0);
    else if (!strcmp(a, "--samples")) O.samples = (int)parse_int(a, v, 1);
    else if (!strcmp(a, "--pageable-loops")) O.pageable_loops = (int)parse_int(a, v, 1);
    else if (!strcmp(a, "--latency-copies")) O.lat_copies = (int)parse_int(a, v, 1);
    else if (!strcmp(a, "--latency-bytes")) O.lat_bytes = (size_t)parse_int(a, v, 1);
    else if (!strcmp(a, "--chase-steps")) O.chase_steps = parse_int(a, v, 1);
    else if (!strcmp(a, "--gate-timeout")) O.gate_timeout_s = (double)parse_int(a, v, 1);
    else if (!strcmp(a, "--tests")) snprintf(O.tests, sizeof O.tests, "%s", v);
    else if (!strcmp(a, "--devices")) snprintf(O.devices, sizeof O.devices, "%s", v);
    else rmb_usage("unknown option %s", a);
  }
  if (O.size % 16) rmb_usage("--size must be a multiple of 16 bytes (got %s)", "an odd size");
  if (O.samples > 64) rmb_usage("--samples %s is more than 64", "N");
  if (O.lat_bytes > O.size) rmb_usage("--latency-bytes larger than --size%s", "");
  if (strcmp(O.tests, "all")) {
    char copy[512];
    snprintf(copy, sizeof copy, "%s", O.tests);
    for (char *t = strtok(copy, ","); t; t = strtok(NULL, ",")) {
      int ok = 0;
      for (int k = 0; ALL_TESTS[k]; k++) ok |= !strcmp(t, ALL_TESTS[k]);
      if (!ok) rmb_usage("unknown test %s", t);
    }
  }
}

/* ------------------------------------------------------------------------------- devices */
struct Dev {
  int id;
  int sms;
  cudaStream_t s;
  cudaEvent_t e0, e1;
  unsigned *x, *y;               /* two buffers of O.size bytes */
  unsigned long long *bad;       /* mismatch counter of check_kernel */
  unsigned long long *sink;
  char pci[32];
};
static Dev D[MAX_DEV];
static int ND;
static int peer_ok[MAX_DEV][MAX_DEV];
static volatile int *g_open, *g_timed_out;   /* pinned, mapped: the gate */

static void set_ctx(const char *test, int src, int dst) {
  char s[16], d[16];
  if (src < 0) snprintf(s, sizeof s, "host"); else snprintf(s, sizeof s, "GPU%d", D[src].id);
  if (dst < 0) snprintf(d, sizeof d, "host"); else snprintf(d, sizeof d, "GPU%d", D[dst].id);
  snprintf(g_ctx, sizeof g_ctx, "%s %s->%s", test, s, d);
}

static int grid_for(int dev) { return D[dev].sms * 2; }

static void fill(int dev, void *p, size_t bytes, unsigned seed) {
  CK(cudaSetDevice(D[dev].id));
  fill_kernel<<<grid_for(dev), THREADS, 0, D[dev].s>>>((unsigned *)p, bytes / 4, seed);
  CK_LAUNCH();
  CK(cudaStreamSynchronize(D[dev].s));
}

static unsigned long long check(int dev, const void *p, size_t bytes, unsigned seed) {
  unsigned long long bad = 0;
  CK(cudaSetDevice(D[dev].id));
  CK(cudaMemsetAsync(D[dev].bad, 0, sizeof bad, D[dev].s));
  check_kernel<<<grid_for(dev), THREADS, 0, D[dev].s>>>((const unsigned *)p, bytes / 4, seed, D[dev].bad);
  CK_LAUNCH();
  CK(cudaMemcpyAsync(&bad, D[dev].bad, sizeof bad, cudaMemcpyDeviceToHost, D[dev].s));
  CK(cudaStreamSynchronize(D[dev].s));
  return bad;
}

/* ------------------------------------------------------------------------------- one sample */
enum { CE = 0, SM = 1 };
struct Job {
  int dev;            /* whose stream (and copy engine / SMs) does the copies */
  int kind;           /* CE or SM */
  void *dst;
  const void *src;
  size_t bytes;
};

static void issue(const Job *j) {
  if (j->kind == CE) {
    CK(cudaMemcpyAsync(j->dst, j->src, j->bytes, cudaMemcpyDefault, D[j->dev].s));
  } else {
    copy_kernel<<<grid_for(j->dev), THREADS, 0, D[j->dev].s>>>((const uint4 *)j->src, (uint4 *)j->dst, j->bytes / 16);
    CK_LAUNCH();
  }
}

/* Queue gate, warm-up, start, loops x copy, stop on every job's stream; open the gate; time. */
static void run_sample(const Job *jobs, int njobs, int loops, int warmup, long long *ns) {
  for (int j = 0; j < njobs; j++)
    for (int k = 0; k < j; k++)
      if (jobs[j].dev == jobs[k].dev) fail("run_sample", "two concurrent jobs on one GPU's stream");
  *g_open = 0;
  *g_timed_out = 0;
  __sync_synchronize();
  unsigned long long timeout_ns = (unsigned long long)(O.gate_timeout_s * 1e9);
  for (int j = 0; j < njobs; j++) {
    const Dev *d = &D[jobs[j].dev];
    CK(cudaSetDevice(d->id));
    gate_kernel<<<1, 1, 0, d->s>>>(g_open, g_timed_out, timeout_ns);
    CK_LAUNCH();
    for (int w = 0; w < warmup; w++) issue(&jobs[j]);
  }
  const Dev *first = &D[jobs[0].dev];
  CK(cudaSetDevice(first->id));
  CK(cudaEventRecord(first->e0, first->s));
  for (int j = 1; j < njobs; j++) {     /* every stream starts when the first one does */
    const Dev *d = &D[jobs[j].dev];
    CK(cudaSetDevice(d->id));
    CK(cudaStreamWaitEvent(d->s, first->e0, 0));
    CK(cudaEventRecord(d->e0, d->s));
  }
  for (int j = 0; j < njobs; j++) {
    const Dev *d = &D[jobs[j].dev];
    CK(cudaSetDevice(d->id));
    for (int l = 0; l < loops; l++) issue(&jobs[j]);
    CK(cudaEventRecord(d->e1, d->s));
  }
  __sync_synchronize();
  *g_open = 1;                          /* everything is queued: go */
  __sync_synchronize();
  for (int j = 0; j < njobs; j++) CK(cudaStreamSynchronize(D[jobs[j].dev].s));
  if (*g_timed_out)
    fail("gate", "the gate kernel gave up after %.0f s before the copies were released", O.gate_timeout_s);
  for (int j = 0; j < njobs; j++) {
    float ms = 0;
    const Dev *d = &D[jobs[j].dev];
    CK(cudaSetDevice(d->id));
    CK(cudaEventElapsedTime(&ms, d->e0, d->e1));
    ns[j] = (long long)(ms * 1e6 + 0.5);
  }
}

/* One result record: the samples' nanoseconds for `loops` copies of `bytes` (and the reverse stream's). */
static void emit_result(const char *test, int src, int dst, int engine, size_t bytes, long long loops,
                        const long long *ns, const long long *ns_reverse) {
  rmb_line l;
  rmb_begin(&l, "result");
  rmb_str(&l, "test", test);
  rmb_int(&l, "src", src < 0 ? -1 : D[src].id);
  rmb_int(&l, "dst", dst < 0 ? -1 : D[dst].id);
  rmb_int(&l, "engine", D[engine].id);
  rmb_int(&l, "bytes", (long long)bytes);
  rmb_int(&l, "loops", loops);
  rmb_ints(&l, "ns", ns, O.samples);
  if (ns_reverse) rmb_ints(&l, "ns_reverse", ns_reverse, O.samples);
  rmb_end(&l);
}

/* Runs O.samples samples of 1 or 2 concurrent jobs, checks the data of each, writes one result. */
static void measure(const char *test, int src, int dst, const Job *jobs, int njobs, int loops, int warmup,
                    int check_data) {
  long long ns[2][64];
  for (int s = 0; s < O.samples; s++) {
    unsigned seed_src = 0x5eed0000u + (unsigned)s, seed_dst = 0xdead0000u + (unsigned)s;
    if (check_data)
      for (int j = 0; j < njobs; j++) {
        fill(jobs[j].dev, (void *)jobs[j].src, jobs[j].bytes, seed_src + 17u * (unsigned)j);
        fill(jobs[j].dev, jobs[j].dst, jobs[j].bytes, seed_dst);
      }
    long long one[2] = {0, 0};
    run_sample(jobs, njobs, loops, warmup, one);
    for (int j = 0; j < njobs; j++) ns[j][s] = one[j];
    if (check_data)
      for (int j = 0; j < njobs; j++) {
        unsigned long long bad = check(jobs[j].dev, jobs[j].dst, jobs[j].bytes, seed_src + 17u * (unsigned)j);
        if (bad) fail("data check", "%llu of %zu words differ after the copies", bad, jobs[j].bytes / 4);
      }
  }
  emit_result(test, src, dst, jobs[0].dev, jobs[0].bytes, loops, ns[0], njobs == 2 ? ns[1] : NULL);
}

/* ------------------------------------------------------------------------------- tests */
/* The pair bandwidth tests: who copies (source pushes / destination pulls), with what, one way or both. */
struct PairTest {
  const char *name;
  int kind, pull, bidir;
};
static const PairTest PAIR_TESTS[] = {{"ce_write", CE, 0, 0}, {"ce_read", CE, 1, 0}, {"ce_bidir_write", CE, 0, 1},
                                      {"ce_bidir_read", CE, 1, 1}, {"sm_write", SM, 0, 0}, {"sm_read", SM, 1, 0},
                                      {"sm_bidir", SM, 0, 1}};

static void pair_tests(int a, int b) {
  Dev *A = &D[a], *B = &D[b];
  for (const PairTest &t : PAIR_TESTS) {
    if (!want(t.name)) continue;
    set_ctx(t.name, a, b);
    /* a -> b on the pushing (a) or pulling (b) GPU; with bidir also b -> a on the other one */
    Job j[2] = {{t.pull ? b : a, t.kind, B->x, A->x, O.size}, {t.pull ? a : b, t.kind, A->y, B->y, O.size}};
    measure(t.name, a, b, j, t.bidir ? 2 : 1, O.loops, O.warmup, 1);
  }
  if (want("latency_ce")) {
    set_ctx("latency_ce", a, b);
    Job j = {a, CE, B->x, A->x, O.lat_bytes};
    measure("latency_ce", a, b, &j, 1, O.lat_copies, 10, 0);
  }
}

/* A random cycle through chase_bytes of GPU `owner` with one node every 1 KiB (Sattolo's shuffle). */
static unsigned long long *build_chain(int owner, long long *nodes_out) {
  size_t spacing = 1024, nodes = O.chase_bytes / spacing;
  unsigned long long *mem = NULL;
  CK(cudaSetDevice(D[owner].id));
  CK(cudaMalloc((void **)&mem, O.chase_bytes));
  size_t *perm = (size_t *)malloc(nodes * sizeof *perm);
  unsigned long long *host = (unsigned long long *)calloc(O.chase_bytes / 8, 8);
  if (!perm || !host) fail("malloc", "no host memory for the pointer chain");
  for (size_t i = 0; i < nodes; i++) perm[i] = i;
  unsigned long long r = 0x9e3779b97f4a7c15ull;
  for (size_t i = nodes - 1; i > 0; i--) {
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    size_t k = (size_t)(r % i);
    size_t t = perm[i]; perm[i] = perm[k]; perm[k] = t;
  }
  for (size_t i = 0; i < nodes; i++) {
    size_t from = perm[i], to = perm[(i + 1) % nodes];
    host[from * spacing / 8] = (unsigned long long)((char *)mem + to * spacing);
  }
  CK(cudaMemcpy(mem, host, O.chase_bytes, cudaMemcpyHostToDevice));
  free(perm);
  free(host);
  *nodes_out = (long long)nodes;
  return mem;
}

static void latency_sm(int reader, int owner, unsigned long long *chain) {
  set_ctx("latency_sm", reader, owner);
  long long ns[64];
  Dev *R = &D[reader];
  CK(cudaSetDevice(R->id));
  for (int s = 0; s < O.samples; s++) {
    chase_kernel<<<1, 1, 0, R->s>>>(chain, 1000, R->sink);   /* warm: TLB entries, first touch */
    CK_LAUNCH();
    CK(cudaEventRecord(R->e0, R->s));
    chase_kernel<<<1, 1, 0, R->s>>>(chain, O.chase_steps, R->sink);
    CK_LAUNCH();
    CK(cudaEventRecord(R->e1, R->s));
    CK(cudaStreamSynchronize(R->s));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, R->e0, R->e1));
    ns[s] = (long long)(ms * 1e6 + 0.5);
  }
  emit_result("latency_sm", reader, owner, reader, 8, O.chase_steps, ns, NULL);
}

/* Keep this process (and its first-touch host memory) near GPU `dev`, as the driver's own
 * tools do; silently nothing when sysfs does not say. */
static void bind_near(int dev) {
  char path[128], list[4096];
  char bus[32];
  snprintf(bus, sizeof bus, "%s", D[dev].pci);
  for (char *p = bus; *p; p++) *p = (char)tolower((unsigned char)*p);
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/local_cpulist", bus);
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(list, 1, sizeof list - 1, f);
  fclose(f);
  list[n] = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  int any = 0;
  for (char *tok = strtok(list, ",\n"); tok; tok = strtok(NULL, ",\n")) {
    int lo, hi;
    if (sscanf(tok, "%d-%d", &lo, &hi) == 2) {
    } else if (sscanf(tok, "%d", &lo) == 1) {
      hi = lo;
    } else {
      continue;
    }
    for (int c = lo; c <= hi && c < CPU_SETSIZE; c++) { CPU_SET(c, &set); any = 1; }
  }
  if (any) sched_setaffinity(0, sizeof set, &set);
}

static unsigned host_pattern(size_t i, unsigned seed) {   /* pattern(), on the host */
  unsigned x = (unsigned)i * 2654435761u ^ seed ^ (unsigned)(i >> 32) * 40503u;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  return x;
}

static void pageable(const char *test, int dev, int to_device) {
  set_ctx(test, to_device ? -1 : dev, to_device ? dev : -1);
  size_t n = O.size;
  unsigned *h = (unsigned *)malloc(n);
  if (!h) fail("malloc", "no %zu bytes of pageable host memory", n);
  unsigned seed = 0xabcd0000u;
  Dev *G = &D[dev];
  long long ns[64];
  if (to_device) {
    for (size_t i = 0; i < n / 4; i++) h[i] = host_pattern(i, seed);
  } else {
    memset(h, 0, n);                         /* touch every page before timing */
    fill(dev, G->x, n, seed);
  }
  CK(cudaSetDevice(G->id));
  for (int s = 0; s < O.samples; s++) {
    if (to_device) CK(cudaMemcpy(G->x, h, n, cudaMemcpyHostToDevice));   /* warm-up */
    else CK(cudaMemcpy(h, G->x, n, cudaMemcpyDeviceToHost));
    long long t0 = rmb_now_ns();
    for (int l = 0; l < O.pageable_loops; l++) {
      if (to_device) CK(cudaMemcpy(G->x, h, n, cudaMemcpyHostToDevice));
      else CK(cudaMemcpy(h, G->x, n, cudaMemcpyDeviceToHost));
    }
    ns[s] = rmb_now_ns() - t0;
  }
  unsigned long long bad = 0;
  if (to_device) {
    bad = check(dev, G->x, n, seed);
  } else {
    for (size_t i = 0; i < n / 4; i += 1021) bad += h[i] != host_pattern(i, seed);
  }
  if (bad) fail("data check", "%llu words differ after the pageable copies", bad);
  free(h);
  emit_result(test, to_device ? -1 : dev, to_device ? dev : -1, dev, n, O.pageable_loops, ns, NULL);
}

static void host_tests(int dev) {
  Dev *G = &D[dev];
  int pinned = want("h2d_pinned") || want("d2h_pinned");
  if (pinned) {
    bind_near(dev);
    void *h = NULL;
    set_ctx("host buffer", -1, dev);
    CK(cudaSetDevice(G->id));
    CK(cudaHostAlloc(&h, O.size, cudaHostAllocPortable | cudaHostAllocMapped));
    void *hd = NULL;                      /* the same memory as the GPU addresses it */
    CK(cudaHostGetDevicePointer(&hd, h, 0));
    if (want("h2d_pinned")) {
      set_ctx("h2d_pinned", -1, dev);
      Job j = {dev, CE, G->x, hd, O.size};
      measure("h2d_pinned", -1, dev, &j, 1, O.loops, O.warmup, 1);
    }
    if (want("d2h_pinned")) {
      set_ctx("d2h_pinned", dev, -1);
      Job j = {dev, CE, hd, G->x, O.size};
      measure("d2h_pinned", dev, -1, &j, 1, O.loops, O.warmup, 1);
    }
    CK(cudaFreeHost(h));
  }
  if (want("h2d_pageable")) { bind_near(dev); pageable("h2d_pageable", dev, 1); }
  if (want("d2h_pageable")) { bind_near(dev); pageable("d2h_pageable", dev, 0); }
}

/* ------------------------------------------------------------------------------- main */
int main(int argc, char **argv) {
  parse_args(argc, argv);
  int runtime = 0, driver = 0, count = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    char msg[300];
    snprintf(msg, sizeof msg, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device is visible");
    rmb_error("cudaGetDeviceCount", (long long)e, msg);
    return RMB_EXIT_NO_GPU;
  }
  /* which devices */
  int ids[MAX_DEV];
  int n = 0;
  if (O.devices[0]) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", O.devices);
    for (char *t = strtok(copy, ","); t && n < MAX_DEV; t = strtok(NULL, ",")) {
      int id = (int)parse_int("--devices", t, 0);
      if (id >= count) rmb_usage("--devices names a GPU that is not there: %s", t);
      ids[n++] = id;
    }
  } else {
    for (int i = 0; i < count && i < MAX_DEV; i++) ids[n++] = i;
  }
  ND = n;
  rmb_line l;
  rmb_begin(&l, "info");
  rmb_str(&l, "program", "p2p");
  rmb_int(&l, "format", RMB_FORMAT);
  rmb_int(&l, "cuda_runtime", runtime);
  rmb_int(&l, "cuda_driver", driver);
  rmb_int(&l, "devices", count);
  rmb_int(&l, "samples", O.samples);
  rmb_end(&l);

  for (int i = 0; i < ND; i++) {
    Dev *d = &D[i];
    d->id = ids[i];
    snprintf(g_ctx, sizeof g_ctx, "setup of GPU%d", d->id);
    CK(cudaSetDevice(d->id));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, d->id));
    CK(cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, d->id));
    CK(cudaDeviceGetPCIBusId(d->pci, sizeof d->pci, d->id));
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    rmb_begin(&l, "device");
    rmb_int(&l, "index", d->id);
    rmb_str(&l, "name", p.name);
    rmb_str(&l, "pci", d->pci);
    rmb_int(&l, "sms", d->sms);
    rmb_int(&l, "cc_major", p.major);
    rmb_int(&l, "cc_minor", p.minor);
    rmb_int(&l, "memory", (long long)total_b);
    rmb_int(&l, "copy_engines", p.asyncEngineCount);
    rmb_end(&l);
    size_t need = 2 * O.size + O.chase_bytes + ((size_t)64 << 20);
    if (free_b < need)
      fail("memory", "GPU%d has %zu MiB free and the tests need %zu MiB: pass a smaller --size", d->id,
           free_b >> 20, need >> 20);
    CK(cudaStreamCreateWithFlags(&d->s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&d->e0));
    CK(cudaEventCreate(&d->e1));
    CK(cudaMalloc((void **)&d->x, O.size));
    CK(cudaMalloc((void **)&d->y, O.size));
    CK(cudaMalloc((void **)&d->bad, sizeof *d->bad));
    CK(cudaMalloc((void **)&d->sink, sizeof *d->sink));
  }
  snprintf(g_ctx, sizeof g_ctx, "gate");
  CK(cudaSetDevice(D[0].id));
  CK(cudaHostAlloc((void **)&g_open, 2 * sizeof(int), cudaHostAllocPortable | cudaHostAllocMapped));
  g_timed_out = g_open + 1;
  int *gate_dev = NULL;                   /* with unified addressing the GPUs use the host address */
  CK(cudaHostGetDevicePointer((void **)&gate_dev, (void *)g_open, 0));
  if ((void *)gate_dev != (void *)g_open) fail("gate", "this system has no unified virtual addressing");

  for (int a = 0; a < ND; a++)
    for (int b = 0; b < ND; b++) {
      if (a == b) continue;
      int can = 0;
      snprintf(g_ctx, sizeof g_ctx, "peer access GPU%d->GPU%d", D[a].id, D[b].id);
      CK(cudaDeviceCanAccessPeer(&can, D[a].id, D[b].id));
      if (can) {
        CK(cudaSetDevice(D[a].id));
        cudaError_t pe = cudaDeviceEnablePeerAccess(D[b].id, 0);
        if (pe == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
        else CK(pe);
      }
      peer_ok[a][b] = can;
      rmb_begin(&l, "peer");
      rmb_int(&l, "src", D[a].id);
      rmb_int(&l, "dst", D[b].id);
      rmb_int(&l, "access", can);
      rmb_end(&l);
    }

  if (ND < 2) rmb_skip("GPU pairs", "only one GPU is visible");
  for (int a = 0; a < ND; a++)
    for (int b = 0; b < ND; b++) {
      if (a == b) continue;
      if (!peer_ok[a][b] || !peer_ok[b][a]) {
        char what[64];
        snprintf(what, sizeof what, "GPU%d->GPU%d", D[a].id, D[b].id);
        rmb_skip(what, "no peer access between these GPUs: copies would be staged by the driver");
        continue;
      }
      pair_tests(a, b);
    }
  if (want("latency_sm") && ND >= 2) {
    for (int owner = 0; owner < ND; owner++) {
      long long nodes = 0;
      snprintf(g_ctx, sizeof g_ctx, "pointer chain on GPU%d", D[owner].id);
      unsigned long long *chain = build_chain(owner, &nodes);
      for (int reader = 0; reader < ND; reader++)
        if (reader != owner && peer_ok[reader][owner] && peer_ok[owner][reader]) latency_sm(reader, owner, chain);
      CK(cudaSetDevice(D[owner].id));
      CK(cudaFree(chain));
    }
  }
  for (int d = 0; d < ND; d++) host_tests(d);

  for (int i = 0; i < ND; i++) {
    snprintf(g_ctx, sizeof g_ctx, "teardown of GPU%d", D[i].id);
    CK(cudaSetDevice(D[i].id));
    CK(cudaFree(D[i].x));
    CK(cudaFree(D[i].y));
    CK(cudaFree(D[i].bad));
    CK(cudaFree(D[i].sink));
    CK(cudaEventDestroy(D[i].e0));
    CK(cudaEventDestroy(D[i].e1));
    CK(cudaStreamDestroy(D[i].s));
  }
  CK(cudaFreeHost((void *)g_open));
  rmb_begin(&l, "info");
  rmb_str(&l, "done", "p2p");
  rmb_end(&l);
  return 0;
}
