/* rankmap NCCL profiler plugin: the facts of every NCCL operation, per GPU.
 *
 * Loaded by NCCL through NCCL_PROFILER_PLUGIN=<path of librankmap_nccl.so>. It records facts only;
 * who sent how many bytes to whom is worked out afterwards, in Python, by ONE model that follows
 * the rings and trees NCCL printed (rankmap.capture.nccl_model, docs/nccl-capture.md).
 *
 * One record file per GPU the process drives (an "identity"): a process that drives several GPUs
 * (nccl-tests -g N, ncclCommInitAll, JAX on one host) holds one communicator rank per GPU, and
 * each becomes its own global rank. The GPU is the CUDA context current while NCCL initialises
 * the communicator (libcuda's cuCtxGetDevice + cuDeviceGetPCIBusId, looked up at run time; no
 * build dependency). The file's rank is provisional: RANK (and friends) for a process with one
 * GPU, else the comm rank in the identity's first communicator; the ingest joins every file's
 * communicators by hash and derives the global ranks (docs/nccl-capture.md, "Global ranks").
 *
 * Per identity it records:
 *   - every collective, p2p and (NCCL 2.29+) copy-engine collective task: one call of its
 *     operation with its payload (count x datatype size), host-side time, size histogram, and
 *     the payload on the timeline (peer = the file's own rank: the ingest spreads it over pairs);
 *   - per communicator: hash, name, rank, nranks, nnodes, ABI, GPU (meta nccl.comm.<hash>) and a
 *     table of operations (function, bytes per call, algorithm, protocol, channels, root/peer,
 *     calls, calls captured into CUDA graphs, time), emitted as meta at every flush where it
 *     changed (from the writer's flush thread, never from NCCL's threads).
 * Activation mask: coll + p2p (+ coll/p2p API events from v5 on, only to learn whether a call
 * is being captured into a CUDA graph; + copy-engine collectives from v6 on).
 * ABI v2 .. v7; a second profiler plugin named by RANKMAP_NCCL_CHAIN gets every event too (chain.c). RANKMAP_NCCL_EVENTS=
 * coll|p2p|none narrows it for experiments ("none": what merely loading a plugin costs NCCL).
 *
 * It never disturbs the job: every entry point returns success, and any internal failure turns
 * capture off with one stderr line. */
#define _GNU_SOURCE
#include "nccl_abi.h"
#include "../common/rmrec.h"
#include "../common/rank_env.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLUGIN_NAME "rankmap"
#define OPTAB_SLOTS 512             /* per communicator: distinct (function, size, algo, ...) rows */

/* ---- functions, algorithms, protocols, datatypes (NCCL passes them as strings) ------------- */

enum { F_ALLREDUCE, F_ALLGATHER, F_REDUCESCATTER, F_BROADCAST, F_REDUCE, F_SEND, F_RECV,
       F_ALLTOALL, F_GATHER, F_SCATTER, F_SENDRECV, F_OTHER, F_N };
static const char *const func_name[F_N] = { "AllReduce", "AllGather", "ReduceScatter", "Broadcast",
  "Reduce", "Send", "Recv", "AlltoAll", "Gather", "Scatter", "SendRecv", "Other" };
static const char *const op_name[F_N] = { "ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
  "ncclBroadcast", "ncclReduce", "ncclSend", "ncclRecv", "ncclAlltoAll", "ncclGather",
  "ncclScatter", "ncclSendRecv", "ncclOther" };

enum { A_RING, A_TREE, A_COLLNET_DIRECT, A_COLLNET_CHAIN, A_NVLS, A_NVLS_TREE, A_PAT, A_CE, A_NONE, A_N };
static const char *const algo_name[A_N] = { "RING", "TREE", "COLLNET_DIRECT", "COLLNET_CHAIN",
  "NVLS", "NVLS_TREE", "PAT", "CE", "-" };
enum { P_LL, P_LL128, P_SIMPLE, P_NONE, P_N };
static const char *const proto_name[P_N] = { "LL", "LL128", "SIMPLE", "-" };

static int lookup(const char *s, const char *const *names, int n, int dflt) {
  if (!s) return dflt;
  for (int i = 0; i < n; i++) if (strcmp(s, names[i]) == 0) return i;
  return dflt;
}

/* Bytes of one element, from NCCL's datatype string ("ncclFloat32", ...). NCCL names every type
 * but ncclUint8 (it prints "Unknown" for it), so an unknown name is one byte. */
static uint64_t dtype_size(const char *t) {
  if (!t || strncmp(t, "nccl", 4) != 0) return 1;
  t += 4;
  if (!strcmp(t, "Float32") || !strcmp(t, "Int32") || !strcmp(t, "Uint32")) return 4;
  if (!strcmp(t, "Float16") || !strcmp(t, "Bfloat16")) return 2;
  if (!strcmp(t, "Float64") || !strcmp(t, "Int64") || !strcmp(t, "Uint64")) return 8;
  return 1;   /* Int8, Uint8, Float8e4m3, Float8e5m2 */
}

/* ---- identities (one record file per GPU of the process) and communicators ------------------ */

typedef struct ident {
  rmrec_t *rec;
  int rank, ordinal;                 /* provisional global rank; CUDA device ordinal (-1 unknown) */
  char bus[32];                      /* PCI bus id of the GPU, "" when unknown */
  int op[F_N];
  struct ident *next;
} ident_t;

typedef struct {                     /* one row of the operation table */
  uint64_t bytes;                    /* payload of one call: count x datatype size */
  int32_t root_or_peer;              /* collectives: root (-1 if none); p2p: peer comm rank */
  uint8_t used, func, algo, proto, channels;
  uint64_t calls, captured, time_tk, first_tk, last_tk;  /* rmrec_ticks(): ns at emission */
} oprow_t;

typedef struct comm {
  uint64_t hash;
  char name[64];
  int rank, nranks, nnodes, abi;
  ident_t *id;
  pthread_mutex_t lock;              /* guards the operation table */
  oprow_t rows[OPTAB_SLOTS];
  uint64_t overflow_calls;
  uint64_t calls, emitted_calls;     /* emit the table only when it changed */
  struct comm *next;
} comm_t;

typedef struct {                     /* one live task event (handle given to NCCL) */
  comm_t *comm;
  uint64_t t0_ticks, bytes;
  int32_t root_or_peer;
  uint8_t func, algo, proto, channels, captured;
} event_t;

/* ---- global state ---------------------------------------------------------------------------- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_off;            /* set on internal failure: every entry point turns no-op */
static int g_setup, g_env_rank = -1, g_env_size = -1, g_rank_from_env;
static char g_dir[4096];
static ident_t *g_idents;
static comm_t *g_comms;
static const char *g_events = "all";
static int g_want = RM_EV_COLL | RM_EV_P2P;  /* task events asked of NCCL: RANKMAP_NCCL_EVENTS */

static void say(const char *line) {
  ssize_t w = write(2, line, strlen(line));
  (void)w;
}
static void fail(const char *why) {
  if (atomic_exchange(&g_off, 1)) return;
  int said = 0;
  for (ident_t *i = g_idents; i; i = i->next) if (i->rec && !said) { rmrec_fail(i->rec, why); said = 1; }
  if (!said) {
    char line[600];
    snprintf(line, sizeof line, "rankmap: capture disabled: %s\n", why);
    say(line);
  }
}

static int env_int(const char *const *names, int *out) {
  for (; *names; names++) {
    const char *s = getenv(*names);
    if (s && *s) { char *e; long v = strtol(s, &e, 10); if (!*e && v >= 0) { *out = (int)v; return 1; } }
  }
  return 0;
}

/* Keep this library mapped until exit: NCCL dlcloses profiler plugins when its last communicator
 * goes, but the writer's flush threads and exit handler live here. */
static void pin_self(void) {
  Dl_info info;
  if (dladdr((void *)&pin_self, &info) && info.dli_fname)
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

/* A forked child records nothing (the writer already ignores it): make every entry point a no-op
 * and never wait on a lock some other thread of the parent held at fork time. */
static void atfork_child(void) {
  pthread_mutex_init(&g_lock, NULL);
  atomic_store(&g_off, 1);
}

/* Read the environment once (g_lock held). 0: capture is off. */
static int setup_once(void) {
  if (g_setup) return !atomic_load(&g_off);
  g_setup = 1;
  const char *dir = getenv("RANKMAP_RUN_DIR");
  if (!dir || !*dir) {
    atomic_store(&g_off, 1);
    say("rankmap: capture disabled: RANKMAP_RUN_DIR is not set (the NCCL profiler plugin records nothing)\n");
    return 0;
  }
  snprintf(g_dir, sizeof g_dir, "%s", dir);
  static const char *const rank_env[] = RM_RANK_ENV;
  static const char *const size_env[] = RM_SIZE_ENV;
  g_rank_from_env = env_int(rank_env, &g_env_rank);
  if (!env_int(size_env, &g_env_size)) g_env_size = -1;
  const char *ev = getenv("RANKMAP_NCCL_EVENTS");
  if (ev && *ev && strcmp(ev, "all") != 0) {
    if (!strcmp(ev, "none")) { g_want = 0; g_events = "none"; }
    else if (!strcmp(ev, "coll")) { g_want = RM_EV_COLL; g_events = "coll"; }
    else if (!strcmp(ev, "p2p")) { g_want = RM_EV_P2P; g_events = "p2p"; }
    else {
      char line[200];
      snprintf(line, sizeof line, "rankmap: RANKMAP_NCCL_EVENTS=%.40s not understood (all, coll, p2p, "
               "none): recording all\n", ev);
      say(line);
    }
  }
  pin_self();
  pthread_atfork(NULL, NULL, atfork_child);
  return 1;
}

/* The activation mask for one ABI version: task events, plus (v5+) the API events that say
 * whether a call is being captured into a CUDA graph, plus (v6) copy-engine collectives. */
static int mask_for(int abi) {
  int m = g_want;
  if (abi >= 5 && (m & RM_EV_COLL)) m |= RM_EV_COLL_API;
  if (abi >= 5 && (m & RM_EV_P2P)) m |= RM_EV_P2P_API;
  if (abi >= 6 && (m & RM_EV_COLL)) m |= RM_EV_CE_COLL;
  return m;
}

/* The GPU whose CUDA context is current on this thread (NCCL makes its device current while it
 * initialises a communicator). libcuda is looked up only if the process already loaded it. */
static void current_gpu(char *bus, size_t n, int *ordinal) {
  bus[0] = 0; *ordinal = -1;
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return;
  int (*get_dev)(int *) = (int (*)(int *))dlsym(h, "cuCtxGetDevice");
  int (*bus_id)(char *, int, int) = (int (*)(char *, int, int))dlsym(h, "cuDeviceGetPCIBusId");
  int d = -1;
  if (get_dev && get_dev(&d) == 0 && d >= 0) {
    *ordinal = d;
    if (bus_id && bus_id(bus, (int)n, d) != 0) bus[0] = 0;
    for (char *p = bus; *p; p++) *p = (char)tolower((unsigned char)*p);
  }
  dlclose(h);
}

static int ident_has_comm(const ident_t *id, uint64_t hash) {
  for (comm_t *c = g_comms; c; c = c->next) if (c->id == id && c->hash == hash) return 1;
  return 0;
}

static void pre_flush(void *arg);

/* The identity a new communicator rank belongs to (g_lock held): the one of its GPU, else (GPU
 * unknown) the first one not already in this communicator; a new one (a new record file) if none. */
static ident_t *ident_for(uint64_t hash, int comm_rank, int comm_nranks) {
  char bus[32]; int ordinal;
  current_gpu(bus, sizeof bus, &ordinal);
  ident_t **tail = &g_idents;
  for (ident_t *i = g_idents; i; tail = &i->next, i = i->next) {
    if (bus[0] ? strcmp(i->bus, bus) == 0 : !ident_has_comm(i, hash)) return i;
  }
  ident_t *id = calloc(1, sizeof *id);
  if (!id) { fail("out of memory for a GPU's record"); return NULL; }
  int first = g_idents == NULL;
  id->ordinal = ordinal;
  snprintf(id->bus, sizeof id->bus, "%s", bus);
  /* provisional rank: the launcher's for a process's first GPU, else the comm rank */
  id->rank = first && g_rank_from_env ? g_env_rank : (comm_rank >= 0 ? comm_rank : 0);
  int size = g_env_size > 0 ? g_env_size : 0;
  if (comm_nranks > size) size = comm_nranks;
  if (size <= id->rank) size = id->rank + 1;
  id->rec = rmrec_open_unique(g_dir, "nccl", id->rank, size);
  if (!id->rec) { free(id); atomic_store(&g_off, 1); return NULL; }   /* rmrec said why, in one line */
  for (int f = 0; f < F_N; f++) id->op[f] = rmrec_op(id->rec, op_name[f]);
  char v[160];
  snprintf(v, sizeof v, "%llu", (unsigned long long)rmrec_now_ns());
  rmrec_meta(id->rec, "nccl.clock_monotonic_ns_at_open", v);
  rmrec_meta(id->rec, "nccl.events", g_events);
  rmrec_meta(id->rec, "nccl.world_rank_from", first && g_rank_from_env ? "environment" : "first communicator");
  rmrec_meta(id->rec, "nccl.pair_model", "ingest");
  snprintf(v, sizeof v, "bus=%s ordinal=%d", bus[0] ? bus : "-", ordinal);
  rmrec_meta(id->rec, "nccl.gpu", v);
  rmrec_pre_flush(id->rec, pre_flush, id);
  *tail = id;
  return id;
}

static comm_t *comm_new(uint64_t hash, const char *name, int nnodes, int nranks, int rank, int abi) {
  comm_t *cm = calloc(1, sizeof *cm);
  if (!cm) { fail("out of memory for a communicator"); return NULL; }
  cm->hash = hash; cm->nnodes = nnodes; cm->nranks = nranks; cm->rank = rank; cm->abi = abi;
  snprintf(cm->name, sizeof cm->name, "%s", name ? name : "");
  /* names are written space-separated in the meta: keep them one token */
  for (char *p = cm->name; *p; p++) if (*p == ' ' || *p == '\n' || *p == '=') *p = '_';
  pthread_mutex_init(&cm->lock, NULL);
  return cm;
}

/* A new communicator rank of this process (g_lock held): its identity, its meta. */
static comm_t *add_comm(uint64_t hash, const char *name, int nnodes, int nranks, int rank, int abi) {
  if (!setup_once()) return NULL;
  ident_t *id = ident_for(hash, rank, nranks);
  if (!id) return NULL;
  comm_t *cm = comm_new(hash, name, nnodes, nranks, rank, abi);
  if (!cm) return NULL;
  cm->id = id;
  cm->next = g_comms; g_comms = cm;
  char key[64], v[320];
  snprintf(key, sizeof key, "nccl.comm.%016llx", (unsigned long long)hash);
  snprintf(v, sizeof v, "name=%s rank=%d nranks=%d nnodes=%d abi=v%d bus=%s ordinal=%d",
           cm->name[0] ? cm->name : "-", rank, nranks, nnodes, abi, id->bus[0] ? id->bus : "-", id->ordinal);
  rmrec_meta(id->rec, key, v);
  return cm;
}

/* ---- operation table (text in the meta: later values win, so each emission is complete) ---- */

static void emit_comm_ops(comm_t *cm, int only_if_changed) {
  if (only_if_changed && __atomic_load_n(&cm->calls, __ATOMIC_RELAXED) == cm->emitted_calls) return;
  size_t cap = 256 + (size_t)OPTAB_SLOTS * 240, len = 0;   /* a row prints at most ~220 chars */
  char *s = malloc(cap);
  if (!s) return;
  len += (size_t)snprintf(s, cap, "func bytes algo proto channels root_or_peer calls time_ns first_ns last_ns captured\n");
  rmrec_ticks_calibrate(0);          /* ticks -> ns over everything since the clock's reference */
  pthread_mutex_lock(&cm->lock);
  cm->emitted_calls = cm->calls;
  for (int i = 0; i < OPTAB_SLOTS && len < cap - 240; i++) {
    const oprow_t *o = &cm->rows[i];
    if (!o->used) continue;
    len += (size_t)snprintf(s + len, cap - len, "%s %llu %s %s %u %d %llu %llu %llu %llu %llu\n",
        func_name[o->func], (unsigned long long)o->bytes, algo_name[o->algo], proto_name[o->proto],
        (unsigned)o->channels, (int)o->root_or_peer, (unsigned long long)o->calls,
        (unsigned long long)rmrec_ticks_to_ns(o->time_tk),
        (unsigned long long)rmrec_ticks_to_mono_ns(o->first_tk),
        (unsigned long long)rmrec_ticks_to_mono_ns(o->last_tk), (unsigned long long)o->captured);
  }
  if (cm->overflow_calls && len < cap - 240)
    len += (size_t)snprintf(s + len, cap - len, "# %llu calls beyond %d distinct rows not tabled\n",
                            (unsigned long long)cm->overflow_calls, OPTAB_SLOTS);
  pthread_mutex_unlock(&cm->lock);
  char key[64];
  snprintf(key, sizeof key, "nccl.ops.%016llx.%d", (unsigned long long)cm->hash, cm->rank);
  rmrec_meta(cm->id->rec, key, s);
  free(s);
}

/* The writer's flush thread of identity arg: its changed tables go into this flush. */
static void pre_flush(void *arg) {
  if (atomic_load(&g_off)) return;
  if (pthread_mutex_trylock(&g_lock) != 0) return;   /* a communicator is starting: next flush */
  for (comm_t *cm = g_comms; cm; cm = cm->next) if (cm->id == arg) emit_comm_ops(cm, 1);
  pthread_mutex_unlock(&g_lock);
}

static void table_add(comm_t *cm, const event_t *e, uint64_t t1) {
  uint64_t h = e->bytes * 0x9E3779B97F4A7C15ull ^ ((uint64_t)e->func << 8 | e->algo << 16 | e->proto << 24 |
               (uint64_t)e->channels << 32) ^ (uint64_t)(uint32_t)e->root_or_peer * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  pthread_mutex_lock(&cm->lock);
  __atomic_fetch_add(&cm->calls, 1, __ATOMIC_RELAXED);
  for (unsigned k = 0; k < OPTAB_SLOTS; k++) {
    oprow_t *r = &cm->rows[(h + k) % OPTAB_SLOTS];
    if (!r->used) {
      r->used = 1; r->func = e->func; r->algo = e->algo; r->proto = e->proto; r->channels = e->channels;
      r->bytes = e->bytes; r->root_or_peer = e->root_or_peer; r->first_tk = e->t0_ticks;
    } else if (r->func != e->func || r->bytes != e->bytes || r->algo != e->algo || r->proto != e->proto ||
               r->channels != e->channels || r->root_or_peer != e->root_or_peer) {
      continue;
    }
    r->calls++; r->captured += e->captured; r->time_tk += t1 - e->t0_ticks; r->last_tk = t1;
    pthread_mutex_unlock(&cm->lock);
    return;
  }
  cm->overflow_calls++;
  pthread_mutex_unlock(&cm->lock);
}

/* ---- event handles: a small per-thread free list in front of malloc --------------------------- */

#define EV_CACHE 64
static __thread event_t *t_free[EV_CACHE];
static __thread int t_nfree;

static event_t *ev_alloc(void) {
  if (t_nfree) return t_free[--t_nfree];
  event_t *e = malloc(sizeof *e);
  if (!e) fail("out of memory for an event");
  return e;
}
static void ev_free(event_t *e) {
  if (t_nfree < EV_CACHE) t_free[t_nfree++] = e;
  else free(e);
}

/* Handles of events that need no state: every group event (NCCL up to 2.27 starts a plan's task
 * events only when its group event got a non-NULL handle), and the API events, whose handle tells
 * the task events below them whether the call is being captured into a CUDA graph. Stopping them
 * does nothing. */
static char g_group_handle, g_api_handle, g_api_captured;

/* Start a task event: everything the stop needs is copied (NCCL's strings are static). */
static void start_task(comm_t *cm, void **handle, int is_coll, const char *func, size_t count,
                       const char *dtype, int root_or_peer, int channels, const char *algo,
                       const char *proto, const void *parent) {
  *handle = NULL;
  if (!cm || atomic_load_explicit(&g_off, memory_order_relaxed)) return;
  event_t *e = ev_alloc();
  if (!e) return;
  e->comm = cm;
  e->func = (uint8_t)lookup(func, func_name, F_OTHER, F_OTHER);
  e->bytes = (uint64_t)count * dtype_size(dtype);
  e->root_or_peer = root_or_peer;
  if (is_coll && e->func != F_BROADCAST && e->func != F_REDUCE && e->func != F_GATHER && e->func != F_SCATTER)
    e->root_or_peer = -1;            /* NCCL passes 0 as root for rootless collectives */
  e->channels = (uint8_t)channels;
  e->algo = (uint8_t)(is_coll ? lookup(algo, algo_name, A_NONE, A_NONE) : A_NONE);
  e->proto = (uint8_t)(is_coll ? lookup(proto, proto_name, P_NONE, P_NONE) : P_NONE);
  e->captured = parent == (const void *)&g_api_captured;
  e->t0_ticks = rmrec_ticks();
  *handle = e;
}

static rm_nccl_result_t stop_event(void *handle) {
  event_t *e = handle;
  if (!e || handle == (void *)&g_group_handle || handle == (void *)&g_api_handle ||
      handle == (void *)&g_api_captured) return RM_NCCL_SUCCESS;
  rmrec_t *rec = e->comm->id->rec;
  if (!atomic_load_explicit(&g_off, memory_order_relaxed) && rmrec_enabled(rec)) {
    uint64_t t1 = rmrec_ticks();
    ident_t *id = e->comm->id;
    rmrec_call(rec, id->op[e->func], e->bytes, t1 - e->t0_ticks);
    if (e->func != F_RECV) rmrec_timeline_at(rec, id->rank, RMREC_NCCL, e->bytes, t1);
    table_add(e->comm, e, t1);
  }
  ev_free(e);
  return RM_NCCL_SUCCESS;
}

static rm_nccl_result_t record_state(void *handle, int state, void *args) {
  (void)handle; (void)state; (void)args;          /* no state of any event is needed */
  return RM_NCCL_SUCCESS;
}

/* ---- init / finalize shared by every ABI version -------------------------------------------- */

static comm_t *init_comm(int *mask, uint64_t hash, const char *name, int nnodes, int nranks,
                         int rank, int abi) {
  pthread_mutex_lock(&g_lock);
  comm_t *cm = atomic_load(&g_off) ? NULL : add_comm(hash, name, nnodes, nranks, rank, abi);
  pthread_mutex_unlock(&g_lock);
  if (mask) *mask = cm ? mask_for(abi) : 0;
  return cm;
}

static rm_nccl_result_t finalize_comm(void *ctx) {
  comm_t *cm = ctx;
  if (cm && !atomic_load(&g_off)) {
    pthread_mutex_lock(&g_lock);
    emit_comm_ops(cm, 0);            /* the table stays: events of other threads may still land */
    pthread_mutex_unlock(&g_lock);
    rmrec_flush(cm->id->rec);
  }
  return RM_NCCL_SUCCESS;
}

/* At exit (the library is pinned, so this runs once, at process exit): last tables, last flush. */
__attribute__((destructor)) static void at_unload(void) {
  if (!g_idents) return;
  if (!atomic_load(&g_off)) {
    pthread_mutex_lock(&g_lock);
    for (comm_t *cm = g_comms; cm; cm = cm->next) emit_comm_ops(cm, 1);
    pthread_mutex_unlock(&g_lock);
  }
  for (ident_t *i = g_idents; i; i = i->next) rmrec_close(i->rec);
}

/* ---- v5, v6 and v7 (NCCL 2.28+) -------------------------------------------------------------------- */

static inline int wanted(uint64_t type, int abi) {
  return type == RM_EV_GROUP ? g_want != 0 : (type & (uint64_t)mask_for(abi)) != 0;
}

static rm_nccl_result_t v5_init(void **ctx, uint64_t comm_id, int *mask, const char *name,
                                int nnodes, int nranks, int rank, rm_nccl_logger_t log) {
  (void)log;
  *ctx = init_comm(mask, comm_id, name, nnodes, nranks, rank, 5);
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t v6_init(void **ctx, uint64_t comm_id, int *mask, const char *name,
                                int nnodes, int nranks, int rank, rm_nccl_logger_t log) {
  (void)log;
  *ctx = init_comm(mask, comm_id, name, nnodes, nranks, rank, 6);
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t v7_init(void **ctx, uint64_t comm_id, int *mask, const char *name,
                                int nnodes, int nranks, int rank, rm_nccl_logger_t log) {
  (void)log;
  *ctx = init_comm(mask, comm_id, name, nnodes, nranks, rank, 7);
  return RM_NCCL_SUCCESS;
}
static void v5_dispatch(comm_t *cm, void **handle, const rm_descr_v5_t *d) {
  switch (d->type) {
    case RM_EV_GROUP: *handle = &g_group_handle; break;
    case RM_EV_COLL_API: *handle = d->coll_api.graph_captured ? &g_api_captured : &g_api_handle; break;
    case RM_EV_P2P_API: *handle = d->p2p_api.graph_captured ? &g_api_captured : &g_api_handle; break;
    case RM_EV_COLL:
      start_task(cm, handle, 1, d->coll.func, d->coll.count, d->coll.dtype, d->coll.root,
                 d->coll.channels, d->coll.algo, d->coll.proto, d->parent);
      break;
    case RM_EV_P2P:
      start_task(cm, handle, 0, d->p2p.func, d->p2p.count, d->p2p.dtype, d->p2p.peer,
                 d->p2p.channels, NULL, NULL, d->parent);
      break;
    default: break;
  }
}
static rm_nccl_result_t v5_start(void *ctx, void **handle, rm_descr_v5_t *d) {
  *handle = NULL;
  if (d && ctx && wanted(d->type, 5)) v5_dispatch(ctx, handle, d);
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t v6_start(void *ctx, void **handle, rm_descr_v6_t *d) {
  *handle = NULL;
  if (!d || !ctx || !wanted(d->type, 6)) return RM_NCCL_SUCCESS;
  if (d->type == RM_EV_CE_COLL)      /* a collective run by the copy engines: no channels, proto */
    start_task(ctx, handle, 1, d->ce_coll.func, d->ce_coll.count, d->ce_coll.dtype, d->ce_coll.root,
               0, "CE", NULL, d->parent);
  else                               /* the v5 members sit at the same offsets in a v6 descriptor */
    v5_dispatch(ctx, handle, (const rm_descr_v5_t *)(const void *)d);
  return RM_NCCL_SUCCESS;
}
/* v7: the v6 members at their v6 offsets (a user tag appended to each); kernel-phase events unused */
static rm_nccl_result_t v7_start(void *ctx, void **handle, rm_descr_v7_t *d) {
  *handle = NULL;
  if (!d || !ctx || !wanted(d->type, 7)) return RM_NCCL_SUCCESS;
  if (d->type == RM_EV_CE_COLL)
    start_task(ctx, handle, 1, d->ce_coll.func, d->ce_coll.count, d->ce_coll.dtype, d->ce_coll.root,
               0, "CE", NULL, d->parent);
  else
    v5_dispatch(ctx, handle, (const rm_descr_v5_t *)(const void *)d);
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t v4plus_record(void *handle, int state, rm_state_args_v4_t *a) {
  return record_state(handle, state, a);
}

/* rankmap's own tables; native/nccl/chain.c exports the ncclProfiler_v* tables NCCL loads, which
 * call these (and a chained second plugin, RANKMAP_NCCL_CHAIN) */
rm_profiler_v7_t rm_own_v7 = { PLUGIN_NAME, v7_init, v7_start, stop_event, v4plus_record, finalize_comm };
rm_profiler_v6_t rm_own_v6 = { PLUGIN_NAME, v6_init, v6_start, stop_event, v4plus_record, finalize_comm };
rm_profiler_v5_t rm_own_v5 = { PLUGIN_NAME, v5_init, v5_start, stop_event, v4plus_record, finalize_comm };

/* ---- v4 (NCCL 2.27) ------------------------------------------------------------------------------- */

static rm_nccl_result_t v4_init(void **ctx, int *mask, const char *name, uint64_t hash, int nnodes,
                                int nranks, int rank, rm_nccl_logger_t log) {
  (void)log;
  *ctx = init_comm(mask, hash, name, nnodes, nranks, rank, 4);
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t v4_start(void *ctx, void **handle, rm_descr_v4_t *d) {
  *handle = NULL;
  if (!d || !ctx || !wanted(d->type, 4)) return RM_NCCL_SUCCESS;
  if (d->type == RM_EV_GROUP)
    *handle = &g_group_handle;
  else if (d->type == RM_EV_COLL)
    start_task(ctx, handle, 1, d->coll.func, d->coll.count, d->coll.dtype, d->coll.root,
               d->coll.channels, d->coll.algo, d->coll.proto, NULL);
  else if (d->type == RM_EV_P2P)
    start_task(ctx, handle, 0, d->p2p.func, d->p2p.count, d->p2p.dtype, d->p2p.peer,
               d->p2p.channels, NULL, NULL, NULL);
  return RM_NCCL_SUCCESS;
}

rm_profiler_v4_t rm_own_v4 = { PLUGIN_NAME, v4_init, v4_start, stop_event, v4plus_record, finalize_comm };

/* ---- v3 and v2 (NCCL 2.23 - 2.26): init knows nothing of the communicator; it is learnt from the
 *      first coll/p2p descriptor (hash, name, rank); its size is not given (-1) ---- */

typedef struct { comm_t *cm; int abi; pthread_mutex_t lock; } legacy_ctx_t;

static rm_nccl_result_t legacy_init(void **ctx, int *mask, int abi) {
  *ctx = NULL;
  pthread_mutex_lock(&g_lock);
  /* the record file of this GPU now (its communicator is learnt from the first task event) */
  int ok = !atomic_load(&g_off) && setup_once() && ident_for(0, -1, -1) != NULL;
  pthread_mutex_unlock(&g_lock);
  if (!ok) { if (mask) *mask = 0; return RM_NCCL_SUCCESS; }
  legacy_ctx_t *l = calloc(1, sizeof *l);
  if (!l) { fail("out of memory for a communicator"); if (mask) *mask = 0; return RM_NCCL_SUCCESS; }
  l->abi = abi;
  pthread_mutex_init(&l->lock, NULL);
  if (mask) *mask = mask_for(abi);
  *ctx = l;
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t v2_init(void **ctx, int *mask) { return legacy_init(ctx, mask, 2); }
static rm_nccl_result_t v3_init(void **ctx, int *mask) { return legacy_init(ctx, mask, 3); }

static comm_t *legacy_comm(legacy_ctx_t *l, uint64_t hash, const char *name, int rank) {
  if (!l) return NULL;
  comm_t *cm = __atomic_load_n(&l->cm, __ATOMIC_ACQUIRE);
  if (cm) return cm;
  pthread_mutex_lock(&l->lock);
  if (!l->cm) {
    pthread_mutex_lock(&g_lock);
    cm = atomic_load(&g_off) ? NULL : add_comm(hash, name, 0, -1, rank, l->abi);
    pthread_mutex_unlock(&g_lock);
    __atomic_store_n(&l->cm, cm, __ATOMIC_RELEASE);
  }
  cm = l->cm;
  pthread_mutex_unlock(&l->lock);
  return cm;
}

#define LEGACY_START(D)                                                                            \
  *handle = NULL;                                                                                  \
  if (!D || !ctx || atomic_load_explicit(&g_off, memory_order_relaxed) || !wanted(D->type, 3))     \
    return RM_NCCL_SUCCESS;                                                                        \
  if (D->type == RM_EV_GROUP)                                                                      \
    *handle = &g_group_handle;                                                                     \
  else if (D->type == RM_EV_COLL)                                                                  \
    start_task(legacy_comm(ctx, D->coll.comm_hash, D->coll.comm_name, D->rank), handle, 1,         \
               D->coll.func, D->coll.count, D->coll.dtype, D->coll.root, D->coll.max_channels,     \
               D->coll.algo, D->coll.proto, NULL);                                                 \
  else if (D->type == RM_EV_P2P)                                                                   \
    start_task(legacy_comm(ctx, D->p2p.comm_hash, D->p2p.comm_name, D->rank), handle, 0,           \
               D->p2p.func, D->p2p.count, D->p2p.dtype, D->p2p.peer, 0, NULL, NULL, NULL);         \
  return RM_NCCL_SUCCESS;

static rm_nccl_result_t v3_start(void *ctx, void **handle, rm_descr_v3_t *d) { LEGACY_START(d) }
static rm_nccl_result_t v2_start(void *ctx, void **handle, rm_descr_v2_t *d) { LEGACY_START(d) }

static rm_nccl_result_t legacy_record(void *handle, int state, rm_state_args_v3_t *a) {
  return record_state(handle, state, a);
}
static rm_nccl_result_t legacy_finalize(void *ctx) {
  legacy_ctx_t *l = ctx;
  return l ? finalize_comm(l->cm) : RM_NCCL_SUCCESS;
}

rm_profiler_v3_t rm_own_v3 = { PLUGIN_NAME, v3_init, v3_start, stop_event, legacy_record, legacy_finalize };
rm_profiler_v2_t rm_own_v2 = { PLUGIN_NAME, v2_init, v2_start, stop_event, legacy_record, legacy_finalize };
