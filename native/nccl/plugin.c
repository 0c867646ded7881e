/* rankmap NCCL profiler plugin: who sends how many bytes to whom through NCCL.
 *
 * Loaded by NCCL through NCCL_PROFILER_PLUGIN=<path of librankmap_nccl.so>; writes one record
 * file per process, <RANKMAP_RUN_DIR>/rank-<world rank>.nccl.rmrec, through the shared record
 * writer (native/common/rmrec.h), class "nccl".
 *
 * What it does with the events NCCL gives it (activation mask: coll + p2p only, so NCCL adds no
 * proxy or kernel-channel bookkeeping on our behalf; RANKMAP_NCCL_EVENTS=coll|p2p|none narrows it
 * for experiments, "none" measuring what merely loading a profiler plugin costs inside NCCL):
 *   - a collective or p2p task event is timed from startEvent to stopEvent (host side: the time
 *     NCCL spends handing the task to the GPU/proxy, not the kernel's run time);
 *   - at stopEvent the payload (count x datatype size) is counted as one call of its operation,
 *     the pair traffic of the documented model (ring successor in rank order, see
 *     docs/nccl-capture.md) is counted per world peer when the communicator's members are
 *     known, and one row of the per-communicator operation table (function, bytes per call,
 *     algorithm, protocol, channels, root/peer) is updated;
 *   - group events get one shared dummy handle (NCCL up to 2.27 starts task events only under a
 *     non-NULL group handle); proxy, kernel and API events get NULL (NCCL then never stops them).
 *
 * Communicator members: at init each process writes <run dir>/comm-<hash>-<rank>.txt holding its
 * world rank and waits briefly (RANKMAP_NCCL_MEMBERS_WAIT_MS, default 1000) for the other members'
 * files; NCCL calls the profiler's init after the communicator's bootstrap, so they appear within
 * milliseconds. Without them, a communicator with nranks == world size and rank == world rank is
 * taken as the world (identity); otherwise collectives are left to rankmap.capture.nccl_model,
 * which joins the files afterwards. Which case applied is written in the meta.
 *
 * It never disturbs the job: every entry point returns success, and any internal failure turns
 * capture off with one stderr line. */
#define _GNU_SOURCE
#include "nccl_abi.h"
#include "../common/rmrec.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

enum { A_RING, A_TREE, A_COLLNET_DIRECT, A_COLLNET_CHAIN, A_NVLS, A_NVLS_TREE, A_PAT, A_NONE, A_N };
static const char *const algo_name[A_N] = { "RING", "TREE", "COLLNET_DIRECT", "COLLNET_CHAIN",
  "NVLS", "NVLS_TREE", "PAT", "-" };
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

/* ---- per-communicator state --------------------------------------------------------------- */

typedef struct {                     /* one row of the operation table */
  uint64_t bytes;                    /* payload of one call: count x datatype size */
  int32_t root_or_peer;              /* collectives: root (-1 if none); p2p: peer comm rank */
  uint8_t used, func, algo, proto, channels;
  uint64_t calls, time_tk, first_tk, last_tk;  /* rmrec_ticks(): ns at emission */
} oprow_t;

typedef struct comm {
  uint64_t hash;
  char name[64];
  int rank, nranks, nnodes, abi;
  int *members;                      /* world rank of each comm rank (-1: unknown) */
  const char *members_how;           /* "files", "identity", "assumed-world", "unknown" */
  int resolved;                      /* members[] complete: pair traffic is counted in C */
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
  uint8_t func, algo, proto, channels;
} event_t;

/* ---- global state ---------------------------------------------------------------------------- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static rmrec_t *g_rec;               /* NULL: capture off */
static _Atomic int g_off;            /* set on internal failure: every entry point turns no-op */
static int g_tried, g_world_rank = -1, g_world_size = -1, g_rank_from_env;
static _Atomic int g_files_visible = 1;   /* cleared when a wait for member files timed out */
static int g_op[F_N];
static char g_dir[4096];
static comm_t *g_comms;
static _Atomic uint64_t g_last_emit_tk;      /* tables go into the meta every RANKMAP_NCCL_EMIT_MS */
static uint64_t g_emit_every_tk;             /* rmrec's shared tick clock (rmrec.h) */
static int g_mask = RM_EV_COLL | RM_EV_P2P;  /* activation mask asked of NCCL: RANKMAP_NCCL_EVENTS */

static void say_off(const char *why) {          /* the one stderr line, when rmrec is not open */
  if (atomic_exchange(&g_off, 1)) return;
  char line[600];
  int n = snprintf(line, sizeof line, "rankmap: capture disabled: %s\n", why);
  if (n > 0) { ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1); (void)w; }
}
static void fail(const char *why) {
  if (g_rec) { rmrec_fail(g_rec, why); atomic_store(&g_off, 1); }
  else say_off(why);
}

static int env_int(const char *const *names, int *out) {
  for (; *names; names++) {
    const char *s = getenv(*names);
    if (s && *s) { char *e; long v = strtol(s, &e, 10); if (!*e && v >= 0) { *out = (int)v; return 1; } }
  }
  return 0;
}

/* Keep this library mapped until exit: NCCL dlcloses profiler plugins when its last communicator
 * goes, but the writer's flush thread and exit handler live here. */
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

/* Open the record file once, at the first communicator. Called with g_lock held. */
static void open_once(int comm_rank, int comm_nranks) {
  if (g_tried) return;
  g_tried = 1;
  const char *dir = getenv("RANKMAP_RUN_DIR");
  if (!dir || !*dir) { say_off("RANKMAP_RUN_DIR is not set (the NCCL profiler plugin records nothing)"); return; }
  snprintf(g_dir, sizeof g_dir, "%s", dir);
  static const char *const rank_env[] = { "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", NULL };
  static const char *const size_env[] = { "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL };
  g_rank_from_env = env_int(rank_env, &g_world_rank);
  if (!g_rank_from_env) g_world_rank = comm_rank >= 0 ? comm_rank : 0;
  if (!env_int(size_env, &g_world_size)) g_world_size = comm_nranks > 0 ? comm_nranks : g_world_rank + 1;
  if (g_world_size <= g_world_rank) g_world_size = g_world_rank + 1;
  /* which task events to ask NCCL for (experiments; the default records everything) */
  const char *ev = getenv("RANKMAP_NCCL_EVENTS"), *ev_name = "all";
  if (ev && *ev && strcmp(ev, "all") != 0) {
    if (!strcmp(ev, "none")) { g_mask = 0; ev_name = "none"; }
    else if (!strcmp(ev, "coll")) { g_mask = RM_EV_COLL; ev_name = "coll"; }
    else if (!strcmp(ev, "p2p")) { g_mask = RM_EV_P2P; ev_name = "p2p"; }
    else {
      char line[200];
      int n = snprintf(line, sizeof line, "rankmap: RANKMAP_NCCL_EVENTS=%.40s not understood (all, coll, p2p, "
                       "none): recording all\n", ev);
      if (n > 0) { ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1); (void)w; }
    }
  }
  uint64_t ns_open = rmrec_now_ns();
  g_rec = rmrec_open(dir, "nccl", g_world_rank, g_world_size);
  if (!g_rec) { atomic_store(&g_off, 1); return; }   /* rmrec said why, in one line */
  pin_self();
  pthread_atfork(NULL, NULL, atfork_child);
  for (int f = 0; f < F_N; f++) g_op[f] = rmrec_op(g_rec, op_name[f]);
  char v[128];
  snprintf(v, sizeof v, "%llu", (unsigned long long)ns_open);
  rmrec_meta(g_rec, "nccl.clock_monotonic_ns_at_open", v);
  rmrec_meta(g_rec, "nccl.events", ev_name);
  rmrec_meta(g_rec, "nccl.world_rank_from", g_rank_from_env ? "environment" : "first communicator");
  rmrec_meta(g_rec, "nccl.pair_model", "ring-rank-order");
  const char *w = getenv("RANKMAP_NCCL_EMIT_MS");
  uint64_t every_ns = (w && atoi(w) > 0) ? (uint64_t)atoi(w) * 1000000ull : 5000000000ull;
  g_emit_every_tk = rmrec_ns_to_ticks(every_ns);   /* rmrec_open calibrated the clock (>= 1 ms) */
  atomic_store(&g_last_emit_tk, rmrec_ticks());
}

/* ---- communicator members ------------------------------------------------------------------- */

static void member_path(char *p, size_t n, uint64_t hash, int rank) {
  snprintf(p, n, "%s/comm-%016llx-%d.txt", g_dir, (unsigned long long)hash, rank);
}

/* Publish our world rank for this communicator (write + rename: readers never see half a file). */
static int write_member_file(const comm_t *cm) {
  char path[4200], tmp[4300];
  member_path(path, sizeof path, cm->hash, cm->rank);
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  char line[160];
  int n = snprintf(line, sizeof line, "%d %d %d\n", g_world_rank, cm->rank, cm->nranks);
  int ok = write(fd, line, (size_t)n) == n;
  close(fd);
  if (!ok || rename(tmp, path) != 0) { unlink(tmp); return -1; }
  return 0;
}

static int read_member_file(uint64_t hash, int rank) {
  char path[4200], buf[160];
  member_path(path, sizeof path, hash, rank);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *e;
  long w = strtol(buf, &e, 10);
  return (e == buf || w < 0) ? -1 : (int)w;
}

/* Fill cm->members: files of all members (bounded wait), else identity when the communicator
 * looks like the world, else unknown. At init only, without g_lock. */
static void resolve_members(comm_t *cm) {
  int n = cm->nranks;
  for (int i = 0; i < n; i++) cm->members[i] = -1;
  if (cm->rank >= 0 && cm->rank < n) cm->members[cm->rank] = g_world_rank;
  if (n == 1) { cm->resolved = 1; cm->members_how = "self"; return; }
  long wait_ms = 1000;
  const char *w = getenv("RANKMAP_NCCL_MEMBERS_WAIT_MS");
  if (w && *w) wait_ms = atol(w);
  if (!g_files_visible) wait_ms = 0;
  int have = 0;
  if (write_member_file(cm) == 0) {
    uint64_t deadline = rmrec_now_ns() + (uint64_t)(wait_ms > 0 ? wait_ms : 0) * 1000000ull;
    for (;;) {
      have = 0;
      for (int i = 0; i < n; i++) {
        if (cm->members[i] < 0) cm->members[i] = read_member_file(cm->hash, i);
        have += cm->members[i] >= 0;
      }
      if (have == n || rmrec_now_ns() >= deadline) break;
      struct timespec ts = { 0, 2000000 };
      nanosleep(&ts, NULL);
    }
  }
  if (have == n) { cm->resolved = 1; cm->members_how = "files"; return; }
  if (wait_ms > 0) g_files_visible = 0;   /* other nodes' files are not here: stop waiting */
  if (g_rank_from_env && n == g_world_size && cm->rank == g_world_rank) {
    for (int i = 0; i < n; i++) cm->members[i] = i;
    cm->resolved = 1; cm->members_how = "identity";
  } else {
    cm->members_how = "unknown";
  }
}

static void announce_comm(comm_t *cm) {
  char key[64], v[256];
  if (cm->members) rmrec_comm(g_rec, cm->hash, cm->name, cm->nranks, cm->members);
  snprintf(key, sizeof key, "nccl.comm.%016llx", (unsigned long long)cm->hash);
  snprintf(v, sizeof v, "name=%s rank=%d nranks=%d nnodes=%d members=%s abi=v%d",
           cm->name[0] ? cm->name : "-", cm->rank, cm->nranks, cm->nnodes, cm->members_how, cm->abi);
  rmrec_meta(g_rec, key, v);
}

static comm_t *comm_new(uint64_t hash, const char *name, int nnodes, int nranks, int rank, int abi) {
  comm_t *cm = calloc(1, sizeof *cm);
  if (!cm) { fail("out of memory for a communicator"); return NULL; }
  cm->hash = hash; cm->nnodes = nnodes; cm->nranks = nranks; cm->rank = rank; cm->abi = abi;
  snprintf(cm->name, sizeof cm->name, "%s", name ? name : "");
  /* names are written space-separated in the meta: keep them one token */
  for (char *p = cm->name; *p; p++) if (*p == ' ' || *p == '\n' || *p == '=') *p = '_';
  pthread_mutex_init(&cm->lock, NULL);
  cm->members_how = "unknown";
  if (nranks > 0) {
    cm->members = malloc(sizeof(int) * (size_t)nranks);
    if (!cm->members) { free(cm); fail("out of memory for a communicator"); return NULL; }
  }
  return cm;
}

/* ---- operation table (text in the meta: later values win, so each emission is complete) ---- */

static void emit_comm_ops(comm_t *cm, int only_if_changed) {
  if (only_if_changed && __atomic_load_n(&cm->calls, __ATOMIC_RELAXED) == cm->emitted_calls) return;
  size_t cap = 256 + (size_t)OPTAB_SLOTS * 224, len = 0;   /* a row prints at most ~200 chars */
  char *s = malloc(cap);
  if (!s) return;
  len += (size_t)snprintf(s, cap, "func bytes algo proto channels root_or_peer calls time_ns first_ns last_ns\n");
  rmrec_ticks_calibrate(0);          /* ticks -> ns over everything since the clock's reference */
  pthread_mutex_lock(&cm->lock);
  cm->emitted_calls = cm->calls;
  for (int i = 0; i < OPTAB_SLOTS && len < cap - 224; i++) {
    const oprow_t *o = &cm->rows[i];
    if (!o->used) continue;
    len += (size_t)snprintf(s + len, cap - len, "%s %llu %s %s %u %d %llu %llu %llu %llu\n",
        func_name[o->func], (unsigned long long)o->bytes, algo_name[o->algo], proto_name[o->proto],
        (unsigned)o->channels, (int)o->root_or_peer, (unsigned long long)o->calls,
        (unsigned long long)rmrec_ticks_to_ns(o->time_tk),
        (unsigned long long)rmrec_ticks_to_mono_ns(o->first_tk),
        (unsigned long long)rmrec_ticks_to_mono_ns(o->last_tk));
  }
  if (cm->overflow_calls && len < cap - 224)
    len += (size_t)snprintf(s + len, cap - len, "# %llu calls beyond %d distinct rows not tabled\n",
                            (unsigned long long)cm->overflow_calls, OPTAB_SLOTS);
  pthread_mutex_unlock(&cm->lock);
  char key[64];
  snprintf(key, sizeof key, "nccl.ops.%016llx.%d", (unsigned long long)cm->hash, cm->rank);
  rmrec_meta(g_rec, key, s);
  free(s);
}

static void emit_all(int may_wait) {
  if (may_wait) pthread_mutex_lock(&g_lock);
  else if (pthread_mutex_trylock(&g_lock) != 0) return;   /* a communicator is starting: later */
  for (comm_t *cm = g_comms; cm; cm = cm->next) emit_comm_ops(cm, 1);
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
    r->calls++; r->time_tk += t1 - e->t0_ticks; r->last_tk = t1;
    pthread_mutex_unlock(&cm->lock);
    return;
  }
  cm->overflow_calls++;
  pthread_mutex_unlock(&cm->lock);
}

/* ---- pair model (rank-order ring; docs/nccl-capture.md) -------------------------------------- */

static __thread uint64_t t_now_tk;   /* the stop's tick, for the timeline of the pair rows */
static inline void pair(comm_t *cm, int op, int dir, int peer_comm_rank, uint64_t bytes) {
  if (!bytes || !cm->members || peer_comm_rank < 0 || peer_comm_rank >= cm->nranks ||
      peer_comm_rank == cm->rank) return;
  int world_peer = cm->members[peer_comm_rank];
  if (world_peer >= 0)   /* unknown members: left to rankmap.capture.nccl_model */
    rmrec_traffic_at(g_rec, world_peer, RMREC_NCCL, op, RMREC_MEM_DEVICE, dir, bytes, 1, t_now_tk);
}

/* Count what this rank sends to and receives from whom for one finished task. */
static void attribute(comm_t *cm, const event_t *e) {
  int op = g_op[e->func], n = cm->nranks, r = cm->rank;
  if (e->func == F_SEND) { pair(cm, op, RMREC_SEND, e->root_or_peer, e->bytes); return; }
  if (e->func == F_RECV) { pair(cm, op, RMREC_RECV, e->root_or_peer, e->bytes); return; }
  if (!cm->resolved || n < 2 || r < 0 || r >= n) return;
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  uint64_t S = e->bytes, ring = 0;
  int spread = e->algo == A_NVLS || e->algo == A_NVLS_TREE || e->algo == A_COLLNET_DIRECT ||
               e->algo == A_COLLNET_CHAIN || e->algo == A_PAT;
  switch (e->func) {
    case F_ALLREDUCE:
      if (e->algo == A_TREE) {       /* chain in rank order: reduce towards 0, broadcast back */
        if (r > 0) { pair(cm, op, RMREC_SEND, r - 1, S); pair(cm, op, RMREC_RECV, r - 1, S); }
        if (r < n - 1) { pair(cm, op, RMREC_SEND, r + 1, S); pair(cm, op, RMREC_RECV, r + 1, S); }
        return;
      }
      ring = (2 * (uint64_t)(n - 1) * S + (uint64_t)n / 2) / (uint64_t)n;
      break;
    case F_ALLGATHER: case F_REDUCESCATTER:   /* count is per rank */
      ring = (uint64_t)(n - 1) * S;
      break;
    case F_BROADCAST: {                       /* chain root -> root+1 -> ... */
      int root = e->root_or_peer;
      if (root < 0 || root >= n) return;
      if (r != (root + n - 1) % n) pair(cm, op, RMREC_SEND, next, S);
      if (r != root) pair(cm, op, RMREC_RECV, prev, S);
      return;
    }
    case F_REDUCE: {                          /* chain root+1 -> ... -> root */
      int root = e->root_or_peer;
      if (root < 0 || root >= n) return;
      if (r != root) pair(cm, op, RMREC_SEND, next, S);
      if (r != (root + 1) % n) pair(cm, op, RMREC_RECV, prev, S);
      return;
    }
    case F_ALLTOALL:                          /* count is per peer */
      for (int p = 0; p < n; p++) { pair(cm, op, RMREC_SEND, p, S); pair(cm, op, RMREC_RECV, p, S); }
      return;
    case F_GATHER: case F_SCATTER: {
      int root = e->root_or_peer, to_root = e->func == F_GATHER;
      if (root < 0 || root >= n) return;
      if (r == root) for (int p = 0; p < n; p++) pair(cm, op, to_root ? RMREC_RECV : RMREC_SEND, p, S);
      else pair(cm, op, to_root ? RMREC_SEND : RMREC_RECV, root, S);
      return;
    }
    default: return;
  }
  if (spread) {                               /* through a switch or log-steps: evenly to all */
    uint64_t each = ring / (uint64_t)(n - 1);
    for (int p = 0; p < n; p++) { pair(cm, op, RMREC_SEND, p, each); pair(cm, op, RMREC_RECV, p, each); }
  } else {
    pair(cm, op, RMREC_SEND, next, ring);
    pair(cm, op, RMREC_RECV, prev, ring);
  }
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

/* Start a task event: everything the stop needs is copied (NCCL's strings are static). */
static void start_task(comm_t *cm, void **handle, int is_coll, const char *func, size_t count,
                       const char *dtype, int root_or_peer, int channels, const char *algo,
                       const char *proto) {
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
  e->t0_ticks = rmrec_ticks();
  *handle = e;
}

/* The handle of every group event. NCCL (2.27 and older) starts a plan's task events only when
 * its group event got a non-NULL handle, so group events get this one; stopping it does nothing. */
static char g_group_handle;

/* Events the activation mask did not ask for get no handle, should NCCL start them anyway; with
 * RANKMAP_NCCL_EVENTS=none, group events get none either. */
static inline int wanted(uint64_t type) {
  return type == RM_EV_GROUP ? g_mask != 0 : (type & (uint64_t)g_mask) != 0;
}

static rm_nccl_result_t stop_event(void *handle) {
  event_t *e = handle;
  if (!e || handle == (void *)&g_group_handle) return RM_NCCL_SUCCESS;
  if (!atomic_load_explicit(&g_off, memory_order_relaxed) && rmrec_enabled(g_rec)) {
    uint64_t t1_ticks = rmrec_ticks();
    rmrec_call(g_rec, g_op[e->func], e->bytes, t1_ticks - e->t0_ticks);
    t_now_tk = t1_ticks;
    attribute(e->comm, e);
    table_add(e->comm, e, t1_ticks);
    uint64_t last = atomic_load_explicit(&g_last_emit_tk, memory_order_relaxed);
    if (t1_ticks - last > g_emit_every_tk &&
        atomic_compare_exchange_strong(&g_last_emit_tk, &last, t1_ticks))
      emit_all(0);                   /* every 5 s: changed operation tables into the meta */
  }
  ev_free(e);
  return RM_NCCL_SUCCESS;
}

static rm_nccl_result_t record_state(void *handle, int state, void *args) {
  (void)handle; (void)state; (void)args;          /* no state of coll/p2p events is needed */
  return RM_NCCL_SUCCESS;
}

/* ---- init / finalize shared by every ABI version -------------------------------------------- */

static comm_t *init_comm(int *mask, uint64_t hash, const char *name, int nnodes, int nranks,
                         int rank, int abi) {
  pthread_mutex_lock(&g_lock);
  open_once(rank, nranks);
  int on = rmrec_enabled(g_rec) && !atomic_load(&g_off);
  pthread_mutex_unlock(&g_lock);
  comm_t *cm = on ? comm_new(hash, name, nnodes, nranks, rank, abi) : NULL;
  if (cm) {
    /* no lock while waiting for the other members: communicators of other threads may be
     * initialising at the same time, in any order */
    if (nranks > 0) resolve_members(cm);
    pthread_mutex_lock(&g_lock);
    cm->next = g_comms; g_comms = cm;
    announce_comm(cm);
    pthread_mutex_unlock(&g_lock);
  }
  if (mask) *mask = cm ? g_mask : (atomic_load(&g_off) ? 0 : *mask);
  return cm;
}

static rm_nccl_result_t finalize_comm(void *ctx) {
  comm_t *cm = ctx;
  if (cm && g_rec && !atomic_load(&g_off)) {
    pthread_mutex_lock(&g_lock);
    emit_comm_ops(cm, 0);            /* the table stays: events of other threads may still land */
    pthread_mutex_unlock(&g_lock);
    rmrec_flush(g_rec);
  }
  return RM_NCCL_SUCCESS;
}

/* At exit (the library is pinned, so this runs once, at process exit): last table, last flush. */
__attribute__((destructor)) static void at_unload(void) {
  if (!g_rec) return;
  if (!atomic_load(&g_off)) emit_all(1);
  rmrec_close(g_rec);
}

/* ---- v5 and v6 (NCCL 2.28+) -------------------------------------------------------------------- */

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
static rm_nccl_result_t v5_start(void *ctx, void **handle, rm_descr_v5_t *d) {
  *handle = NULL;
  if (!d || !ctx) return RM_NCCL_SUCCESS;
  if (!wanted(d->type)) return RM_NCCL_SUCCESS;
  if (d->type == RM_EV_GROUP)
    *handle = &g_group_handle;
  else if (d->type == RM_EV_COLL)
    start_task(ctx, handle, 1, d->coll.func, d->coll.count, d->coll.dtype, d->coll.root,
               d->coll.channels, d->coll.algo, d->coll.proto);
  else if (d->type == RM_EV_P2P)
    start_task(ctx, handle, 0, d->p2p.func, d->p2p.count, d->p2p.dtype, d->p2p.peer,
               d->p2p.channels, NULL, NULL);
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t v6_start(void *ctx, void **handle, rm_descr_v6_t *d) {
  /* the v5 members sit at the same offsets in a v6 descriptor */
  return v5_start(ctx, handle, (rm_descr_v5_t *)(void *)d);
}
static rm_nccl_result_t v4plus_record(void *handle, int state, rm_state_args_v4_t *a) {
  return record_state(handle, state, a);
}

__attribute__((visibility("default"))) rm_profiler_v6_t ncclProfiler_v6 = {
  PLUGIN_NAME, v6_init, v6_start, stop_event, v4plus_record, finalize_comm };
__attribute__((visibility("default"))) rm_profiler_v5_t ncclProfiler_v5 = {
  PLUGIN_NAME, v5_init, v5_start, stop_event, v4plus_record, finalize_comm };

/* ---- v4 (NCCL 2.27) ------------------------------------------------------------------------------- */

static rm_nccl_result_t v4_init(void **ctx, int *mask, const char *name, uint64_t hash, int nnodes,
                                int nranks, int rank, rm_nccl_logger_t log) {
  (void)log;
  *ctx = init_comm(mask, hash, name, nnodes, nranks, rank, 4);
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t v4_start(void *ctx, void **handle, rm_descr_v4_t *d) {
  *handle = NULL;
  if (!d || !ctx) return RM_NCCL_SUCCESS;
  if (!wanted(d->type)) return RM_NCCL_SUCCESS;
  if (d->type == RM_EV_GROUP)
    *handle = &g_group_handle;
  else if (d->type == RM_EV_COLL)
    start_task(ctx, handle, 1, d->coll.func, d->coll.count, d->coll.dtype, d->coll.root,
               d->coll.channels, d->coll.algo, d->coll.proto);
  else if (d->type == RM_EV_P2P)
    start_task(ctx, handle, 0, d->p2p.func, d->p2p.count, d->p2p.dtype, d->p2p.peer,
               d->p2p.channels, NULL, NULL);
  return RM_NCCL_SUCCESS;
}

__attribute__((visibility("default"))) rm_profiler_v4_t ncclProfiler_v4 = {
  PLUGIN_NAME, v4_init, v4_start, stop_event, v4plus_record, finalize_comm };

/* ---- v3 and v2 (NCCL 2.23 - 2.26): init knows nothing of the communicator; it is learnt from the
 *      first coll/p2p descriptor (hash, name, rank), and its size is taken to be the world's ---- */

typedef struct { comm_t *cm; int abi; pthread_mutex_t lock; } legacy_ctx_t;

static rm_nccl_result_t legacy_init(void **ctx, int *mask, int abi) {
  *ctx = NULL;
  pthread_mutex_lock(&g_lock);
  open_once(-1, -1);
  int ok = rmrec_enabled(g_rec) && !atomic_load(&g_off);
  pthread_mutex_unlock(&g_lock);
  if (!ok) { if (mask) *mask = 0; return RM_NCCL_SUCCESS; }
  legacy_ctx_t *l = calloc(1, sizeof *l);
  if (!l) { fail("out of memory for a communicator"); if (mask) *mask = 0; return RM_NCCL_SUCCESS; }
  l->abi = abi;
  pthread_mutex_init(&l->lock, NULL);
  if (mask) *mask = g_mask;
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
    int n = g_world_size;
    cm = comm_new(hash, name, 0, n, rank, l->abi);
    if (cm) {
      for (int i = 0; i < n; i++) cm->members[i] = i;
      if (rank == g_world_rank) { cm->resolved = 1; cm->members_how = "assumed-world"; }
      else { for (int i = 0; i < n; i++) cm->members[i] = -1; cm->members_how = "unknown"; }
      int saved = cm->nranks;
      cm->nranks = -1;                 /* size unknown: the files say only who we are */
      (void)write_member_file(cm);
      cm->nranks = saved;
      cm->next = g_comms; g_comms = cm;
      announce_comm(cm);
    }
    pthread_mutex_unlock(&g_lock);
    __atomic_store_n(&l->cm, cm, __ATOMIC_RELEASE);
  }
  cm = l->cm;
  pthread_mutex_unlock(&l->lock);
  return cm;
}

static rm_nccl_result_t v3_start(void *ctx, void **handle, rm_descr_v3_t *d) {
  *handle = NULL;
  if (!d || !ctx || atomic_load_explicit(&g_off, memory_order_relaxed)) return RM_NCCL_SUCCESS;
  if (!wanted(d->type)) return RM_NCCL_SUCCESS;
  if (d->type == RM_EV_GROUP)
    *handle = &g_group_handle;
  else if (d->type == RM_EV_COLL)
    start_task(legacy_comm(ctx, d->coll.comm_hash, d->coll.comm_name, d->rank), handle, 1, d->coll.func,
               d->coll.count, d->coll.dtype, d->coll.root, d->coll.max_channels, d->coll.algo, d->coll.proto);
  else if (d->type == RM_EV_P2P)
    start_task(legacy_comm(ctx, d->p2p.comm_hash, d->p2p.comm_name, d->rank), handle, 0, d->p2p.func,
               d->p2p.count, d->p2p.dtype, d->p2p.peer, 0, NULL, NULL);
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t v2_start(void *ctx, void **handle, rm_descr_v2_t *d) {
  *handle = NULL;
  if (!d || !ctx || atomic_load_explicit(&g_off, memory_order_relaxed)) return RM_NCCL_SUCCESS;
  if (!wanted(d->type)) return RM_NCCL_SUCCESS;
  if (d->type == RM_EV_GROUP)
    *handle = &g_group_handle;
  else if (d->type == RM_EV_COLL)
    start_task(legacy_comm(ctx, d->coll.comm_hash, d->coll.comm_name, d->rank), handle, 1, d->coll.func,
               d->coll.count, d->coll.dtype, d->coll.root, d->coll.max_channels, d->coll.algo, d->coll.proto);
  else if (d->type == RM_EV_P2P)
    start_task(legacy_comm(ctx, d->p2p.comm_hash, d->p2p.comm_name, d->rank), handle, 0, d->p2p.func,
               d->p2p.count, d->p2p.dtype, d->p2p.peer, 0, NULL, NULL);
  return RM_NCCL_SUCCESS;
}
static rm_nccl_result_t legacy_record(void *handle, int state, rm_state_args_v3_t *a) {
  return record_state(handle, state, a);
}
static rm_nccl_result_t legacy_finalize(void *ctx) {
  legacy_ctx_t *l = ctx;
  return l ? finalize_comm(l->cm) : RM_NCCL_SUCCESS;
}

__attribute__((visibility("default"))) rm_profiler_v3_t ncclProfiler_v3 = {
  PLUGIN_NAME, v3_init, v3_start, stop_event, legacy_record, legacy_finalize };
__attribute__((visibility("default"))) rm_profiler_v2_t ncclProfiler_v2 = {
  PLUGIN_NAME, v2_init, v2_start, stop_event, legacy_record, legacy_finalize };
