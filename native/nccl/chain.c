/* The profiler tables NCCL loads, and the chain to a second profiler plugin.
 *
 * NCCL loads one profiler plugin. So that rankmap does not displace another one (NCCL Inspector,
 * a cloud image's default profiler), RANKMAP_NCCL_CHAIN=/path/lib.so names a second plugin that
 * receives every event NCCL hands to rankmap, with its own contexts and handles: NCCL then gets a
 * pair (rankmap's, the other's) for each, and the parent handles inside every descriptor are
 * rewritten to the receiver's own before each plugin sees it. The activation mask NCCL gets is the
 * union of both; each plugin is only handed the event types it asked for (and every group event,
 * which NCCL up to 2.27 needs answered for its task events).
 *
 * The other plugin is driven at the ABI version NCCL drives rankmap at, or, from v5 on, at the
 * highest version >= 5 it exports below that: v5, v6 and v7 share the init and state signatures
 * and every v5 member keeps its offset in later descriptors, so a v5 plugin (Inspector) reads a v7
 * descriptor of the types it asked for as its own. Earlier versions chain only to the same version.
 * Without RANKMAP_NCCL_CHAIN every entry point goes straight to rankmap's own (plugin.c). Nothing
 * the other plugin does can stop rankmap recording, and nothing of rankmap's (capture off) stops
 * the other: failures are said in one stderr line. */
#define _GNU_SOURCE
#include "nccl_abi.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* rankmap's own tables (plugin.c); every version's table has the same six slots */
extern rm_profiler_v7_t rm_own_v7;
extern rm_profiler_v6_t rm_own_v6;
extern rm_profiler_v5_t rm_own_v5;
extern rm_profiler_v4_t rm_own_v4;
extern rm_profiler_v3_t rm_own_v3;
extern rm_profiler_v2_t rm_own_v2;

typedef rm_nccl_result_t (*init_new_t)(void **, uint64_t, int *, const char *, int, int, int, rm_nccl_logger_t);
typedef rm_nccl_result_t (*init_v4_t)(void **, int *, const char *, uint64_t, int, int, int, rm_nccl_logger_t);
typedef rm_nccl_result_t (*init_old_t)(void **, int *);
typedef rm_nccl_result_t (*start_t)(void *, void **, void *);
typedef rm_nccl_result_t (*stop_t)(void *);
typedef rm_nccl_result_t (*record_t)(void *, int, void *);
typedef rm_nccl_result_t (*fini_t)(void *);
typedef struct { const char *name; void *init, *start, *stop, *record, *finalize; } table_t;

static const table_t *own_table(int abi) {
  switch (abi) {
    case 7: return (const table_t *)(const void *)&rm_own_v7;
    case 6: return (const table_t *)(const void *)&rm_own_v6;
    case 5: return (const table_t *)(const void *)&rm_own_v5;
    case 4: return (const table_t *)(const void *)&rm_own_v4;
    case 3: return (const table_t *)(const void *)&rm_own_v3;
    default: return (const table_t *)(const void *)&rm_own_v2;
  }
}
static size_t descr_size(int abi) {
  static const size_t sz[8] = { 0, 0, sizeof(rm_descr_v2_t), sizeof(rm_descr_v3_t), sizeof(rm_descr_v4_t),
                                sizeof(rm_descr_v5_t), sizeof(rm_descr_v6_t), sizeof(rm_descr_v7_t) };
  return sz[abi];
}

/* ---- the other plugin ---------------------------------------------------------------------------- */

static pthread_mutex_t c_lock = PTHREAD_MUTEX_INITIALIZER;
static int c_loaded;                 /* RANKMAP_NCCL_CHAIN looked at */
static const table_t *c_tbl;         /* the other plugin's table, NULL: no chain */
static int c_abi;                    /* the version it is driven at */

static void say(const char *line) { ssize_t w = write(2, line, strlen(line)); (void)w; }
static rm_nccl_result_t c_stop(void *handle);

/* Find the other plugin once, for the version NCCL drives rankmap at. 1: chained. */
static int chain_for(int abi) {
  pthread_mutex_lock(&c_lock);
  if (!c_loaded) {
    c_loaded = 1;
    const char *path = getenv("RANKMAP_NCCL_CHAIN");
    char line[1400];
    if (path && *path) {
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        snprintf(line, sizeof line, "rankmap: RANKMAP_NCCL_CHAIN=%.500s: cannot load it (%.600s); NCCL events go to "
                 "rankmap alone\n", path, dlerror());
        say(line);
      } else {
        int lowest = abi >= 5 ? 5 : abi, self = 0;
        for (int w = abi; w >= lowest && !c_tbl; w--) {
          char sym[32];
          snprintf(sym, sizeof sym, "ncclProfiler_v%d", w);
          const table_t *t = dlsym(h, sym);
          if (t && t->stop == (void *)c_stop) {      /* the same library: rankmap itself */
            say("rankmap: RANKMAP_NCCL_CHAIN names rankmap's own plugin: not chained to itself\n");
            self = 1;
            break;
          }
          if (t) { c_tbl = t; c_abi = w; }
        }
        if (!c_tbl && !self) {
          snprintf(line, sizeof line, "rankmap: RANKMAP_NCCL_CHAIN=%.500s exports no profiler table NCCL's ABI v%d can "
                   "drive (ncclProfiler_v%d%s); NCCL events go to rankmap alone\n", path, abi, abi,
                   abi >= 5 ? " down to v5" : "");
          say(line);
        }
        if (c_tbl) {
          snprintf(line, sizeof line, "rankmap: NCCL profiler events also go to %.500s (%.60s, ABI v%d)\n", path,
                   c_tbl->name ? c_tbl->name : "?", c_abi);
          say(line);
        }
      }
    }
  }
  pthread_mutex_unlock(&c_lock);
  return c_tbl != NULL;
}

typedef struct { void *mine, *theirs; int their_mask; } pair_ctx_t;
typedef struct pair_ev { void *mine, *theirs; } pair_ev_t;

/* a small per-thread free list of event pairs in front of malloc */
#define PAIR_CACHE 64
static __thread pair_ev_t *t_pairs[PAIR_CACHE];
static __thread int t_npairs;
static pair_ev_t *pair_new(void) { return t_npairs ? t_pairs[--t_npairs] : malloc(sizeof(pair_ev_t)); }
static void pair_free(pair_ev_t *p) { if (t_npairs < PAIR_CACHE) t_pairs[t_npairs++] = p; else free(p); }

/* ---- generic entry points (abi: the version NCCL drives) --------------------------------------- */

static pair_ctx_t *pair_ctx(void *mine, rm_nccl_result_t their_rc, void *theirs, int their_mask) {
  if (their_rc != RM_NCCL_SUCCESS) {
    char line[200];
    snprintf(line, sizeof line, "rankmap: the chained profiler's init returned %d: it gets no events of this "
             "communicator\n", their_rc);
    say(line);
    theirs = NULL; their_mask = 0;
  }
  pair_ctx_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->mine = mine; p->theirs = theirs; p->their_mask = theirs ? their_mask : 0;
  return p;
}

static rm_nccl_result_t c_init_new(int abi, void **ctx, uint64_t id, int *mask, const char *name, int nn,
                                   int nr, int r, rm_nccl_logger_t log) {
  rm_nccl_result_t rc = ((init_new_t)own_table(abi)->init)(ctx, id, mask, name, nn, nr, r, log);
  if (!chain_for(abi)) return rc;
  void *theirs = NULL; int m2 = 0;
  rm_nccl_result_t rc2 = ((init_new_t)c_tbl->init)(&theirs, id, &m2, name, nn, nr, r, log);
  pair_ctx_t *p = pair_ctx(*ctx, rc2, theirs, m2);
  if (!p) return rc;                 /* no memory: rankmap's context alone (the chain is lost) */
  *mask |= p->their_mask;
  *ctx = p;
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t c_init_v4(void **ctx, int *mask, const char *name, uint64_t hash, int nn, int nr, int r,
                                  rm_nccl_logger_t log) {
  rm_nccl_result_t rc = ((init_v4_t)own_table(4)->init)(ctx, mask, name, hash, nn, nr, r, log);
  if (!chain_for(4)) return rc;
  void *theirs = NULL; int m2 = 0;
  rm_nccl_result_t rc2 = ((init_v4_t)c_tbl->init)(&theirs, &m2, name, hash, nn, nr, r, log);
  pair_ctx_t *p = pair_ctx(*ctx, rc2, theirs, m2);
  if (!p) return rc;
  *mask |= p->their_mask;
  *ctx = p;
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t c_init_old(int abi, void **ctx, int *mask) {
  rm_nccl_result_t rc = ((init_old_t)own_table(abi)->init)(ctx, mask);
  if (!chain_for(abi)) return rc;
  void *theirs = NULL; int m2 = 0;
  rm_nccl_result_t rc2 = ((init_old_t)c_tbl->init)(&theirs, &m2);
  pair_ctx_t *p = pair_ctx(*ctx, rc2, theirs, m2);
  if (!p) return rc;
  *mask |= p->their_mask;
  *ctx = p;
  return RM_NCCL_SUCCESS;
}

/* Set the handle fields of a descriptor copy (parent; from v5 on, a task's group too) to one side's. */
static void retarget(unsigned char *d, size_t group_at, pair_ev_t *parent, pair_ev_t *group, int theirs) {
  void *p = parent ? (theirs ? parent->theirs : parent->mine) : NULL;
  memcpy(d + offsetof(rm_descr_v5_t, parent), &p, sizeof p);
  if (group_at) {
    void *g = group ? (theirs ? group->theirs : group->mine) : NULL;
    memcpy(d + group_at, &g, sizeof g);
  }
}

static rm_nccl_result_t c_start(int abi, void *ctx, void **handle, void *d) {
  if (!c_tbl) return ((start_t)own_table(abi)->start)(ctx, handle, d);
  *handle = NULL;
  pair_ctx_t *pc = ctx;
  if (!pc || !d) return RM_NCCL_SUCCESS;
  unsigned char buf[sizeof(rm_descr_v7_t) > sizeof(rm_descr_v2_t) ? sizeof(rm_descr_v7_t) : sizeof(rm_descr_v2_t)];
  size_t n = descr_size(abi);
  memcpy(buf, d, n);
  uint64_t type = abi >= 5 ? ((rm_descr_v5_t *)d)->type : ((rm_descr_v4_t *)d)->type;
  size_t group_at = abi < 5 ? 0 : type == RM_EV_COLL ? offsetof(rm_descr_v5_t, coll.group)
                                : type == RM_EV_P2P ? offsetof(rm_descr_v5_t, p2p.group) : 0;
  pair_ev_t *parent, *group = NULL;
  memcpy(&parent, buf + offsetof(rm_descr_v5_t, parent), sizeof parent);
  if (group_at) memcpy(&group, buf + group_at, sizeof group);
  void *mine = NULL, *theirs = NULL;
  retarget(buf, group_at, parent, group, 0);
  ((start_t)own_table(abi)->start)(pc->mine, &mine, buf);
  if (pc->theirs && (type == RM_EV_GROUP || (type & (uint64_t)pc->their_mask))) {
    memcpy(buf, d, n);
    retarget(buf, group_at, parent, group, 1);
    ((start_t)c_tbl->start)(pc->theirs, &theirs, buf);
  }
  if (mine || theirs) {
    pair_ev_t *e = pair_new();
    if (!e) {                        /* no memory: stop both now rather than lose their handles */
      if (mine) ((stop_t)own_table(abi)->stop)(mine);
      if (theirs) ((stop_t)c_tbl->stop)(theirs);
      return RM_NCCL_SUCCESS;
    }
    e->mine = mine; e->theirs = theirs;
    *handle = e;
  }
  return RM_NCCL_SUCCESS;
}

static rm_nccl_result_t c_stop(void *handle) {
  if (!c_tbl) return ((stop_t)own_table(7)->stop)(handle);   /* one stop for every version */
  pair_ev_t *e = handle;
  if (!e) return RM_NCCL_SUCCESS;
  if (e->mine) ((stop_t)own_table(7)->stop)(e->mine);
  if (e->theirs) ((stop_t)c_tbl->stop)(e->theirs);
  pair_free(e);
  return RM_NCCL_SUCCESS;
}

static rm_nccl_result_t c_record(int abi, void *handle, int state, void *args) {
  if (!c_tbl) return ((record_t)own_table(abi)->record)(handle, state, args);
  pair_ev_t *e = handle;
  if (!e) return RM_NCCL_SUCCESS;
  if (e->mine) ((record_t)own_table(abi)->record)(e->mine, state, args);
  if (e->theirs) ((record_t)c_tbl->record)(e->theirs, state, args);
  return RM_NCCL_SUCCESS;
}

static rm_nccl_result_t c_finalize(int abi, void *ctx) {
  if (!c_tbl) return ((fini_t)own_table(abi)->finalize)(ctx);
  pair_ctx_t *pc = ctx;
  if (!pc) return RM_NCCL_SUCCESS;
  ((fini_t)own_table(abi)->finalize)(pc->mine);
  if (pc->theirs) ((fini_t)c_tbl->finalize)(pc->theirs);
  free(pc);
  return RM_NCCL_SUCCESS;
}

/* ---- the exported tables ------------------------------------------------------------------------- */

#define NEW_ABI(V)                                                                                         \
  static rm_nccl_result_t v##V##_init(void **c, uint64_t id, int *m, const char *n, int nn, int nr, int r,  \
                                      rm_nccl_logger_t l) { return c_init_new(V, c, id, m, n, nn, nr, r, l); } \
  static rm_nccl_result_t v##V##_start(void *c, void **h, rm_descr_v##V##_t *d) { return c_start(V, c, h, d); } \
  static rm_nccl_result_t v##V##_record(void *h, int s, rm_state_args_v4_t *a) { return c_record(V, h, s, a); } \
  static rm_nccl_result_t v##V##_fini(void *c) { return c_finalize(V, c); }                                 \
  __attribute__((visibility("default"))) rm_profiler_v##V##_t ncclProfiler_v##V = {                          \
    "rankmap", v##V##_init, v##V##_start, c_stop, v##V##_record, v##V##_fini };
NEW_ABI(7)
NEW_ABI(6)
NEW_ABI(5)

static rm_nccl_result_t v4_start(void *c, void **h, rm_descr_v4_t *d) { return c_start(4, c, h, d); }
static rm_nccl_result_t v4_record(void *h, int s, rm_state_args_v4_t *a) { return c_record(4, h, s, a); }
static rm_nccl_result_t v4_fini(void *c) { return c_finalize(4, c); }
__attribute__((visibility("default"))) rm_profiler_v4_t ncclProfiler_v4 = {
  "rankmap", c_init_v4, v4_start, c_stop, v4_record, v4_fini };

#define OLD_ABI(V)                                                                                         \
  static rm_nccl_result_t v##V##_init(void **c, int *m) { return c_init_old(V, c, m); }                    \
  static rm_nccl_result_t v##V##_start(void *c, void **h, rm_descr_v##V##_t *d) { return c_start(V, c, h, d); } \
  static rm_nccl_result_t v##V##_record(void *h, int s, rm_state_args_v3_t *a) { return c_record(V, h, s, a); } \
  static rm_nccl_result_t v##V##_fini(void *c) { return c_finalize(V, c); }                                 \
  __attribute__((visibility("default"))) rm_profiler_v##V##_t ncclProfiler_v##V = {                          \
    "rankmap", v##V##_init, v##V##_start, c_stop, v##V##_record, v##V##_fini };
OLD_ABI(3)
OLD_ABI(2)
