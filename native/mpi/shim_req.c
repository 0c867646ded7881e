/*
 * shim_req.c -- request tracking of the rankmap PMPI shim: receives (counted when they complete,
 * from the status), persistent requests (their rows replayed at every MPI_Start), matched-probe
 * messages, and the batch lookups of the multi-request completion calls.
 */
#include "shim_core.h"

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

static int rq_find_locked(MPI_Request req, rm_rq_t *out) {
  if (req == MPI_REQUEST_NULL) return 0;
  uint64_t key = hkey(&req, sizeof req);
  for (unsigned i = (unsigned)hmix(key) & (RQ_SIZE - 1), n = 0; n < RQ_SIZE; n++, i = (i + 1) & (RQ_SIZE - 1)) {
    if (rq_tab[i].key == 0) return 0;
    if (rq_tab[i].key == key) { *out = rq_tab[i]; return 1; }
  }
  return 0;
}

int rm_rq_get(MPI_Request req, rm_rq_t *out) {
  if (req == MPI_REQUEST_NULL || !rm_rq_count) return 0;
  rq_lock();
  int found = rq_find_locked(req, out);
  rq_unlock();
  return found;
}

int rm_rq_get_n(int n, const MPI_Request *reqs, rm_rq_t *e, char *has) {
  int k = 0;
  rq_lock();
  for (int i = 0; i < n; i++) k += (has[i] = (char)rq_find_locked(reqs[i], &e[i]));
  rq_unlock();
  return k;
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

void rm_rq_del(const rm_rq_t *e) {
  rq_lock();
  rq_del_locked(e);
  rq_unlock();
}

/* the receive row a completed tracked request adds, if any: world peer and bytes */
static int rq_row(const rm_rq_t *e, const MPI_Status *st, int *peer, uint64_t *bytes) {
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

void rm_rq_account(const rm_rq_t *e, const MPI_Status *st) {
  int peer;
  uint64_t bytes;
  if (rq_row(e, st, &peer, &bytes)) rm_emit(peer, RMREC_P2P, e->op, e->mem, RMREC_RECV, bytes, 1);
}

static inline int rq_once(int kind) { return kind == RQ_RECV || kind == RQ_SRECV; }  /* freed at completion */

void rm_rq_release_n(int n, const rm_rq_t *e, const char *sel) {
  int any = 0;
  for (int i = 0; i < n && !any; i++) any = sel[i] && rq_once(e[i].kind);
  if (!any) return;
  rq_lock();
  for (int i = 0; i < n; i++) if (sel[i] && rq_once(e[i].kind)) rq_del_locked(&e[i]);
  rq_unlock();
}

void rm_rq_done(const rm_rq_t *e, const MPI_Status *st) {
  rm_rq_account(e, st);
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
  if (!rm_rq_get(r, &e) || e.kind != RQ_PSTART || !e.rs) return 0;
  rm_replay(e.rs);
  return e.rs->payload;
}

uint64_t rm_start_all(int n, const MPI_Request *reqs) {
  uint64_t sum = 0;
  for (int i = 0; i < n && rm_rq_count; i++) sum += rm_start_one(reqs[i]);
  return sum;
}

/* ---- multi-request completion ------------------------------------------------------------------- */

int rm_multi_get(rm_multi_t *m, int n, const MPI_Request *reqs) {
  m->n = n; m->k = 0; m->st = NULL; m->fst = NULL; m->agg_msgs = 0;
  m->e = m->e_s; m->has = m->has_s; m->done = m->done_s;
  if (!rm_rq_count || n <= 0) return 0;
  if (n > 16) {
    m->e = malloc(sizeof(rm_rq_t) * (size_t)n);
    m->has = malloc((size_t)n);
    m->done = malloc((size_t)n);
    if (!m->e || !m->has || !m->done) { rm_multi_end(m); m->n = 0; return 0; }
  }
  memset(m->done, 0, (size_t)n);
  m->k = rm_rq_get_n(n, reqs, m->e, m->has);
  return m->k;
}

MPI_Status *rm_multi_statuses(rm_multi_t *m, MPI_Status *sts) {
  if (sts != MPI_STATUSES_IGNORE) return sts;
  m->st = m->n <= 16 ? m->st_s : malloc(sizeof(MPI_Status) * (size_t)m->n);
  if (!m->st) m->k = 0;            /* out of memory: give up counting these receives */
  return m->st ? m->st : sts;
}

/* Receives completed together from one peer by one operation become one row (a window of 64
 * receives from a neighbour is one traffic update, not 64). */
static void agg_flush(rm_multi_t *m) {
  if (m->agg_msgs) rm_emit(m->agg_peer, RMREC_P2P, m->agg_op, m->agg_mem, RMREC_RECV, m->agg_bytes, m->agg_msgs);
  m->agg_msgs = 0;
}

void rm_multi_done(rm_multi_t *m, int i, const MPI_Status *st) {
  if (i < 0 || i >= m->n || !m->has[i]) return;
  const rm_rq_t *e = &m->e[i];
  int peer;
  uint64_t bytes;
  if (rq_row(e, st, &peer, &bytes)) {
    if (m->agg_msgs && (peer != m->agg_peer || e->op != m->agg_op || e->mem != m->agg_mem)) agg_flush(m);
    if (!m->agg_msgs) { m->agg_peer = peer; m->agg_op = e->op; m->agg_mem = e->mem; m->agg_bytes = 0; }
    m->agg_bytes += bytes;
    m->agg_msgs++;
  }
  m->done[i] = 1;
}

void rm_multi_end(rm_multi_t *m) {
  agg_flush(m);
  if (m->k) rm_rq_release_n(m->n, m->e, m->done);
  if (m->e != m->e_s) free(m->e);
  if (m->has != m->has_s) free(m->has);
  if (m->done != m->done_s) free(m->done);
  if (m->st && m->st != m->st_s) free(m->st);
  free(m->fst);
  m->e = m->e_s; m->has = m->has_s; m->done = m->done_s; m->st = NULL; m->fst = NULL; m->k = 0;
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
  if (msg == MPI_MESSAGE_NULL || msg == MPI_MESSAGE_NO_PROC || !rm_rq_get(msg_key(msg), &e)) return NULL;
  rm_rq_del(&e);
  return e.kind == RQ_MSG ? e.xl : NULL;
}
