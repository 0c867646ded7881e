/* A second NCCL profiler plugin for the chain tests: it counts what it is given and checks it.
 *
 * Built with -DMIN_ABI=m -DMAX_ABI=M it exports ncclProfiler_v<m> .. ncclProfiler_v<M> (m = M = 5 is
 * what NCCL Inspector exports). It asks for every event type, and counts, per event type, the
 * events started, and the stops, state records, inits and finalizes. Every handle it gives out is
 * its own struct; a parent (or, from v5 on, a task's group) that is not NULL and not one of its own
 * handles, a stop or record of a handle that is not its own, and a context that is not its own are
 * counted as "foreign": a chain that passes on another plugin's handles shows up there. At exit it
 * writes the counts to $COUNTER_OUT.<pid>. */
#define _GNU_SOURCE
#include "../../native/nccl/nccl_abi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAGIC 0xC0C0C0C0u
typedef struct { unsigned magic; uint64_t type; } handle_t;
typedef struct { unsigned magic; int abi; } ctx_t;

static long starts[16], stops, records, inits, finals, foreign;

static int mine(const void *p) { return p && ((const handle_t *)p)->magic == MAGIC; }
static int my_ctx(const void *p) { return p && ((const ctx_t *)p)->magic == MAGIC + 1; }

static void *ctx_new(int abi, int *mask) {
  ctx_t *c = malloc(sizeof *c);
  c->magic = MAGIC + 1; c->abi = abi;
  *mask = 0xFFFF;
  inits++;
  return c;
}

static rm_nccl_result_t start(void *ctx, void **h, const void *d, int abi) {
  uint64_t type = abi >= 5 ? ((const rm_descr_v5_t *)d)->type : ((const rm_descr_v4_t *)d)->type;
  const void *parent = ((const rm_descr_v5_t *)d)->parent;
  if (!my_ctx(ctx) || (parent && !mine(parent))) foreign++;
  if (abi >= 5 && type == RM_EV_COLL && ((const rm_descr_v5_t *)d)->coll.group && !mine(((const rm_descr_v5_t *)d)->coll.group))
    foreign++;
  if (abi >= 5 && type == RM_EV_P2P && ((const rm_descr_v5_t *)d)->p2p.group && !mine(((const rm_descr_v5_t *)d)->p2p.group))
    foreign++;
  for (int b = 0; b < 16; b++) if (type == (uint64_t)1 << b) starts[b]++;
  handle_t *e = malloc(sizeof *e);
  e->magic = MAGIC; e->type = type;
  *h = e;
  return 0;
}
static rm_nccl_result_t stop(void *h) {
  if (!mine(h)) { foreign++; return 0; }
  stops++;
  ((handle_t *)h)->magic = 0;
  free(h);
  return 0;
}
static rm_nccl_result_t record(void *h, int state, void *a) {
  (void)state; (void)a;
  if (!mine(h)) foreign++; else records++;
  return 0;
}
static rm_nccl_result_t fini(void *ctx) {
  if (!my_ctx(ctx)) foreign++; else { finals++; free(ctx); }
  return 0;
}

__attribute__((destructor)) static void report(void) {
  const char *out = getenv("COUNTER_OUT");
  if (!out || !inits) return;
  char path[4096];
  snprintf(path, sizeof path, "%s.%d", out, (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f) return;
  for (int b = 0; b < 16; b++) if (starts[b]) fprintf(f, "start.%d %ld\n", 1 << b, starts[b]);
  fprintf(f, "stops %ld\nrecords %ld\ninits %ld\nfinals %ld\nforeign %ld\n", stops, records, inits, finals, foreign);
  fclose(f);
}

#define NEW_INIT(V) \
  static rm_nccl_result_t init_v##V(void **c, uint64_t id, int *m, const char *n, int nn, int nr, int r, rm_nccl_logger_t l) { \
    (void)id; (void)n; (void)nn; (void)nr; (void)r; (void)l; *c = ctx_new(V, m); return 0; } \
  static rm_nccl_result_t start_v##V(void *c, void **h, void *d) { return start(c, h, d, V); }
#define OLD_START(V) static rm_nccl_result_t start_v##V(void *c, void **h, void *d) { return start(c, h, d, V); }

#if MIN_ABI <= 7 && MAX_ABI >= 7
NEW_INIT(7)
rm_profiler_v7_t ncclProfiler_v7 = { "counter", init_v7, (void *)start_v7, stop, (void *)record, fini };
#endif
#if MIN_ABI <= 6 && MAX_ABI >= 6
NEW_INIT(6)
rm_profiler_v6_t ncclProfiler_v6 = { "counter", init_v6, (void *)start_v6, stop, (void *)record, fini };
#endif
#if MIN_ABI <= 5 && MAX_ABI >= 5
NEW_INIT(5)
rm_profiler_v5_t ncclProfiler_v5 = { "counter", init_v5, (void *)start_v5, stop, (void *)record, fini };
#endif
#if MIN_ABI <= 4 && MAX_ABI >= 4
static rm_nccl_result_t init_v4(void **c, int *m, const char *n, uint64_t h, int nn, int nr, int r, rm_nccl_logger_t l) {
  (void)n; (void)h; (void)nn; (void)nr; (void)r; (void)l; *c = ctx_new(4, m); return 0; }
OLD_START(4)
rm_profiler_v4_t ncclProfiler_v4 = { "counter", init_v4, (void *)start_v4, stop, (void *)record, fini };
#endif
#if MIN_ABI <= 3 && MAX_ABI >= 3
static rm_nccl_result_t init_v3(void **c, int *m) { *c = ctx_new(3, m); return 0; }
OLD_START(3)
rm_profiler_v3_t ncclProfiler_v3 = { "counter", init_v3, (void *)start_v3, stop, (void *)record, fini };
#endif
#if MIN_ABI <= 2 && MAX_ABI >= 2
static rm_nccl_result_t init_v2(void **c, int *m) { *c = ctx_new(2, m); return 0; }
OLD_START(2)
rm_profiler_v2_t ncclProfiler_v2 = { "counter", init_v2, (void *)start_v2, stop, (void *)record, fini };
#endif
