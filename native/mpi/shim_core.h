/*
 * shim_core.h -- internals shared by the rankmap PMPI shim's translation units:
 * capture state, communicator/window rank translation, request tracking, memory kind,
 * and the accounting helpers that both the C and the Fortran wrappers call.
 */
#ifndef RANKMAP_SHIM_CORE_H
#define RANKMAP_SHIM_CORE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include "rmrec.h"

#define RM_TLS __thread __attribute__((tls_model("initial-exec")))

/* Everything declared below is internal to the shim: hidden, so it is reached without the GOT or
 * PLT (the MPI_ and Fortran entry points keep the default visibility mpi.h gives them). */
#pragma GCC visibility push(hidden)

/* Every operation name the shim records (RM_OPS), generated from calls.spec, and RM_HAVE_PMPI_x
 * for the optional routines this MPI declares. */
#include "rm_gen.h"

enum {
#define RM_ENUM(n) OP_##n,
  RM_OPS(RM_ENUM)
#undef RM_ENUM
  OP__COUNT
};

/* rank translation of one communicator (or window): world rank of each (remote) rank, and the
 * communicator's id in the record's COMM blocks (0 = MPI_COMM_WORLD) */
typedef struct { int size, me, inter; int *w; uint64_t id; int nbc; } rm_xl_t;   /* nbc: see rm_nbc_begin */
/* rm_comm_xl: MPI_COMM_WORLD and the communicator this thread translated last (valid while no
 * communicator was freed since: rm_xt_gen counts frees) inline, the rest through the table */
typedef struct { uint64_t key; unsigned gen; rm_xl_t *x; } rm_comm_last_t;

/* Capture state.  rm_on: capture active (Init done, RANKMAP_RUN_DIR set, not finalized).
 * rm_single: the MPI library provides less than MPI_THREAD_MULTIPLE, so MPI calls never overlap
 * and the shim's counters and request table need no locked instructions.
 * Per thread, in one block (one TLS base for all):
 *   in_f: inside a Fortran wrapper that already counted; C wrappers then pass through;
 *   rs: row set being filled (persistent requests), see rm_emit;
 *   tick: the timeline's time of the current wrapper's rows (an rmrec_ticks() reading);
 *   last, epoch: the thread's latest clock reading, and rmrec_epoch when it was taken;
 *   skip, skip_s, rng: short calls left before the next timed one (skip_s: of the starts, which
 *     are timed more sparsely; see rm_clock_in), and the generator that draws them;
 *   slow: per operation, its latest timed call was slow (so the next one is timed);
 *   ops, shard, plain: the operation counters this thread adds to (its own rmrec shard under
 *     MPI_THREAD_MULTIPLE, else the shared ones) and whether it is their only writer;
 *   fast: what the entry points' fast paths may do (RM_FAST_*), one test of the thread's own block;
 *     set only while capture is on (by rm_thread_init, cleared by rm_teardown on its thread) and
 *     0 while a Fortran wrapper runs the library's routine (RM_F_LIB), so a fast path needs no test
 *     of rm_on and in_f of its own;
 *   rowc: pointers to the traffic rows this thread updated last (see rm_emit);
 *   sc: the sends this thread accounted last, by their arguments (see rm_p2p_send);
 *   rr: the rows of the blocking receives it accounted last (see rm_recv_fast_row);
 *   coll, coll_mem: the collective in progress on this thread (operation id + 1, 0 for none) and
 *   its buffer's memory kind: what the library's own messages are attributed to (shim_coll.c);
 *   comm_last: the communicator this thread translated last (rm_comm_xl). */
typedef struct rm_rowset rm_rowset_t;
typedef struct { uint64_t key; rmrec_slot_t *s; _Atomic uint64_t *tl; unsigned tl_epoch; } rm_rowc_t;
#define RM_ROWC 16
/* A send's accounting memoised by its arguments (rm_p2p_send): the payload of a predefined type,
 * the row (slot) its world peer, operation and memory kind lead to, its timeline cell (valid while
 * rmrec_epoch is tl_epoch; RM_NO_EPOCH: none), and its operation's byte and size-bin counters.
 * dk: the peer and the operation in one word, compared at once. */
typedef struct {
  uint64_t dk; MPI_Count count; MPI_Datatype t; MPI_Comm comm; unsigned gen; int mem, peer;
  uint64_t n; rmrec_slot_t *s; _Atomic uint64_t *tl; unsigned tl_epoch;
  _Atomic uint64_t *ob, *oh;
  uint64_t gran;                    /* the 64 KiB granule of its latest buffer (kind mem) */
} __attribute__((aligned(64))) rm_sc_t;   /* 128 bytes: an entry's place is a shift, not a multiply */
#define RM_NO_EPOCH 0xffffffffu
/* A blocking receive's row memoised by what decides it (rm_recv_fast_row): the communicator's
 * translation, the status's source, the operation and the buffer's 64 KiB granule (whose memory
 * kind the row has); valid while no communicator was freed (gen). */
typedef struct { const rm_xl_t *xl; int src, op; unsigned gen; uint64_t gran; rmrec_slot_t *s; } rm_rr_t;
#define RM_RR 4
static inline uint64_t rm_sc_dk(int dest, int op) { return (uint64_t)(uint32_t)dest | ((uint64_t)(uint32_t)op << 32); }
#define RM_SC 8
typedef struct {
  int in_f; uint32_t skip, skip_s; rm_rowset_t *rs; uint64_t tick, last, rng; unsigned epoch;
  int shard, plain, fast; rmrec_opstat_t *ops;
  int coll, coll_mem; struct rm_coll_memo *cm;
  /* the library source's nonblocking collectives (shim_coll.c): in a starting call, the tag its
   * schedule is expected to use and its communicator; in a completion call of one, its op + 1 */
  int nb_start, nb_tag, nb_wait; rm_xl_t *nb_xl;
  uint8_t slow[(RMREC_MAX_OPS + 7) / 8];
  rm_rowc_t rowc[RM_ROWC];
  rm_sc_t sc[RM_SC];
  rm_rr_t rr[RM_RR];
  rm_comm_last_t comm_last;          /* see rm_comm_xl */
  int drawn;                         /* the thread's first gap of each kind was drawn (bits 1 << start) */
} rm_tls_t;
/* rm_t.fast: plain adds to the thread's counters; and nonblocking receives recorded in the log */
enum { RM_FAST_PLAIN = 1, RM_FAST_RLOG = 2 };
extern RM_TLS rm_tls_t rm_t;
#define rm_in_f (rm_t.in_f)
#define rm_rs (rm_t.rs)
#define rm_tick (rm_t.tick)
extern rmrec_t *rm_R;
extern int rm_on, rm_single;
extern int rm_track_recv;      /* RANKMAP_RECV (default 1): record receives (from their statuses) */
extern int rm_wrank, rm_wsize;
#define RM_CAPTURE (__builtin_expect(rm_on, 1) && !rm_in_f)
/* a Fortran wrapper's call of the library's own routine: the C wrappers it reaches pass through */
#define RM_F_LIB(call) do { int f_fast_ = rm_t.fast; rm_t.fast = 0; rm_in_f++; call; rm_in_f--; rm_t.fast = f_fast_; } while (0)

/* ---- the time of a call ------------------------------------------------------------------------
 * Two clock reads (~12 ns each on a virtual machine's TSC) would be most of what a short call
 * costs, so short calls are timed by sampling: a call of an operation whose latest timed call was
 * slow (>= rm_slow_ticks) is always timed, weight 1; any other call is timed with probability
 * 2^-rm_sample_bits (independently, drawn as geometric gaps), and its duration is counted with
 * weight 2^rm_sample_bits (Horvitz-Thompson: the time per operation is an unbiased estimate; calls,
 * bytes and pairs stay exact).  A thread's first call is timed, weight 1 (no gap was drawn yet).
 * RANKMAP_SAMPLE=1 times every call.  An untimed call's rows take the thread's latest clock reading
 * for the timeline, as long as no timeline bucket boundary has passed since (rmrec_epoch).
 * The calls that only start a transfer (calls.spec's "timing: start": MPI_Isend, MPI_Irecv,
 * MPI_Start, ...) draw from a gap count of their own, with probability 2^-rm_start_bits (16 times
 * sparser by default; RANKMAP_SAMPLE_START): they never wait, so a rank's time in MPI is hardly
 * theirs, while at 1 in 16 their timing -- two clock reads and the full wrapper -- was about a
 * quarter of what the shim adds to a message-rate loop (18 ns a clock read on a GPU node's host).
 * What a start's time estimate loses is only its variance, for the same unbiased sum. */
extern unsigned rm_sample_bits, rm_start_bits;
extern uint64_t rm_slow_ticks;
/* the operations of RM_START_OPS (a constant for a constant op, as in every entry point) */
static inline __attribute__((always_inline)) int rm_op_start(int op) {
  switch (op) {
#define RM_START_CASE(name) case OP_##name:
    RM_START_OPS(RM_START_CASE)
#undef RM_START_CASE
      return 1;
    default:
      return 0;
  }
}
/* the gap count op's calls draw from */
#define RM_SKIP(op) (*(rm_op_start(op) ? &rm_t.skip_s : &rm_t.skip))

static inline uint64_t rm_rng(void) {              /* xorshift64 */
  uint64_t x = rm_t.rng ? rm_t.rng : (rmrec_ticks() | 1);
  x ^= x << 13; x ^= x >> 7; x ^= x << 17;
  return rm_t.rng = x;
}
/* untimed short calls before the next timed one: failures before a success of probability 2^-b */
static inline uint32_t rm_next_skip_bits(unsigned b) {
  if (!b) return 0;
  uint64_t mask = (1ull << b) - 1;
  if (!(b & (b - 1))) {
    /* b a power of two (so 64 % b == 0): the first all-zero b-bit field of x, found at once:
     * (x - L) & ~x & H (L: a 1 at the bottom of every field, H: at the top) has its lowest set
     * bit in the lowest zero field (a borrow starts only at a zero field, so the fields below it
     * are exact).  L from a table and shifts for the divisions by b: three divisions were most
     * of a draw's cost. */
    static const uint64_t lo_of[7] = {~0ull, ~0ull / 3, ~0ull / 0xf, ~0ull / 0xff, ~0ull / 0xffff,
                                      ~0ull / 0xffffffffull, 1};
    unsigned sh = (unsigned)__builtin_ctz(b);
    uint64_t lo = lo_of[sh], hi = lo << (b - 1);
    for (uint32_t skip = 0;; skip += 64u >> sh) {
      uint64_t x = rm_rng(), z = (x - lo) & ~x & hi;
      if (z) return skip + ((uint32_t)__builtin_ctzll(z) >> sh);
    }
  }
  for (uint32_t skip = 0;;) {
    uint64_t x = rm_rng();
    for (unsigned i = 0; i + b <= 64; i += b, skip++)
      if (!((x >> i) & mask)) return skip;
  }
}
static inline uint32_t rm_next_skip(void) { return rm_next_skip_bits(rm_sample_bits); }
void rm_thread_init(void);      /* the calling thread's counters (first call of a thread) */
/* Once per timed call, out of line: draws the untimed calls before the next timed one of its kind
 * (rm_t.skip, or rm_t.skip_s for a start) and returns this call's weight, 2^rm_sample_bits (or
 * 2^rm_start_bits) -- but 1 for the thread's first call of the kind (the first call also sets up
 * the thread's counters).  That call is timed for certain, as no gap was drawn before it; weighted
 * as sampled, a slow first call (a first collective waiting for late ranks, a connection set up)
 * counted 16 times over, and a rank's time in MPI could exceed its run. */
unsigned rm_next_skip_call(int start);

/* at entry: returns the weight of this call's duration (0: not timed), *t0 its start */
static inline __attribute__((always_inline)) unsigned rm_clock_in(int op, uint64_t *t0) {
  unsigned e = rmrec_epoch;
  unsigned w = 1;
  if (!(rm_t.slow[op >> 3] & (1u << (op & 7)))) {
    if (RM_SKIP(op)) {
      RM_SKIP(op)--;
      if (e != rm_t.epoch) { rm_t.epoch = e; rm_t.last = rmrec_ticks(); }
      rm_tick = rm_t.last;
      return 0;
    }
    w = rm_next_skip_call(rm_op_start(op));
  }
  rm_t.epoch = e;
  *t0 = rm_tick = rm_t.last = rmrec_ticks();
  return w;
}
uint64_t rm_clock_dt(int op, uint64_t t0, unsigned w);   /* a timed call's weighted duration */
/* one call of an operation with this payload: its bytes and its size bin */
static inline __attribute__((always_inline)) void rm_op_add(rmrec_opstat_t *o, uint64_t payload, int pl) {
  if (payload) rmrec_add(&o->bytes, payload, pl);
  rmrec_add(&o->hist[rmrec_hist_bin(payload)], 1, pl);
}
/* at exit: the operation's counters; a timed call's duration out of line (one call in 16) */
static inline __attribute__((always_inline)) void rm_clock_out(int op, uint64_t payload, uint64_t t0, unsigned w) {
  rmrec_opstat_t *o = &rm_t.ops[op];
  int pl = rm_t.plain;
  if (__builtin_expect(w != 0, 0)) rmrec_add(&o->ticks, rm_clock_dt(op, t0, w), pl);
  rm_op_add(o, payload, pl);
}
/* a wrapper's clock: RM_T0 at entry, RM_DONE at exit (the collective in progress, if any, is over then) */
#define RM_T0(op) uint64_t t0_ = 0; unsigned w_ = rm_clock_in(op, &t0_)
#define RM_DONE(op, n) do { rm_t.coll = 0; rm_t.nb_wait = 0; rm_clock_out(op, (n), t0_, w_); } while (0)

/* The fast path of an entry point (calls.spec's "fast"): an untimed call whose accounting needs
 * no call of its own.  rm_fast_ok: the call is untimed and the thread is the only writer of its
 * counters (plain adds) -- which also says that capture is on and no Fortran wrapper is running
 * the library's routine (rm_t.fast is 0 otherwise), so the entry point tests it first; the
 * entry's own test comes next, and counts the call when it can (0: nothing counted); only when
 * both hold is the call taken off the count to the next timed one.  Anything else goes the full
 * way, which decides again (nothing was changed). */
static inline __attribute__((always_inline)) int rm_fast_ok(int op) {
  return !(rm_t.slow[op >> 3] & (1u << (op & 7))) && RM_SKIP(op) && (rm_t.fast & RM_FAST_PLAIN);
}

/* Count arrays of the v/w collectives: int in MPI_Alltoallv, MPI_Count in MPI_Alltoallv_c.
 * RM_CV(a) makes the view from either; rm_cv(v, i) reads element i. */
typedef struct { const int *i; const MPI_Count *c; } rm_cv_t;
static inline MPI_Count rm_cv(rm_cv_t v, int k) { return v.c ? v.c[k] : v.i[k]; }
static inline rm_cv_t rm_cv_int(const int *a) { return (rm_cv_t){a, NULL}; }
static inline rm_cv_t rm_cv_count(const MPI_Count *a) { return (rm_cv_t){NULL, a}; }
#define RM_CV(a) _Generic((a), const int *: rm_cv_int, int *: rm_cv_int, \
                               const MPI_Count *: rm_cv_count, MPI_Count *: rm_cv_count)(a)
#define RM_CV_NONE ((rm_cv_t){NULL, NULL})
/* the buffer whose memory kind a collective's rows get: the receive buffer when sending in place */
#define RM_INPLACE(s, r) ((s) == MPI_IN_PLACE ? (const void *)(r) : (const void *)(s))

/* handle bits (pointer or int) -> nonzero hash-table key, and its mix */
static inline uint64_t rm_hkey(const void *h, size_t n) {
  uint64_t k = 0;
  __builtin_memcpy(&k, h, n < 8 ? n : 8);
  return k ^ 0x8000000000000000ull;
}
static inline uint64_t rm_hmix(uint64_t k) { k ^= k >> 31; k *= 0x9e3779b97f4a7c15ull; return k ^ (k >> 29); }

extern rm_xl_t rm_xl_world;
extern _Atomic unsigned rm_xt_gen;
#define rm_comm_last (rm_t.comm_last)
rm_xl_t *rm_comm_xl_slow(MPI_Comm comm);
/* the thread's last translation is comm's (and no communicator was freed since) */
static inline __attribute__((always_inline)) int rm_comm_last_is(MPI_Comm comm) {
  return rm_comm_last.key == rm_hkey(&comm, sizeof comm) &&
         rm_comm_last.gen == __atomic_load_n((unsigned *)&rm_xt_gen, __ATOMIC_ACQUIRE);
}
static inline rm_xl_t *rm_comm_xl(MPI_Comm comm) {
  if (comm == MPI_COMM_WORLD) return &rm_xl_world;
  if (rm_comm_last_is(comm)) return rm_comm_last.x;
  return rm_comm_xl_slow(comm);
}
rm_xl_t *rm_win_xl(MPI_Win win);
static inline __attribute__((always_inline)) int rm_world(const rm_xl_t *x, int r) {
  if (r < 0 || !x || r >= x->size) return -1;
  return x->w ? x->w[r] : r;
}

void rm_setup(void);      /* after PMPI_Init*: open the writer */
void rm_teardown(void);   /* before PMPI_Finalize: final flush */

/* RMREC_MEM_* of a buffer (shim_mem.c): a granule classified before is one load and a compare,
 * inline; everything else (sentinels, first sight, CUDA) in rm_mem_slow */
#define RM_MK_SLOTS 4096
extern _Atomic uint64_t rm_mk_cache[RM_MK_SLOTS];   /* (64 KiB granule << 2) | kind, 0 = empty */
int rm_mem_slow(const void *buf);
/* the kind of a buffer whose granule was classified before, -1 if it was not */
static inline __attribute__((always_inline)) int rm_mem_cached(const void *buf) {
  uint64_t g = (uint64_t)(uintptr_t)buf >> 16;
  uint64_t c = __atomic_load_n((uint64_t *)&rm_mk_cache[g & (RM_MK_SLOTS - 1)], __ATOMIC_RELAXED);
  return c != 0 && (c >> 2) == g ? (int)(c & 3) : -1;
}
static inline __attribute__((always_inline)) int rm_mem(const void *buf) {
  int k = rm_mem_cached(buf);
  return __builtin_expect(k >= 0, 1) ? k : rm_mem_slow(buf);
}
/* A remembered call's buffer has the kind mem it was counted with: it lies in the granule gran the
 * entry was filled with (a granule keeps its kind once classified), or the granule cache says so. */
static inline __attribute__((always_inline)) int rm_mem_is(const void *buf, uint64_t gran, int mem) {
  return gran == (uint64_t)(uintptr_t)buf >> 16 || rm_mem_cached(buf) == mem;
}
void rm_mem_init(void);

/* Sizes of the predefined datatypes (never freed, so safe to cache), filled once at setup and
 * read-only afterwards: a hit costs a hash and a compare instead of a PMPI_Type_size call. */
#define RM_TS_SLOTS 128
typedef struct { MPI_Datatype t; int size; } rm_ts_t;
extern rm_ts_t rm_ts_tab[RM_TS_SLOTS];
static inline unsigned rm_ts_slot(MPI_Datatype t) {
  uint64_t k = 0;
  __builtin_memcpy(&k, &t, sizeof t < 8 ? sizeof t : 8);
  return (unsigned)((k * 0x9E3779B97F4A7C15ull) >> 57);   /* 7 bits = RM_TS_SLOTS */
}
/* the cached size of a predefined datatype, 0 for any other.  Two types may hash to one slot (the
 * handles are addresses in the library, which moves from run to run), so a type that found its
 * slot taken sits in the next free one: a lookup goes on to the first empty slot (the table is
 * never full). */
static inline int rm_ts_cached(MPI_Datatype t) {
  for (unsigned i = rm_ts_slot(t);; i = (i + 1) & (RM_TS_SLOTS - 1)) {
    const rm_ts_t *e = &rm_ts_tab[i];
    if (e->size <= 0) return 0;
    if (e->t == t) return e->size;
  }
}
/* a datatype whose size cannot change under its handle: predefined (in the table) or none */
static inline int rm_ts_fixed(MPI_Datatype t) { return t == MPI_DATATYPE_NULL || rm_ts_cached(t) > 0; }
static inline uint64_t rm_tsz(MPI_Datatype t, MPI_Count count) {
  if (count <= 0 || t == MPI_DATATYPE_NULL) return 0;
  int s = rm_ts_cached(t);
  if (!s) PMPI_Type_size(t, &s);
  return (uint64_t)(s > 0 ? s : 0) * (uint64_t)count;
}

/* Rows are either recorded at once, or (while rm_rs is set, for persistent requests) stored
 * in a row set that MPI_Start replays; a persistent collective keeps its signature (sig + 1). */
typedef struct { int peer, klass, op, mem, dir, origin; uint64_t bytes; } rm_row_t;
struct rm_rowset { int n, cap; int start_op; uint64_t payload; rm_row_t *rows; int sig; };
void rm_rowset_add(rm_rowset_t *rs, int peer, int klass, int op, int mem, int dir, int origin, uint64_t bytes);
/* a row whose peer attribution is not the call's own (RMREC_ORIGIN_LIBRARY/MIRROR/MODEL): not cached */
void rm_emit_from(int peer, int klass, int op, int mem, int dir, uint64_t bytes, uint64_t msgs, int origin);
int rm_row_fill(rm_rowc_t *e, uint64_t key, int peer, int klass, int op, int mem, int dir);
/* a call row's key in the thread's row cache, and its place there */
static inline uint64_t rm_row_key(int peer, int klass, int op, int mem, int dir) {
  return (1ull << 63) | ((uint64_t)(uint32_t)peer << 24) | ((uint64_t)(op & 0xffff) << 8) |
         ((uint64_t)(klass & 0xf) << 4) | ((uint64_t)(mem & 0x7) << 1) | (uint64_t)(dir & 1);
}
static inline rm_rowc_t *rm_rowc_of(uint64_t key) { return &rm_t.rowc[(key ^ (key >> 24) ^ (key >> 9)) & (RM_ROWC - 1)]; }
/* A traffic row of the call (RMREC_ORIGIN_CALL): bytes and messages into the row's counters (found through the thread's row cache,
 * the writer's table only on a miss), sent bytes also into the timeline cell of the row's time
 * (rm_tick; the cell is cached until the next timeline bucket, rmrec_epoch). */
static inline __attribute__((always_inline)) void rm_emit(int peer, int klass, int op, int mem, int dir, uint64_t bytes, uint64_t msgs) {
  if (peer < 0) return;
  rm_rowset_t *rs = rm_rs;
  if (__builtin_expect(rs != NULL, 0)) { rm_rowset_add(rs, peer, klass, op, mem, dir, RMREC_ORIGIN_CALL, bytes); return; }
  uint64_t key = rm_row_key(peer, klass, op, mem, dir);
  rm_rowc_t *e = rm_rowc_of(key);
  if (__builtin_expect(e->key != key, 0) && !rm_row_fill(e, key, peer, klass, op, mem, dir)) return;
  int pl = rm_t.plain;
  rmrec_add(&e->s->bytes, bytes, pl);
  rmrec_add(&e->s->msgs, msgs, pl);
  if (dir == RMREC_SEND && bytes) {
    if (__builtin_expect(e->tl_epoch != rm_t.epoch || !e->tl, 0)) {
      e->tl = rmrec_tl_cell(rm_R, peer, klass, rm_tick);
      e->tl_epoch = rm_t.epoch;
    }
    if (e->tl) rmrec_add(e->tl, bytes, rm_single);   /* timeline cells are shared by the threads */
  }
}
void rm_replay(const rm_rowset_t *rs);
rm_rowset_t *rm_rowset_new(int start_op);
uint64_t rm_start_one(MPI_Request r);   /* counts a persistent send/collective at MPI_Start */
uint64_t rm_start_all(int n, const MPI_Request *reqs);
/* persistent requests: rows of the accounting between begin and end are kept with the request */
rm_rowset_t *rm_persist_begin(int op);
void rm_persist_end(rm_rowset_t *rs, MPI_Request req);

/* request tracking: one hash table for every kind (locked under MPI_THREAD_MULTIPLE), and below
 * MPI_THREAD_MULTIPLE a cheaper home for the most common kind, the nonblocking receive: a log in
 * posting order (shim_req.c) */
enum { RQ_RECV = 1, RQ_PRECV = 2, RQ_PSTART = 3, RQ_MSG = 4, RQ_SRECV = 5, RQ_NBC = 6 };
enum { RQ_IN_TABLE = 0, RQ_IN_LOG = 1 };
typedef struct {
  uint64_t key, seq; int kind, op, mem, where; rm_xl_t *xl; rm_rowset_t *rs;
  int src; uint64_t bytes;          /* RQ_SRECV: the posted source (comm rank) and length; RQ_NBC: src
                                     * is the schedule's tag */
} rm_rq_t;
extern volatile int rm_rq_count;    /* entries in the table */
/* The receive log: the receive of sequence number s at e[s & (cap - 1)], key 0 once completed;
 * the live ones lie in [head, tail), head live or equal to tail; full when tail == lim
 * (head + cap).  Used only when rm_single.  The buffer's memory kind is looked up at completion,
 * where a window's buffers mostly share one granule (one lookup for many receives).
 * An entry holds its communicator's translation and its operation in one word, xo: the
 * translation's address (8-aligned) with the operation's code in its low bit (RM_RL_OP*: the log
 * serves MPI_Irecv and MPI_Imrecv and their large-count forms), so posting stores one word less
 * and a completion compares one word less per receive.
 * nx is the entry of tail and nlim the first entry the fast path may not fill: the array's end
 * or the full mark (lim), whichever comes first, so posting a receive tests one pointer for both
 * (rm_rl_mark after tail, lim or the array changed). */
typedef struct { uint64_t key; uintptr_t xo; const void *buf; uint64_t spare; } rm_rle_t;
typedef struct { rm_rle_t *e, *nx, *nlim; uint64_t cap, head, tail, lim; int live; } rm_rlog_t;
extern rm_rlog_t rm_rl;
#define RM_RL_OPS(X) X(0, MPI_Irecv) X(1, MPI_Imrecv)
/* the code of op in the log (a constant where op is), -1 if the log does not serve op */
static inline int rm_rl_code(int op) {
#define RM_RL_CODE(c, o) if (op == OP_##o) return c;
  RM_RL_OPS(RM_RL_CODE)
#undef RM_RL_CODE
  return -1;
}
static inline int rm_rl_op(uintptr_t xo) {
#define RM_RL_OP(c, o) if ((xo & 1) == c) return OP_##o;
  RM_RL_OPS(RM_RL_OP)
#undef RM_RL_OP
  return -1;
}
static inline rm_xl_t *rm_rl_xl(uintptr_t xo) { return (rm_xl_t *)(xo & ~(uintptr_t)1); }
static inline int rm_rq_pending(void) { return rm_rq_count | rm_rl.live; }
void rm_rq_put(MPI_Request req, int kind, int op, int mem, rm_xl_t *xl, rm_rowset_t *rs);
void rm_rq_put_nbc(MPI_Request req, int op, int tag);
int rm_rl_room(void);
static inline rm_rle_t *rm_rl_at(uint64_t s) { return &rm_rl.e[s & (rm_rl.cap - 1)]; }   /* receive s's entry */
static inline void rm_rl_mark(void) {
  if (!rm_rl.cap) { rm_rl.nx = rm_rl.nlim = NULL; return; }
  uint64_t to_end = rm_rl.cap - (rm_rl.tail & (rm_rl.cap - 1)), to_full = rm_rl.lim - rm_rl.tail;
  rm_rl.nx = rm_rl_at(rm_rl.tail);
  rm_rl.nlim = rm_rl.nx + (to_end < to_full ? to_end : to_full);
}
/* A nonblocking receive (MPI_Irecv, MPI_Imrecv), in two steps around the library's call, so that
 * only the entry and the request's address stay live across it: rm_rq_recv_begin fills the log's
 * next entry (or, if the MPI calls of threads may overlap, the thread's scratch entry for the
 * table) and returns it, NULL if the receive cannot be tracked; rm_rq_recv_commit makes it live
 * with the request the library returned (a successful call's request is never null).  Nothing
 * can append to the log in between: it is used only when MPI calls never overlap, and no MPI
 * library calls the MPI_ entry points from inside its own. */
extern RM_TLS rm_rle_t rm_rq_scratch;
/* the log's next entry (rm_rl.nx, filled before the library's call) made live with its request */
static inline __attribute__((always_inline)) void rm_rq_recv_push(MPI_Request req) {
  rm_rl.nx->key = rm_hkey(&req, sizeof req);
  rm_rl.nx++;
  rm_rl.tail++; rm_rl.live++;
}
static inline __attribute__((always_inline)) rm_rle_t *rm_rq_recv_begin(int op, const void *buf, rm_xl_t *xl) {
  rm_rle_t *e = &rm_rq_scratch;
  int code = rm_rl_code(op);
  if (rm_single && code >= 0) {
    if (__builtin_expect(rm_rl.nx == rm_rl.nlim, 0)) {      /* the array's end or a full log */
      if (rm_rl.tail == rm_rl.lim && !rm_rl_room()) return NULL;
      rm_rl_mark();
    }
    e = rm_rl.nx;
    e->xo = (uintptr_t)xl | (uintptr_t)code;
  } else
    e->xo = (uintptr_t)xl, e->spare = (uint64_t)op;
  e->buf = buf;
  return e;
}
static inline __attribute__((always_inline)) void rm_rq_recv_commit(rm_rle_t *e, MPI_Request req) {
  if (e == &rm_rq_scratch) rm_rq_put(req, RQ_RECV, (int)e->spare, rm_mem(e->buf), rm_rl_xl(e->xo), NULL);
  else rm_rq_recv_push(req);
}
/* The fast path of MPI_Irecv with receives recorded (calls.spec's "fast"): the call counted and
 * the log's next entry filled, if the log is in use (rm_single) and has room before the array's
 * end, and the communicator's translation is at hand (MPI_COMM_WORLD, the thread's last); 0
 * (nothing done) otherwise.  rm_rq_recv_push makes the entry live after the library's call. */
static inline __attribute__((always_inline)) int rm_rq_recv_fast(int op, const void *buf, int source, MPI_Comm comm) {
  if (rm_rl_code(op) < 0 || !(rm_t.fast & RM_FAST_RLOG) || source == MPI_PROC_NULL) return 0;
  /* the communicator before the log: fewer values live at once, so the entry point needs no
   * register of its own to save */
  uintptr_t x = (uintptr_t)&rm_xl_world;
  if (comm != MPI_COMM_WORLD) {
    if (!rm_comm_last_is(comm)) return 0;
    x = (uintptr_t)rm_comm_last.x;
  }
  rm_rle_t *e = rm_rl.nx;
  if (e == rm_rl.nlim) return 0;
  e->xo = x | (uintptr_t)rm_rl_code(op);
  e->buf = buf;
  rmrec_add(&rm_t.ops[op].hist[0], 1, 1);      /* a receive's payload is counted at its completion */
  return 1;
}
/* A receive (MPI_Recv, MPI_Irecv) while receives are not recorded (the default; RANKMAP_RECV=1
 * records them): only the call counted -- its payload is the sender's row -- and the library's
 * call a jump, so the entry point sets up no frame and does nothing after the call */
static inline __attribute__((always_inline)) int rm_recv_untracked(int op) {
  if (rm_track_recv) return 0;
  rmrec_add(&rm_t.ops[op].hist[0], 1, 1);
  return 1;
}
/* The receive half of MPI_Isendrecv(_replace).  MPICH 4.0 completes these requests without
 * filling the status, so with a named source the posted source and length are counted (a shorter
 * message counts as the posted length); with MPI_ANY_SOURCE the status decides. */
void rm_rq_put_srecv(MPI_Request req, int op, int mem, MPI_Comm comm, int source, uint64_t bytes);
int  rm_rq_get(MPI_Request req, rm_rq_t *out);
void rm_rq_del(const rm_rq_t *e);
void rm_rq_done(const rm_rq_t *e, const MPI_Status *st);  /* a tracked request completed */
void rm_rq_failed(const rm_rq_t *e);                       /* ... completed with an error: no row */
/* The requests of one MPI_Waitall/Testall/Waitany/...: looked up before the call, accounted per
 * completed request, released by the accounting (log entries) or together by rm_multi_end (table
 * entries).  Log entries found are kept as runs (requests i.. i+n-1 are the log's s.. s+n-1: one
 * run for a window posted and completed in the same order), table entries as copies.  These lists
 * and our status arrays are the thread's, grown once, not allocated per call. */
typedef struct { int i, n; uint64_t s; } rm_run_t;
typedef struct { int i, done; rm_rq_t e; } rm_tfound_t;
typedef struct { int peer, op, mem; uint64_t bytes, msgs; } rm_agg_t;   /* a receive row being summed */
typedef struct {
  int n, k, nr, nt, own, freed;     /* requests; tracked; runs; table copies; own buffers (a nested
                                       call); log entries released */
  int all;                          /* the runs hold every live entry of the log: how many (else 0) */
  uint64_t tail0, rel0;             /* the log's tail and its count of releases (tail - live) at the
                                       lookup: what a nested call changed since (rm_multi_done_all) */
  rm_run_t *r; rm_tfound_t *t; MPI_Status *st; MPI_Fint *fst;
  rm_agg_t agg;
} rm_multi_t;
int  rm_multi_get(rm_multi_t *m, int n, const MPI_Request *reqs);     /* returns k */
MPI_Status *rm_multi_statuses(rm_multi_t *m, MPI_Status *sts);       /* ours if sts is IGNORE */
MPI_Fint *rm_multi_fbuf(rm_multi_t *m, size_t n);                    /* n MPI_Fint of ours */
int  rm_multi_has(const rm_multi_t *m, int i);                        /* request i is tracked */
void rm_multi_done(rm_multi_t *m, int i, const MPI_Status *st);      /* request i completed */
void rm_multi_done_all(rm_multi_t *m, const MPI_Status *sts);        /* all completed (Waitall) */
void rm_multi_drop(rm_multi_t *m, int i);                            /* request i failed: no row */
void rm_multi_done_err(rm_multi_t *m, int i, const MPI_Status *st);  /* after MPI_ERR_IN_STATUS */
void rm_multi_end(rm_multi_t *m);
/* matched probes: MPI_Message -> communicator until MPI_Mrecv/MPI_Imrecv takes it */
void rm_msg_put(MPI_Message msg, MPI_Comm comm);
rm_xl_t *rm_msg_take(MPI_Message msg);

/* ---- collectives: what the library did (shim_coll.c) --------------------------------------------
 * Each collective call records its FACTS (communicator, operation, counts and type sizes, root,
 * flags), aggregated by signature per timeline bucket into COLLFACTS blocks; the pair traffic is
 * derived from them at ingest by a mirror of the library's algorithm choice (or a model).  Under
 * Open MPI with its monitoring PML, the library's own per-message accounting is captured instead
 * (rm_lib_on): every message it sends for a collective becomes a row of origin "library". */
enum { RM_FACT_INPLACE = 1, RM_FACT_COMMUTE = 2, RM_FACT_COMMUTE_KNOWN = 4, RM_FACT_LIBRARY = 8 };
extern int rm_lib_on;
/* Nonblocking collectives under the library source.  Open MPI's libnbc gives each schedule started
 * on a communicator the next tag of that communicator (-27, -28, ...) and sends all its messages
 * with it, mostly in later calls (MPI_Wait, MPI_Test, any call that progresses).  The starting call
 * expects the communicator's next tag (rm_nbc_begin), a message of the call with another tag no
 * live schedule has corrects it (the library used tags the shim did not see, e.g. while creating a
 * communicator), the request keeps it (rm_nbc_started) and its completion forgets it; a message
 * whose tag no live schedule names goes to the collective whose request is being completed. */
void rm_nbc_begin_(MPI_Comm comm);
void rm_nbc_started_(MPI_Request req);
void rm_nbc_skip_(MPI_Comm comm);
void rm_nbc_forget(int tag, int op);
static inline int rm_nbc_begin(MPI_Comm comm) { if (rm_lib_on) rm_nbc_begin_(comm); return 1; }
static inline void rm_nbc_started(MPI_Request req) { if (rm_t.nb_start) rm_nbc_started_(req); }
/* a persistent collective's init takes its tag once, for all its starts */
static inline void rm_nbc_skip(MPI_Comm comm) { if (rm_lib_on) rm_nbc_skip_(comm); }
void rm_coll_setup(void);                 /* after the writer is open: library hook, flush hook */
void rm_coll_teardown(void);              /* before the final flush: META of the facts */
/* The signatures a thread counted last, by the call's own arguments (a set per operation class):
 * a code calls the same collective with the same arguments again and again, and a repeat then
 * costs a few compares and one plain add instead of building the 64-byte signature, hashing it,
 * taking the table's lock and probing it.  Communicators are told apart by their translation's id
 * (never reused); only calls whose type sizes cannot change under their handles (predefined types)
 * and without per-peer vectors are remembered.  slot1: the table slot + 1 (0: empty).
 * A remembered signature's calls are held in its entry until they are added to the table: cnt
 * calls in timeline bucket `bucket` (computed from rm_tick == tick; at another tick the bucket is
 * computed again, and a new one takes the calls held to the table), of which pub are in the
 * table already.  The owner
 * thread adds to cnt without a lock; everything else (a new bucket, a new signature, the flush
 * adding cnt - pub) happens under the table's lock.  So the entries live in a block on the heap
 * that the flush can reach (rm_coll_blocks), and outlive their thread.
 * Codes alternate signatures (a solver's dot products of one, two and three doubles, a row and a
 * column communicator, MPI_Bcast and MPI_Barrier, whose numbers are equal mod RM_COLL_SETS; a
 * molecular-dynamics step's several MPI_Allreduce of different counts), so a call may be held in
 * two groups of entries: its operation class's set of RM_COLL_WAYS (2) ways, and a hashed set of
 * RM_COLL_HWAYS (2) ways, one of RM_COLL_HSETS (16) chosen by a hash of the call's count, type,
 * root and operation (rm_coll_hash: one multiply).  A chain of functions looks (shim_gen.py): the
 * entry point at way 0, rmf_ at way 1, rmg_ at the hashed set (its way of the call's operation and
 * count through its handle, else the other), so a signature that repeats alone, or two in turn,
 * cost what they did before there were hashed sets: the entry point and rmf_ are instruction for
 * instruction what they were.  With three ways per class set and no hashed sets, four or more
 * signatures of one class in turn missed on every call, each new one evicting the one filled
 * first, the next to be called again: 784 shim instructions per call (Open MPI; MPICH 768), now
 * 127 for four, 141 for eight and 149 for sixteen in turn (MPICH 130, 150, 155); one repeated
 * 85-87 as before; three in turn 117 against 109 (MPICH 120 against 112: the hash and the way's
 * choice cost the third ~24 more than a third class way did) (bench/coll_memo.py, callgrind).
 * Eight consecutive counts of one operation never share a hashed set (Fibonacci hashing: the
 * fractional parts of k/phi for 8 consecutive k lie >= 0.09 apart, more than a set's 1/16),
 * sixteen at most two to one (no three within 1/16).  Memory: 40 entries of 160 bytes per thread
 * that makes collective calls (6.4 KB; 12 entries, 1.9 KB, with three ways per class set).
 * A new signature takes an empty way of its class set if there is one (a class's first signature
 * takes way 0, the one the entry point looks at first), else the entry last called in the oldest
 * timeline bucket (bucket) among its class set's and its hashed set's ways; of those in the same
 * bucket a hashed way before a class way (signatures called in turn that found room stay where
 * they are, a newcomer evicting within its hashed set), and then the one filled first (filled)
 * (shim_coll.c, memo_victim): no entry is written on a hit to keep a recency order, and a way is
 * never moved (its held calls stay where the flush finds them). */
typedef struct rm_coll_memo {
  uint64_t comm; int64_t scount, rcount; MPI_Datatype st, rt; int op, root, flags, mem, slot1;
  uint64_t tick; int64_t bucket; _Atomic uint64_t cnt; uint64_t pub;
  /* the owner's fast path (rm_coll_fast): the communicator's handle and rm_xt_gen when the entry
   * was last counted in full, the epoch of its bucket (RM_NO_EPOCH: not armed), the call's payload
   * and its operation's byte and size-bin counters */
  MPI_Comm hcomm; unsigned hgen, fepoch; uint64_t n; _Atomic uint64_t *ob, *oh;
  uint64_t gran;                    /* the buffer's 64 KiB granule, whose kind is mem */
  uint64_t filled;                  /* when it took its call: the thread's count of fills then */
  uint64_t hits;                    /* calls the fast path counted in it, in a way after the first
                                       (way 0's path stays as it was): META collectives.memo_way_hits */
} rm_coll_memo_t;
#define RM_COLL_SETS 4                    /* operation classes: the operation's number mod 4 */
#define RM_COLL_WAYS 2                    /* ways of a class set: way 0 (entry point), way 1 (rmf_) */
#define RM_COLL_HBITS 4
#define RM_COLL_HSETS (1 << RM_COLL_HBITS)    /* hashed sets (rm_coll_hash) */
#define RM_COLL_HWAYS 2                   /* ways of a hashed set (rmg_) */
#define RM_COLL_HELD (RM_COLL_WAYS + RM_COLL_HWAYS)   /* the entries a call may be held in */
#define RM_COLL_LOOKS (RM_COLL_WAYS + 1)  /* the fast path's looks (calls.spec fast.ways): the class
                                             set's ways, then the hashed set (rm_coll_fast) */
#define RM_COLL_MEMO (RM_COLL_SETS * RM_COLL_WAYS + RM_COLL_HSETS * RM_COLL_HWAYS)   /* entries per thread */
/* the first way of op's class set in a thread's entries */
static inline rm_coll_memo_t *rm_coll_set(rm_coll_memo_t *cm, int op) {
  return cm + ((unsigned)op % RM_COLL_SETS) * RM_COLL_WAYS;
}
/* The hashed set of a call: its count in the low bits of the key, so that a run of counts gets
 * keys in a row, which Fibonacci hashing (the top bits of key x 2^64/phi) spreads over the sets
 * evenly; the type (a handle: a pointer or an int), root and operation above them.  The same
 * arguments on the fast path (rm_cf_t) and the full one (rm_coll_fact's), so both find an entry
 * in the same set. */
static inline __attribute__((always_inline)) unsigned rm_coll_hash(int op, int64_t count, MPI_Datatype t, int root) {
  uint64_t k = (uint64_t)count + ((uint64_t)(uintptr_t)t << 20) + ((uint64_t)(uint32_t)root << 44) +
               ((uint64_t)(uint32_t)op << 54);
  return (unsigned)((k * 0x9E3779B97F4A7C15ull) >> (64 - RM_COLL_HBITS));
}
static inline __attribute__((always_inline))
rm_coll_memo_t *rm_coll_hset(rm_coll_memo_t *cm, int op, int64_t count, MPI_Datatype t, int root) {
  return cm + RM_COLL_SETS * RM_COLL_WAYS + rm_coll_hash(op, count, t, root) * RM_COLL_HWAYS;
}
/* the entries a call may be held in, `way` 0 .. RM_COLL_WAYS + RM_COLL_HWAYS - 1: its class set's
 * ways, then its hashed set's */
static inline __attribute__((always_inline))
rm_coll_memo_t *rm_coll_way(rm_coll_memo_t *cm, int op, int way, int64_t count, MPI_Datatype t, int root) {
  return way < RM_COLL_WAYS ? rm_coll_set(cm, op) + way : rm_coll_hset(cm, op, count, t, root) + (way - RM_COLL_WAYS);
}
/* the entry remembers this signature (the facts' arguments; comm: the translation's id) */
static inline __attribute__((always_inline))
int rm_coll_memo_is(const rm_coll_memo_t *c, int op, uint64_t comm, int mem, int root, int64_t scount,
                    MPI_Datatype st, int64_t rcount, MPI_Datatype rt, int flags) {
  return c->slot1 && c->op == op && c->comm == comm && c->scount == scount && c->rcount == rcount &&
         c->st == st && c->rt == rt && c->root == root && c->flags == flags && c->mem == mem;
}
/* one more call held in the entry: its owner's plain add (the flush reads cnt under the table's lock) */
static inline __attribute__((always_inline)) void rm_coll_memo_add(rm_coll_memo_t *c) {
  __atomic_store_n((uint64_t *)&c->cnt, __atomic_load_n((uint64_t *)&c->cnt, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}
rm_coll_memo_t *rm_coll_memo_init(void);  /* the calling thread's entries (first collective) */
void rm_coll_memo_retick(rm_coll_memo_t *c);   /* rm_tick moved: a new bucket moves the calls held */
extern int rm_coll_on;                    /* the facts table exists */
rm_coll_memo_t *rm_coll_fact_miss(rm_coll_memo_t *cm, int op, rm_xl_t *x, int mem, int root, int64_t scount,
                                  MPI_Datatype st, int64_t rcount, MPI_Datatype rt, int flags, const int64_t *vec,
                                  int nvec);
/* One call's facts; x = NULL (self or inter-communicator): the call is attributed, no facts.
 * vec: nvec per-peer byte counts (v/w collectives), or NULL.  A signature remembered in its class
 * set is counted inline; one in its hashed set is counted by rm_coll_fact_miss, which takes
 * anything else through the table.  Returns
 * the thread's entry that now holds the call's signature (NULL: none), which rm_coll_acc arms for
 * the fast path. */
static inline __attribute__((always_inline))
rm_coll_memo_t *rm_coll_fact(int op, rm_xl_t *x, int mem, int root, int64_t scount, MPI_Datatype st,
                             int64_t rcount, MPI_Datatype rt, int flags, const int64_t *vec, int nvec) {
  rm_t.coll = op + 1;                      /* the library's messages from now on belong to op */
  rm_t.coll_mem = mem;
  if (!x || !rm_coll_on) return NULL;
  flags |= rm_lib_on ? RM_FACT_LIBRARY : 0;
  rm_coll_memo_t *cm = rm_t.cm;
  if (__builtin_expect(!cm, 0)) cm = rm_coll_memo_init();
  rm_coll_memo_t *c = rm_coll_set(cm, op);
  _Static_assert(RM_COLL_WAYS == 2, "rm_coll_fact looks at two ways of the class set");
  if (nvec <= 0 && !rm_rs &&
      (rm_coll_memo_is(c, op, x->id, mem, root, scount, st, rcount, rt, flags) ||
       rm_coll_memo_is(++c, op, x->id, mem, root, scount, st, rcount, rt, flags))) {
    if (__builtin_expect(c->tick != rm_tick, 0)) rm_coll_memo_retick(c);
    rm_coll_memo_add(c);
    return c;
  }
  return rm_coll_fact_miss(cm, op, x, mem, root, scount, st, rcount, rt, flags, vec, nvec);   /* (hashed set too) */
}

void rm_coll_count(int sig);              /* one more call of a stored signature (MPI_Start) */

/* MPI_T (shim_mpit.c): control variables as META, performance variables sampled per flush */
void rm_mpit_setup(void);
/* Open MPI's pml_monitoring_enable as MPI_T read it after MPI_Init (-1: not there) */
extern int rm_pml_monitoring;
void rm_mpit_sample(rmrec_t *c, int final);   /* from the flush hook */
void rm_mpit_teardown(void);

/* accounting: each returns the logical payload in bytes */
uint64_t rm_p2p_send_slow(rm_sc_t *c, int op, const void *buf, MPI_Count count, MPI_Datatype t, int dest, MPI_Comm comm);
/* A send: its row and timeline cell.  Codes send the same arguments again and again (a window of
 * MPI_Isend, a halo exchange's few neighbours), so the thread remembers its last sends by their
 * arguments: a repeat costs the compares, the buffer's memory kind and the counter updates instead
 * of the datatype size, the communicator's translation and the row's key (about a hundred
 * instructions less per send).  Only sends whose payload cannot change are remembered (predefined
 * datatypes); a freed communicator (rm_xt_gen) or a row set being filled (rm_rs) goes the long way. */
static inline rm_sc_t *rm_sc_of(int op, MPI_Count count, int dest) {
  return &rm_t.sc[((unsigned)dest ^ (unsigned)count ^ ((unsigned)op << 1)) & (RM_SC - 1)];
}
/* the entry holds these arguments, and no communicator was freed since it was filled (a relaxed
 * read: what the entry points to is the thread's own, so no later read needs ordering after it) */
static inline __attribute__((always_inline))
int rm_sc_holds(const rm_sc_t *c, int op, MPI_Count count, MPI_Datatype t, int dest, MPI_Comm comm) {
  return c->s != NULL && c->dk == rm_sc_dk(dest, op) && c->count == count && c->t == t && c->comm == comm &&
         c->gen == __atomic_load_n((unsigned *)&rm_xt_gen, __ATOMIC_RELAXED);
}
static inline __attribute__((always_inline))
uint64_t rm_p2p_send(int op, const void *buf, MPI_Count count, MPI_Datatype t, int dest, MPI_Comm comm) {
  rm_sc_t *c = rm_sc_of(op, count, dest);
  if (__builtin_expect(rm_sc_holds(c, op, count, t, dest, comm) && !rm_rs && c->mem == rm_mem(buf), 1)) {
    c->gran = (uint64_t)(uintptr_t)buf >> 16;        /* where the fast path looks next (a kind never changes) */
    int pl = rm_t.plain;
    uint64_t n = c->n;
    rmrec_slot_t *s = c->s;
    _Atomic uint64_t *tl = c->tl;
    if (n && __builtin_expect(c->tl_epoch != rm_t.epoch, 0)) {
      c->tl = tl = rmrec_tl_cell(rm_R, c->peer, RMREC_P2P, rm_tick);
      c->tl_epoch = tl ? rm_t.epoch : RM_NO_EPOCH;
    }
    rmrec_add(&s->bytes, n, pl);
    rmrec_add(&s->msgs, 1, pl);
    if (n && tl) rmrec_add(tl, n, rm_single);
    return n;
  }
  return rm_p2p_send_slow(c, op, buf, count, t, dest, comm);
}
/* A remembered send on the fast path: every counter of the call (the row, the timeline cell, the
 * operation's bytes and size bin) with plain adds, when its arguments, its buffer's memory kind and
 * its timeline cell are all cached; 0 (nothing counted) otherwise.  (No row set is being filled
 * in an entry point: rm_rs is set only inside a persistent request's accounting.) */
static inline __attribute__((always_inline))
int rm_p2p_send_fast(int op, const void *buf, MPI_Count count, MPI_Datatype t, int dest, MPI_Comm comm) {
  const rm_sc_t *c = rm_sc_of(op, count, dest);
  /* the entry's address made opaque: GCC keeps it in a register rather than working the
   * thread-local address out again at each read, so the fields are read where they are needed
   * and few values are live at once */
  __asm__("" : "+r"(c));
  if (!rm_sc_holds(c, op, count, t, dest, comm)) return 0;
  /* a buffer in the granule of the entry's latest call has its kind; any other goes the full
   * way once (which looks the kind up and moves the granule): the granule cache's lookup here
   * took registers the entry point then saved on every call */
  if (c->gran != (uint64_t)(uintptr_t)buf >> 16) return 0;
  uint64_t n = c->n;
  if (n && c->tl_epoch != rmrec_epoch) return 0;
  rmrec_slot_t *s = c->s;
  rmrec_add(&s->bytes, n, 1);
  rmrec_add(&s->msgs, 1, 1);
  if (n) rmrec_add(c->tl, n, rm_single);
  rmrec_add(c->ob, n, 1);
  rmrec_add(c->oh, 1, 1);
  return 1;
}
uint64_t rm_p2p_recv(int op, int mem, rm_xl_t *xl, const MPI_Status *st);   /* rm_p2p_recv_in out of line */

/* Bytes a status says were received, -1 if the request was cancelled (a cancelled receive is no
 * message; MPICH fills its source with 0).  The MPI_Get_elements_x call is a good share of a short
 * receive's cost, so where the status layout is known (Open MPI: _ucount, _cancelled; MPICH and its
 * derivatives: count_lo + count_hi_and_cancelled) it is read directly; rm_setup checks the reading
 * against MPI_Status_set_elements_x / MPI_Status_set_cancelled and falls back to the calls
 * (rm_status_direct = 0). */
extern int rm_status_direct;
int64_t rm_status_bytes_call(const MPI_Status *st);   /* through MPI_Test_cancelled, MPI_Get_elements_x */
/* The fields themselves, only where rm_status_direct says they read right; in two parts: nonzero
 * if the receive was cancelled, and the bytes otherwise (so a loop can test the first with other
 * words at once) */
static inline uint64_t rm_status_cancel_bits(const MPI_Status *st) {
#if defined(OPEN_MPI)
  return (uint32_t)st->_cancelled;
#elif defined(MPICH_NUMVERSION) || defined(MPICH_VERSION)
  return (uint32_t)st->count_hi_and_cancelled & 1;
#else
  return rm_status_bytes_call(st) < 0;
#endif
}
static inline uint64_t rm_status_count_bits(const MPI_Status *st) {
#if defined(OPEN_MPI)
  return (uint64_t)st->_ucount;
#elif defined(MPICH_NUMVERSION) || defined(MPICH_VERSION)
  return (((uint64_t)(unsigned)st->count_hi_and_cancelled >> 1) << 32) | (unsigned)st->count_lo;
#else
  return (uint64_t)rm_status_bytes_call(st);
#endif
}
/* ... and as one figure, -1 for a cancelled receive */
static inline int64_t rm_status_fields(const MPI_Status *st) {
#if defined(OPEN_MPI) || defined(MPICH_NUMVERSION) || defined(MPICH_VERSION)
  return rm_status_cancel_bits(st) ? -1 : (int64_t)rm_status_count_bits(st);
#else
  return rm_status_bytes_call(st);
#endif
}
static inline int64_t rm_status_bytes(const MPI_Status *st) {
  return rm_status_direct ? rm_status_fields(st) : rm_status_bytes_call(st);
}
/* A completed receive's row: the status's source (a rank of xl) and length; its bytes, 0 when it
 * has none (MPI_PROC_NULL, an inactive request, a cancelled receive). */
static inline __attribute__((always_inline)) uint64_t rm_p2p_recv_in(int op, int mem, rm_xl_t *xl, const MPI_Status *st) {
  if (!st || st == MPI_STATUS_IGNORE || st->MPI_SOURCE < 0) return 0;
  int64_t c = rm_status_bytes(st);
  if (c < 0) return 0;
  rm_emit(rm_world(xl, st->MPI_SOURCE), RMREC_P2P, op, mem, RMREC_RECV, (uint64_t)c, 1);
  return (uint64_t)c;
}
/* The fast path of a recorded blocking receive (MPI_Recv, and MPI_Sendrecv's receive half; with
 * receives not recorded the entry point's fast.jump takes the call): before the call, that its
 * row will need no call of its own -- the communicator's translation is at hand (MPI_COMM_WORLD,
 * the thread's last); after the library's
 * successful call, the row from the status (calls.spec's fast.post).  No MPI library calls the
 * MPI_ entry points from inside its own, so the thread's last translation is still comm's then. */
static inline __attribute__((always_inline)) int rm_recv_fast_ok(MPI_Comm comm) {
  return rm_track_recv && (comm == MPI_COMM_WORLD || rm_comm_last_is(comm));
}
uint64_t rm_recv_row_fill(rm_rr_t *m, int op, const void *buf, rm_xl_t *xl, int src, uint64_t bytes);
/* A latency-bound code receives from the same few peers into the same buffers again and again, so
 * the row of a repeated receive (same translation, source, operation and granule) comes from the
 * thread's memo: two compares and two adds instead of the buffer's kind, the source's world rank
 * and the row's key (about 40 instructions less per MPI_Recv).  Plain adds: a fast path runs only
 * where the thread is its counters' only writer (rm_fast_ok). */
static inline __attribute__((always_inline))
uint64_t rm_recv_fast_row(int op, const void *buf, int source, MPI_Comm comm, const MPI_Status *st) {
  if (!rm_track_recv || source == MPI_PROC_NULL) return 0;
  if (!st || st == MPI_STATUS_IGNORE || st->MPI_SOURCE < 0) return 0;
  int64_t c = rm_status_bytes(st);
  if (c < 0) return 0;
  rm_xl_t *xl = comm == MPI_COMM_WORLD ? &rm_xl_world : rm_comm_last.x;
  int src = st->MPI_SOURCE;
  rm_rr_t *m = &rm_t.rr[(unsigned)(src ^ op) & (RM_RR - 1)];
  if (__builtin_expect(m->xl == xl && m->src == src && m->op == op && m->gran == (uint64_t)(uintptr_t)buf >> 16 &&
                       m->gen == __atomic_load_n((unsigned *)&rm_xt_gen, __ATOMIC_RELAXED), 1)) {
    rmrec_add(&m->s->bytes, (uint64_t)c, 1);
    rmrec_add(&m->s->msgs, 1, 1);
    return (uint64_t)c;
  }
  return rm_recv_row_fill(m, op, buf, xl, src, (uint64_t)c);
}
/* a fast path's own count of its call (an untimed call's rm_clock_out, plain adds) */
static inline __attribute__((always_inline)) void rm_op_fast(int op, uint64_t payload) {
  rm_op_add(&rm_t.ops[op], payload, 1);
}
/* a receive whose source and length are known when it is set up (partitioned receives) */
uint64_t rm_p2p_expect(int op, const void *buf, MPI_Count count, MPI_Datatype t, int source, MPI_Comm comm);

/* intra-communicator of at least 2 ranks, else no pair traffic */
static inline __attribute__((always_inline)) rm_xl_t *rm_coll_xl(MPI_Comm comm) {
  rm_xl_t *x = rm_comm_xl(comm);
  return (x && !x->inter && x->size > 1) ? x : NULL;
}
static inline int rm_inplace(const void *b) { return b == MPI_IN_PLACE ? RM_FACT_INPLACE : 0; }
/* The facts of a collective that has no per-peer counts, from its arguments: the buffer whose
 * memory kind its rows get (or a fixed kind), root, counts, types and flags.  One constructor per
 * collective (rm_cf_allreduce, ...) serves both its full accounting (rm_acc_*) and its fast path
 * (rm_coll_fast), so the two cannot disagree on which signature a call is. */
typedef struct {
  const void *buf; int kind;          /* kind >= 0: RMREC_MEM_* of a call without a buffer */
  int root, flags; MPI_Count scount, rcount; MPI_Datatype st, rt;
} rm_cf_t;
/* the full accounting of such a call with payload n: its facts counted, and the entry that holds
 * them armed for the fast path with the communicator's handle, the payload and the operation's
 * counters (an untimed call's exit adds n and one size-bin count; see rm_clock_out).  A call
 * without facts (a communicator of one rank, an inter-communicator) arms an entry that holds its
 * arguments and no signature (rm_coll_memo_bare), so its repeats take the fast path too. */
rm_coll_memo_t *rm_coll_memo_bare(int op, MPI_Comm comm, const rm_cf_t *f, int mem);
static inline __attribute__((always_inline)) uint64_t rm_coll_acc(int op, MPI_Comm comm, rm_cf_t f, uint64_t n) {
  rm_xl_t *x = rm_coll_xl(comm);
  int mem = f.kind >= 0 ? f.kind : rm_mem(f.buf);
  rm_coll_memo_t *c = rm_coll_fact(op, x, mem, f.root, f.scount, f.st, f.rcount, f.rt, f.flags, NULL, 0);
  if (!(rm_t.fast & RM_FAST_PLAIN) || rm_rs) return n;
  if (!x) c = rm_coll_memo_bare(op, comm, &f, mem);   /* no facts (MPI_COMM_SELF, ...): the arguments alone */
  if (c) {
    c->hcomm = comm; c->hgen = __atomic_load_n((unsigned *)&rm_xt_gen, __ATOMIC_ACQUIRE);
    c->fepoch = rm_t.epoch;            /* the epoch of rm_tick, whose bucket the entry counts in */
    c->n = n;
    c->ob = &rm_t.ops[op].bytes; c->oh = &rm_t.ops[op].hist[rmrec_hist_bin(n)];
    c->gran = (uint64_t)(uintptr_t)f.buf >> 16;
  }
  return n;
}
/* The fast path of such a collective (calls.spec's "fast"; the entry point tries way 0, a function
 * of its own the other ways: "fast.ways"): the call's `way`-th entry (rm_coll_way) was armed with the
 * call's facts through the same communicator handle (none freed since), its bucket is still the
 * current one (rmrec_epoch unchanged) and the buffer has its memory kind (rm_coll_armed): the call
 * counted with plain adds and marked in progress (the library's own messages are attributed to it
 * until the entry point's fast.after ends it); 0 (nothing done) otherwise. */
static inline __attribute__((always_inline)) int rm_coll_armed(const rm_coll_memo_t *c, int op, MPI_Comm comm,
                                                                const rm_cf_t *f) {
  if (c->op != op || c->hcomm != comm || c->scount != f->scount || c->rcount != f->rcount || c->st != f->st ||
      c->rt != f->rt || c->root != f->root || (c->flags & ~RM_FACT_LIBRARY) != f->flags ||
      c->fepoch != rmrec_epoch || c->hgen != __atomic_load_n((unsigned *)&rm_xt_gen, __ATOMIC_ACQUIRE))
    return 0;
  return f->kind >= 0 ? c->mem == f->kind : rm_mem_is(f->buf, c->gran, c->mem);
}
static inline __attribute__((always_inline)) int rm_coll_fast(int op, int way, MPI_Comm comm, rm_cf_t f) {
  rm_coll_memo_t *c = rm_t.cm;
  if (!c) return 0;
  if (way < RM_COLL_WAYS) {
    c = rm_coll_set(c, op) + way;
  } else {
    /* the hashed set, one look: its first way if that holds this operation and count through this
     * handle, else its second (one check of the facts, not two: fewer registers to save) */
    _Static_assert(RM_COLL_HWAYS == 2, "a hashed set's look picks one of two ways");
    c = rm_coll_hset(c, op, f.scount, f.st, f.root);
    c += c->op != op || c->scount != f.scount || c->hcomm != comm;
  }
  if (!rm_coll_armed(c, op, comm, &f)) return 0;
  int mem = c->mem;
  rm_coll_memo_add(c);
  if (way) c->hits++;                  /* (a constant in each path: nothing in way 0's) */
  rmrec_add(c->ob, c->n, 1);
  rmrec_add(c->oh, 1, 1);
  rm_t.coll = op + 1;
  rm_t.coll_mem = mem;
  return 1;
}
/* Facts (rm_cf_t) of the collectives without per-peer counts.  The same count and type on both
 * sides: */
static inline rm_cf_t rm_cf_sym(const void *buf, MPI_Count count, MPI_Datatype t, int root, int flags) {
  return (rm_cf_t){buf, -1, root, flags, count, count, t, t};
}
static inline rm_cf_t rm_cf_bcast(const void *buf, MPI_Count count, MPI_Datatype t, int root) {
  return rm_cf_sym(buf, count, t, root, 0);
}
static inline rm_cf_t rm_cf_reduce(const void *sbuf, MPI_Count count, MPI_Datatype t, int root) {
  return rm_cf_sym(sbuf, count, t, root, rm_inplace(sbuf));
}
static inline rm_cf_t rm_cf_allreduce(const void *sbuf, MPI_Count count, MPI_Datatype t) {
  return rm_cf_sym(sbuf, count, t, 0, 0);
}
static inline rm_cf_t rm_cf_allgather(const void *sbuf, MPI_Count rcount, MPI_Datatype rt) {
  return rm_cf_sym(sbuf, rcount, rt, 0, 0);
}
static inline rm_cf_t rm_cf_alltoall(const void *sbuf, MPI_Count rcount, MPI_Datatype rt) {
  return rm_cf_sym(sbuf, rcount, rt, 0, 0);
}
static inline rm_cf_t rm_cf_reduce_scatter_block(const void *sbuf, MPI_Count rcount, MPI_Datatype t) {
  return rm_cf_sym(sbuf, rcount, t, 0, rm_inplace(sbuf));
}
static inline rm_cf_t rm_cf_scan(const void *sbuf, MPI_Count count, MPI_Datatype t) {
  return rm_cf_sym(sbuf, count, t, 0, rm_inplace(sbuf));
}
/* The sides differ (a gather's root that receives in place: its send type is the receive type): */
static inline rm_cf_t rm_cf_gather(const void *sbuf, MPI_Count scount, MPI_Datatype st, MPI_Count rcount,
                                   MPI_Datatype rt, int root) {
  return (rm_cf_t){sbuf, -1, root, rm_inplace(sbuf), scount, rcount, sbuf == MPI_IN_PLACE ? rt : st, rt};
}
static inline rm_cf_t rm_cf_scatter(const void *sbuf, MPI_Count scount, MPI_Datatype st, MPI_Count rcount,
                                    MPI_Datatype rt, int root) {
  return (rm_cf_t){sbuf, -1, root, 0, scount, rcount, st, rt};
}
static inline rm_cf_t rm_cf_barrier(void) {
  return (rm_cf_t){NULL, RMREC_MEM_UNKNOWN, 0, 0, 0, 0, MPI_BYTE, MPI_BYTE};
}
/* The collectives a code calls most often (a solver's dot products, a time step's broadcast), inline
 * in their wrappers: with the signature remembered they come to a few compares and adds, and a call
 * into another function with its register saves would be a good part of that. */
static inline __attribute__((always_inline))
uint64_t rm_acc_bcast(int op, const void *buf, MPI_Count count, MPI_Datatype t, int root, MPI_Comm comm) {
  return rm_coll_acc(op, comm, rm_cf_bcast(buf, count, t, root), rm_tsz(t, count));
}
static inline __attribute__((always_inline))
uint64_t rm_acc_reduce(int op, const void *sbuf, MPI_Count count, MPI_Datatype t, int root, MPI_Comm comm) {
  return rm_coll_acc(op, comm, rm_cf_reduce(sbuf, count, t, root), rm_tsz(t, count));
}
static inline __attribute__((always_inline))
uint64_t rm_acc_allreduce(int op, const void *sbuf, MPI_Count count, MPI_Datatype t, MPI_Comm comm) {
  return rm_coll_acc(op, comm, rm_cf_allreduce(sbuf, count, t), rm_tsz(t, count));
}
static inline __attribute__((always_inline)) uint64_t rm_acc_barrier(int op, MPI_Comm comm) {
  return rm_coll_acc(op, comm, rm_cf_barrier(), 0);
}
uint64_t rm_acc_gather(int op, const void *sbuf, MPI_Count scount, MPI_Datatype st, MPI_Count rcount, MPI_Datatype rt, int root, MPI_Comm comm);
uint64_t rm_acc_gatherv(int op, const void *sbuf, MPI_Count scount, MPI_Datatype st, rm_cv_t rcounts, MPI_Datatype rt, int root, MPI_Comm comm);
uint64_t rm_acc_scatter(int op, const void *sbuf, MPI_Count scount, MPI_Datatype st, MPI_Count rcount, MPI_Datatype rt, int root, MPI_Comm comm);
uint64_t rm_acc_scatterv(int op, const void *sbuf, rm_cv_t scounts, MPI_Datatype st, MPI_Count rcount, MPI_Datatype rt, int root, MPI_Comm comm);
uint64_t rm_acc_allgather(int op, const void *sbuf, MPI_Count rcount, MPI_Datatype rt, MPI_Comm comm);
uint64_t rm_acc_allgatherv(int op, const void *sbuf, rm_cv_t rcounts, MPI_Datatype rt, MPI_Comm comm);
uint64_t rm_acc_alltoall(int op, const void *sbuf, MPI_Count rcount, MPI_Datatype rt, MPI_Comm comm);
uint64_t rm_acc_alltoallv(int op, const void *sbuf, rm_cv_t scounts, MPI_Datatype st, rm_cv_t rcounts, MPI_Datatype rt, MPI_Comm comm);
uint64_t rm_acc_alltoallw(int op, const void *sbuf, rm_cv_t scounts, const MPI_Datatype *sts, rm_cv_t rcounts, const MPI_Datatype *rts, MPI_Comm comm);
uint64_t rm_acc_reduce_scatter(int op, const void *sbuf, rm_cv_t rcounts, MPI_Datatype t, MPI_Comm comm);
uint64_t rm_acc_reduce_scatter_block(int op, const void *sbuf, MPI_Count rcount, MPI_Datatype t, MPI_Comm comm);
uint64_t rm_acc_scan(int op, const void *sbuf, MPI_Count count, MPI_Datatype t, MPI_Comm comm);
/* neighbour collectives: kind 0 allgather, 1 allgatherv, 2 alltoall, 3 alltoallv, 4 alltoallw */
uint64_t rm_acc_neighbor(int op, int kind, const void *sbuf, MPI_Count scount, rm_cv_t scounts, MPI_Datatype st,
                         const MPI_Datatype *sts, MPI_Count rcount, rm_cv_t rcounts, MPI_Datatype rt,
                         const MPI_Datatype *rts, MPI_Comm comm);
/* one-sided: origin-side rows (send = origin->target, recv = target->origin) */
uint64_t rm_acc_rma(int op, const void *obuf, uint64_t sent, const void *rbuf, uint64_t got, int target, MPI_Win win);

#pragma GCC visibility pop

#endif
