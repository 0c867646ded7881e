/*
 * shim_req.c -- request tracking of the rankmap PMPI shim: receives (counted when they complete,
 * from the status), persistent requests (their rows replayed at every MPI_Start), matched-probe
 * messages, and the batch lookups of the multi-request completion calls.
 *
 * Two homes for a tracked request:
 *   the table: open addressing by handle, backward-shift delete, a spinlock under
 *     MPI_THREAD_MULTIPLE.  Every kind lives here when the MPI calls of threads may overlap, and
 *     the long-lived kinds (persistent requests, matched-probe messages, MPI_Isendrecv) always.
 *   the receive log (rm_rl), below MPI_THREAD_MULTIPLE: nonblocking receives in posting order.
 *     A receive is appended (a few stores, no hash); completion calls name requests mostly in
 *     the order they were posted, so a lookup first compares the handle with the entry after the
 *     previous match (a cursor), and only otherwise asks a hash index of the log, built lazily
 *     (handle -> latest sequence number; entries may be stale, each hit is checked against the
 *     log; rebuilt when half full).  A completed entry gets key 0 and the head moves over such
 *     entries; a full log is compacted in place when at most half of it is live, else doubled.
 *     A batch stops looking for log entries once it has found all live ones, so the sends of a
 *     window cost no lookup.
 */
#include "shim_core.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define hkey rm_hkey
#define hmix rm_hmix

#define RQ_SIZE (1u << 16)
static rm_rq_t rq_tab[RQ_SIZE];
static atomic_flag rq_flag = ATOMIC_FLAG_INIT;    /* spinlock: held for a few table probes only */
static uint64_t rq_seq;
volatile int rm_rq_count;

static inline void rq_lock(void) {
  if (rm_single) return;              /* MPI calls never overlap: nothing to exclude */
  while (atomic_flag_test_and_set_explicit(&rq_flag, memory_order_acquire)) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
static inline void rq_unlock(void) { if (!rm_single) atomic_flag_clear_explicit(&rq_flag, memory_order_release); }

static void rq_insert(MPI_Request req, rm_rq_t e) {
  if (req == MPI_REQUEST_NULL) return;
  e.key = hkey(&req, sizeof req);
  rq_lock();
  unsigned i = (unsigned)hmix(e.key) & (RQ_SIZE - 1), n = 0;
  for (; n < RQ_SIZE; n++, i = (i + 1) & (RQ_SIZE - 1))
    if (rq_tab[i].key == 0 || rq_tab[i].key == e.key) break;
  if (n == RQ_SIZE) {
    rq_unlock();
    rmrec_fail(rm_R, "more than 65536 pending receive or persistent requests");
    return;
  }
  if (rq_tab[i].key == 0) rm_rq_count++;
  e.seq = ++rq_seq;
  rq_tab[i] = e;
  rq_unlock();
}

void rm_rq_put(MPI_Request req, int kind, int op, int mem, rm_xl_t *xl, rm_rowset_t *rs) {
  rq_insert(req, (rm_rq_t){.kind = kind, .op = op, .mem = mem, .xl = xl, .rs = rs, .src = -1});
}

void rm_rq_put_srecv(MPI_Request req, int op, int mem, MPI_Comm comm, int source, uint64_t bytes) {
  if (source == MPI_PROC_NULL) return;
  rq_insert(req, (rm_rq_t){.kind = RQ_SRECV, .op = op, .mem = mem, .xl = rm_comm_xl(comm), .src = source,
                           .bytes = bytes});
}

void rm_rq_put_nbc(MPI_Request req, int op, int tag) {
  rq_insert(req, (rm_rq_t){.kind = RQ_NBC, .op = op, .mem = 0, .src = tag});
}

static int rq_find_locked(MPI_Request req, rm_rq_t *out) {
  if (req == MPI_REQUEST_NULL) return 0;
  uint64_t key = hkey(&req, sizeof req);
  for (unsigned i = (unsigned)hmix(key) & (RQ_SIZE - 1), n = 0; n < RQ_SIZE; n++, i = (i + 1) & (RQ_SIZE - 1)) {
    if (rq_tab[i].key == 0) return 0;
    if (rq_tab[i].key == key) { *out = rq_tab[i]; return 1; }
  }
  return 0;
}

static int64_t rl_find(uint64_t key, uint64_t from);
static void rl_copy(uint64_t s, rm_rq_t *out);
static int rq_get_table(MPI_Request req, rm_rq_t *out);

int rm_rq_get(MPI_Request req, rm_rq_t *out) {
  if (req == MPI_REQUEST_NULL) return 0;
  if (rm_rl.live) {
    int64_t s = rl_find(hkey(&req, sizeof req), rm_rl.head);
    if (s >= 0) { rl_copy((uint64_t)s, out); return 1; }
  }
  if (!rm_rq_count || !rq_get_table(req, out)) return 0;
  if (out->kind == RQ_NBC) rm_t.nb_wait = out->op + 1;   /* its schedule's messages in this call */
  return 1;
}

static int rq_get_table(MPI_Request req, rm_rq_t *out) {
  if (req == MPI_REQUEST_NULL || !rm_rq_count) return 0;
  rq_lock();
  int found = rq_find_locked(req, out);
  rq_unlock();
  return found;
}

/* delete with backward shift, only if the entry is still the one that was looked up */
static void rq_del_locked(const rm_rq_t *e) {
  unsigned i = (unsigned)hmix(e->key) & (RQ_SIZE - 1), n = 0;
  for (; n < RQ_SIZE; n++, i = (i + 1) & (RQ_SIZE - 1)) {
    if (rq_tab[i].key == 0) { n = RQ_SIZE; break; }
    if (rq_tab[i].key == e->key) break;
  }
  if (n < RQ_SIZE && rq_tab[i].seq == e->seq) {
    unsigned j = i;
    for (;;) {
      rq_tab[i].key = 0;
      for (;;) {
        j = (j + 1) & (RQ_SIZE - 1);
        if (rq_tab[j].key == 0) goto done;
        unsigned h = (unsigned)hmix(rq_tab[j].key) & (RQ_SIZE - 1);
        /* move j back to i unless its home h lies cyclically in (i, j] */
        if (i <= j ? (i < h && h <= j) : (i < h || h <= j)) continue;
        break;
      }
      rq_tab[i] = rq_tab[j];
      i = j;
    }
  done:
    rm_rq_count--;
  }
}

static void rl_release(const rm_rq_t *e);

void rm_rq_del(const rm_rq_t *e) {
  if (e->where == RQ_IN_LOG) { rl_release(e); return; }
  rq_lock();
  rq_del_locked(e);
  rq_unlock();
}

/* the receive row a completed tracked request adds, if any: world peer and bytes */
static inline int rq_row(const rm_rq_t *e, const MPI_Status *st, int *peer, uint64_t *bytes) {
  if (e->kind == RQ_SRECV && e->src >= 0) {
    *peer = rm_world(e->xl, e->src);
    *bytes = e->bytes;
    return *peer >= 0;
  }
  if (e->kind != RQ_RECV && e->kind != RQ_PRECV && e->kind != RQ_SRECV) return 0;
  if (!st || st == MPI_STATUS_IGNORE || st->MPI_SOURCE < 0) return 0;   /* PROC_NULL, inactive */
  int64_t c = rm_status_bytes(st);
  *peer = rm_world(e->xl, st->MPI_SOURCE);
  *bytes = (uint64_t)c;
  return c >= 0 && *peer >= 0;
}

/* freed at completion (a nonblocking collective's schedule then sends no more: its tag is forgotten) */
static inline int rq_once(int kind) { return kind == RQ_RECV || kind == RQ_SRECV || kind == RQ_NBC; }
static inline void rq_forget(const rm_rq_t *e) { if (e->kind == RQ_NBC) rm_nbc_forget(e->src, e->op); }

void rm_rq_done(const rm_rq_t *e, const MPI_Status *st) {
  int peer;
  uint64_t bytes;
  if (rq_row(e, st, &peer, &bytes)) rm_emit(peer, RMREC_P2P, e->op, e->mem, RMREC_RECV, bytes, 1);
  rq_forget(e);
  if (rq_once(e->kind)) rm_rq_del(e);
}

/* A tracked request the library completed with an error (a program running under
 * MPI_ERRORS_RETURN): no row -- the library says the receive failed -- but released like a
 * completed one, since the library reuses the handle and a stale entry would take the next
 * receive's place. */
void rm_rq_failed(const rm_rq_t *e) {
  rq_forget(e);
  if (rq_once(e->kind)) rm_rq_del(e);
}


/* ---- persistent requests ------------------------------------------------------------------------- */

rm_rowset_t *rm_persist_begin(int op) {
  rm_rowset_t *rs = rm_rowset_new(op);
  rm_rs = rs;
  return rs;
}

void rm_persist_end(rm_rowset_t *rs, MPI_Request req) {
  rm_rs = NULL;
  rm_rq_put(req, RQ_PSTART, rs->start_op, 0, NULL, rs);
}

uint64_t rm_start_one(MPI_Request r) {
  rm_rq_t e;
  if (!rq_get_table(r, &e) || e.kind != RQ_PSTART || !e.rs) return 0;
  rm_replay(e.rs);
  return e.rs->payload;
}

uint64_t rm_start_all(int n, const MPI_Request *reqs) {
  uint64_t sum = 0;
  for (int i = 0; i < n && rm_rq_count; i++) sum += rm_start_one(reqs[i]);
  return sum;
}

/* ---- the receive log (below MPI_THREAD_MULTIPLE) ------------------------------------------------ */

rm_rlog_t rm_rl;
RM_TLS rm_rle_t rm_rq_scratch;     /* rm_rq_recv_begin's entry when the request goes to the table */
typedef struct { uint64_t key, seq; } rl_idx_t;
static rl_idx_t *rl_idx;                 /* lazy index: key -> latest sequence number */
static uint64_t rl_icap, rl_iused, rl_hashed;   /* entries before rl_hashed are indexed */

static void rl_idx_put(uint64_t key, uint64_t s) {
  uint64_t m = rl_icap - 1, i = hmix(key) & m;
  while (rl_idx[i].key && rl_idx[i].key != key) i = (i + 1) & m;
  if (!rl_idx[i].key) { rl_idx[i].key = key; rl_iused++; }
  rl_idx[i].seq = s;
}

/* a fresh index of the live entries indexed so far, sized for 4x the live ones */
static int rl_reindex(void) {
  uint64_t cap = 1024;
  while (cap < 4 * (uint64_t)rm_rl.live) cap *= 2;
  if (cap != rl_icap) {
    rl_idx_t *n = calloc(cap, sizeof *n);
    if (!n) return 0;
    free(rl_idx);
    rl_idx = n; rl_icap = cap;
  } else memset(rl_idx, 0, cap * sizeof *rl_idx);
  rl_iused = 0;
  if (rl_hashed < rm_rl.head) rl_hashed = rm_rl.head;
  for (uint64_t s = rm_rl.head; s < rl_hashed; s++)
    if (rm_rl_at(s)->key) rl_idx_put(rm_rl_at(s)->key, s);
  return 1;
}

/* the live entry of key, through the index (brought up to the tail first); -1 if none */
static int64_t rl_find_slow(uint64_t key) {
  if (!rm_rl.live) return -1;
  if (rl_hashed < rm_rl.head) rl_hashed = rm_rl.head;
  for (; rl_hashed < rm_rl.tail; rl_hashed++) {
    uint64_t k = rm_rl_at(rl_hashed)->key;
    if (!k) continue;
    if ((rl_iused + 1) * 2 > rl_icap && !rl_reindex()) {      /* no memory: scan the log */
      for (uint64_t s = rm_rl.head; s < rm_rl.tail; s++) if (rm_rl_at(s)->key == key) return (int64_t)s;
      return -1;
    }
    rl_idx_put(k, rl_hashed);
  }
  if (!rl_icap) return -1;
  uint64_t m = rl_icap - 1;
  for (uint64_t i = hmix(key) & m; rl_idx[i].key; i = (i + 1) & m)
    if (rl_idx[i].key == key) {
      uint64_t s = rl_idx[i].seq;
      return s >= rm_rl.head && s < rm_rl.tail && rm_rl_at(s)->key == key ? (int64_t)s : -1;
    }
  return -1;
}

/* the live entry of key: the one at `from` (a cursor) if it matches, else through the index */
static int64_t rl_find(uint64_t key, uint64_t from) {
  if (from < rm_rl.tail && rm_rl_at(from)->key == key) return (int64_t)from;
  return rl_find_slow(key);
}

/* the log entry as a table entry (for the single-request calls) */
static void rl_copy(uint64_t s, rm_rq_t *out) {
  const rm_rle_t *e = rm_rl_at(s);
  *out = (rm_rq_t){.key = e->key, .seq = s, .kind = RQ_RECV, .op = rm_rl_op(e->xo), .mem = rm_mem(e->buf),
                   .where = RQ_IN_LOG, .xl = rm_rl_xl(e->xo), .src = -1};
}

/* after entries were released: the head onto the first live entry.  lim grows with it; nlim, the
 * fast path's bound, is left as it was (never past the true one: lim only grows between two
 * rm_rl_mark), and the first receive that meets it sets it again (rm_rq_recv_begin). */
static inline void rl_trim(void) {
  if (!rm_rl.live) rm_rl.head = rm_rl.tail;
  else while (rm_rl.head < rm_rl.tail && !rm_rl_at(rm_rl.head)->key) rm_rl.head++;
  rm_rl.lim = rm_rl.head + rm_rl.cap;
}

static void rl_release(const rm_rq_t *e) {
  if (e->seq < rm_rl.head || e->seq >= rm_rl.tail || rm_rl_at(e->seq)->key != e->key) return;
  rm_rl_at(e->seq)->key = 0;
  rm_rl.live--;
  rl_trim();
}

/* The thread's buffers for the batch calls, grown once.  A completion call nested in another on
 * the same thread (a callback of the library) gets buffers of its own, freed at its end. */
typedef struct { rm_run_t *r; rm_tfound_t *t; MPI_Status *st; MPI_Fint *fst; size_t nr, nt, nst, nfst; int busy; } mbuf_t;
static RM_TLS mbuf_t mb;

/* The log is full: compact it in place (live entries renumbered after the old tail, so no stale
 * index entry can name them) when at most half is live, else double it (sequence numbers kept).
 * Never compacted while a batch call of the thread holds sequence numbers (mb.busy: a call nested
 * in it posts receives), so that its runs still name its receives.  0: out of memory. */
int rm_rl_room(void) {
  uint64_t cap = rm_rl.cap;
  if (cap && (uint64_t)rm_rl.live <= cap / 2 && !mb.busy) {
    uint64_t j = 0, base = rm_rl.tail;
    for (uint64_t s = rm_rl.head; s < rm_rl.tail; s++) {
      rm_rle_t *e = rm_rl_at(s);
      if (!e->key) continue;
      rm_rle_t *d = rm_rl_at(base + j++);   /* = slot (head + j): never after e's slot */
      if (d != e) *d = *e;
    }
    rm_rl.head = base; rm_rl.tail = base + j;
    rl_hashed = base; rl_iused = 0;
    if (rl_idx) memset(rl_idx, 0, rl_icap * sizeof *rl_idx);
  } else {
    uint64_t ncap = cap ? 2 * cap : 1024;
    rm_rle_t *n = malloc(ncap * sizeof *n);
    if (!n) { rmrec_fail(rm_R, "out of memory for pending receives"); return 0; }
    for (uint64_t s = rm_rl.head; s < rm_rl.tail; s++) n[s & (ncap - 1)] = *rm_rl_at(s);
    free(rm_rl.e);
    rm_rl.e = n; rm_rl.cap = ncap;
  }
  rm_rl.lim = rm_rl.head + rm_rl.cap;
  rm_rl_mark();
  return 1;
}

/* ---- multi-request completion ------------------------------------------------------------------- */

static void *grow(void **p, size_t *cap, size_t need, size_t size, int own) {
  if (own) return malloc(need * size);
  if (need <= *cap) return *p;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *n = malloc(c * size);
  if (!n) return NULL;
  free(*p);
  *p = n; *cap = c;
  return n;
}
#define GROW(field, cnt, need, own) ((__typeof__(mb.field))grow((void **)&mb.field, &mb.cnt, (need), sizeof *mb.field, (own)))

/* request i's table entry, copied (another thread may move it once the lock is gone) */
static void multi_table(rm_multi_t *m, int i, MPI_Request r) {
  if (r == MPI_REQUEST_NULL) return;
  if (!m->t && !(m->t = GROW(t, nt, (size_t)m->n, m->own))) return;
  rm_tfound_t *t = &m->t[m->nt];
  if (rq_find_locked(r, &t->e)) {
    t->i = i; t->done = 0; m->nt++;
    if (t->e.kind == RQ_NBC && !rm_t.nb_wait) rm_t.nb_wait = t->e.op + 1;
  }
}

int rm_multi_get(rm_multi_t *m, int n, const MPI_Request *reqs) {
  m->n = n; m->k = 0; m->nr = 0; m->nt = 0; m->freed = 0; m->all = 0; m->agg.msgs = 0;
  m->r = NULL; m->t = NULL; m->st = NULL; m->fst = NULL;
  if (n <= 0 || !rm_rq_pending()) { m->own = 0; return 0; }
  m->own = mb.busy;
  int left = rm_rl.live, i = 0, nr = 0;
  rq_lock();
  if (left && (m->r = GROW(r, nr, (size_t)n, m->own))) {
    /* the log: first the entry after the previous match (a cursor), then the index */
    rm_run_t *R = m->r;
    const rm_rle_t *L = rm_rl.e;
    uint64_t mask = rm_rl.cap - 1, tail = rm_rl.tail, cur = rm_rl.head, next_s = 0;
    int next_i = -1;
    for (; i < n; i++) {
      /* in order: a run of requests that are the log's next entries, compared in a tight loop */
      if (cur < tail && L[cur & mask].key == hkey(&reqs[i], sizeof reqs[i])) {
        uint64_t room = tail - cur, wrap = mask + 1 - (cur & mask);
        if (room > wrap) room = wrap;
        if (room > (uint64_t)left) room = (uint64_t)left;
        if (room > (uint64_t)(n - i)) room = (uint64_t)(n - i);
        const rm_rle_t *p = &L[cur & mask] + 1;
        const MPI_Request *q = &reqs[i + 1];
        uint64_t c = 1;
        /* four at a time, one branch: each key equals its request's key, that is the request's
         * bits xor the key's top bit (rm_hkey) */
        for (; c + 4 <= room; c += 4, p += 4, q += 4) {
          uint64_t x = (p[0].key ^ hkey(&q[0], sizeof *q)) | (p[1].key ^ hkey(&q[1], sizeof *q)) |
                       (p[2].key ^ hkey(&q[2], sizeof *q)) | (p[3].key ^ hkey(&q[3], sizeof *q));
          if (x) break;
        }
        while (c < room && p->key == hkey(q, sizeof *q)) { p++; q++; c++; }
        if (i == next_i && cur == next_s) R[nr - 1].n += (int)c;
        else R[nr++] = (rm_run_t){i, (int)c, cur};
        i += (int)c; cur += c; next_i = i; next_s = cur;
        left -= (int)c;
        if (!left) break;              /* every live receive found: the rest are not in the log */
        while (cur < tail && !L[cur & mask].key) cur++;
        i--;
        continue;
      }
      MPI_Request r = reqs[i];
      int64_t f = r == MPI_REQUEST_NULL ? -1 : rl_find_slow(hkey(&r, sizeof r));
      if (f < 0) { if (rm_rq_count) multi_table(m, i, r); continue; }
      uint64_t s = (uint64_t)f;
      if (i == next_i && s == next_s) R[nr - 1].n++;
      else R[nr++] = (rm_run_t){i, 1, s};
      next_i = i + 1; next_s = s + 1;
      if (!--left) { i++; break; }
      for (cur = s + 1; cur < tail && !L[cur & mask].key; cur++) {}
    }
  }
  m->nr = nr;
  m->all = nr && !left ? rm_rl.live : 0;
  m->tail0 = rm_rl.tail;
  m->rel0 = rm_rl.tail - (uint64_t)(int64_t)rm_rl.live;
  if (rm_rq_count)
    for (; i < n; i++) multi_table(m, i, reqs[i]);
  rq_unlock();
  m->k = rm_rl.live - left + m->nt;
  if (!nr && !m->nt) {                 /* nothing tracked: nothing held */
    if (m->own) { free(m->r); free(m->t); m->own = 0; }
    m->r = NULL; m->t = NULL; m->k = 0;
    return 0;
  }
  if (!m->own) mb.busy = 1;
  return m->k;
}

MPI_Status *rm_multi_statuses(rm_multi_t *m, MPI_Status *sts) {
  if (sts != MPI_STATUSES_IGNORE) return sts;
  m->st = GROW(st, nst, (size_t)m->n, m->own);
  if (!m->st) m->k = 0;            /* out of memory: give up counting these receives */
  return m->st ? m->st : sts;
}

MPI_Fint *rm_multi_fbuf(rm_multi_t *m, size_t n) {
  m->fst = GROW(fst, nfst, n, m->own);
  if (!m->fst) m->k = 0;
  return m->fst;
}

/* Receives completed together from one peer by one operation become one row (a window of 64
 * receives from a neighbour is one traffic update, not 64). */
static void agg_emit(rm_agg_t a) {
  if (a.msgs) rm_emit(a.peer, RMREC_P2P, a.op, a.mem, RMREC_RECV, a.bytes, a.msgs);
}
static inline __attribute__((always_inline)) void agg_add(rm_agg_t *a, int peer, int op, int mem, uint64_t bytes) {
  if (a->msgs && (peer != a->peer || op != a->op || mem != a->mem)) { agg_emit(*a); a->msgs = 0; }
  if (!a->msgs) { a->peer = peer; a->op = op; a->mem = mem; a->bytes = 0; }
  a->bytes += bytes;
  a->msgs++;
}

/* a log entry completed with status st: its row into the sum, the entry released (key 0; the
 * count and the head follow in rm_multi_end).  Returns 1 if it was live. */
static inline __attribute__((always_inline)) int log_take(rm_agg_t *a, rm_rle_t *e, const MPI_Status *st) {
  if (!e->key) return 0;
  int src = st->MPI_SOURCE;
  if (src >= 0) {                                            /* else PROC_NULL */
    int64_t c = rm_status_bytes(st);
    int peer = rm_world(rm_rl_xl(e->xo), src);
    if (c >= 0 && peer >= 0) agg_add(a, peer, rm_rl_op(e->xo), rm_mem(e->buf), (uint64_t)c);
  }
  e->key = 0;
  return 1;
}

static void table_take(rm_agg_t *a, rm_tfound_t *t, const MPI_Status *st) {
  int peer;
  uint64_t bytes;
  if (t->done) return;
  if (rq_row(&t->e, st, &peer, &bytes)) agg_add(a, peer, t->e.op, t->e.mem, bytes);
  t->done = 1;
}

/* The runs of one batch completed (statuses sts): their rows summed, entries released.  A receive
 * whose communicator and operation (one word), source and buffer granule are those of the one
 * summed before joins its row at once (the common case: a window from one peer), and a run of
 * such receives costs a few loads, compares and one add each; only a change looks up the world
 * rank and the memory kind.  `direct`: rm_status_direct, a constant in each of the copies
 * rm_multi_done_all makes, so the status read is a field read (or a call) with no test; `zero`:
 * the keys are cleared -- not needed when the batch completes every live receive, since the head
 * then moves to the tail and nothing before it is looked at again. */
typedef struct { rm_agg_t a; uintptr_t lxo; int lsrc; uint64_t lg; } rd_t;

static inline __attribute__((always_inline)) void seg_done(rd_t *d, rm_rle_t *e, const MPI_Status *st, int n,
                                                         int direct, int zero) {
  rm_rle_t *end = e + n;
  while (e < end) {
    /* the run that joins the row being summed: bytes in a register, messages by the run's length */
    rm_rle_t *e0 = e;
    uint64_t bytes = 0;
    const int lsrc = d->lsrc;
    const uintptr_t lxo = d->lxo;
    const uint64_t lg = d->lg;
    for (; e < end; e++, st++) {
      uint64_t differ = (uint32_t)(st->MPI_SOURCE ^ lsrc) | (e->xo ^ lxo) | (((uint64_t)(uintptr_t)e->buf >> 16) ^ lg);
      uint64_t c;
      if (direct) {                    /* the cancelled flag tested with the rest */
        if (differ | rm_status_cancel_bits(st)) break;
        c = rm_status_count_bits(st);
      } else {
        int64_t b = rm_status_bytes_call(st);
        if (differ || b < 0) break;
        c = (uint64_t)b;
      }
      if (zero) e->key = 0;
      bytes += c;
    }
    d->a.bytes += bytes;
    d->a.msgs += (uint64_t)(e - e0);
    if (e == end) break;
    /* a receive that does not join: each request completes once, so it is released with no check */
    if (zero) e->key = 0;
    int src = st->MPI_SOURCE;
    int64_t c = direct ? rm_status_fields(st) : rm_status_bytes_call(st);
    uintptr_t xo = e->xo;
    const void *buf = e->buf;
    e++, st++;
    if (src < 0 || c < 0) continue;          /* PROC_NULL (as the library says), cancelled */
    int peer = rm_world(rm_rl_xl(xo), src);
    d->lsrc = peer < 0 ? INT_MIN : src; d->lxo = xo; d->lg = (uint64_t)(uintptr_t)buf >> 16;  /* INT_MIN: no source */
    if (peer < 0) continue;
    agg_add(&d->a, peer, rm_rl_op(xo), rm_mem(buf), (uint64_t)c);
  }
}

static inline __attribute__((always_inline)) void runs_done(rm_multi_t *m, const MPI_Status *sts, int direct,
                                                          int zero) {
  rm_rle_t *L = rm_rl.e;
  uint64_t cap = rm_rl.cap;
  rd_t d = {m->agg, 0, INT_MIN, 0};
  for (int j = 0; j < m->nr; j++) {
    const rm_run_t r = m->r[j];
    uint64_t s0 = r.s & (cap - 1);
    int n1 = (uint64_t)r.n <= cap - s0 ? r.n : (int)(cap - s0);   /* a run may go round the end */
    m->freed += r.n;
    seg_done(&d, L + s0, &sts[r.i], n1, direct, zero);
    if (n1 < r.n) seg_done(&d, L, &sts[r.i + n1], r.n - n1, direct, zero);
  }
  m->agg = d.a;
}

/* Log entry s, if it is still live: a nested call may have released it (its key is 0 then, or the
 * head has moved past it and its slot holds a later receive).  The log is not compacted while a
 * batch holds sequence numbers (rm_rl_room), so a live entry at s is the one the batch found. */
static inline rm_rle_t *run_entry(uint64_t s) {
  if (s < rm_rl.head || s >= rm_rl.tail) return NULL;
  rm_rle_t *e = rm_rl_at(s);
  return e->key ? e : NULL;
}

/* The runs of a batch during whose library call a nested call (a callback: a generalized request's
 * query function, an error handler) released log entries: each entry taken only if still live, so
 * none is counted or released twice. */
static __attribute__((noinline)) void runs_recheck(rm_multi_t *m, const MPI_Status *sts) {
  for (int j = 0; j < m->nr; j++)
    for (int q = 0; q < m->r[j].n; q++) {
      rm_rle_t *e = run_entry(m->r[j].s + (uint64_t)q);
      if (e) m->freed += log_take(&m->agg, e, &sts[m->r[j].i + q]);
    }
}

void rm_multi_done_all(rm_multi_t *m, const MPI_Status *sts) {
  /* tail - live counts the log's releases (a receive posted moves both): a nested call released some */
  if (rm_rl.tail - (uint64_t)(int64_t)rm_rl.live != m->rel0) runs_recheck(m, sts);
  else if (!rm_status_direct) runs_done(m, sts, 0, 1);
  /* every live receive completes here, and no nested call posted or completed one since rm_multi_get */
  else if (m->all && rm_rl.tail == m->tail0) runs_done(m, sts, 1, 0);
  else runs_done(m, sts, 1, 1);
  for (int j = 0; j < m->nt; j++) table_take(&m->agg, &m->t[j], &sts[m->t[j].i]);
}

/* request i among the runs (the log's sequence number, -1 if none) or the table copies */
static int64_t run_of(const rm_multi_t *m, int i) {
  int lo = 0, hi = m->nr - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const rm_run_t *r = &m->r[mid];
    if (i < r->i) hi = mid - 1;
    else if (i >= r->i + r->n) lo = mid + 1;
    else return (int64_t)(r->s + (uint64_t)(i - r->i));
  }
  return -1;
}
static rm_tfound_t *table_of(const rm_multi_t *m, int i) {
  int lo = 0, hi = m->nt - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (m->t[mid].i == i) return &m->t[mid];
    if (m->t[mid].i < i) lo = mid + 1; else hi = mid - 1;
  }
  return NULL;
}

int rm_multi_has(const rm_multi_t *m, int i) {
  return m->k && i >= 0 && i < m->n && (run_of(m, i) >= 0 || table_of(m, i));
}

void rm_multi_done(rm_multi_t *m, int i, const MPI_Status *st) {
  if (!m->k || i < 0 || i >= m->n) return;
  int64_t s = run_of(m, i);
  if (s >= 0) {
    rm_rle_t *e = run_entry((uint64_t)s);
    if (e) m->freed += log_take(&m->agg, e, st);
    return;
  }
  rm_tfound_t *t = table_of(m, i);
  if (t) table_take(&m->agg, t, st);
}

void rm_multi_drop(rm_multi_t *m, int i) {
  if (!m->k || i < 0 || i >= m->n) return;
  int64_t s = run_of(m, i);
  if (s >= 0) {
    rm_rle_t *e = run_entry((uint64_t)s);
    if (e) { e->key = 0; m->freed++; }
    return;
  }
  rm_tfound_t *t = table_of(m, i);
  if (t) t->done = 1;                 /* released by rm_multi_end, no row */
}

/* One request of a batch the library answered with MPI_ERR_IN_STATUS: its status's MPI_ERROR says
 * it completed (counted), failed (released without a row) or is still pending (kept). */
void rm_multi_done_err(rm_multi_t *m, int i, const MPI_Status *st) {
  if (st->MPI_ERROR == MPI_SUCCESS) rm_multi_done(m, i, st);
  else if (st->MPI_ERROR != MPI_ERR_PENDING) rm_multi_drop(m, i);
}

void rm_multi_end(rm_multi_t *m) {
  if (!m->r && !m->t) return;          /* nothing tracked: nothing held */
  agg_emit(m->agg);
  m->agg.msgs = 0;
  if (m->freed) { rm_rl.live -= m->freed; rl_trim(); }
  int any = 0;
  for (int j = 0; j < m->nt && !any; j++) any = m->t[j].done && rq_once(m->t[j].e.kind);
  if (any) {
    rq_lock();
    for (int j = 0; j < m->nt; j++)
      if (m->t[j].done && rq_once(m->t[j].e.kind)) { rq_forget(&m->t[j].e); rq_del_locked(&m->t[j].e); }
    rq_unlock();
  }
  if (m->own) { free(m->r); free(m->t); free(m->st); free(m->fst); }
  else mb.busy = 0;
  m->k = m->nr = m->nt = m->own = m->freed = 0;
  m->r = NULL; m->t = NULL; m->st = NULL; m->fst = NULL;
}

/* ---- matched probes ----------------------------------------------------------------------------- */
/* A message handle lives in the request table under its own key (salted, so it never meets a
 * request's): kind RQ_MSG, the communicator's translation kept until a receive takes it. */

static MPI_Request msg_key(MPI_Message msg) {
  uint64_t k = hkey(&msg, sizeof msg) ^ 0x5bd1e9955bd1e995ull;
  MPI_Request r;
  memset(&r, 0, sizeof r);
  memcpy(&r, &k, sizeof r < sizeof k ? sizeof r : sizeof k);
  return r;
}

void rm_msg_put(MPI_Message msg, MPI_Comm comm) {
  if (msg == MPI_MESSAGE_NULL || msg == MPI_MESSAGE_NO_PROC) return;
  rm_rq_put(msg_key(msg), RQ_MSG, 0, 0, rm_comm_xl(comm), NULL);
}

rm_xl_t *rm_msg_take(MPI_Message msg) {
  rm_rq_t e;
  if (msg == MPI_MESSAGE_NULL || msg == MPI_MESSAGE_NO_PROC || !rq_get_table(msg_key(msg), &e)) return NULL;
  rm_rq_del(&e);
  return e.kind == RQ_MSG ? e.xl : NULL;
}
