/*
 * shim_core.c -- state, rank translation, request tracking, memory kind and the collective
 * traffic models of the rankmap PMPI shim.  Models: docs/collective-models.md.
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
RM_TLS rm_tls_t rm_t;
int rm_wrank, rm_wsize;
rm_ts_t rm_ts_tab[RM_TS_SLOTS];

static const char *op_names[] = {
#define RM_NAME(n) #n,
  RM_OPS(RM_NAME)
#undef RM_NAME
};

#define MODEL_DESC "rankmap-1: bcast/reduce/gather/scatter binomial tree; gatherv/scatterv linear; " \
  "allreduce recursive doubling below 65536 bytes (or count < size) else ring; allgather recursive " \
  "doubling below 65536 total bytes on a power-of-two size else ring; allgatherv ring; alltoall(v/w) " \
  "pairwise exchange; reduce_scatter(_block) ring; scan/exscan recursive doubling; barrier " \
  "dissemination; neighbour collectives direct"

/* ---- handle -> translation tables (communicators, windows) ---------------------------- */

#define XT_SIZE 4096
typedef struct { _Atomic uint64_t key; rm_xl_t *_Atomic val; } xt_ent_t;
typedef struct { xt_ent_t e[XT_SIZE]; pthread_mutex_t lock; } xt_t;
static xt_t comm_tab = { .lock = PTHREAD_MUTEX_INITIALIZER };
static xt_t win_tab = { .lock = PTHREAD_MUTEX_INITIALIZER };
static rm_xl_t xl_world;
static int comm_kv = MPI_KEYVAL_INVALID, win_kv = MPI_KEYVAL_INVALID;
static _Atomic uint64_t comm_seq = 1;
/* The last communicator each thread looked up (most codes use one or two): valid while no
 * communicator was freed since (xt_gen counts frees; a freed handle may come back as another). */
static _Atomic unsigned xt_gen;
static RM_TLS struct { uint64_t key; unsigned gen; rm_xl_t *x; } comm_last;

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

rm_xl_t *rm_comm_xl(MPI_Comm comm) {
  if (comm == MPI_COMM_WORLD) return &xl_world;
  if (comm == MPI_COMM_NULL) return NULL;
  uint64_t key = hkey(&comm, sizeof comm);
  unsigned gen = atomic_load_explicit(&xt_gen, memory_order_acquire);
  if (comm_last.key == key && comm_last.gen == gen) return comm_last.x;
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
  xt_put(&comm_tab, key, x);
  comm_last.key = key; comm_last.gen = gen; comm_last.x = x;
  if (comm_kv != MPI_KEYVAL_INVALID) PMPI_Comm_set_attr(comm, comm_kv, x);
  if (!inter) rmrec_comm(rm_R, atomic_fetch_add(&comm_seq, 1), "", x->size, x->w);
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

/* ---- memory kind through the CUDA driver, loaded at run time ------------------------------- */

typedef int (*cu_attrs_fn)(unsigned n, int *attrs, void **data, unsigned long long ptr);
static cu_attrs_fn cu_attrs;
#define MK_SLOTS 1024
static _Atomic uint64_t mk_cache[MK_SLOTS];   /* (64 KiB granule << 2) | kind, 0 = empty */
#define MR_SLOTS 64
static struct { _Atomic uint64_t lo, hi; _Atomic int kind; } mk_range[MR_SLOTS];
static _Atomic unsigned mk_nrange;

static void mem_init(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (h) cu_attrs = (cu_attrs_fn)dlsym(h, "cuPointerGetAttributes");
  rmrec_meta(rm_R, "cuda", cu_attrs ? "loaded" : "not loaded");
}

int rm_mem(const void *buf) {
  if (!buf || buf == MPI_IN_PLACE || buf == MPI_BOTTOM) return RMREC_MEM_UNKNOWN;
  if (!cu_attrs) return RMREC_MEM_HOST;
  uint64_t a = (uint64_t)(uintptr_t)buf, g = a >> 16;
  uint64_t c = atomic_load_explicit(&mk_cache[g & (MK_SLOTS - 1)], memory_order_relaxed);
  if (c && (c >> 2) == g) return (int)(c & 3);
  unsigned nr = atomic_load_explicit(&mk_nrange, memory_order_acquire);
  for (unsigned i = 0; i < nr && i < MR_SLOTS; i++)
    if (a >= atomic_load_explicit(&mk_range[i].lo, memory_order_relaxed) &&
        a < atomic_load_explicit(&mk_range[i].hi, memory_order_relaxed))
      return atomic_load_explicit(&mk_range[i].kind, memory_order_relaxed);
  /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE=2, IS_MANAGED=8, RANGE_START_ADDR=11, RANGE_SIZE=12 */
  int attrs[4] = {2, 8, 11, 12};
  unsigned int mtype = 0;
  int managed = 0;
  unsigned long long start = 0;
  size_t size = 0;
  void *data[4] = {&mtype, &managed, &start, &size};
  int kind = RMREC_MEM_HOST;
  if (cu_attrs(4, attrs, data, (unsigned long long)a) == 0) {
    if (managed) kind = RMREC_MEM_MANAGED;
    else if (mtype == 2 /* CU_MEMORYTYPE_DEVICE */) kind = RMREC_MEM_DEVICE;
  }
  if (kind != RMREC_MEM_HOST && size) {
    unsigned i = atomic_fetch_add(&mk_nrange, 1);
    if (i < MR_SLOTS) {
      atomic_store(&mk_range[i].lo, start);
      atomic_store(&mk_range[i].hi, start + size);
      atomic_store(&mk_range[i].kind, kind);
    } else atomic_store(&mk_nrange, MR_SLOTS);
  }
  atomic_store_explicit(&mk_cache[g & (MK_SLOTS - 1)], (g << 2) | (uint64_t)kind, memory_order_relaxed);
  return kind;
}

/* ---- setup / teardown ------------------------------------------------------------------- */

/* Fill rm_ts_tab with the predefined datatypes (first come keeps a slot; the rest go through
 * PMPI_Type_size as before). */
static void ts_init(void) {
  const MPI_Datatype ts[] = {
    MPI_CHAR, MPI_SIGNED_CHAR, MPI_UNSIGNED_CHAR, MPI_BYTE, MPI_WCHAR, MPI_SHORT, MPI_UNSIGNED_SHORT,
    MPI_INT, MPI_UNSIGNED, MPI_LONG, MPI_UNSIGNED_LONG, MPI_LONG_LONG, MPI_UNSIGNED_LONG_LONG,
    MPI_FLOAT, MPI_DOUBLE, MPI_LONG_DOUBLE, MPI_C_BOOL, MPI_INT8_T, MPI_INT16_T, MPI_INT32_T,
    MPI_INT64_T, MPI_UINT8_T, MPI_UINT16_T, MPI_UINT32_T, MPI_UINT64_T, MPI_AINT, MPI_OFFSET,
    MPI_C_FLOAT_COMPLEX, MPI_C_DOUBLE_COMPLEX, MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT,
    MPI_2INT, MPI_SHORT_INT, MPI_PACKED,
  };
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
    int sz = 0;
    if (ts[i] == MPI_DATATYPE_NULL || PMPI_Type_size(ts[i], &sz) != MPI_SUCCESS || sz <= 0) continue;
    rm_ts_t *e = &rm_ts_tab[rm_ts_slot(ts[i])];
    if (e->size == 0) { e->t = ts[i]; e->size = sz; }
  }
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
  char *nl = strchr(lib, '\n');
  if (nl) *nl = 0;
  rmrec_meta(rm_R, "mpi_library", lib);
  PMPI_Get_version(&ver, &sub);
  char v[32];
  snprintf(v, sizeof v, "%d.%d", ver, sub);
  rmrec_meta(rm_R, "mpi_version", v);
  rmrec_meta(rm_R, "collective_model", MODEL_DESC);
  rmrec_meta(rm_R, "shim", "rankmap-mpi 1");
  int *ident = malloc(sizeof(int) * (size_t)rm_wsize);
  if (ident) {
    for (int i = 0; i < rm_wsize; i++) ident[i] = i;
    rmrec_comm(rm_R, 0, "MPI_COMM_WORLD", rm_wsize, ident);
    free(ident);
  }
  PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, comm_del_fn, &comm_kv, NULL);
  PMPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, win_del_fn, &win_kv, NULL);
  mem_init();
  ts_init();
  /* Below MPI_THREAD_MULTIPLE the application never has two MPI calls in flight, so nothing the
   * wrappers update is written concurrently: plain adds, no request-table lock. */
  int level = MPI_THREAD_MULTIPLE;
  if (PMPI_Query_thread(&level) != MPI_SUCCESS) level = MPI_THREAD_MULTIPLE;
  rm_single = level < MPI_THREAD_MULTIPLE;
  rmrec_single_writer(rm_R, rm_single);
  rmrec_meta(rm_R, "shim.counters", rm_single ? "single-writer (MPI thread level below MULTIPLE)"
                                              : "atomic (MPI_THREAD_MULTIPLE)");
  rm_on = 1;
}

void rm_teardown(void) {
  if (!rm_on) return;
  rm_on = 0;
  rmrec_close(rm_R);
}

/* ---- emitting rows ------------------------------------------------------------------------- */

void rm_emit(int peer, int klass, int op, int mem, int dir, uint64_t bytes, uint64_t msgs) {
  if (peer < 0) return;
  rm_rowset_t *rs = rm_rs;
  if (!rs) { rmrec_traffic_at(rm_R, peer, klass, op, mem, dir, bytes, msgs, rm_tick); return; }
  if (rs->n == rs->cap) {
    int cap = rs->cap ? 2 * rs->cap : 8;
    rm_row_t *r = realloc(rs->rows, sizeof *r * (size_t)cap);
    if (!r) return;
    rs->rows = r; rs->cap = cap;
  }
  rs->rows[rs->n++] = (rm_row_t){peer, klass, op, mem, dir, bytes};
}

rm_rowset_t *rm_rowset_new(int start_op) {
  rm_rowset_t *rs = calloc(1, sizeof *rs);
  if (rs) rs->start_op = start_op;
  return rs;
}

void rm_replay(const rm_rowset_t *rs) {
  for (int i = 0; i < rs->n; i++) {
    const rm_row_t *r = &rs->rows[i];
    rmrec_traffic_at(rm_R, r->peer, r->klass, r->op, r->mem, r->dir, r->bytes, 1, rm_tick);
  }
}

/* ---- point-to-point ------------------------------------------------------------------------ */

uint64_t rm_p2p_send(int op, const void *buf, MPI_Count count, MPI_Datatype t, int dest, MPI_Comm comm) {
  uint64_t n = rm_tsz(t, count);
  if (dest < 0) return n;               /* MPI_PROC_NULL */
  int w = rm_world(rm_comm_xl(comm), dest);
  rm_emit(w, RMREC_P2P, op, rm_mem(buf), RMREC_SEND, n, 1);
  return n;
}

uint64_t rm_p2p_recv(int op, int mem, rm_xl_t *xl, const MPI_Status *st) {
  if (!st || st == MPI_STATUS_IGNORE || st->MPI_SOURCE < 0) return 0;  /* PROC_NULL, inactive */
  MPI_Count c = 0;     /* elements of MPI_BYTE = bytes, beyond 2 GiB too (MPI_Get_count stops there) */
  if (PMPI_Get_elements_x(st, MPI_BYTE, &c) != MPI_SUCCESS || c < 0) return 0;
  int w = rm_world(xl, st->MPI_SOURCE);
  rm_emit(w, RMREC_P2P, op, mem, RMREC_RECV, (uint64_t)c, 1);
  return (uint64_t)c;
}

uint64_t rm_p2p_expect(int op, const void *buf, MPI_Count count, MPI_Datatype t, int source, MPI_Comm comm) {
  uint64_t n = rm_tsz(t, count);
  if (source < 0) return n;             /* MPI_PROC_NULL */
  rm_emit(rm_world(rm_comm_xl(comm), source), RMREC_P2P, op, rm_mem(buf), RMREC_RECV, n, 1);
  return n;
}

/* ---- collective models (docs/collective-models.md) ------------------------------------------- */

#define SMALL_BYTES 65536u

static inline void edge(rm_xl_t *x, int op, int mem, int dir, int peer, uint64_t bytes) {
  rm_emit(rm_world(x, peer), RMREC_COLL, op, mem, dir, bytes, 1);
}
static inline int lowbit(int v) { return v & -v; }
/* intra-communicator of at least 2 ranks, else no pair traffic */
static rm_xl_t *coll_xl(MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  return (x && !x->inter && x->size > 1) ? x : NULL;
}

/* binomial tree rooted at root; per_rank(child) bytes on each edge toward the leaves
 * (dir_down: parent sends), or the reverse (reduce/gather: child sends). block>0: gather/scatter,
 * edge bytes = block * ranks in the child's subtree. */
static void binomial(rm_xl_t *x, int op, int mem, int root, uint64_t n, int toward_root, int subtree) {
  int p = x->size, vr = (x->me - root + p) % p;
  int mask = 1;
  while (mask < p) {
    if (vr & mask) {   /* parent is vr - mask */
      int parent = (vr - mask + root) % p;
      uint64_t b = subtree ? n * (uint64_t)(mask < p - vr ? mask : p - vr) : n;
      edge(x, op, mem, toward_root ? RMREC_SEND : RMREC_RECV, parent, b);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < p) {
      int child = (vr + mask + root) % p;
      uint64_t b = subtree ? n * (uint64_t)(mask < p - (vr + mask) ? mask : p - (vr + mask)) : n;
      edge(x, op, mem, toward_root ? RMREC_RECV : RMREC_SEND, child, b);
    }
}

uint64_t rm_acc_bcast(int op, const void *buf, MPI_Count count, MPI_Datatype t, int root, MPI_Comm comm) {
  uint64_t n = rm_tsz(t, count);
  rm_xl_t *x = coll_xl(comm);
  if (x && n) binomial(x, op, rm_mem(buf), root, n, 0, 0);
  return n;
}

uint64_t rm_acc_reduce(int op, const void *sbuf, MPI_Count count, MPI_Datatype t, int root, MPI_Comm comm) {
  uint64_t n = rm_tsz(t, count);
  rm_xl_t *x = coll_xl(comm);
  if (x && n) binomial(x, op, rm_mem(sbuf), root, n, 1, 0);
  return n;
}

static void recursive_doubling(rm_xl_t *x, int op, int mem, uint64_t n) {
  int p = x->size, me = x->me, p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  if (me >= p2) {                           /* extra rank: hand data to me - p2, get result back */
    edge(x, op, mem, RMREC_SEND, me - p2, n);
    edge(x, op, mem, RMREC_RECV, me - p2, n);
    return;
  }
  if (me + p2 < p) {
    edge(x, op, mem, RMREC_RECV, me + p2, n);
    edge(x, op, mem, RMREC_SEND, me + p2, n);
  }
  for (int mask = 1; mask < p2; mask <<= 1) {
    edge(x, op, mem, RMREC_SEND, me ^ mask, n);
    edge(x, op, mem, RMREC_RECV, me ^ mask, n);
  }
}

/* ring reduce-scatter + allgather over p chunks of the element range */
static uint64_t ring_chunk(MPI_Count count, int p, int i, uint64_t esz) {
  return esz * (uint64_t)(count / p + (i < count % p ? 1 : 0));
}
static uint64_t ring_allreduce_sent(int r, MPI_Count count, int p, uint64_t esz) {
  uint64_t total = esz * (uint64_t)count;
  return (total - ring_chunk(count, p, (r + 1) % p, esz)) + (total - ring_chunk(count, p, (r + 2) % p, esz));
}

uint64_t rm_acc_allreduce(int op, const void *sbuf, MPI_Count count, MPI_Datatype t, MPI_Comm comm) {
  uint64_t n = rm_tsz(t, count);
  rm_xl_t *x = coll_xl(comm);
  if (!x || !n) return n;
  int mem = rm_mem(sbuf), p = x->size, me = x->me;
  if (n < SMALL_BYTES || count < p) { recursive_doubling(x, op, mem, n); return n; }
  uint64_t esz = n / (uint64_t)count;
  rm_emit(rm_world(x, (me + 1) % p), RMREC_COLL, op, mem, RMREC_SEND, ring_allreduce_sent(me, count, p, esz), 2 * (uint64_t)(p - 1));
  rm_emit(rm_world(x, (me - 1 + p) % p), RMREC_COLL, op, mem, RMREC_RECV,
          ring_allreduce_sent((me - 1 + p) % p, count, p, esz), 2 * (uint64_t)(p - 1));
  return n;
}

uint64_t rm_acc_gather(int op, const void *sbuf, MPI_Count scount, MPI_Datatype st, MPI_Count rcount, MPI_Datatype rt,
                       int root, MPI_Comm comm) {
  rm_xl_t *x = coll_xl(comm);
  rm_xl_t *any = rm_comm_xl(comm);
  int me = any ? any->me : 0;
  uint64_t n = (me == root) ? rm_tsz(rt, rcount) : rm_tsz(st, scount);
  if (x && n) binomial(x, op, rm_mem(sbuf), root, n, 1, 1);
  return n;
}

uint64_t rm_acc_scatter(int op, const void *sbuf, MPI_Count scount, MPI_Datatype st, MPI_Count rcount, MPI_Datatype rt,
                        int root, MPI_Comm comm) {
  rm_xl_t *x = coll_xl(comm);
  rm_xl_t *any = rm_comm_xl(comm);
  int me = any ? any->me : 0;
  uint64_t n = (me == root) ? rm_tsz(st, scount) : rm_tsz(rt, rcount);
  if (x && n) binomial(x, op, rm_mem(sbuf), root, n, 0, 1);
  return n;
}

uint64_t rm_acc_gatherv(int op, const void *sbuf, MPI_Count scount, MPI_Datatype st, rm_cv_t rcounts,
                        MPI_Datatype rt, int root, MPI_Comm comm) {
  rm_xl_t *x = coll_xl(comm);
  if (!x) return rm_tsz(st, scount);
  int mem = rm_mem(sbuf);
  if (x->me != root) {
    uint64_t n = rm_tsz(st, scount);
    if (n) edge(x, op, mem, RMREC_SEND, root, n);
    return n;
  }
  uint64_t own = rm_tsz(rt, rm_cv(rcounts, root));
  for (int i = 0; i < x->size; i++)
    if (i != root && rm_cv(rcounts, i) > 0) edge(x, op, mem, RMREC_RECV, i, rm_tsz(rt, rm_cv(rcounts, i)));
  return own;
}

uint64_t rm_acc_scatterv(int op, const void *sbuf, rm_cv_t scounts, MPI_Datatype st, MPI_Count rcount,
                         MPI_Datatype rt, int root, MPI_Comm comm) {
  rm_xl_t *x = coll_xl(comm);
  if (!x) return rm_tsz(rt, rcount);
  int mem = rm_mem(sbuf);
  if (x->me != root) {
    uint64_t n = rm_tsz(rt, rcount);
    if (n) edge(x, op, mem, RMREC_RECV, root, n);
    return n;
  }
  for (int i = 0; i < x->size; i++)
    if (i != root && rm_cv(scounts, i) > 0) edge(x, op, mem, RMREC_SEND, i, rm_tsz(st, rm_cv(scounts, i)));
  return rm_tsz(st, rm_cv(scounts, root));
}

uint64_t rm_acc_allgather(int op, const void *sbuf, MPI_Count rcount, MPI_Datatype rt, MPI_Comm comm) {
  uint64_t n = rm_tsz(rt, rcount);
  rm_xl_t *x = coll_xl(comm);
  if (!x || !n) return n;
  int p = x->size, me = x->me, mem = rm_mem(sbuf);
  if ((p & (p - 1)) == 0 && n * (uint64_t)p < SMALL_BYTES) {
    for (int mask = 1; mask < p; mask <<= 1) {
      edge(x, op, mem, RMREC_SEND, me ^ mask, n * (uint64_t)mask);
      edge(x, op, mem, RMREC_RECV, me ^ mask, n * (uint64_t)mask);
    }
    return n;
  }
  rm_emit(rm_world(x, (me + 1) % p), RMREC_COLL, op, mem, RMREC_SEND, n * (uint64_t)(p - 1), (uint64_t)(p - 1));
  rm_emit(rm_world(x, (me - 1 + p) % p), RMREC_COLL, op, mem, RMREC_RECV, n * (uint64_t)(p - 1), (uint64_t)(p - 1));
  return n;
}

uint64_t rm_acc_allgatherv(int op, const void *sbuf, rm_cv_t rcounts, MPI_Datatype rt, MPI_Comm comm) {
  rm_xl_t *x = coll_xl(comm);
  rm_xl_t *any = rm_comm_xl(comm);
  uint64_t own = any ? rm_tsz(rt, rm_cv(rcounts, any->me < any->size ? any->me : 0)) : 0;
  if (!x) return own;
  int p = x->size, me = x->me, mem = rm_mem(sbuf);
  uint64_t total = 0;
  for (int i = 0; i < p; i++) total += rm_tsz(rt, rm_cv(rcounts, i));
  /* ring: rank r forwards every block except block (r+1) mod p */
  uint64_t out = total - rm_tsz(rt, rm_cv(rcounts, (me + 1) % p));
  uint64_t in = total - rm_tsz(rt, rm_cv(rcounts, me));
  rm_emit(rm_world(x, (me + 1) % p), RMREC_COLL, op, mem, RMREC_SEND, out, (uint64_t)(p - 1));
  rm_emit(rm_world(x, (me - 1 + p) % p), RMREC_COLL, op, mem, RMREC_RECV, in, (uint64_t)(p - 1));
  return own;
}

uint64_t rm_acc_alltoall(int op, const void *sbuf, MPI_Count rcount, MPI_Datatype rt, MPI_Comm comm) {
  uint64_t n = rm_tsz(rt, rcount);
  rm_xl_t *x = coll_xl(comm);
  if (!x) return n;
  int mem = rm_mem(sbuf);
  if (n)
    for (int i = 0; i < x->size; i++)
      if (i != x->me) { edge(x, op, mem, RMREC_SEND, i, n); edge(x, op, mem, RMREC_RECV, i, n); }
  return n * (uint64_t)x->size;
}

uint64_t rm_acc_alltoallv(int op, const void *sbuf, rm_cv_t scounts, MPI_Datatype st, rm_cv_t rcounts,
                          MPI_Datatype rt, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  if (!x || x->inter) return 0;
  int inplace = (sbuf == MPI_IN_PLACE);
  rm_cv_t sc = inplace ? rcounts : scounts;
  MPI_Datatype stt = inplace ? rt : st;
  int mem = rm_mem(sbuf);
  uint64_t total = 0;
  for (int i = 0; i < x->size; i++) {
    uint64_t s = rm_tsz(stt, rm_cv(sc, i)), r = rm_tsz(rt, rm_cv(rcounts, i));
    total += s;
    if (i == x->me) continue;
    if (s) edge(x, op, mem, RMREC_SEND, i, s);
    if (r) edge(x, op, mem, RMREC_RECV, i, r);
  }
  return total;
}

uint64_t rm_acc_alltoallw(int op, const void *sbuf, rm_cv_t scounts, const MPI_Datatype *sts,
                          rm_cv_t rcounts, const MPI_Datatype *rts, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  if (!x || x->inter) return 0;
  int inplace = (sbuf == MPI_IN_PLACE);
  int mem = rm_mem(sbuf);
  uint64_t total = 0;
  for (int i = 0; i < x->size; i++) {
    uint64_t s = inplace ? rm_tsz(rts[i], rm_cv(rcounts, i)) : rm_tsz(sts[i], rm_cv(scounts, i));
    uint64_t r = rm_tsz(rts[i], rm_cv(rcounts, i));
    total += s;
    if (i == x->me) continue;
    if (s) edge(x, op, mem, RMREC_SEND, i, s);
    if (r) edge(x, op, mem, RMREC_RECV, i, r);
  }
  return total;
}

uint64_t rm_acc_reduce_scatter(int op, const void *sbuf, rm_cv_t rcounts, MPI_Datatype t, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  if (!x || x->inter) return 0;
  int p = x->size, me = x->me, mem = rm_mem(sbuf);
  uint64_t total = 0;
  for (int i = 0; i < p; i++) total += rm_tsz(t, rm_cv(rcounts, i));
  if (p > 1) {  /* ring: rank r sends partial sums of every block except its own */
    rm_emit(rm_world(x, (me + 1) % p), RMREC_COLL, op, mem, RMREC_SEND, total - rm_tsz(t, rm_cv(rcounts, me)), (uint64_t)(p - 1));
    int prev = (me - 1 + p) % p;
    rm_emit(rm_world(x, prev), RMREC_COLL, op, mem, RMREC_RECV, total - rm_tsz(t, rm_cv(rcounts, prev)), (uint64_t)(p - 1));
  }
  return total;
}

uint64_t rm_acc_reduce_scatter_block(int op, const void *sbuf, MPI_Count rcount, MPI_Datatype t, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  if (!x || x->inter) return 0;
  int p = x->size, me = x->me, mem = rm_mem(sbuf);
  uint64_t n = rm_tsz(t, rcount);
  if (p > 1 && n) {
    rm_emit(rm_world(x, (me + 1) % p), RMREC_COLL, op, mem, RMREC_SEND, n * (uint64_t)(p - 1), (uint64_t)(p - 1));
    rm_emit(rm_world(x, (me - 1 + p) % p), RMREC_COLL, op, mem, RMREC_RECV, n * (uint64_t)(p - 1), (uint64_t)(p - 1));
  }
  return n * (uint64_t)p;
}

uint64_t rm_acc_scan(int op, const void *sbuf, MPI_Count count, MPI_Datatype t, MPI_Comm comm) {
  uint64_t n = rm_tsz(t, count);
  rm_xl_t *x = coll_xl(comm);
  if (!x || !n) return n;
  int mem = rm_mem(sbuf);
  for (int mask = 1; mask < x->size; mask <<= 1) {
    int partner = x->me ^ mask;
    if (partner < x->size) { edge(x, op, mem, RMREC_SEND, partner, n); edge(x, op, mem, RMREC_RECV, partner, n); }
  }
  return n;
}

uint64_t rm_acc_barrier(int op, MPI_Comm comm) {
  rm_xl_t *x = coll_xl(comm);
  if (!x) return 0;
  int p = x->size, me = x->me;
  for (int mask = 1; mask < p; mask <<= 1) {
    edge(x, op, RMREC_MEM_UNKNOWN, RMREC_SEND, (me + mask) % p, 0);
    edge(x, op, RMREC_MEM_UNKNOWN, RMREC_RECV, (me - mask + p) % p, 0);
  }
  return 0;
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

uint64_t rm_acc_neighbor(int op, int kind, const void *sbuf, MPI_Count scount, rm_cv_t scounts, MPI_Datatype st,
                         const MPI_Datatype *sts, MPI_Count rcount, rm_cv_t rcounts, MPI_Datatype rt,
                         const MPI_Datatype *rts, MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  int nin, nout, *in, *out;
  if (!x || neighbors(comm, &nin, &in, &nout, &out) != 0) return 0;
  int mem = rm_mem(sbuf);
  uint64_t total = 0;
  for (int i = 0; i < nout; i++) {
    uint64_t s = kind <= 1 ? rm_tsz(st, scount) : kind == 2 ? rm_tsz(st, scount)
               : kind == 3 ? rm_tsz(st, rm_cv(scounts, i)) : rm_tsz(sts[i], rm_cv(scounts, i));
    total += s;
    if (out[i] >= 0 && s) edge(x, op, mem, RMREC_SEND, out[i], s);
  }
  for (int i = 0; i < nin; i++) {
    uint64_t r = kind == 0 || kind == 2 ? rm_tsz(rt, rcount) : kind == 4 ? rm_tsz(rts[i], rm_cv(rcounts, i))
               : rm_tsz(rt, rm_cv(rcounts, i));
    if (in[i] >= 0 && r) edge(x, op, mem, RMREC_RECV, in[i], r);
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
