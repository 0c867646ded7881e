/* Drive the rankmap NCCL profiler plugin the way NCCL does, without NCCL or a GPU.
 *
 *   harness PLUGIN.so ABI scenario     one rank of the test scenario (RANK/WORLD_SIZE from env)
 *   harness PLUGIN.so ABI bench N      N single-collective groups (every event NCCL would issue),
 *                                      prints "ns_per_op <x>"
 *   harness PLUGIN.so ABI multi P I G  process I of P, each driving G GPUs (no RANK variable): the
 *                                      multi-GPU scenario below
 *
 * ABI is 2..7: the harness looks up ncclProfiler_v<ABI> with dlsym and calls it with descriptors
 * laid out as that NCCL version lays them out (native/nccl/nccl_abi.h, checked field by field
 * against NCCL's own headers). For each task it goes through the same sequence as NCCL's
 * enqueue path: (v5+) group-API / coll-API / p2p-API events, then the group event, the task
 * events with their parents, proxy-op and kernel-channel events under the task, a state record,
 * and the stops in NCCL's order. Every entry point must return 0; the harness exits 1 otherwise.
 *
 * The scenario (nranks = WORLD_SIZE, rank = RANK), on communicator A (hash 0xA11CE, the world, in
 * rank order) and B (hash 0xB0B, the same processes in reverse order: comm rank = n-1-RANK):
 *   A: AllReduce   1200 x ncclFloat32  RING   SIMPLE  x3
 *   A: AllGather    256 x ncclFloat16  RING   LL      x2     (count per rank)
 *   A: ReduceScatter 128 x ncclFloat64 RING   LL128   x1     (count per rank)
 *   A: Broadcast   4096 x ncclInt8     root 1         x1
 *   A: Reduce       100 x ncclInt32    root 0         x1
 *   A: Send 5000 x ncclFloat32 to rank+1, Recv 5000 x ncclFloat32 from rank-1  (one group) x2
 *   A: AllReduce  65536 x ncclBfloat16 TREE   LL128   x1
 *   B: AllReduce    300 x ncclFloat32  RING   SIMPLE  x1
 *   B: Send 64 x "Unknown" (ncclUint8) to comm rank+1 (v4+ only)
 *
 * The multi-GPU scenario (one process drives G GPUs, as nccl-tests -g G, ncclCommInitAll or JAX
 * do): the harness makes "GPU" g current through the stand-in libcuda (tests/native/fake_cuda.c,
 * fake_cuda_set_device; MULTI_NO_GPU=1 leaves no GPU current, as without libcuda) before
 * initialising each of its communicator ranks, then issues every operation as one group over
 * the G communicators (ncclGroupStart; one call per communicator; ncclGroupEnd):
 *   W (hash 0x3A11, all P*G GPUs, comm rank = I*G + g):
 *     AllReduce 1000 x ncclFloat32 RING SIMPLE x2, AllGather 64 x ncclFloat32 RING LL x1,
 *     Send 300 x ncclInt8 to comm rank+1 and Recv 300 from comm rank-1 x1,
 *     AllReduce 2048 x ncclFloat32 RING LL128 x1 captured into a CUDA graph (v5+; API event
 *     with graphCaptured = 1)
 *   L (hash 0x10CA1 + I, the G GPUs of this process, comm rank = g): Broadcast 256 x ncclInt8 root 0 x1
 */
#define _GNU_SOURCE
#include "../../native/nccl/nccl_abi.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int abi, failures;
static void *tbl;

#define CHECK(call) do { int rc_ = (call); if (rc_ != 0) { \
  fprintf(stderr, "harness: %s returned %d (line %d)\n", #call, rc_, __LINE__); failures++; } } while (0)

static void logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)level; (void)flags; (void)file; (void)line; (void)fmt;
}

/* The version-independent view of one task the harness issues. */
typedef struct {
  int is_coll;
  const char *func, *dtype, *algo, *proto;
  size_t count;
  int root_or_peer, channels, captured;
} task_t;

/* ---- per-version calls -------------------------------------------------------------------- */

static int call_init(void **ctx, int *mask, uint64_t hash, const char *name, int nranks, int rank) {
  switch (abi) {
    case 7: return ((rm_profiler_v7_t *)tbl)->init(ctx, hash, mask, name, 1, nranks, rank, logger);
    case 6: return ((rm_profiler_v6_t *)tbl)->init(ctx, hash, mask, name, 1, nranks, rank, logger);
    case 5: return ((rm_profiler_v5_t *)tbl)->init(ctx, hash, mask, name, 1, nranks, rank, logger);
    case 4: return ((rm_profiler_v4_t *)tbl)->init(ctx, mask, name, hash, 1, nranks, rank, logger);
    case 3: return ((rm_profiler_v3_t *)tbl)->init(ctx, mask);
    default: return ((rm_profiler_v2_t *)tbl)->init(ctx, mask);
  }
}
static int call_stop(void *h) { return ((rm_profiler_v5_t *)tbl)->stopEvent(h); }   /* same slot in all */
static int call_finalize(void *ctx) { return ((rm_profiler_v5_t *)tbl)->finalize(ctx); }
static int call_record(void *h, int state) {
  rm_state_args_v4_t a4; rm_state_args_v3_t a3;
  memset(&a4, 0, sizeof a4); memset(&a3, 0, sizeof a3);
  a4.kernel_ch.gpu_timer = 123456789;
  if (abi >= 4) return ((rm_profiler_v4_t *)tbl)->recordEventState(h, state, &a4);
  return ((rm_profiler_v3_t *)tbl)->recordEventState(h, state, &a3);
}

/* Start one event of any type. hash/name are what v2/v3 descriptors carry. */
static int call_start(void *ctx, void **h, uint64_t type, void *parent, int rank, const task_t *t,
                      void *group, uint64_t hash, const char *name) {
  if (abi >= 5) {
    rm_descr_v7_t d7; memset(&d7, 0, sizeof d7);   /* v5 members sit at the same offsets in v6 and v7 */
    rm_descr_v5_t *d = (rm_descr_v5_t *)(void *)&d7;
    d->type = type; d->parent = parent; d->rank = rank;
    if (type == RM_EV_COLL) {
      d->coll.seq = 7; d->coll.func = t->func; d->coll.count = t->count; d->coll.root = t->root_or_peer;
      d->coll.dtype = t->dtype; d->coll.channels = (uint8_t)t->channels; d->coll.warps = 16;
      d->coll.algo = t->algo; d->coll.proto = t->proto; d->coll.group = group;
    } else if (type == RM_EV_P2P) {
      d->p2p.func = t->func; d->p2p.count = t->count; d->p2p.dtype = t->dtype; d->p2p.peer = t->root_or_peer;
      d->p2p.channels = (uint8_t)t->channels; d->p2p.group = group;
    } else if (type == RM_EV_COLL_API) {
      d->coll_api.func = t->func; d->coll_api.count = t->count; d->coll_api.dtype = t->dtype;
      d->coll_api.root = t->root_or_peer; d->coll_api.graph_captured = t->captured != 0;
    } else if (type == RM_EV_P2P_API) {
      d->p2p_api.func = t->func; d->p2p_api.count = t->count; d->p2p_api.dtype = t->dtype;
      d->p2p_api.graph_captured = t->captured != 0;
    } else if (type == RM_EV_GROUP_API) {
      d->group_api.depth = 1;
    } else if (type == RM_EV_PROXY_OP) {
      d->proxy_op.pid = 1; d->proxy_op.peer = 0; d->proxy_op.n_steps = 4; d->proxy_op.chunk_size = 1 << 19;
      d->proxy_op.is_send = 1;
    } else if (type == RM_EV_KERNEL_CH) {
      d->kernel_ch.channel = 0; d->kernel_ch.gpu_timer = 1000;
    }
    if (abi == 7) return ((rm_profiler_v7_t *)tbl)->startEvent(ctx, h, &d7);
    if (abi == 6) return ((rm_profiler_v6_t *)tbl)->startEvent(ctx, h, (rm_descr_v6_t *)(void *)&d7);
    return ((rm_profiler_v5_t *)tbl)->startEvent(ctx, h, d);
  }
  if (type >= RM_EV_GROUP_API) { *h = NULL; return 0; }     /* these types do not exist before v5 */
  if (abi == 4) {
    rm_descr_v4_t d; memset(&d, 0, sizeof d);
    d.type = (uint8_t)type; d.parent = (type == RM_EV_COLL || type == RM_EV_P2P) ? group : parent; d.rank = rank;
    if (type == RM_EV_COLL) {
      d.coll.seq = 7; d.coll.func = t->func; d.coll.count = t->count; d.coll.root = t->root_or_peer;
      d.coll.dtype = t->dtype; d.coll.channels = (uint8_t)t->channels; d.coll.warps = 16;
      d.coll.algo = t->algo; d.coll.proto = t->proto;
    } else if (type == RM_EV_P2P) {
      d.p2p.func = t->func; d.p2p.count = t->count; d.p2p.dtype = t->dtype; d.p2p.peer = t->root_or_peer;
      d.p2p.channels = (uint8_t)t->channels;
    } else if (type == RM_EV_PROXY_OP) {
      d.proxy_op.pid = 1; d.proxy_op.n_steps = 4; d.proxy_op.is_send = 1;
    }
    return ((rm_profiler_v4_t *)tbl)->startEvent(ctx, h, &d);
  }
  if (abi == 3) {
    rm_descr_v3_t d; memset(&d, 0, sizeof d);
    d.type = (uint8_t)type; d.parent = (type == RM_EV_COLL || type == RM_EV_P2P) ? group : parent; d.rank = rank;
    if (type == RM_EV_COLL) {
      d.coll.comm_name = name; d.coll.comm_hash = hash; d.coll.seq = 7; d.coll.func = t->func;
      d.coll.count = t->count; d.coll.root = t->root_or_peer; d.coll.dtype = t->dtype;
      d.coll.max_channels = (uint8_t)t->channels; d.coll.algo = t->algo; d.coll.proto = t->proto;
    } else if (type == RM_EV_P2P) {
      d.p2p.comm_name = name; d.p2p.comm_hash = hash; d.p2p.func = t->func; d.p2p.count = t->count;
      d.p2p.dtype = t->dtype; d.p2p.peer = t->root_or_peer;
    }
    return ((rm_profiler_v3_t *)tbl)->startEvent(ctx, h, &d);
  }
  if (type == RM_EV_KERNEL_CH) { *h = NULL; return 0; }      /* no kernel events in v2 */
  rm_descr_v2_t d; memset(&d, 0, sizeof d);
  d.type = (uint8_t)type; d.parent = (type == RM_EV_COLL || type == RM_EV_P2P) ? group : parent; d.rank = rank;
  if (type == RM_EV_COLL) {
    d.coll.comm_name = name; d.coll.comm_hash = hash; d.coll.seq = 7; d.coll.func = t->func;
    d.coll.count = t->count; d.coll.root = t->root_or_peer; d.coll.dtype = t->dtype;
    d.coll.traffic_bytes = 0; d.coll.max_channels = (uint8_t)t->channels; d.coll.algo = t->algo;
    d.coll.proto = t->proto;
  } else if (type == RM_EV_P2P) {
    d.p2p.comm_name = name; d.p2p.comm_hash = hash; d.p2p.func = t->func; d.p2p.count = t->count;
    d.p2p.dtype = t->dtype; d.p2p.peer = t->root_or_peer;
  }
  return ((rm_profiler_v2_t *)tbl)->startEvent(ctx, h, &d);
}

/* One ncclGroupStart ... ncclGroupEnd holding ntasks tasks, as NCCL's enqueue drives it. */
static void issue_group(void *ctx, int mask, int rank, const task_t *tasks, int ntasks, uint64_t hash,
                        const char *name) {
  void *gapi = NULL, *api[8] = {0}, *grp = NULL, *task[8] = {0}, *proxy = NULL, *kern = NULL;
  if (abi >= 5) {
    CHECK(call_start(ctx, &gapi, RM_EV_GROUP_API, NULL, rank, NULL, NULL, hash, name));
    for (int i = 0; i < ntasks; i++) {
      CHECK(call_start(ctx, &api[i], tasks[i].is_coll ? RM_EV_COLL_API : RM_EV_P2P_API, gapi, rank,
                       &tasks[i], NULL, hash, name));
      if (api[i]) CHECK(call_stop(api[i]));
    }
    if (gapi) CHECK(call_record(gapi, RM_ST_GROUP_END_API_START));
  }
  /* the plan: group event, then task events (v5: parent = API event, parentGroup = group) */
  CHECK(call_start(ctx, &grp, RM_EV_GROUP, NULL, rank, NULL, NULL, hash, name));
  for (int i = 0; i < ntasks; i++) {
    uint64_t type = tasks[i].is_coll ? RM_EV_COLL : RM_EV_P2P;
    if (!(mask & (int)type)) continue;
    if (abi <= 4 && !grp) continue;    /* NCCL <= 2.27: no task events without a group handle */
    CHECK(call_start(ctx, &task[i], type, api[i], rank, &tasks[i], grp, hash, name));
  }
  /* proxy and kernel-channel events hang under the first task (NCCL issues them only when the
   * mask asks; the plugin must cope either way) */
  CHECK(call_start(ctx, &proxy, RM_EV_PROXY_OP, task[0], rank, NULL, NULL, hash, name));
  if (proxy) { CHECK(call_record(proxy, RM_ST_PROXY_STEP_SEND_GPU_WAIT)); CHECK(call_stop(proxy)); }
  CHECK(call_start(ctx, &kern, RM_EV_KERNEL_CH, task[0], rank, NULL, NULL, hash, name));
  if (kern) { CHECK(call_record(kern, RM_ST_KERNEL_CH_STOP)); CHECK(call_stop(kern)); }
  for (int i = 0; i < ntasks; i++) if (task[i]) CHECK(call_stop(task[i]));
  if (grp) CHECK(call_stop(grp));
  if (gapi) CHECK(call_stop(gapi));
}

static task_t coll(const char *f, size_t count, const char *dt, const char *algo, const char *proto, int root) {
  task_t t = { 1, f, dt, algo, proto, count, root, 2, 0 };
  return t;
}
static task_t p2p(const char *f, size_t count, const char *dt, int peer) {
  task_t t = { 0, f, dt, NULL, NULL, count, peer, 1, 0 };
  return t;
}

static int scenario(void) {
  const char *rs = getenv("RANK"), *ws = getenv("WORLD_SIZE");
  int rank = rs ? atoi(rs) : 0, n = ws ? atoi(ws) : 1;
  int mask = 0, mask_b = 0;
  void *ca = NULL, *cb = NULL;
  const uint64_t HA = 0xA11CE, HB = 0xB0B;
  CHECK(call_init(&ca, &mask, HA, "world", n, rank));
  int rb = n - 1 - rank;
  CHECK(call_init(&cb, &mask_b, HB, "reversed", n, rb));
  printf("mask %d\n", mask);
  for (int i = 0; i < 3; i++) { task_t t = coll("AllReduce", 1200, "ncclFloat32", "RING", "SIMPLE", 0); issue_group(ca, mask, rank, &t, 1, HA, "world"); }
  for (int i = 0; i < 2; i++) { task_t t = coll("AllGather", 256, "ncclFloat16", "RING", "LL", 0); issue_group(ca, mask, rank, &t, 1, HA, "world"); }
  { task_t t = coll("ReduceScatter", 128, "ncclFloat64", "RING", "LL128", 0); issue_group(ca, mask, rank, &t, 1, HA, "world"); }
  { task_t t = coll("Broadcast", 4096, "ncclInt8", "RING", "SIMPLE", 1 % n); issue_group(ca, mask, rank, &t, 1, HA, "world"); }
  { task_t t = coll("Reduce", 100, "ncclInt32", "RING", "SIMPLE", 0); issue_group(ca, mask, rank, &t, 1, HA, "world"); }
  for (int i = 0; i < 2; i++) {
    task_t t[2] = { p2p("Send", 5000, "ncclFloat32", (rank + 1) % n), p2p("Recv", 5000, "ncclFloat32", (rank + n - 1) % n) };
    issue_group(ca, mask, rank, t, 2, HA, "world");
  }
  { task_t t = coll("AllReduce", 65536, "ncclBfloat16", "TREE", "LL128", 0); issue_group(ca, mask, rank, &t, 1, HA, "world"); }
  { task_t t = coll("AllReduce", 300, "ncclFloat32", "RING", "SIMPLE", 0); issue_group(cb, mask_b, rb, &t, 1, HB, "reversed"); }
  if (abi >= 4) { task_t t = p2p("Send", 64, "Unknown", (rb + 1) % n); issue_group(cb, mask_b, rb, &t, 1, HB, "reversed"); }
  CHECK(call_finalize(cb));
  CHECK(call_finalize(ca));
  return failures ? 1 : 0;
}

static int bench(long iters) {
  int mask = 0;
  void *ctx = NULL;
  setenv("RANKMAP_NCCL_MEMBERS_WAIT_MS", "0", 0);
  CHECK(call_init(&ctx, &mask, 0xBE1C, "bench", 1, 0));
  task_t t = coll("AllReduce", 2, "ncclFloat32", "RING", "LL", 0);
  struct timespec a, b;
  for (int pass = 0; pass < 2; pass++) {            /* pass 0 warms up */
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < iters; i++) issue_group(ctx, mask, 0, &t, 1, 0xBE1C, "bench");
    clock_gettime(CLOCK_MONOTONIC, &b);
  }
  double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)iters;
  printf("ns_per_op %.1f\n", ns);
  CHECK(call_finalize(ctx));
  return failures ? 1 : 0;
}

/* ---- one process, several GPUs ---------------------------------------------------------------- */

static void (*set_device)(int);

static int multi(int nproc, int me, int ngpu) {
  enum { MAXG = 8 };
  if (ngpu < 1 || ngpu > MAXG || nproc < 1 || me < 0 || me >= nproc) return 2;
  const char *no_gpu = getenv("MULTI_NO_GPU");
  if (!(no_gpu && *no_gpu == '1')) {
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    set_device = cu ? (void (*)(int))dlsym(cu, "fake_cuda_set_device") : NULL;
    if (!set_device) { fprintf(stderr, "harness: stand-in libcuda.so.1 not found\n"); return 2; }
  }
  const uint64_t HW = 0x3A11, HL = 0x10CA1 + (uint64_t)me;
  int n = nproc * ngpu, mask[MAXG], lmask[MAXG];
  void *w[MAXG], *l[MAXG];
  for (int g = 0; g < ngpu; g++) {          /* ncclCommInitAll: device g current, then its init */
    if (set_device) set_device(g);
    CHECK(call_init(&w[g], &mask[g], HW, "world", n, me * ngpu + g));
  }
  for (int g = 0; g < ngpu; g++) {
    if (set_device) set_device(g);
    CHECK(call_init(&l[g], &lmask[g], HL, "local", ngpu, g));
  }
  printf("mask %d\n", mask[0]);
  if (set_device) set_device(-1);           /* operations come from a thread with no GPU current */
  for (int rep = 0; rep < 2; rep++)
    for (int g = 0; g < ngpu; g++) { task_t t = coll("AllReduce", 1000, "ncclFloat32", "RING", "SIMPLE", 0); issue_group(w[g], mask[g], me * ngpu + g, &t, 1, HW, "world"); }
  for (int g = 0; g < ngpu; g++) { task_t t = coll("AllGather", 64, "ncclFloat32", "RING", "LL", 0); issue_group(w[g], mask[g], me * ngpu + g, &t, 1, HW, "world"); }
  for (int g = 0; g < ngpu; g++) {
    int r = me * ngpu + g;
    task_t t[2] = { p2p("Send", 300, "ncclInt8", (r + 1) % n), p2p("Recv", 300, "ncclInt8", (r + n - 1) % n) };
    issue_group(w[g], mask[g], r, t, 2, HW, "world");
  }
  if (abi >= 5)
    for (int g = 0; g < ngpu; g++) {
      task_t t = coll("AllReduce", 2048, "ncclFloat32", "RING", "LL128", 0);
      t.captured = 1;
      issue_group(w[g], mask[g], me * ngpu + g, &t, 1, HW, "world");
    }
  for (int g = 0; g < ngpu; g++) { task_t t = coll("Broadcast", 256, "ncclInt8", "RING", "SIMPLE", 0); issue_group(l[g], lmask[g], g, &t, 1, HL, "local"); }
  for (int g = 0; g < ngpu; g++) { CHECK(call_finalize(l[g])); CHECK(call_finalize(w[g])); }
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: harness PLUGIN.so ABI scenario | bench N | multi P I G\n"); return 2; }
  abi = atoi(argv[2]);
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "harness: dlopen: %s\n", dlerror()); return 2; }
  char sym[32];
  snprintf(sym, sizeof sym, "ncclProfiler_v%d", abi);
  tbl = dlsym(lib, sym);
  if (!tbl) { fprintf(stderr, "harness: %s not exported\n", sym); return 2; }
  printf("name %s\n", ((rm_profiler_v5_t *)tbl)->name);
  int rc;
  if (strcmp(argv[3], "bench") == 0) rc = bench(argc > 4 ? atol(argv[4]) : 100000);
  else if (strcmp(argv[3], "multi") == 0) rc = argc > 6 ? multi(atoi(argv[4]), atoi(argv[5]), atoi(argv[6])) : 2;
  else rc = scenario();
  /* NCCL dlcloses the plugin when its last communicator is gone; the plugin must survive that */
  dlclose(lib);
  return rc;
}
