/*
 * shim_core.c -- state, rank translation, memory kind and the accounting helpers of the rankmap
 * PMPI shim.  Collective pair traffic: shim_coll.c and docs/collective-models.md.
 */
#define _GNU_SOURCE
#include "shim_core.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rmrec_t *rm_R;
int rm_on, rm_single;
int rm_track_recv = 0;
RM_TLS rm_tls_t rm_t;
int rm_wrank, rm_wsize;
unsigned rm_sample_bits, rm_start_bits;
static _Atomic uint64_t timed_calls[2];   /* timed calls [others, starts]: the meta's shim.timed */
int rm_status_direct;
uint64_t rm_slow_ticks;
#define SLOW_NS 2000          /* a call this long or longer is always timed next time */
rm_ts_t rm_ts_tab[RM_TS_SLOTS];

static const char *op_names[] = {
#define RM_NAME(n) #n,
  RM_OPS(RM_NAME)
#undef RM_NAME
};

/* ---- handle -> translation tables (communicators, windows) ---------------------------- */

#define XT_SIZE 4096
typedef struct { _Atomic uint64_t key; rm_xl_t *_Atomic val; } xt_ent_t;
typedef struct { xt_ent_t e[XT_SIZE]; pthread_mutex_t lock; } xt_t;
static xt_t comm_tab = { .lock = PTHREAD_MUTEX_INITIALIZER };
static xt_t win_tab = { .lock = PTHREAD_MUTEX_INITIALIZER };
rm_xl_t rm_xl_world;
#define xl_world rm_xl_world
static int comm_kv = MPI_KEYVAL_INVALID, win_kv = MPI_KEYVAL_INVALID;
static _Atomic uint64_t comm_seq = 1;
/* The last communicator each thread looked up (most codes use one or two): valid while no
 * communicator was freed since (xt_gen counts frees; a freed handle may come back as another). */
_Atomic unsigned rm_xt_gen;
#define xt_gen rm_xt_gen
#define comm_last rm_comm_last

#define hkey rm_hkey
#define hmix rm_hmix

static rm_xl_t *xt_find(xt_t *t, uint64_t key) {
  for (unsigned i = (unsigned)hmix(key) & (XT_SIZE - 1), n = 0; n < XT_SIZE; n++, i = (i + 1) & (XT_SIZE - 1)) {
    uint64_t k = atomic_load_explicit(&t->e[i].key, memory_order_acquire);
    if (k == key) return atomic_load_explicit(&t->e[i].val, memory_order_acquire);
    if (k == 0) return NULL;
  }
  return NULL;
}
static void xt_put(xt_t *t, uint64_t key, rm_xl_t *x) {
  pthread_mutex_lock(&t->lock);
  for (unsigned i = (unsigned)hmix(key) & (XT_SIZE - 1), n = 0; n < XT_SIZE; n++, i = (i + 1) & (XT_SIZE - 1)) {
    uint64_t k = atomic_load(&t->e[i].key);
    if (k == key || k == 0 || k == 1) {      /* 1: a freed entry, reusable */
      atomic_store(&t->e[i].val, x);
      atomic_store(&t->e[i].key, key);
      break;
    }
  }
  pthread_mutex_unlock(&t->lock);
}
static void xt_del(xt_t *t, uint64_t key) {
  pthread_mutex_lock(&t->lock);
  for (unsigned i = (unsigned)hmix(key) & (XT_SIZE - 1), n = 0; n < XT_SIZE; n++, i = (i + 1) & (XT_SIZE - 1)) {
    uint64_t k = atomic_load(&t->e[i].key);
    if (k == 0) break;
    if (k == key) { atomic_store(&t->e[i].key, 1); break; }   /* the rm_xl_t is leaked on purpose:  */
  }                                                           /* pending requests may still use it */
  atomic_fetch_add_explicit(&xt_gen, 1, memory_order_release);   /* per-thread caches: stale now */
  pthread_mutex_unlock(&t->lock);
}

/* Attribute delete callbacks: the MPI library calls them however the object is freed. */
static int comm_del_fn(MPI_Comm comm, int kv, void *val, void *extra) {
  (void)kv; (void)val; (void)extra;
  xt_del(&comm_tab, hkey(&comm, sizeof comm));
  return MPI_SUCCESS;
}
static int win_del_fn(MPI_Win win, int kv, void *val, void *extra) {
  (void)kv; (void)val; (void)extra;
  xt_del(&win_tab, hkey(&win, sizeof win));
  return MPI_SUCCESS;
}

static rm_xl_t *build_xl(MPI_Group g, int me, int inter) {
  int n = 0;
  PMPI_Group_size(g, &n);
  rm_xl_t *x = calloc(1, sizeof *x);
  int *in = malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!x || !in) { free(x); free(in); return NULL; }
  x->w = malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!x->w) { free(x); free(in); return NULL; }
  for (int i = 0; i < n; i++) in[i] = i;
  MPI_Group wg;
  PMPI_Comm_group(MPI_COMM_WORLD, &wg);
  PMPI_Group_translate_ranks(g, n, in, wg, x->w);
  PMPI_Group_free(&wg);
  for (int i = 0; i < n; i++) if (x->w[i] == MPI_UNDEFINED) x->w[i] = -1;
  free(in);
  x->size = n; x->me = me; x->inter = inter;
  return x;
}

rm_xl_t *rm_comm_xl_slow(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return NULL;
  uint64_t key = hkey(&comm, sizeof comm);
  unsigned gen = atomic_load_explicit(&xt_gen, memory_order_acquire);
  rm_xl_t *x = xt_find(&comm_tab, key);
  if (x) { comm_last.key = key; comm_last.gen = gen; comm_last.x = x; return x; }
  int inter = 0, me = 0;
  MPI_Group g;
  PMPI_Comm_test_inter(comm, &inter);
  PMPI_Comm_rank(comm, &me);
  if (inter) PMPI_Comm_remote_group(comm, &g); else PMPI_Comm_group(comm, &g);
  x = build_xl(g, me, inter);
  PMPI_Group_free(&g);
  if (!x) return NULL;
  if (!inter) {                           /* its id before any thread can find it */
    x->id = atomic_fetch_add(&comm_seq, 1);
    rmrec_comm(rm_R, x->id, "", x->size, x->w);
  }
  xt_put(&comm_tab, key, x);
  comm_last.key = key; comm_last.gen = gen; comm_last.x = x;
  if (comm_kv != MPI_KEYVAL_INVALID) PMPI_Comm_set_attr(comm, comm_kv, x);
  return x;
}

rm_xl_t *rm_win_xl(MPI_Win win) {
  if (win == MPI_WIN_NULL) return NULL;
  uint64_t key = hkey(&win, sizeof win);
  rm_xl_t *x = xt_find(&win_tab, key);
  if (x) return x;
  MPI_Group g;
  PMPI_Win_get_group(win, &g);
  int me = 0;
  PMPI_Group_rank(g, &me);
  x = build_xl(g, me, 0);
  PMPI_Group_free(&g);
  if (!x) return NULL;
  xt_put(&win_tab, key, x);
  if (win_kv != MPI_KEYVAL_INVALID) PMPI_Win_set_attr(win, win_kv, x);
  return x;
}

/* ---- setup / teardown ------------------------------------------------------------------- */

/* Fill rm_ts_tab with the predefined datatypes; one whose slot is taken sits in the next free
 * one (rm_ts_cached).  Which types collide depends on where the library is loaded, and a type
 * left out would never be remembered by the sends' and collectives' memories.  The types codes
 * send most come first, so that they keep their own slots (one compare to find) when they can. */
static void ts_init(void) {
  const MPI_Datatype ts[] = {
    MPI_DOUBLE, MPI_INT, MPI_BYTE, MPI_CHAR, MPI_FLOAT, MPI_LONG, MPI_LONG_LONG, MPI_UNSIGNED_CHAR,
    MPI_SIGNED_CHAR, MPI_WCHAR, MPI_SHORT, MPI_UNSIGNED_SHORT, MPI_UNSIGNED, MPI_UNSIGNED_LONG,
    MPI_UNSIGNED_LONG_LONG, MPI_LONG_DOUBLE, MPI_C_BOOL, MPI_INT8_T, MPI_INT16_T, MPI_INT32_T,
    MPI_INT64_T, MPI_UINT8_T, MPI_UINT16_T, MPI_UINT32_T, MPI_UINT64_T, MPI_AINT, MPI_OFFSET,
    MPI_C_FLOAT_COMPLEX, MPI_C_DOUBLE_COMPLEX, MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT,
    MPI_2INT, MPI_SHORT_INT, MPI_PACKED,
  };
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
    int sz = 0;
    if (ts[i] == MPI_DATATYPE_NULL || PMPI_Type_size(ts[i], &sz) != MPI_SUCCESS || sz <= 0) continue;
    unsigned k = rm_ts_slot(ts[i]);
    while (rm_ts_tab[k].size > 0 && rm_ts_tab[k].t != ts[i]) k = (k + 1) & (RM_TS_SLOTS - 1);
    if (rm_ts_tab[k].size == 0) { rm_ts_tab[k].t = ts[i]; rm_ts_tab[k].size = sz; }
  }
}

/* a sampling variable's N (one call in N, rounded down to a power of two, at most 2^16) as bits */
static unsigned sample_bits(const char *v, unsigned long dflt) {
  unsigned long n = v && *v ? strtoul(v, NULL, 10) : dflt;
  unsigned b = 0;
  while (n > 1 && b < 16) { n >>= 1; b++; }
  return b;
}

void rm_setup(void) {
  if (rm_R) return;
  const char *dir = getenv("RANKMAP_RUN_DIR");
  if (!dir || !*dir) return;
  int init = 0, fin = 0;
  PMPI_Initialized(&init);
  PMPI_Finalized(&fin);
  if (!init || fin) return;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rm_wrank);
  PMPI_Comm_size(MPI_COMM_WORLD, &rm_wsize);
  xl_world.size = rm_wsize; xl_world.me = rm_wrank; xl_world.w = NULL;
  rm_R = rmrec_open(dir, "mpi", rm_wrank, rm_wsize);
  if (!rm_R) return;
  for (int i = 0; i < OP__COUNT; i++)
    if (rmrec_op(rm_R, op_names[i]) != i) { rmrec_fail(rm_R, "operation table out of order"); return; }
  char lib[MPI_MAX_LIBRARY_VERSION_STRING + 1] = "";
  int len = 0, ver = 0, sub = 0;
  PMPI_Get_library_version(lib, &len);
  lib[len > 0 && len <= MPI_MAX_LIBRARY_VERSION_STRING ? len : 0] = 0;
  rmrec_meta(rm_R, "mpi_library_full", lib);   /* MPICH: device and configure line too */
  char *nl = strchr(lib, '\n');
  if (nl) *nl = 0;
  rmrec_meta(rm_R, "mpi_library", lib);
  Dl_info where;        /* the library file itself: a conformance record names its build by it */
  if (dladdr((void *)PMPI_Init, &where) && where.dli_fname && where.dli_fname[0] == '/')
    rmrec_meta(rm_R, "mpi_library_file", where.dli_fname);
  PMPI_Get_version(&ver, &sub);
  char v[32];
  snprintf(v, sizeof v, "%d.%d", ver, sub);
  rmrec_meta(rm_R, "mpi_version", v);
  rmrec_meta(rm_R, "shim", "rankmap-mpi 1");
  int *ident = malloc(sizeof(int) * (size_t)rm_wsize);
  if (ident) {
    for (int i = 0; i < rm_wsize; i++) ident[i] = i;
    rmrec_comm(rm_R, 0, "MPI_COMM_WORLD", rm_wsize, ident);
    free(ident);
  }
  PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_del_fn, &comm_kv, NULL);
  PMPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, win_del_fn, &win_kv, NULL);
  rm_mem_init();
  ts_init();
  /* the status layout: read directly only if it gives what the library set, beyond 2^32 too */
  MPI_Status probe;
  rm_status_direct = 1;
  for (MPI_Count v = 1; v < ((MPI_Count)1 << 40) && rm_status_direct; v = v * 977 + 3) {
    memset(&probe, 0x5a, sizeof probe);
    rm_status_direct = PMPI_Status_set_elements_x(&probe, MPI_BYTE, v) == MPI_SUCCESS &&
                       PMPI_Status_set_cancelled(&probe, 0) == MPI_SUCCESS && rm_status_bytes(&probe) == v;
    if (rm_status_direct)        /* and the cancelled flag: set, it must read as no message */
      rm_status_direct = PMPI_Status_set_cancelled(&probe, 1) == MPI_SUCCESS && rm_status_bytes(&probe) == -1;
  }
  /* Below MPI_THREAD_MULTIPLE the application never has two MPI calls in flight, so nothing the
   * wrappers update is written concurrently: plain adds, no request-table lock. */
  int level = MPI_THREAD_MULTIPLE;
  if (PMPI_Query_thread(&level) != MPI_SUCCESS) level = MPI_THREAD_MULTIPLE;
  rm_single = level < MPI_THREAD_MULTIPLE;
  rmrec_single_writer(rm_R, rm_single);
  rmrec_meta(rm_R, "shim.counters", rm_single ? "single-writer (MPI thread level below MULTIPLE)"
                                              : "per-thread shards (MPI_THREAD_MULTIPLE)");
  const char *rv = getenv("RANKMAP_RECV");
  rm_track_recv = rv && strcmp(rv, "1") == 0;
  rmrec_meta(rm_R, "shim.receives", rm_track_recv ? "recorded at completion, from the status (RANKMAP_RECV=1)"
                                                  : "not recorded: send side only (RANKMAP_RECV=1 records them)");
  /* call timing: RANKMAP_SAMPLE = N (a power of two, default 16) times one short call in N;
   * RANKMAP_SAMPLE_START one start in N (default 16 N; every call with RANKMAP_SAMPLE=1) */
  rm_sample_bits = sample_bits(getenv("RANKMAP_SAMPLE"), 16);
  rm_start_bits = sample_bits(getenv("RANKMAP_SAMPLE_START"), rm_sample_bits ? 16u << rm_sample_bits : 1);
  /* RANKMAP_SLOW_NS: where a call counts as slow (always timed next time).  Under an instruction
   * counter (valgrind) every call is slow; bench/shim_overhead.py raises it there so the counts
   * follow the sampling a native run gets. */
  const char *sn = getenv("RANKMAP_SLOW_NS");
  long slow_ns = sn && *sn ? strtol(sn, NULL, 10) : SLOW_NS;
  if (slow_ns <= 0) slow_ns = SLOW_NS;
  rm_slow_ticks = rmrec_ns_to_ticks((uint64_t)slow_ns);
  char tm[192];
  if (rm_sample_bits || rm_start_bits)
    snprintf(tm, sizeof tm, "sampled: calls under %ld ns timed 1 in %u, weighted %u (starts 1 in %u); "
             "a thread's first call and those after a slower one always timed",
             slow_ns, 1u << rm_sample_bits, 1u << rm_sample_bits, 1u << rm_start_bits);
  else
    snprintf(tm, sizeof tm, "every call timed");
  rmrec_meta(rm_R, "shim.timing", tm);
  rm_mpit_setup();
  rm_coll_setup();
  rm_on = 1;
}

void rm_teardown(void) {
  if (!rm_on) return;
  rm_on = 0;
  rm_coll_teardown();
  rm_t.fast = 0;              /* this thread's fast paths off with capture (rm_fast_ok) */
  char tc[96];                /* how many durations the time estimates rest on */
  snprintf(tc, sizeof tc, "%llu calls, %llu starts",
           (unsigned long long)__atomic_load_n(&timed_calls[0], __ATOMIC_RELAXED),
           (unsigned long long)__atomic_load_n(&timed_calls[1], __ATOMIC_RELAXED));
  rmrec_meta(rm_R, "shim.timed", tc);
  rmrec_close(rm_R);          /* the final flush samples the pvars once more */
  rm_mpit_teardown();
}

/* ---- emitting rows ------------------------------------------------------------------------- */

/* A thread's first call comes here too (its skip count starts at 0, and no operation of it is slow
 * yet), so the thread's counters are set up here rather than tested for on every call. */
unsigned rm_next_skip_call(int start) {
  unsigned b = start ? rm_start_bits : rm_sample_bits, w = 1u << b, kind = 1u << (start != 0);
  if (__builtin_expect(!rm_t.ops, 0)) rm_thread_init();
  if (__builtin_expect(!(rm_t.drawn & kind), 0)) { rm_t.drawn |= (int)kind; w = 1; }
  *(start ? &rm_t.skip_s : &rm_t.skip) = rm_next_skip_bits(b);
  return w;
}

/* the clock read at the end of a timed call: its duration, weighted, and whether the operation's
 * next call is timed too (this one was slow) */
uint64_t rm_clock_dt(int op, uint64_t t0, unsigned w) {
  rm_t.last = rmrec_ticks();
  rmrec_add(&timed_calls[rm_op_start(op)], 1, rm_single);
  uint64_t dt = rm_t.last - t0;
  uint8_t bit = (uint8_t)(1u << (op & 7));
  if (dt >= rm_slow_ticks) rm_t.slow[op >> 3] |= bit; else rm_t.slow[op >> 3] &= (uint8_t)~bit;
  return dt * w;
}

void rm_thread_init(void) {
  int shard = rm_single ? 0 : rmrec_shard(rm_R);
  rmrec_opstat_t *o = rmrec_opstats(rm_R, shard);
  if (!o) { shard = 0; o = rmrec_opstats(rm_R, 0); }
  rm_t.shard = shard;
  rm_t.plain = rm_single || shard > 0;
  rm_t.fast = (rm_t.plain ? RM_FAST_PLAIN : 0) | (rm_single && rm_track_recv ? RM_FAST_RLOG : 0);
  rm_t.ops = o;
}

int rm_row_fill(rm_rowc_t *e, uint64_t key, int peer, int klass, int op, int mem, int dir) {
  if (!rm_t.ops) rm_thread_init();
  rmrec_slot_t *s = rmrec_slot(rm_R, rm_t.shard, RMREC_ORIGIN_CALL, peer, klass, op, mem, dir);
  if (!s) return 0;
  e->key = key; e->s = s; e->tl = NULL;
  return 1;
}

void rm_emit_from(int peer, int klass, int op, int mem, int dir, uint64_t bytes, uint64_t msgs, int origin) {
  if (origin == RMREC_ORIGIN_CALL) { rm_emit(peer, klass, op, mem, dir, bytes, msgs); return; }
  if (peer < 0) return;
  if (rm_rs) { rm_rowset_add(rm_rs, peer, klass, op, mem, dir, origin, bytes); return; }
  rmrec_traffic_from(rm_R, peer, klass, op, mem, dir, bytes, msgs, rm_tick, origin);
}

void rm_rowset_add(rm_rowset_t *rs, int peer, int klass, int op, int mem, int dir, int origin, uint64_t bytes) {
  if (rs->n == rs->cap) {
    int cap = rs->cap ? 2 * rs->cap : 8;
    rm_row_t *r = realloc(rs->rows, sizeof *r * (size_t)cap);
    if (!r) return;
    rs->rows = r; rs->cap = cap;
  }
  rs->rows[rs->n++] = (rm_row_t){peer, klass, op, mem, dir, origin, bytes};
}

rm_rowset_t *rm_rowset_new(int start_op) {
  rm_rowset_t *rs = calloc(1, sizeof *rs);
  if (rs) rs->start_op = start_op;
  return rs;
}

void rm_replay(const rm_rowset_t *rs) {
  for (int i = 0; i < rs->n; i++) {
    const rm_row_t *r = &rs->rows[i];
    rmrec_traffic_from(rm_R, r->peer, r->klass, r->op, r->mem, r->dir, r->bytes, 1, rm_tick, r->origin);
  }
  if (rs->sig) rm_coll_count(rs->sig - 1);
}

/* ---- point-to-point ------------------------------------------------------------------------ */

int64_t rm_status_bytes_call(const MPI_Status *st) {
  int cancelled = 0;
  if (PMPI_Test_cancelled(st, &cancelled) == MPI_SUCCESS && cancelled) return -1;
  MPI_Count c = 0;       /* elements of MPI_BYTE = bytes, beyond 2 GiB too (MPI_Get_count stops there) */
  return PMPI_Get_elements_x(st, MPI_BYTE, &c) == MPI_SUCCESS ? (int64_t)c : -1;
}

/* a send the thread has not memoised (rm_p2p_send): accounted, then remembered in c if it can be */
uint64_t rm_p2p_send_slow(rm_sc_t *c, int op, const void *buf, MPI_Count count, MPI_Datatype t, int dest, MPI_Comm comm) {
  uint64_t n = rm_tsz(t, count);
  if (dest < 0) return n;               /* MPI_PROC_NULL */
  unsigned gen = __atomic_load_n((unsigned *)&rm_xt_gen, __ATOMIC_ACQUIRE);   /* before translating */
  int w = rm_world(rm_comm_xl(comm), dest), mem = rm_mem(buf);
  rm_emit(w, RMREC_P2P, op, mem, RMREC_SEND, n, 1);
  if (w < 0 || rm_rs) return n;
  if (count > 0 && !rm_ts_fixed(t)) return n;         /* the payload is fixed for a predefined type only */
  uint64_t key = rm_row_key(w, RMREC_P2P, op, mem, RMREC_SEND);
  rm_rowc_t *e = rm_rowc_of(key);
  if (e->key != key) return n;          /* no row (the record is full) */
  rmrec_opstat_t *o = &rm_t.ops[op];
  *c = (rm_sc_t){.dk = rm_sc_dk(dest, op), .comm = comm, .t = t, .count = count, .mem = mem, .peer = w, .gen = gen,
                 .n = n, .s = e->s, .tl = e->tl, .tl_epoch = e->tl ? e->tl_epoch : RM_NO_EPOCH,
                 .ob = &o->bytes, .oh = &o->hist[rmrec_hist_bin(n)], .gran = (uint64_t)(uintptr_t)buf >> 16};
  return n;
}

/* a blocking receive the thread has not memoised (rm_recv_fast_row): its row, then remembered in m */
uint64_t rm_recv_row_fill(rm_rr_t *m, int op, const void *buf, rm_xl_t *xl, int src, uint64_t bytes) {
  unsigned gen = __atomic_load_n((unsigned *)&rm_xt_gen, __ATOMIC_ACQUIRE);
  int w = rm_world(xl, src), mem = rm_mem(buf);
  rm_emit(w, RMREC_P2P, op, mem, RMREC_RECV, bytes, 1);
  if (w < 0) return bytes;
  uint64_t key = rm_row_key(w, RMREC_P2P, op, mem, RMREC_RECV);
  const rm_rowc_t *e = rm_rowc_of(key);
  if (e->key != key) return bytes;      /* no row (the record is full) */
  *m = (rm_rr_t){.xl = xl, .src = src, .op = op, .gen = gen, .gran = (uint64_t)(uintptr_t)buf >> 16, .s = e->s};
  return bytes;
}

uint64_t rm_p2p_recv(int op, int mem, rm_xl_t *xl, const MPI_Status *st) {
  return rm_p2p_recv_in(op, mem, xl, st);
}

uint64_t rm_p2p_expect(int op, const void *buf, MPI_Count count, MPI_Datatype t, int source, MPI_Comm comm) {
  uint64_t n = rm_tsz(t, count);
  if (source < 0) return n;             /* MPI_PROC_NULL */
  rm_emit(rm_world(rm_comm_xl(comm), source), RMREC_P2P, op, rm_mem(buf), RMREC_RECV, n, 1);
  return n;
}

/* ---- collectives: facts per call (shim_coll.c applies them) ------------------------------------ */

static inline int my_rank(MPI_Comm comm) { rm_xl_t *x = rm_comm_xl(comm); return x ? x->me : 0; }

uint64_t rm_acc_gather(int op, const void *sbuf, MPI_Count scount, MPI_Datatype st, MPI_Count rcount, MPI_Datatype rt,
                       int root, MPI_Comm comm) {
  uint64_t n = my_rank(comm) == root ? rm_tsz(rt, rcount) : rm_tsz(st, scount);
  return rm_coll_acc(op, comm, rm_cf_gather(sbuf, scount, st, rcount, rt, root), n);
}

uint64_t rm_acc_scatter(int op, const void *sbuf, MPI_Count scount, MPI_Datatype st, MPI_Count rcount, MPI_Datatype rt,
                        int root, MPI_Comm comm) {
  uint64_t n = my_rank(comm) == root ? rm_tsz(st, scount) : rm_tsz(rt, rcount);
  return rm_coll_acc(op, comm, rm_cf_scatter(sbuf, scount, st, rcount, rt, root), n);
}

/* per-peer bytes of a counts array (v/w collectives), on the stack for small communicators */
#define VEC_STACK 256
static int64_t *vec_of(int64_t *stack, int n) {
  return n <= VEC_STACK ? stack : malloc(sizeof(int64_t) * (size_t)n);
}
static void vec_done(int64_t *v, int64_t *stack) { if (v != stack) free(v); }

uint64_t rm_acc_gatherv(int op, const void *sbuf, MPI_Count scount, MPI_Datatype st, rm_cv_t rcounts,
                        MPI_Datatype rt, int root, MPI_Comm comm) {
  rm_xl_t *x = rm_coll_xl(comm);
  if (!x || x->me != root) {                  /* a non-root only knows its own block */
    rm_coll_fact(op, x, rm_mem(sbuf), root, scount, st, scount, st, 0, NULL, 0);
    return rm_tsz(st, scount);
  }
  int64_t vs[VEC_STACK], *v = vec_of(vs, x->size);
  if (v) for (int i = 0; i < x->size; i++) v[i] = (int64_t)rm_tsz(rt, rm_cv(rcounts, i));
  rm_coll_fact(op, x, rm_mem(sbuf), root, scount, st, rm_cv(rcounts, root), rt, rm_inplace(sbuf), v, v ? x->size : 0);
  vec_done(v, vs);
  return rm_tsz(rt, rm_cv(rcounts, root));
}

uint64_t rm_acc_scatterv(int op, const void *sbuf, rm_cv_t scounts, MPI_Datatype st, MPI_Count rcount,
                         MPI_Datatype rt, int root, MPI_Comm comm) {
  rm_xl_t *x = rm_coll_xl(comm);
  if (!x || x->me != root) {
    rm_coll_fact(op, x, rm_mem(sbuf), root, rcount, rt, rcount, rt, 0, NULL, 0);
    return rm_tsz(rt, rcount);
  }
  int64_t vs[VEC_STACK], *v = vec_of(vs, x->size);
  if (v) for (int i = 0; i < x->size; i++) v[i] = (int64_t)rm_tsz(st, rm_cv(scounts, i));
  rm_coll_fact(op, x, rm_mem(sbuf), root, rm_cv(scounts, root), st, rcount, rt, 0, v, v ? x->size : 0);
  vec_done(v, vs);
  return rm_tsz(st, rm_cv(scounts, root));
}

uint64_t rm_acc_allgather(int op, const void *sbuf, MPI_Count rcount, MPI_Datatype rt, MPI_Comm comm) {
  return rm_coll_acc(op, comm, rm_cf_allgather(sbuf, rcount, rt), rm_tsz(rt, rcount));
}

uint64_t rm_acc_allgatherv(int op, const void *sbuf, rm_cv_t rcounts, MPI_Datatype rt, MPI_Comm comm) {
  rm_xl_t *x = rm_coll_xl(comm), *any = rm_comm_xl(comm);
  uint64_t own = any ? rm_tsz(rt, rm_cv(rcounts, any->me < any->size ? any->me : 0)) : 0;
  if (!x) { rm_coll_fact(op, NULL, 0, 0, 0, rt, 0, rt, 0, NULL, 0); return own; }
  int64_t vs[VEC_STACK], *v = vec_of(vs, x->size);
  if (v) for (int i = 0; i < x->size; i++) v[i] = (int64_t)rm_tsz(rt, rm_cv(rcounts, i));
  MPI_Count mine = rm_cv(rcounts, x->me);
  rm_coll_fact(op, x, rm_mem(sbuf), 0, mine, rt, mine, rt, 0, v, v ? x->size : 0);
  vec_done(v, vs);
  return own;
}

uint64_t rm_acc_alltoall(int op, const void *sbuf, MPI_Count rcount, MPI_Datatype rt, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  return rm_coll_acc(op, comm, rm_cf_alltoall(sbuf, rcount, rt), rm_tsz(rt, rcount) * (uint64_t)(x ? x->size : 1));
}

/* alltoallv/w: vec = bytes sent to each peer, then bytes received from each peer */
static uint64_t a2av(int op, const void *sbuf, rm_cv_t scounts, const MPI_Datatype *sts, MPI_Datatype st,
                     rm_cv_t rcounts, const MPI_Datatype *rts, MPI_Datatype rt, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  if (!x || x->inter) { rm_coll_fact(op, NULL, 0, 0, 0, rt, 0, rt, 0, NULL, 0); return 0; }
  int p = x->size, in = sbuf == MPI_IN_PLACE;
  int64_t vs[VEC_STACK], *v = vec_of(vs, 2 * p);
  uint64_t total = 0;
  for (int i = 0; i < p; i++) {
    MPI_Datatype ti = in ? (rts ? rts[i] : rt) : (sts ? sts[i] : st);
    uint64_t s = rm_tsz(ti, in ? rm_cv(rcounts, i) : rm_cv(scounts, i));
    total += s;
    if (v) { v[i] = (int64_t)s; v[p + i] = (int64_t)rm_tsz(rts ? rts[i] : rt, rm_cv(rcounts, i)); }
  }
  rm_coll_fact(op, rm_coll_xl(comm), rm_mem(sbuf), 0, 0, rt, 0, rt, in, v, v ? 2 * p : 0);
  vec_done(v, vs);
  return total;
}

uint64_t rm_acc_alltoallv(int op, const void *sbuf, rm_cv_t scounts, MPI_Datatype st, rm_cv_t rcounts,
                          MPI_Datatype rt, MPI_Comm comm) {
  return a2av(op, sbuf, scounts, NULL, st, rcounts, NULL, rt, comm);
}

uint64_t rm_acc_alltoallw(int op, const void *sbuf, rm_cv_t scounts, const MPI_Datatype *sts,
                          rm_cv_t rcounts, const MPI_Datatype *rts, MPI_Comm comm) {
  return a2av(op, sbuf, scounts, sts, MPI_DATATYPE_NULL, rcounts, rts, MPI_DATATYPE_NULL, comm);
}

uint64_t rm_acc_reduce_scatter(int op, const void *sbuf, rm_cv_t rcounts, MPI_Datatype t, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  if (!x || x->inter) { rm_coll_fact(op, NULL, 0, 0, 0, t, 0, t, 0, NULL, 0); return 0; }
  int p = x->size;
  int64_t vs[VEC_STACK], *v = vec_of(vs, p);
  uint64_t total = 0;
  for (int i = 0; i < p; i++) {
    uint64_t b = rm_tsz(t, rm_cv(rcounts, i));
    total += b;
    if (v) v[i] = (int64_t)b;
  }
  MPI_Count mine = rm_cv(rcounts, x->me);
  rm_coll_fact(op, rm_coll_xl(comm), rm_mem(sbuf), 0, mine, t, mine, t, rm_inplace(sbuf), v, v ? p : 0);
  vec_done(v, vs);
  return total;
}

uint64_t rm_acc_reduce_scatter_block(int op, const void *sbuf, MPI_Count rcount, MPI_Datatype t, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  if (!x || x->inter) { rm_coll_fact(op, NULL, 0, 0, 0, t, 0, t, 0, NULL, 0); return 0; }
  return rm_coll_acc(op, comm, rm_cf_reduce_scatter_block(sbuf, rcount, t), rm_tsz(t, rcount) * (uint64_t)x->size);
}

uint64_t rm_acc_scan(int op, const void *sbuf, MPI_Count count, MPI_Datatype t, MPI_Comm comm) {
  return rm_coll_acc(op, comm, rm_cf_scan(sbuf, count, t), rm_tsz(t, count));
}

/* in/out neighbour lists of a communicator with a topology (comm ranks; PROC_NULL kept) */
static int neighbors(MPI_Comm comm, int *nin, int **in, int *nout, int **out) {
  int topo = MPI_UNDEFINED;
  *in = *out = NULL; *nin = *nout = 0;
  PMPI_Topo_test(comm, &topo);
  if (topo == MPI_CART) {
    int nd = 0;
    PMPI_Cartdim_get(comm, &nd);
    *in = malloc(sizeof(int) * (size_t)(2 * nd + 1));
    if (!*in) return -1;
    for (int d = 0; d < nd; d++) PMPI_Cart_shift(comm, d, 1, &(*in)[2 * d], &(*in)[2 * d + 1]);
    *nin = *nout = 2 * nd;
    *out = *in;
    return 0;
  }
  if (topo == MPI_GRAPH) {
    int me, nn = 0;
    PMPI_Comm_rank(comm, &me);
    PMPI_Graph_neighbors_count(comm, me, &nn);
    *in = malloc(sizeof(int) * (size_t)(nn + 1));
    if (!*in) return -1;
    PMPI_Graph_neighbors(comm, me, nn, *in);
    *nin = *nout = nn;
    *out = *in;
    return 0;
  }
  if (topo == MPI_DIST_GRAPH) {
    int ni = 0, no = 0, w = 0;
    PMPI_Dist_graph_neighbors_count(comm, &ni, &no, &w);
    *in = malloc(sizeof(int) * (size_t)(ni + 1));
    *out = malloc(sizeof(int) * (size_t)(no + 1));
    if (!*in || !*out) { free(*in); free(*out); *in = *out = NULL; return -1; }
    PMPI_Dist_graph_neighbors(comm, ni, *in, MPI_UNWEIGHTED, no, *out, MPI_UNWEIGHTED);
    *nin = ni; *nout = no;
    return 0;
  }
  return -1;
}

/* neighbour collectives: every library sends each block straight to its neighbour, so their rows
 * are written here, as a mirror of that one algorithm */
static inline void edge(rm_xl_t *x, int op, int mem, int dir, int peer, uint64_t bytes) {
  rm_emit_from(rm_world(x, peer), RMREC_COLL, op, mem, dir, bytes, 1, RMREC_ORIGIN_MIRROR);
}

uint64_t rm_acc_neighbor(int op, int kind, const void *sbuf, MPI_Count scount, rm_cv_t scounts, MPI_Datatype st,
                         const MPI_Datatype *sts, MPI_Count rcount, rm_cv_t rcounts, MPI_Datatype rt,
                         const MPI_Datatype *rts, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  int nin, nout, *in, *out;
  rm_coll_fact(op, NULL, rm_mem(sbuf), 0, 0, MPI_BYTE, 0, MPI_BYTE, 0, NULL, 0);   /* attribution only */
  if (!x || neighbors(comm, &nin, &in, &nout, &out) != 0) return 0;
  int direct = !rm_lib_on;     /* the library reports its own messages: no rows of ours */
  int mem = rm_mem(sbuf);
  uint64_t total = 0;
  for (int i = 0; i < nout; i++) {
    uint64_t s = kind <= 1 ? rm_tsz(st, scount) : kind == 2 ? rm_tsz(st, scount)
               : kind == 3 ? rm_tsz(st, rm_cv(scounts, i)) : rm_tsz(sts[i], rm_cv(scounts, i));
    total += s;
    if (direct && out[i] >= 0 && s) edge(x, op, mem, RMREC_SEND, out[i], s);
  }
  for (int i = 0; i < nin; i++) {
    uint64_t r = kind == 0 || kind == 2 ? rm_tsz(rt, rcount) : kind == 4 ? rm_tsz(rts[i], rm_cv(rcounts, i))
               : rm_tsz(rt, rm_cv(rcounts, i));
    if (direct && in[i] >= 0 && r) edge(x, op, mem, RMREC_RECV, in[i], r);
  }
  if (out != in) free(out);
  free(in);
  return total;
}

uint64_t rm_acc_rma(int op, const void *obuf, uint64_t sent, const void *rbuf, uint64_t got, int target, MPI_Win win) {
  if (target < 0) return sent + got;
  int w = rm_world(rm_win_xl(win), target);
  if (sent) rm_emit(w, RMREC_RMA, op, rm_mem(obuf), RMREC_SEND, sent, 1);
  if (got) rm_emit(w, RMREC_RMA, op, rm_mem(rbuf), RMREC_RECV, got, 1);
  return sent + got;
}
