/*
 * shim_coll.c -- what the MPI library did with each collective call.
 *
 * A PMPI layer sees the arguments of a collective, not the messages the library exchanges to
 * carry it out.  Two sources fill that gap (docs/collective-models.md):
 *
 *  library  Open MPI's monitoring PML records every message it sends through
 *           mca_common_monitoring_record_pml(world rank, bytes, tag), an exported entry point of
 *           libmca_common_monitoring (Open MPI 4.1), or of libmpi itself where the components are
 *           built into it (an Open MPI 5 built without dlopen, as PyPI's wheel).  The shim defines
 *           that symbol too: being preloaded, its definition is the one the monitoring PML binds
 *           to, so each message passes through here (and on to the real one, so the library's own
 *           dumps stay intact).  Each message sent inside a collective call, and each message
 *           with a negative tag (the library's internal traffic) outside one, becomes a TRAFFIC
 *           row of origin "library", attributed to the collective in progress on the thread.
 *           (The monitoring's MPI_T variables pml_monitoring_messages_* would say the same, but
 *           Open MPI 4.1 deregisters them when MPI_Init closes the unused PML components, so
 *           they cannot be read after MPI_Init.)
 *  facts    every collective call adds one to its signature (communicator, operation, counts and
 *           type sizes, root, flags) in the current timeline bucket; COLLFACTS blocks carry them,
 *           and the reader applies a mirror of the library's algorithm selection (or a model) to
 *           derive the pair rows.  With the library source on, the facts are flagged as measured
 *           and no pair rows are derived from them.
 */
#define _GNU_SOURCE
#include "shim_core.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rm_lib_on;

/* ---- facts table -------------------------------------------------------------------------------- */

#define SIG_SLOTS (1u << 16)      /* distinct signatures kept; more are counted as lost */
#define SIG_RING 8                /* buckets per signature between two flushes, before it grows */
#define SIG_RING_MAX 65536        /* ... up to this many (else merged into the last) */

/* COLLFACTS entries, from the one layout declaration (rmrec_layout.h, docs/record-format.md) */
#pragma pack(push, 1)
typedef struct { RMREC_ROW_COLLFACT_SIG(RMREC_FIELD_, RMREC_ARRAY_) } fact_sig_t;
typedef struct { RMREC_ROW_COLLFACT_CALLS(RMREC_FIELD_, RMREC_ARRAY_) } fact_calls_t;
#pragma pack(pop)
_Static_assert(sizeof(fact_sig_t) == 64, "fact signature");
_Static_assert(sizeof(fact_calls_t) == 24, "fact calls");

typedef struct {
  uint64_t hash;
  fact_sig_t def;
  int64_t *vec;
  int written, n, cap;               /* buckets counted since the last flush, and room for them */
  int64_t *bucket;                   /* ring0 / calls0 until the ring grows (sig_grow) */
  uint64_t *calls;
  int64_t ring0[SIG_RING];
  uint64_t calls0[SIG_RING];
} sig_t;

static sig_t *sigs;               /* SIG_SLOTS, allocated at setup (pages touched lazily) */
static uint32_t *sig_order;       /* slot of signature i, in creation order */
static uint32_t nsig;
static uint64_t lost_calls;
static uint64_t memo_misses;      /* calls a thread could have remembered that took the table's path */
/* The table is written by the MPI calls and read (and its per-bucket counts reset) by the flush
 * thread.  A spin lock, not a mutex: held for a few instructions by a call, it costs one exchange
 * to take and a plain store to release, where an uncontended mutex costs two locked operations and
 * two library calls -- a good part of what a collective's accounting costs.  The flusher, which
 * holds it longer (writing the new signatures), does so once per flush interval. */
static atomic_int sig_lock;
#if defined(__x86_64__) || defined(__i386__)
#define SPIN_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define SPIN_PAUSE() __asm__ __volatile__("yield")
#else
#define SPIN_PAUSE() ((void)0)
#endif
static inline void sig_lock_take(void) {
  while (atomic_exchange_explicit(&sig_lock, 1, memory_order_acquire))
    for (unsigned spins = 0; atomic_load_explicit(&sig_lock, memory_order_relaxed); spins++) {
      if (spins < 64) SPIN_PAUSE();
      else sched_yield();                 /* the holder may be descheduled (cores oversubscribed) */
    }
}
static inline void sig_lock_give(void) { atomic_store_explicit(&sig_lock, 0, memory_order_release); }

/* a table index, not a stored value: eight bytes a step (the 64-byte signature in 8 steps, not 64) */
static uint64_t hwords(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (; n >= 8; n -= 8, b += 8) {
    uint64_t w;
    memcpy(&w, b, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  while (n--) { h ^= *b++; h *= 0x100000001b3ull; }
  return h;
}

static int type_size(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return 0;
  return (int)rm_tsz(t, 1);
}

/* A signature called in more buckets between two flushes than its ring holds (a collective in every
 * bucket, more buckets than 8 per flush interval: the default 100 ms buckets and 1 s flushes make
 * 10) gets a ring twice as large, once per size: merging them would put several buckets' calls in
 * one.  Only when that fails, or past SIG_RING_MAX, are the rest merged into the last bucket. */
static int sig_grow(sig_t *e) {
  if (e->cap >= SIG_RING_MAX) return 0;
  int64_t *b = malloc(sizeof(int64_t) * 2 * (size_t)e->cap);
  uint64_t *c = malloc(sizeof(uint64_t) * 2 * (size_t)e->cap);
  if (!b || !c) { free(b); free(c); return 0; }
  memcpy(b, e->bucket, sizeof(int64_t) * (size_t)e->n);
  memcpy(c, e->calls, sizeof(uint64_t) * (size_t)e->n);
  if (e->bucket != e->ring0) { free(e->bucket); free(e->calls); }
  e->bucket = b; e->calls = c; e->cap *= 2;
  return 1;
}

/* count `calls` calls of signature e in bucket b (sig_lock held) */
static void sig_add(sig_t *e, int64_t b, uint64_t calls) {
  if (e->n && e->bucket[e->n - 1] == b) { e->calls[e->n - 1] += calls; return; }
  if (e->n == e->cap && !sig_grow(e)) { e->calls[e->n - 1] += calls; return; }
  e->bucket[e->n] = b; e->calls[e->n] = calls; e->n++;
}

static int sig_find(const fact_sig_t *d, const int64_t *vec, int nvec) {
  uint64_t h = hwords(0xcbf29ce484222325ull, d, sizeof *d);
  if (nvec) h = hwords(h, vec, sizeof(int64_t) * (size_t)nvec);
  h |= 1;
  for (uint32_t i = (uint32_t)(h ^ (h >> 29)) & (SIG_SLOTS - 1), k = 0; k < SIG_SLOTS; k++, i = (i + 1) & (SIG_SLOTS - 1)) {
    sig_t *e = &sigs[i];
    if (e->hash == 0) {
      if (nsig >= SIG_SLOTS * 3 / 4) return -1;
      int64_t *v = NULL;
      if (nvec) {
        v = malloc(sizeof(int64_t) * (size_t)nvec);
        if (!v) return -1;
        memcpy(v, vec, sizeof(int64_t) * (size_t)nvec);
      }
      e->hash = h; e->def = *d; e->vec = v; e->def.sig = nsig;
      e->bucket = e->ring0; e->calls = e->calls0; e->cap = SIG_RING;
      sig_order[nsig++] = i;
      return (int)i;
    }
    if (e->hash == h && memcmp(&e->def.mem, &d->mem, offsetof(fact_sig_t, sig) - 1) == 0 &&
        memcmp(&e->def.comm, &d->comm, sizeof *d - offsetof(fact_sig_t, comm)) == 0 &&
        (!nvec || memcmp(e->vec, vec, sizeof(int64_t) * (size_t)nvec) == 0))
      return (int)i;
  }
  return -1;
}

int rm_coll_on;

/* The threads' remembered signatures (shim_core.h, rm_coll_fact): one block per thread that made a
 * collective call, pushed on a list the flush walks, never freed (a thread's pending calls are
 * added to the table after it exits; a block is ~6.4 KB): the class sets' ways, then the hashed
 * sets' (rm_coll_way). */
typedef struct coll_block { rm_coll_memo_t m[RM_COLL_MEMO]; struct coll_block *next; } coll_block_t;
static _Atomic(coll_block_t *) coll_blocks;
/* out of memory: the entries of every thread that got no block, never written (slot1 0: nothing
 * is remembered; the fast path only reads them) */
static rm_coll_memo_t memo_spare[RM_COLL_MEMO];

rm_coll_memo_t *rm_coll_memo_init(void) {
  coll_block_t *blk = calloc(1, sizeof *blk);
  if (!blk) return rm_t.cm = memo_spare;
  for (int j = 0; j < RM_COLL_MEMO; j++) {
    blk->m[j].fepoch = RM_NO_EPOCH;
    blk->m[j].bucket = INT64_MIN;          /* never called: the first way a new signature takes */
  }
  blk->next = atomic_load_explicit(&coll_blocks, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(&coll_blocks, &blk->next, blk, memory_order_release,
                                                memory_order_relaxed)) {
  }
  return rm_t.cm = blk->m;
}

/* an entry's calls not yet in the table go there (sig_lock held) */
static void memo_publish(rm_coll_memo_t *c) {
  uint64_t n = atomic_load_explicit(&c->cnt, memory_order_relaxed);
  if (c->slot1 && n > c->pub) sig_add(&sigs[c->slot1 - 1], c->bucket, n - c->pub);
  c->pub = n;
}

/* the entry's held calls to the table, then it counts `calls` in bucket b from now on (sig_lock held) */
static void memo_restart(rm_coll_memo_t *c, int64_t b, uint64_t calls) {
  memo_publish(c);
  c->bucket = b; c->pub = 0;
  atomic_store_explicit(&c->cnt, calls, memory_order_relaxed);
}

/* one call of table slot i in the current bucket, straight into the table */
static void count_now(int i) {
  int64_t b = rmrec_bucket(rm_R, rm_tick);
  sig_lock_take();
  sig_add(&sigs[i], b, 1);
  sig_lock_give();
}

void rm_coll_memo_retick(rm_coll_memo_t *c) {
  int64_t b = rmrec_bucket(rm_R, rm_tick);
  if (b != c->bucket) {
    sig_lock_take();
    memo_restart(c, b, 0);
    sig_lock_give();
  }
  c->tick = rm_tick;
}

/* the call an entry holds from now on (its signature's slot, if any, is set apart) */
static void memo_key(rm_coll_memo_t *c, int op, uint64_t comm, int mem, int root, int64_t scount, MPI_Datatype st,
                     int64_t rcount, MPI_Datatype rt, int flags) {
  c->op = op; c->comm = comm; c->mem = mem; c->root = root; c->flags = flags;
  c->scount = scount; c->st = st; c->rcount = rcount; c->rt = rt;
}

/* The entry a new signature takes (shim_core.h): an empty way of its class set if any (a class's
 * first signature takes way 0, the one the entry point looks at first), else the one last called
 * in the oldest timeline bucket among the class set's and the hashed set's ways, of those in the
 * same bucket a hashed way before a class way and then the one filled first.  Across buckets that
 * is the least recently used; within one it keeps the newest signature, so two that alternate
 * settle after a miss or two, where keeping the one called most would let a new pair displace
 * each other until the bucket ends; and signatures called in turn in one bucket that found room
 * stay where they are, a newcomer evicting only within its hashed set. */
static RM_TLS uint64_t memo_fills;
static int memo_before(const rm_coll_memo_t *c, int c_hashed, const rm_coll_memo_t *v, int v_hashed) {
  if (c->bucket != v->bucket) return c->bucket < v->bucket;
  if (c_hashed != v_hashed) return c_hashed;
  return c->filled < v->filled;
}
static rm_coll_memo_t *memo_victim(rm_coll_memo_t *set, rm_coll_memo_t *hset) {
  rm_coll_memo_t *v = NULL;
  for (int w = 0; w < RM_COLL_WAYS && !v; w++)
    if (set[w].bucket == INT64_MIN) v = &set[w];
  for (int w = 0, vh = 0, empty = v != NULL; w < RM_COLL_HELD && !empty; w++) {
    int h = w < RM_COLL_HWAYS;
    rm_coll_memo_t *c = h ? &hset[w] : &set[w - RM_COLL_HWAYS];
    if (!v || memo_before(c, h, v, vh)) v = c, vh = h;
  }
  v->filled = ++memo_fills;
  return v;
}

/* An entry a call without facts looks at: the one armed with the same arguments and communicator
 * handle, else memo_victim's (its held calls go to the table).  It takes the call's arguments with
 * no signature (slot1 0: rm_coll_fact never counts a hit on it and the flush adds nothing from
 * it), for rm_coll_fast. */
rm_coll_memo_t *rm_coll_memo_bare(int op, MPI_Comm comm, const rm_cf_t *f, int mem) {
  rm_coll_memo_t *cm = rm_t.cm;
  if (!cm) cm = rm_coll_memo_init();
  if (cm == memo_spare) return NULL;
  rm_coll_memo_t *c = NULL;
  for (int w = 0; w < RM_COLL_HELD && !c; w++) {
    rm_coll_memo_t *e = rm_coll_way(cm, op, w, f->scount, f->st, f->root);
    if (!e->slot1 && e->op == op && e->hcomm == comm && e->mem == mem && e->root == f->root &&
        e->scount == f->scount && e->st == f->st && e->rcount == f->rcount && e->rt == f->rt && e->flags == f->flags)
      c = e;
  }
  if (!c) {
    c = memo_victim(rm_coll_set(cm, op), rm_coll_hset(cm, op, f->scount, f->st, f->root));
    if (c->slot1) {
      sig_lock_take();
      memo_publish(c);
      c->slot1 = 0;
      sig_lock_give();
    }
    c->pub = 0;
    atomic_store_explicit(&c->cnt, 0, memory_order_relaxed);
    memo_key(c, op, 0, mem, f->root, f->scount, f->st, f->rcount, f->rt, f->flags);
    c->fepoch = RM_NO_EPOCH;
  }
  if (c->fepoch != rm_t.epoch) c->bucket = rmrec_bucket(rm_R, rm_tick);   /* (else armed in this bucket) */
  return c;
}

/* A signature rm_coll_fact did not find in the thread's memory: built, found or added in the
 * table, and counted there or (a remembered one) in the entry it takes. */
rm_coll_memo_t *rm_coll_fact_miss(rm_coll_memo_t *cm, int op, rm_xl_t *x, int mem, int root, int64_t scount,
                                  MPI_Datatype st, int64_t rcount, MPI_Datatype rt, int flags, const int64_t *vec,
                                  int nvec) {
  rm_coll_memo_t *set = rm_coll_set(cm, op), *hset = rm_coll_hset(cm, op, scount, st, root);
  if (nvec <= 0 && !rm_rs)                 /* held in its hashed set: counted as rm_coll_fact */
    for (int w = 0; w < RM_COLL_HWAYS; w++)      /* counts a hit in the class set */
      if (rm_coll_memo_is(&hset[w], op, x->id, mem, root, scount, st, rcount, rt, flags)) {
        rm_coll_memo_t *c = &hset[w];
        if (c->tick != rm_tick) rm_coll_memo_retick(c);
        rm_coll_memo_add(c);
        return c;
      }
  int remember = nvec <= 0 && rm_t.cm != memo_spare && rm_ts_fixed(st) && rm_ts_fixed(rt);
  rm_coll_memo_t *c = NULL;                /* the way it takes: the one holding it (a persistent */
  for (int w = 0; w < RM_COLL_HELD && remember && !c; w++) {   /* collective's setup), else a victim */
    rm_coll_memo_t *e = w < RM_COLL_WAYS ? &set[w] : &hset[w - RM_COLL_WAYS];
    if (rm_coll_memo_is(e, op, x->id, mem, root, scount, st, rcount, rt, flags)) c = e;
  }
  if (remember && !c) c = memo_victim(set, hset);
  int64_t b = rmrec_bucket(rm_R, rm_tick);
  fact_sig_t d;
  memset(&d, 0, sizeof d);
  d.kind = 1; d.mem = (uint8_t)mem;
  d.flags = (uint8_t)flags;
  d.comm = x->id; d.size = x->size; d.rank = x->me; d.root = root;
  d.op = (uint16_t)op;
  d.scount = scount; d.ssize = type_size(st);
  d.rcount = rcount; d.rsize = type_size(rt);
  d.nvec = (uint32_t)(nvec > 0 ? nvec : 0);
  sig_lock_take();
  int i = sig_find(&d, vec, nvec > 0 ? nvec : 0);
  if (remember && !rm_rs) memo_misses++;
  if (i < 0) lost_calls++;
  else if (rm_rs) rm_rs->sig = i + 1;
  else if (!remember) sig_add(&sigs[i], b, 1);
  if (i >= 0 && remember) {
    memo_restart(c, b, rm_rs ? 0 : 1);     /* the previous signature's calls first, then this one's */
    memo_key(c, op, x->id, mem, root, scount, st, rcount, rt, flags);
    c->slot1 = i + 1;
    c->tick = rm_tick;
    c->fepoch = RM_NO_EPOCH;               /* new facts: the fast path waits for rm_coll_acc to arm it */
  }
  sig_lock_give();
  return i >= 0 && remember && !rm_rs ? c : NULL;
}

void rm_coll_count(int slot) {
  if (!sigs || slot < 0 || slot >= (int)SIG_SLOTS) return;
  rm_t.coll = sigs[slot].def.op + 1;       /* a signature's definition never changes once made */
  rm_t.coll_mem = sigs[slot].def.mem;
  count_now(slot);
}

static void facts_flush(rmrec_t *c) {
  sig_lock_take();
  for (coll_block_t *blk = atomic_load_explicit(&coll_blocks, memory_order_acquire); blk; blk = blk->next)
    for (int j = 0; j < RM_COLL_MEMO; j++) memo_publish(&blk->m[j]);
  for (uint32_t k = 0; k < nsig; k++) {
    sig_t *e = &sigs[sig_order[k]];
    if (!e->written) {
      size_t n = sizeof e->def + sizeof(int64_t) * e->def.nvec;
      unsigned char *buf = malloc(n);
      if (!buf) continue;
      memcpy(buf, &e->def, sizeof e->def);
      if (e->def.nvec) memcpy(buf + sizeof e->def, e->vec, sizeof(int64_t) * e->def.nvec);
      rmrec_put(c, RMREC_BT_COLLFACTS, buf, (uint32_t)n);
      free(buf);
      e->written = 1;
    }
    for (int j = 0; j < e->n; j++) {
      fact_calls_t r = {0};
      r.kind = 2; r.sig = e->def.sig; r.bucket = e->bucket[j]; r.calls = e->calls[j];
      rmrec_put(c, RMREC_BT_COLLFACTS, &r, sizeof r);
    }
    e->n = 0;
  }
  sig_lock_give();
}

/* Before the final flush (META given during a flush is written by the next one, and the final
 * flush has none): how many calls the threads' memory missed, how many its ways after the first
 * took on the fast path, and the calls without facts. */
void rm_coll_teardown(void) {
  if (!sigs) return;
  sig_lock_take();
  uint64_t lost = lost_calls, misses = memo_misses, hits[RM_COLL_HELD] = {0};
  enum { CLASS = RM_COLL_SETS * RM_COLL_WAYS };
  for (coll_block_t *blk = atomic_load_explicit(&coll_blocks, memory_order_acquire); blk; blk = blk->next)
    for (int j = 0; j < RM_COLL_MEMO; j++)
      hits[j < CLASS ? j % RM_COLL_WAYS : RM_COLL_WAYS + (j - CLASS) % RM_COLL_HWAYS] += blk->m[j].hits;
  sig_lock_give();
  char v[96];
  snprintf(v, sizeof v, "%llu", (unsigned long long)misses);
  rmrec_meta(rm_R, "collectives.memo_misses", v);
  /* the fast path's calls in the entries a call looks at after the first (way 1 of the class
   * sets, then the hashed sets' ways 0, 1): a broken path to them is otherwise hidden, since the
   * full wrapper finds and counts those calls as well */
  size_t at = 0;
  for (int w = 1; w < RM_COLL_HELD && at < sizeof v; w++)
    at += (size_t)snprintf(v + at, sizeof v - at, "%s%llu", w > 1 ? " " : "", (unsigned long long)hits[w]);
  rmrec_meta(rm_R, "collectives.memo_way_hits", v);
  if (lost) {
    snprintf(v, sizeof v, "%llu collective calls without facts: more than %u distinct signatures",
             (unsigned long long)lost, SIG_SLOTS * 3 / 4);
    rmrec_meta(rm_R, "warning.collective_facts", v);
  }
}

/* ---- library source: Open MPI's monitoring PML ----------------------------------------------- */

static void (*real_record_pml)(int, size_t, int);
static int internal_op = -1;              /* "MPI internal": library messages outside any collective */

/* nonblocking collectives progress inside later calls: the tag of each live schedule names its
 * operation (rm_nbc_begin in shim_core.h) */
#define NB_TAGS 1024
static _Atomic int64_t nb_tag_op[NB_TAGS];    /* (tag << 16) | op, 0 = empty */
#define TAG_NONBLOCKING_BASE (-27)             /* Open MPI coll_tags.h: blocking tags are -10..-26 */

static inline _Atomic int64_t *nb_slot(int tag) { return &nb_tag_op[(unsigned)(-tag) % NB_TAGS]; }
static inline int64_t nb_code(int tag, int op) { return ((int64_t)tag << 16) | op; }
/* the operation of the live schedule of this tag, or -1 */
static inline int nb_op_of(int tag) {
  int64_t v = atomic_load_explicit(nb_slot(tag), memory_order_relaxed);
  return v && (v >> 16) == tag ? (int)(v & 0xffff) : -1;
}

void rm_nbc_begin_(MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  if (!x) return;
  int tag = __atomic_load_n(&x->nbc, __ATOMIC_RELAXED);
  if (tag > TAG_NONBLOCKING_BASE || tag == 0) tag = TAG_NONBLOCKING_BASE;   /* the communicator's first */
  __atomic_store_n(&x->nbc, tag - 1, __ATOMIC_RELAXED);
  atomic_store_explicit(nb_slot(tag), nb_code(tag, rm_t.coll - 1), memory_order_relaxed);
  rm_t.nb_start = 1; rm_t.nb_tag = tag; rm_t.nb_xl = x;
}

void rm_nbc_skip_(MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  if (!x) return;
  int tag = __atomic_load_n(&x->nbc, __ATOMIC_RELAXED);
  if (tag > TAG_NONBLOCKING_BASE || tag == 0) tag = TAG_NONBLOCKING_BASE;
  __atomic_store_n(&x->nbc, tag - 1, __ATOMIC_RELAXED);
}

void rm_nbc_started_(MPI_Request req) {
  rm_t.nb_start = 0;
  rm_rq_put_nbc(req, rm_t.coll - 1, rm_t.nb_tag);
}

void rm_nbc_forget(int tag, int op) {
  int64_t v = nb_code(tag, op);
  atomic_compare_exchange_strong_explicit(nb_slot(tag), &v, 0, memory_order_relaxed, memory_order_relaxed);
}

/* the operation a library message of a nonblocking collective's tag belongs to (op: the collective
 * in progress on the thread, or -1) */
static int nb_attribute(int tag, int op) {
  int live = nb_op_of(tag);
  if (rm_t.nb_start && op >= 0) {
    if (tag == rm_t.nb_tag) return op;
    if (live >= 0) return live;                      /* another schedule, progressed by this call */
    /* the library's tag is not the one expected: it took tags the shim did not see */
    rm_nbc_forget(rm_t.nb_tag, op);
    atomic_store_explicit(nb_slot(tag), nb_code(tag, op), memory_order_relaxed);
    rm_t.nb_tag = tag;
    if (rm_t.nb_xl) __atomic_store_n(&rm_t.nb_xl->nbc, tag - 1, __ATOMIC_RELAXED);
    return op;
  }
  if (live >= 0) return live;
  if (rm_t.nb_wait) return rm_t.nb_wait - 1;         /* the collective being completed */
  if (op >= 0) atomic_store_explicit(nb_slot(tag), nb_code(tag, op), memory_order_relaxed);
  return op;
}

static int find_monitoring(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char **found = data;
  if (strstr(info->dlpi_name, "libmca_common_monitoring")) { found[0] = info->dlpi_name; }
  if (strstr(info->dlpi_name, "mca_pml_monitoring")) { found[1] = info->dlpi_name; }
  return 0;
}

void mca_common_monitoring_record_pml(int world_rank, size_t data_size, int tag);

/* the real record function: the loaded monitoring library's, else the next definition after the
 * shim's (libmpi's own, components built in); NULL where there is none */
static void *resolve_real(const char **pml) {
  const char *found[2] = {NULL, NULL};
  dl_iterate_phdr(find_monitoring, found);
  if (pml) *pml = found[1];
  void *h = found[0] ? dlopen(found[0], RTLD_NOLOAD | RTLD_LAZY) : NULL;
  void *f = h ? dlsym(h, "mca_common_monitoring_record_pml") : dlsym(RTLD_NEXT, "mca_common_monitoring_record_pml");
  return f == (void *)mca_common_monitoring_record_pml ? NULL : f;
}

/* The symbol the monitoring PML calls for each message it sends (see the top of this file).
 * Messages sent before the shim's setup (inside MPI_Init) are only passed on. */
__attribute__((visibility("default")))
void mca_common_monitoring_record_pml(int world_rank, size_t data_size, int tag) {
  if (!real_record_pml) real_record_pml = (void (*)(int, size_t, int))resolve_real(NULL);
  if (real_record_pml) real_record_pml(world_rank, data_size, tag);
  if (!rm_lib_on || !rm_on || world_rank < 0) return;
  int op = rm_t.coll - 1, mem = rm_t.coll_mem;
  /* Inside a collective every message of this thread is the collective's, whatever its tag: the
   * monitoring records persistent sends (alltoall's basic linear algorithm starts them) with tag 1.
   * Outside, a tag >= 0 is the application's own point-to-point, which the shim counts itself. */
  if (op < 0 && tag >= 0) return;
  if (tag <= TAG_NONBLOCKING_BASE) {
    int got = nb_attribute(tag, op);
    if (got != op) mem = RMREC_MEM_UNKNOWN;           /* not the buffer of the call in progress */
    op = got;
  }
  if (op < 0) { op = internal_op; mem = RMREC_MEM_UNKNOWN; }
  rmrec_traffic_from(rm_R, world_rank, RMREC_COLL, op, mem, RMREC_SEND, (uint64_t)data_size, 1,
                     rmrec_ticks(), RMREC_ORIGIN_LIBRARY);
}

/* The library source is on when the monitoring PML is interposed (pml_monitoring_enable != 0: its
 * component stays loaded after MPI_Init; where it is built into libmpi, the variable says so) and
 * RANKMAP_COLLECTIVES does not ask for another source. */
static void lib_setup(void) {
  const char *pml = NULL;
  void *f = resolve_real(&pml);
  if (!f || !(pml || rm_pml_monitoring > 0)) return;
  real_record_pml = (void (*)(int, size_t, int))f;
  const char *want = getenv("RANKMAP_COLLECTIVES");
  if (want && *want && strcmp(want, "auto") != 0 && strcmp(want, "library") != 0) {
    rmrec_meta(rm_R, "collective_pairs", "facts (the library source was available; RANKMAP_COLLECTIVES asked otherwise)");
    return;
  }
  internal_op = rmrec_op(rm_R, "MPI internal");
  rm_lib_on = 1;
  rmrec_meta(rm_R, "collective_pairs", "library: Open MPI monitoring PML, per message");
}

/* ---- setup ------------------------------------------------------------------------------------- */

static void on_flush(rmrec_t *c, void *arg, int final) {
  (void)arg;
  facts_flush(c);
  rm_mpit_sample(c, final);
}

void rm_coll_setup(void) {
  const char *want = getenv("RANKMAP_COLLECTIVES");
  rmrec_meta(rm_R, "collectives.requested", want && *want ? want : "auto");
  sigs = calloc(SIG_SLOTS, sizeof *sigs);
  sig_order = calloc(SIG_SLOTS, sizeof *sig_order);
  if (!sigs || !sig_order) {
    free(sigs); free(sig_order); sigs = NULL; sig_order = NULL;
    rmrec_meta(rm_R, "warning.collective_facts", "out of memory: no collective facts");
  }
  rm_coll_on = sigs != NULL;
  rmrec_meta(rm_R, "collective_pairs", "facts");
  lib_setup();
  rmrec_on_flush(rm_R, on_flush, NULL);
}
