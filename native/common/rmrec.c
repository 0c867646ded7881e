/*
 * rmrec.c -- rankmap record writer.  Format: docs/record-format.md.  API: rmrec.h.
 *
 * Hot path: rmrec_traffic / rmrec_call add into preallocated tables (an open-addressing hash
 * table for traffic rows, dense arrays for ops, a ring of timeline buckets): relaxed atomic adds,
 * or, when the caller declared a single writer, plain loads and stores (no lock prefix; the
 * counters stay _Atomic so the flusher's concurrent reads are well defined).  Every counter only
 * grows; a background thread appends the deltas since the previous flush as checksummed blocks,
 * so a killed process keeps everything up to its last flush.  The flusher never writes a counter
 * the hot path writes, which is what makes the single-writer mode exact.
 */
#define _GNU_SOURCE
#include "rmrec.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOCK_HDR RMREC_BLOCK_HDR_SIZE
#define BLOCK_MAX (1u << 20)   /* split large sections into blocks of about 1 MiB */

#define RMREC_ENUM_BT_(name, value, text) BT_##name = value,
enum { RMREC_BLOCKS(RMREC_ENUM_BT_) };
#define RMREC_SOURCE_NAME_(name, value, text) [value] = text,
static const char *const source_name[] = { RMREC_SOURCES(RMREC_SOURCE_NAME_) };

/* ---- rows (little-endian, packed; see docs/record-format.md) ------------------------- */

/* The structs are expanded from rmrec_layout.h, the declaration the Python reader parses too. */
#define FIELD_ RMREC_FIELD_
#define ARRAY_ RMREC_ARRAY_
#pragma pack(push, 1)
typedef struct { RMREC_ROW_HEADER(FIELD_, ARRAY_) } row_header_t;
typedef struct { RMREC_ROW_BLOCK(FIELD_, ARRAY_) } row_block_t;
typedef struct { RMREC_ROW_TRAFFIC(FIELD_, ARRAY_) } row_traffic_t;
typedef struct { RMREC_ROW_HIST(FIELD_, ARRAY_) } row_hist_t;
typedef struct { RMREC_ROW_OPTIME(FIELD_, ARRAY_) } row_optime_t;
typedef struct { RMREC_ROW_TIMELINE(FIELD_, ARRAY_) } row_timeline_t;
typedef struct { RMREC_ROW_FLUSH(FIELD_, ARRAY_) } row_flush_t;
typedef struct { RMREC_ROW_STRING_ENTRY(FIELD_, ARRAY_) } row_string_entry_t;
typedef struct { RMREC_ROW_META_ENTRY(FIELD_, ARRAY_) } row_meta_entry_t;
typedef struct { RMREC_ROW_COMM_ENTRY(FIELD_, ARRAY_) } row_comm_entry_t;
typedef struct { RMREC_ROW_CUDA_COPY(FIELD_, ARRAY_) } row_copy_t;
typedef struct { RMREC_ROW_CUDA_KERNEL_ENTRY(FIELD_, ARRAY_) } row_kernel_t;
#pragma pack(pop)
/* The sizes docs/record-format.md promises. */
_Static_assert(sizeof(row_header_t) == RMREC_HEADER_SIZE, "header");
_Static_assert(sizeof(row_block_t) == BLOCK_HDR, "block header");
_Static_assert(sizeof(row_traffic_t) == 32, "traffic row");
_Static_assert(sizeof(row_hist_t) == 16, "hist row");
_Static_assert(sizeof(row_optime_t) == 32, "optime row");
_Static_assert(sizeof(row_timeline_t) == 24, "timeline row");
_Static_assert(sizeof(row_flush_t) == 32, "flush row");
_Static_assert(sizeof(row_comm_entry_t) == 16, "comm entry head");
_Static_assert(sizeof(row_copy_t) == 48, "cuda copy row");
_Static_assert(sizeof(row_kernel_t) == 32, "cuda kernel entry head (name bytes follow)");

typedef rmrec_slot_t slot_t;
typedef rmrec_opstat_t opstat_t;
#define MAX_SHARDS 32           /* per-thread counter shards (1..31; 0 is the shared one): 5 key bits */
typedef struct pend { struct pend *next; uint32_t len; unsigned char data[]; } pend_t;
/* CUDA activity, summed since the last flush: a copy (type 1: a/b = source/destination device,
 * k = kind | src mem << 8 | dst mem << 16, v = count, bytes, ns) or a kernel (type 2: a = device,
 * b = name id or -1 for the per-bucket total, v = count, ns).  Emptied by every flush. */
typedef struct { uint8_t type; int64_t bucket; int32_t a, b; uint32_t k; uint64_t v[3]; } act_t;
typedef struct { act_t *e; uint32_t cap, n; } acttab_t;

struct rmrec {
  _Atomic int enabled, failed;
  int fd, source, world_rank, world_size;
  pid_t pid;
  char path[4096];
  uint64_t start_ns, start_wall_ns, bucket_ns, flush_ns, seq;
  int single;                         /* rmrec_single_writer: plain adds on the hot path */
  /* timeline bucket of a tick: (ticks - tick0) * buckets_per_tick_q64 >> 64 */
  uint64_t tick0;
  _Atomic uint64_t buckets_per_tick_q64;
  /* traffic hash table */
  uint64_t tmask;
  slot_t *tab;
  uint64_t (*tshadow)[2];
  /* the slots in use, in the order they were taken (index + 1; 0: being written): a flush walks
   * these, not the whole table (262144 slots by default, ~10 MB with the shadows, for the few
   * dozen rows of a job: 0.3 ms per flush and rank, every rank of a job at the same moment) */
  _Atomic uint64_t *used;
  _Atomic uint64_t nused;
  /* operations */
  pthread_mutex_t oplock;
  _Atomic int nops;
  int ops_emitted;
  char *opname[RMREC_MAX_OPS];
  opstat_t ops[RMREC_MAX_OPS];                 /* shard 0 */
  opstat_t *_Atomic shard_ops[MAX_SHARDS];      /* shards 1.., allocated when a thread asks */
  _Atomic int nshards;
  uint64_t opshadow[RMREC_MAX_OPS][3];
  uint64_t histshadow[RMREC_MAX_OPS][RMREC_HIST_BINS];
  /* timeline: ring of nring (a power of two) buckets x world_size peers x RMREC_NCLASS classes,
   * each cell a running total */
  int nring;
  _Atomic uint64_t *tl;
  uint64_t *tlshadow;                /* what was flushed of each timeline cell */
  /* CUDA activity rows and kernel names (under actlock) */
  pthread_mutex_t actlock;
  acttab_t act;
  int nnames;
  char *name[RMREC_MAX_NAMES];
  int name_next[RMREC_MAX_NAMES], name_head[2 * RMREC_MAX_NAMES];   /* chains of id + 1; 0 ends */
  /* pending variable-size records (meta, comm), emitted at the next flush */
  pend_t *meta, *comm;
  /* flushing */
  pthread_mutex_t flock;
  sem_t fsem;                         /* wakes the flush thread: its close, or a stop signal (sem_post
                                       * is async-signal-safe, a condition variable is not) */
  /* the source's flush hook and, while it runs, the flush's output buffer */
  void (*hook)(rmrec_t *, void *, int);
  void *hook_arg;
  struct obuf *out;
  pthread_t thread;
  int thread_started, stop, closed;
  uint64_t wakeups;                   /* flush-thread wake-ups, reported at close (flush_thread.wakeups) */
  void (*pre_flush)(void *);          /* rmrec_pre_flush: run by the flush thread before each flush */
  void *pre_flush_arg;
};

/* ---- small helpers ------------------------------------------------------------------ */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}
/* CRC-32 (IEEE, as zlib.crc32); crc = previous value, 0 to start. */
static uint32_t crc32_update(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  crc = ~crc;
  while (n--) crc = crc_table[(crc ^ *b++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

#ifdef RMREC_VIRTUAL_CLOCK
/* Benchmarks only (bench/rmrec_synth.c): time is what the caller sets, so an hour of a job's
 * records can be written in seconds by this very writer.  Needs RMREC_NO_TSC (ticks are ns). */
#if !RMREC_TICKS_ARE_NS
#error "RMREC_VIRTUAL_CLOCK needs RMREC_NO_TSC"
#endif
static _Atomic uint64_t virtual_ns = 1;
void rmrec_virtual_clock_set(uint64_t ns) { atomic_store(&virtual_ns, ns); }
uint64_t rmrec_now_ns(void) { return atomic_load(&virtual_ns); }
static uint64_t wall_ns(void) { return 1700000000000000000ull + atomic_load(&virtual_ns); }
#else
uint64_t rmrec_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#endif
/* a switch that is on unless set to "0" (RANKMAP_BUCKET_ALIGN, RANKMAP_FLUSH_ALIGN) */
static int env_on(const char *name) {
  const char *s = getenv(name);
  return !(s && strcmp(s, "0") == 0);
}
static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  return (*end || v == 0) ? dflt : (uint64_t)v;
}
static inline uint64_t mix64(uint64_t k) {
  k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ull; k ^= k >> 33;
  return k;
}
/* bucket = dt * buckets_per_tick (Q64 fixed point): no division on the hot path */
static inline uint64_t ticks_to_bucket(rmrec_t *c, uint64_t dt) {
  uint64_t q = atomic_load_explicit(&c->buckets_per_tick_q64, memory_order_relaxed);
  return (uint64_t)(((unsigned __int128)dt * q) >> 64);
}
/* Add v to a counter: a locked add, or, with a single writer, a plain load + store. */
static inline void bump(_Atomic uint64_t *p, uint64_t v, int single) {
  if (single) atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + v, memory_order_relaxed);
  else atomic_fetch_add_explicit(p, v, memory_order_relaxed);
}

/* ---- the shared tick clock (rmrec.h) -------------------------------------------------------- */

static pthread_once_t tk_once = PTHREAD_ONCE_INIT;
static uint64_t tk_ref, ns_ref;                        /* reference pair, taken once */
static _Atomic uint64_t ns_per_tk_q32 = 1ull << 32;    /* Q32.32 ratios, re-estimated */
static _Atomic uint64_t tk_per_ns_q32 = 1ull << 32;
static _Atomic int tk_calibrated = RMREC_TICKS_ARE_NS;

static void tk_init(void) { ns_ref = rmrec_now_ns(); tk_ref = rmrec_ticks(); }

void rmrec_ticks_calibrate(uint64_t min_span_ns) {
  pthread_once(&tk_once, tk_init);
#if !RMREC_TICKS_ARE_NS
  uint64_t n1 = rmrec_now_ns();
  while (min_span_ns && n1 - ns_ref < min_span_ns) n1 = rmrec_now_ns();
  uint64_t t1 = rmrec_ticks();      /* same read order as the reference: the skews cancel */
  uint64_t dt = t1 - tk_ref, dn = n1 - ns_ref;
  if (dn > 0 && (int64_t)dt > 0) {           /* a TSC that went backwards: keep the old ratio */
    atomic_store_explicit(&ns_per_tk_q32, (uint64_t)(((unsigned __int128)dn << 32) / dt), memory_order_relaxed);
    atomic_store_explicit(&tk_per_ns_q32, (uint64_t)(((unsigned __int128)dt << 32) / dn), memory_order_relaxed);
    atomic_store_explicit(&tk_calibrated, 1, memory_order_release);
  }
#else
  (void)min_span_ns;
#endif
}
static inline void tk_ready(void) {   /* a conversion before any estimate: make one (1 ms, once) */
  if (!atomic_load_explicit(&tk_calibrated, memory_order_acquire)) rmrec_ticks_calibrate(1000000);
}
uint64_t rmrec_ticks_to_ns(uint64_t dt) {
  tk_ready();
  uint64_t q = atomic_load_explicit(&ns_per_tk_q32, memory_order_relaxed);
  return (uint64_t)(((unsigned __int128)dt * q) >> 32);
}
uint64_t rmrec_ns_to_ticks(uint64_t ns) {
  tk_ready();
  uint64_t q = atomic_load_explicit(&tk_per_ns_q32, memory_order_relaxed);
  return (uint64_t)(((unsigned __int128)ns * q) >> 32);
}
uint64_t rmrec_ticks_to_mono_ns(uint64_t t) {
  tk_ready();
  pthread_once(&tk_once, tk_init);
  return t >= tk_ref ? ns_ref + rmrec_ticks_to_ns(t - tk_ref) : ns_ref - rmrec_ticks_to_ns(tk_ref - t);
}

/* ---- failure and fork handling ------------------------------------------------------ */

#define MAX_OPEN 64   /* the MPI shim's file and one NCCL file per GPU of the process */
static rmrec_t *open_list[MAX_OPEN];
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

void rmrec_fail(rmrec_t *c, const char *why) {
  if (!c) return;
  atomic_store(&c->enabled, 0);
  if (atomic_exchange(&c->failed, 1) == 0) {
    char line[512];
    int n = snprintf(line, sizeof line, "rankmap: capture disabled: %s\n", why);
    if (n > 0) { ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1); (void)w; }
  }
}
static void failf(rmrec_t *c, const char *fmt, ...) {
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  rmrec_fail(c, why);
}
int rmrec_enabled(const rmrec_t *c) { return c && atomic_load_explicit(&c->enabled, memory_order_relaxed); }
void rmrec_single_writer(rmrec_t *c, int on) { if (c) c->single = on != 0; }
void rmrec_pre_flush(rmrec_t *c, void (*fn)(void *), void *arg) {
  if (!c) return;
  pthread_mutex_lock(&c->flock);
  c->pre_flush_arg = arg;
  c->pre_flush = fn;
  pthread_mutex_unlock(&c->flock);
}

static void stop_signals_give_back(void);
static volatile sig_atomic_t sig_noted;

/* The child of a fork must never write the parent's file, and has no flush thread. */
static void atfork_child(void) {
  for (int i = 0; i < MAX_OPEN; i++) {
    rmrec_t *c = open_list[i];
    if (!c) continue;
    atomic_store(&c->enabled, 0);
    atomic_store(&c->failed, 1);        /* silent: forking is not a failure */
    c->thread_started = 0;
    c->closed = 1;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    pthread_mutex_init(&c->flock, NULL);
    pthread_mutex_init(&c->oplock, NULL);
    pthread_mutex_init(&c->actlock, NULL);
    open_list[i] = NULL;
  }
  pthread_mutex_init(&open_lock, NULL);
  stop_signals_give_back();    /* the child has no flush thread to act on a noted signal */
  sig_noted = 0;
}
static void atfork_prepare(void) { pthread_mutex_lock(&open_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&open_lock); }
static void at_exit(void) {   /* exit() without close: keep what was counted */
  for (int i = 0; i < MAX_OPEN; i++) if (open_list[i] && open_list[i]->pid == getpid()) rmrec_flush(open_list[i]);
}
static void fork_init(void) {
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
  atexit(at_exit);
}

/* ---- a stop signal keeps what was counted ---------------------------------------------
 * SIGINT, SIGTERM and SIGHUP (Ctrl-C, mpirun or srun stopping the job) would end the process
 * between two flushes and lose what it counted since the last one. Where the application left
 * such a signal at its default, the handler only notes it and puts the default back (a second
 * signal ends the process at once) and wakes the flush threads; one of them flushes every open
 * record of the process and raises the signal again, so the process ends by it as it would have.
 * An application's own handler is never replaced.
 * Before raising it waits until RANKMAP_SIGNAL_LINGER_MS (default 250) have passed since the
 * signal: a launcher that sees one rank end kills the others outright (MPICH's hydra sends SIGKILL
 * the moment the first rank dies), and a flush takes milliseconds, so the rank that flushed first
 * would otherwise cost every slower rank of the job what it counted since its last flush. */
static const int stop_sigs[] = { SIGINT, SIGTERM, SIGHUP };
#define NSTOP ((int)(sizeof stop_sigs / sizeof *stop_sigs))
static volatile sig_atomic_t sig_noted;
static struct timespec sig_when;     /* CLOCK_MONOTONIC when the signal came */
static int sig_ours[NSTOP];
static void on_stop(int sig) {
  struct sigaction d;
  memset(&d, 0, sizeof d);
  d.sa_handler = SIG_DFL;
  sigaction(sig, &d, NULL);
  clock_gettime(CLOCK_MONOTONIC, &sig_when);   /* async-signal-safe, as sem_post is */
  sig_noted = sig;
  /* wake the flush threads now, not at their next bucket (up to 100 ms away): see above */
  for (int i = 0; i < MAX_OPEN; i++) {
    rmrec_t *o = open_list[i];        /* records are never freed: a stale pointer is still a record */
    if (o && o->pid == getpid()) sem_post(&o->fsem);
  }
}
static void stop_signals_take(void) __attribute__((unused));   /* unused on a virtual clock */
static void stop_signals_take(void) {
  for (int i = 0; i < NSTOP; i++) {
    struct sigaction old, a;
    if (sigaction(stop_sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
    memset(&a, 0, sizeof a);
    a.sa_handler = on_stop;
    sigemptyset(&a.sa_mask);
    sig_ours[i] = sigaction(stop_sigs[i], &a, NULL) == 0;
  }
}
/* Put the defaults back where the handler is still ours (the last record closed, or a forked child). */
static void stop_signals_give_back(void) {
  for (int i = 0; i < NSTOP; i++) {
    struct sigaction old, d;
    if (!sig_ours[i]) continue;
    sig_ours[i] = 0;
    if (sigaction(stop_sigs[i], NULL, &old) != 0 || old.sa_handler != on_stop) continue;
    memset(&d, 0, sizeof d);
    d.sa_handler = SIG_DFL;
    sigaction(stop_sigs[i], &d, NULL);
  }
}
/* ts + ns, normalised */
static struct timespec ts_add(struct timespec ts, uint64_t ns) {
  uint64_t t = (uint64_t)ts.tv_nsec + ns;
  ts.tv_sec += (time_t)(t / 1000000000ull);
  ts.tv_nsec = (long)(t % 1000000000ull);
  return ts;
}
/* The one way a noted stop signal ends the process: RANKMAP_SIGNAL_LINGER_MS after it came (see
 * above), then the signal again, at its default by now. */
static void raise_after_linger(int sig) {
  struct timespec until = ts_add(sig_when, env_u64("RANKMAP_SIGNAL_LINGER_MS", 250) * 1000000ull);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {}
  raise(sig);
}
static pthread_once_t sig_once = PTHREAD_ONCE_INIT;
static atomic_int sig_acting;
static void flush_impl(rmrec_t *c, int final);

/* Called by the flush thread of c (c->flock held) once a stop signal was noted: every open record
 * of the process flushed, then the signal raised again (its default now: the process ends by it).
 * One thread acts; the others go back to their wait, which lets it take their locks. */
static void act_on_signal(rmrec_t *c) {
  int expect = 0;
  if (!atomic_compare_exchange_strong(&sig_acting, &expect, 1)) return;
  int sig = sig_noted;
  flush_impl(c, 0);
  pthread_mutex_lock(&open_lock);
  for (int i = 0; i < MAX_OPEN; i++) {
    rmrec_t *o = open_list[i];
    if (!o || o == c || o->pid != getpid()) continue;
    pthread_mutex_lock(&o->flock);
    if (!o->closed) flush_impl(o, 0);
    pthread_mutex_unlock(&o->flock);
  }
  pthread_mutex_unlock(&open_lock);
  raise_after_linger(sig);
}

/* ---- output buffer with block framing ------------------------------------------------ */

typedef struct obuf { unsigned char *p; size_t len, cap, blk; int type, oom; } obuf_t;

static void ob_reserve(obuf_t *b, size_t n) {
  if (b->oom || b->len + n <= b->cap) return;
  size_t cap = b->cap ? b->cap : 65536;
  while (cap < b->len + n) cap *= 2;
  unsigned char *q = realloc(b->p, cap);
  if (!q) { b->oom = 1; return; }
  b->p = q; b->cap = cap;
}
static void ob_put(obuf_t *b, const void *d, size_t n) {
  ob_reserve(b, n);
  if (b->oom) return;
  memcpy(b->p + b->len, d, n);
  b->len += n;
}
static void blk_begin(obuf_t *b, int type) {
  static const unsigned char zero[BLOCK_HDR];
  b->blk = b->len; b->type = type;
  ob_put(b, zero, BLOCK_HDR);
}
static void blk_end(obuf_t *b) {
  if (b->oom || b->type == 0) return;
  unsigned char *h = b->p + b->blk;
  uint32_t len = (uint32_t)(b->len - b->blk - BLOCK_HDR);
  if (len == 0) { b->len = b->blk; b->type = 0; return; }   /* drop empty blocks */
  row_block_t bh = {0};
  memcpy(bh.magic, "RMBK", 4);
  bh.type = (uint16_t)b->type; bh.length = len;
  bh.crc = crc32_update(crc32_update(0, &bh.type, offsetof(row_block_t, crc) - offsetof(row_block_t, type)),
                        h + BLOCK_HDR, len);
  memcpy(h, &bh, sizeof bh);
  b->type = 0;
}
/* Start a new block of the same type when the current one has grown past BLOCK_MAX. */
static void blk_row(obuf_t *b, int type, const void *row, size_t n) {
  if (b->type != type) { if (b->type) blk_end(b); blk_begin(b, type); }
  else if (b->len - b->blk > BLOCK_MAX) { blk_end(b); blk_begin(b, type); }
  ob_put(b, row, n);
}

/* ---- open ---------------------------------------------------------------------------- */

/* Refine the shared tick clock (waiting until min_span_ns since its reference) and derive the
 * bucket ratio of c from it. */
static void calibrate(rmrec_t *c, uint64_t min_span_ns) {
  rmrec_ticks_calibrate(min_span_ns);
  unsigned __int128 q = ((unsigned __int128)atomic_load(&ns_per_tk_q32) << 32) / c->bucket_ns;
  atomic_store(&c->buckets_per_tick_q64, q >> 64 ? UINT64_MAX : (uint64_t)q);
}

static void *flush_thread(void *arg) __attribute__((unused));   /* unused on a virtual clock */

static rmrec_t *open_impl(const char *dir, const char *source, int world_rank, int world_size, int unique);

rmrec_t *rmrec_open(const char *dir, const char *source, int world_rank, int world_size) {
  return open_impl(dir, source, world_rank, world_size, 0);
}
rmrec_t *rmrec_open_unique(const char *dir, const char *source, int world_rank, int world_size) {
  return open_impl(dir, source, world_rank, world_size, 1);
}

static rmrec_t *open_impl(const char *dir, const char *source, int world_rank, int world_size, int unique) {
  if (!dir || !*dir) return NULL;
  pthread_once(&crc_once, crc_init);
  rmrec_t *c = calloc(1, sizeof *c);
  if (!c) { fprintf(stderr, "rankmap: capture disabled: out of memory\n"); return NULL; }
  c->fd = -1;
  c->failed = 0;
  c->source = RMREC_SRC_MPI;
  for (int i = 0; i < (int)(sizeof source_name / sizeof *source_name); i++)
    if (source && strcmp(source, source_name[i]) == 0) c->source = i;
  c->world_rank = world_rank;
  c->world_size = world_size > 0 ? world_size : 1;
  c->pid = getpid();
  pthread_mutex_init(&c->oplock, NULL);
  pthread_mutex_init(&c->flock, NULL);
  pthread_mutex_init(&c->actlock, NULL);
  sem_init(&c->fsem, 0, 0);
  c->bucket_ns = env_u64("RANKMAP_BUCKET_MS", 100) * 1000000ull;
  c->flush_ns = env_u64("RANKMAP_FLUSH_MS", 1000) * 1000000ull;
  uint64_t slots = env_u64("RANKMAP_TABLE_SLOTS", 1u << 18);
  while (slots & (slots - 1)) slots &= slots - 1;     /* round down to a power of two */
  if (slots < 1024) slots = 1024;
  c->tmask = slots - 1;

  /* calloc'ed tables are mapped lazily: untouched pages cost nothing */
  c->tab = calloc(slots, sizeof *c->tab);
  c->tshadow = calloc(slots, sizeof *c->tshadow);
  c->used = calloc(slots, sizeof *c->used);
  /* ring long enough to cover two flush intervals between flushes */
  uint64_t ring = 2 * c->flush_ns / c->bucket_ns + 4;
  if (ring > 4096) ring = 4096;
  while (ring & (ring - 1)) ring += ring & -ring;    /* round up to a power of two: a mask, */
  c->nring = (int)ring;                                /* not a division, on the hot path   */
  size_t tlcells = (size_t)c->nring * (size_t)c->world_size * RMREC_NCLASS;
  c->tl = tlcells <= (1ull << 27) ? calloc(tlcells, sizeof *c->tl) : NULL;
  c->tlshadow = c->tl ? calloc(tlcells, sizeof *c->tlshadow) : NULL;
  if (!c->tlshadow) { free(c->tl); c->tl = NULL; }

  if (!c->tab || !c->tshadow || !c->used) {
    fprintf(stderr, "rankmap: capture disabled: out of memory for %llu table slots\n", (unsigned long long)slots);
    return NULL;
  }
  { /* mkdir -p */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *s = tmp + 1; ; s++) {
      if (*s != '/' && *s) continue;
      char ch = *s;
      *s = 0;
      if (mkdir(tmp, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "rankmap: capture disabled: cannot create run directory %s: %s\n", dir, strerror(errno));
        return NULL;
      }
      if (!ch) break;
      *s = ch;
    }
  }
  const char *src_name = source_name[c->source];
  snprintf(c->path, sizeof c->path, "%s/rank-%d.%s.rmrec", dir, world_rank, src_name);
  if (!unique) {
    c->fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0666);
  } else {   /* never clobber: rank-<r>.<src>.rmrec, else rank-<r>-<pid>-<k>.<src>.rmrec */
    c->fd = open(c->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
    for (int k = 1; c->fd < 0 && errno == EEXIST && k < 1000; k++) {
      snprintf(c->path, sizeof c->path, "%s/rank-%d-%d-%d.%s.rmrec", dir, world_rank, (int)c->pid, k, src_name);
      c->fd = open(c->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
    }
  }
  if (c->fd < 0) {
    fprintf(stderr, "rankmap: capture disabled: cannot write %s: %s\n", c->path, strerror(errno));
    return NULL;
  }

  /* header */
  row_header_t h;
  memset(&h, 0, sizeof h);
  uint64_t w0 = wall_ns(), m0 = rmrec_now_ns(), t0 = rmrec_ticks();
  calibrate(c, 1000000);   /* the tick clock's first estimate spans >= 1 ms; every flush refines it */
  /* Bucket 0 starts at the last multiple of bucket_ns on the wall clock before the rank's start, so
   * the ranks of a job (one clock per node, NTP across nodes) share their bucket boundaries, and their
   * flush threads, which wake at every boundary, wake together: a lockstep job is then held once per
   * bucket, not once per rank and bucket.  The record's start (header start_ns) is that boundary, at
   * most one bucket before the rank's first instruction of capture.  RANKMAP_BUCKET_ALIGN=0: the
   * rank's own start. */
  uint64_t lead = env_on("RANKMAP_BUCKET_ALIGN") ? w0 % c->bucket_ns : 0;
  if (lead > m0) lead = 0;
  c->start_wall_ns = w0 - lead;
  c->start_ns = m0 - lead;
  c->tick0 = t0 - rmrec_ns_to_ticks(lead);
  memcpy(h.magic, "RMREC\r\n\x1a", 8);
  h.version = RMREC_VERSION; h.header_size = RMREC_HEADER_SIZE; h.source = (uint8_t)c->source;
  h.world_rank = world_rank; h.world_size = world_size; h.pid = c->pid;
  h.start_ns = (int64_t)c->start_wall_ns; h.bucket_ns = (int64_t)c->bucket_ns;
  gethostname((char *)h.host, sizeof h.host - 1);
  h.host[sizeof h.host - 1] = 0;
  h.crc = crc32_update(0, &h, offsetof(row_header_t, crc));
  if (write(c->fd, &h, sizeof h) != (ssize_t)sizeof h) {
    fprintf(stderr, "rankmap: capture disabled: cannot write %s: %s\n", c->path, strerror(errno));
    close(c->fd);
    return NULL;
  }
  if (!c->tl) rmrec_meta(c, "timeline", "disabled: world too large for the bucket ring");

  pthread_once(&fork_once, fork_init);
  pthread_mutex_lock(&open_lock);
  for (int i = 0; i < MAX_OPEN; i++) if (!open_list[i]) { open_list[i] = c; break; }
  pthread_mutex_unlock(&open_lock);

  atomic_store(&c->enabled, 1);
#ifndef RMREC_VIRTUAL_CLOCK   /* on a virtual clock the caller flushes, at its own instants */
  if (pthread_create(&c->thread, NULL, flush_thread, c) == 0) {
    c->thread_started = 1;
    if (!getenv("RANKMAP_KEEP_SIGNALS")) pthread_once(&sig_once, stop_signals_take);
  } else rmrec_meta(c, "flush_thread", "not started: flushes only at close");
#endif
  return c;
}

/* ---- hot path ------------------------------------------------------------------------ */

void rmrec_traffic(rmrec_t *c, int peer, int klass, int op, int mem, int dir, uint64_t bytes, uint64_t msgs) {
  if (!c || !atomic_load_explicit(&c->enabled, memory_order_relaxed)) return;
  rmrec_traffic_at(c, peer, klass, op, mem, dir, bytes, msgs, dir == RMREC_SEND ? rmrec_ticks() : 0);
}

static inline void timeline_add(rmrec_t *c, int peer, int klass, uint64_t bytes, uint64_t ticks, int single) {
  _Atomic uint64_t *cell = bytes ? rmrec_tl_cell(c, peer, klass, ticks) : NULL;
  if (cell) bump(cell, bytes, single);
}

void rmrec_timeline_at(rmrec_t *c, int peer, int klass, uint64_t bytes, uint64_t ticks) {
  if (!c || !atomic_load_explicit(&c->enabled, memory_order_relaxed)) return;
  timeline_add(c, peer, klass, bytes, ticks, c->single);
}

void rmrec_traffic_at(rmrec_t *c, int peer, int klass, int op, int mem, int dir, uint64_t bytes, uint64_t msgs,
                      uint64_t ticks) {
  rmrec_traffic_from(c, peer, klass, op, mem, dir, bytes, msgs, ticks, RMREC_ORIGIN_CALL);
}

/* Traffic row keys: bit 63 set (never 0), shard in bits 58-62, origin 56-57, peer 24-55, op 8-23,
 * class 4-7, mem 1-3, dir 0. */
void rmrec_traffic_from(rmrec_t *c, int peer, int klass, int op, int mem, int dir, uint64_t bytes, uint64_t msgs,
                        uint64_t ticks, int origin) {
  if (!c || !atomic_load_explicit(&c->enabled, memory_order_relaxed)) return;
  slot_t *s = rmrec_slot(c, 0, origin, peer, klass, op, mem, dir);
  if (!s) return;
  int single = c->single;
  bump(&s->bytes, bytes, single);
  bump(&s->msgs, msgs, single);
  if (dir == RMREC_SEND) timeline_add(c, peer, klass, bytes, ticks, single);
}

rmrec_slot_t *rmrec_slot(rmrec_t *c, int shard, int origin, int peer, int klass, int op, int mem, int dir) {
  if (!c || !atomic_load_explicit(&c->enabled, memory_order_relaxed)) return NULL;
  uint64_t key = (1ull << 63) | ((uint64_t)(shard & 0x1f) << 58) | ((uint64_t)(origin & 3) << 56) |
                 ((uint64_t)(uint32_t)peer << 24) | ((uint64_t)(op & 0xffff) << 8) | ((uint64_t)(klass & 0xf) << 4) |
                 ((uint64_t)(mem & 0x7) << 1) | (uint64_t)(dir & 1);
  uint64_t i = mix64(key) & c->tmask;
  for (unsigned probe = 0; probe < 4096; probe++, i = (i + 1) & c->tmask) {
    slot_t *s = &c->tab[i];
    uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
    if (k == 0) {
      uint64_t expect = 0;
      if (atomic_compare_exchange_strong(&s->key, &expect, key)) {
        k = key;          /* each slot is taken once: fewer entries than slots, never past the end */
        uint64_t n = atomic_fetch_add_explicit(&c->nused, 1, memory_order_relaxed);
        atomic_store_explicit(&c->used[n], i + 1, memory_order_release);
      } else k = expect;
    }
    if (k == key) return s;
  }
  failf(c, "traffic table full (%llu slots); set RANKMAP_TABLE_SLOTS larger", (unsigned long long)c->tmask + 1);
  return NULL;
}

_Atomic uint64_t *rmrec_tl_cell(rmrec_t *c, int peer, int klass, uint64_t ticks) {
  if (!c || !c->tl || peer < 0 || peer >= c->world_size) return NULL;
  uint64_t b = ticks_to_bucket(c, ticks - c->tick0);
  size_t cell = ((size_t)(b & (uint64_t)(c->nring - 1)) * (size_t)c->world_size + (size_t)peer) * RMREC_NCLASS + (klass & 3);
  return &c->tl[cell];
}

int rmrec_shard(rmrec_t *c) {
  if (!c) return 0;
  int s = atomic_fetch_add(&c->nshards, 1) + 1;
  if (s >= MAX_SHARDS) return 0;
  opstat_t *o = calloc(RMREC_MAX_OPS, sizeof *o);
  if (!o) return 0;
  atomic_store_explicit(&c->shard_ops[s], o, memory_order_release);
  return s;
}

rmrec_opstat_t *rmrec_opstats(rmrec_t *c, int shard) {
  if (!c || shard < 0 || shard >= MAX_SHARDS) return NULL;
  return shard ? atomic_load_explicit(&c->shard_ops[shard], memory_order_acquire) : c->ops;
}

void rmrec_call(rmrec_t *c, int op, uint64_t payload, uint64_t ticks) {
  if (!c || !atomic_load_explicit(&c->enabled, memory_order_relaxed)) return;
  if ((unsigned)op >= RMREC_MAX_OPS) return;
  opstat_t *o = &c->ops[op];
  int single = c->single;
  bump(&o->ticks, ticks, single);
  bump(&o->bytes, payload, single);
  bump(&o->hist[rmrec_hist_bin(payload)], 1, single);
}

/* ---- registration of names, communicators, meta ----------------------------------------- */

int rmrec_op(rmrec_t *c, const char *name) {
  if (!c || !name) return 0;
  pthread_mutex_lock(&c->oplock);
  int n = atomic_load(&c->nops), id = -1;
  for (int i = 0; i < n; i++) if (strcmp(c->opname[i], name) == 0) { id = i; break; }
  if (id < 0 && n < RMREC_MAX_OPS) {
    c->opname[n] = strdup(name);
    if (c->opname[n]) { id = n; atomic_store(&c->nops, n + 1); }
  }
  pthread_mutex_unlock(&c->oplock);
  if (id < 0) { failf(c, "more than %d operation names", RMREC_MAX_OPS); id = 0; }
  return id;
}

static void pend_push(rmrec_t *c, pend_t **list, const void *a, uint32_t na, const void *b, uint32_t nb,
                      const void *d, uint32_t nd) {
  pend_t *p = malloc(sizeof *p + na + nb + nd);
  if (!p) return;
  p->len = na + nb + nd;
  memcpy(p->data, a, na);
  if (nb) memcpy(p->data + na, b, nb);
  if (nd) memcpy(p->data + na + nb, d, nd);
  pthread_mutex_lock(&c->oplock);
  p->next = NULL;
  pend_t **t = list;            /* keep order: later values win in the reader */
  while (*t) t = &(*t)->next;
  *t = p;
  pthread_mutex_unlock(&c->oplock);
}

void rmrec_meta(rmrec_t *c, const char *key, const char *value) {
  if (!c || !key) return;
  if (!value) value = "";
  row_meta_entry_t e = { (uint32_t)strlen(key), (uint32_t)strlen(value) };
  pend_push(c, &c->meta, &e, sizeof e, key, e.key_length, value, e.value_length);
}

void rmrec_comm(rmrec_t *c, uint64_t id, const char *name, int size, const int *world_ranks) {
  if (!c || size < 0) return;
  if (!name) name = "";
  row_comm_entry_t e = { id, (uint32_t)size, (uint32_t)strlen(name) };
  /* the entry head, the name, then i32 members[size] */
  pend_push(c, &c->comm, &e, sizeof e, name, e.name_length, world_ranks, (uint32_t)size * 4);
}

/* ---- CUDA activity (not a hot path: called from the activity buffer thread) ---------------- */

static int64_t bucket_of(const rmrec_t *c, uint64_t mono_ns) {
  if (!mono_ns) return -1;
  return mono_ns <= c->start_ns ? 0 : (int64_t)((mono_ns - c->start_ns) / c->bucket_ns);
}
static int act_same(const act_t *e, const act_t *q) {
  return e->type == q->type && e->bucket == q->bucket && e->a == q->a && e->b == q->b && e->k == q->k;
}
static uint64_t act_hash(const act_t *q) {
  return mix64(((uint64_t)q->bucket * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(uint32_t)q->a << 32 | (uint32_t)q->b) ^
               ((uint64_t)q->k << 8 | q->type));
}
/* Add q's values to its row (actlock held); the table doubles at half full.  0: out of memory. */
static int act_add(rmrec_t *c, const act_t *q) {
  acttab_t *t = &c->act;
  if (2 * (t->n + 1) > t->cap) {
    uint32_t cap = t->cap ? 2 * t->cap : 1024;
    act_t *e = calloc(cap, sizeof *e);
    if (!e) return 0;
    for (uint32_t i = 0; i < t->cap; i++) {
      if (!t->e[i].type) continue;
      uint64_t j = act_hash(&t->e[i]) & (cap - 1);
      while (e[j].type) j = (j + 1) & (cap - 1);
      e[j] = t->e[i];
    }
    free(t->e);
    t->e = e; t->cap = cap;
  }
  uint64_t j = act_hash(q) & (t->cap - 1);
  while (t->e[j].type && !act_same(&t->e[j], q)) j = (j + 1) & (t->cap - 1);
  if (!t->e[j].type) { t->e[j] = *q; memset(t->e[j].v, 0, sizeof t->e[j].v); t->n++; }
  for (int i = 0; i < 3; i++) t->e[j].v[i] += q->v[i];
  return 1;
}

void rmrec_copy(rmrec_t *c, uint64_t start_mono_ns, int kind, int src_mem, int dst_mem, int src_dev, int dst_dev,
                uint64_t bytes, uint64_t count, uint64_t ns) {
  if (!c || !atomic_load_explicit(&c->enabled, memory_order_relaxed)) return;
  act_t q = { .type = 1, .bucket = bucket_of(c, start_mono_ns), .a = src_dev, .b = dst_dev,
              .k = (uint32_t)(kind & 0xff) | (uint32_t)(src_mem & 0xff) << 8 | (uint32_t)(dst_mem & 0xff) << 16,
              .v = { count, bytes, ns } };
  pthread_mutex_lock(&c->actlock);
  int ok = act_add(c, &q);
  pthread_mutex_unlock(&c->actlock);
  if (!ok) rmrec_fail(c, "out of memory for CUDA activity rows");
}

void rmrec_kernel(rmrec_t *c, uint64_t start_mono_ns, int dev, int name_id, uint64_t ns) {
  if (!c || !atomic_load_explicit(&c->enabled, memory_order_relaxed)) return;
  act_t per_name = { .type = 2, .bucket = -1, .a = dev, .b = name_id, .v = { 1, ns, 0 } };
  act_t per_bucket = { .type = 2, .bucket = bucket_of(c, start_mono_ns), .a = dev, .b = -1, .v = { 1, ns, 0 } };
  pthread_mutex_lock(&c->actlock);
  int ok = act_add(c, &per_name) && (per_bucket.bucket < 0 || act_add(c, &per_bucket));
  pthread_mutex_unlock(&c->actlock);
  if (!ok) rmrec_fail(c, "out of memory for CUDA activity rows");
}

int rmrec_name(rmrec_t *c, const char *name) {
  if (!c) return 0;
  if (!name) name = "(unnamed)";
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 1099511628211ull;
  int slot = (int)(h & (2 * RMREC_MAX_NAMES - 1)), id = -1;
  pthread_mutex_lock(&c->actlock);
  for (int i = c->name_head[slot] - 1; i >= 0; i = c->name_next[i] - 1)
    if (strcmp(c->name[i], name) == 0) { id = i; break; }
  if (id < 0 && c->nnames < RMREC_MAX_NAMES - 1) {
    char *d = strdup(name);
    if (d) {
      id = c->nnames++;
      c->name[id] = d;
      c->name_next[id] = c->name_head[slot];
      c->name_head[slot] = id + 1;
    }
  }
  if (id < 0) {            /* full (or out of memory): the last id collects the rest */
    id = RMREC_MAX_NAMES - 1;
    if (!c->name[id]) c->name[id] = (char *)"(other kernels)";
  }
  pthread_mutex_unlock(&c->actlock);
  return id;
}

/* Append the activity rows summed since the last flush, and empty the table. */
static void flush_activity(rmrec_t *c, obuf_t *b) {
  pthread_mutex_lock(&c->actlock);
  acttab_t t = c->act;
  c->act.n = 0;
  if (t.n) { c->act.e = calloc(t.cap, sizeof *c->act.e); if (!c->act.e) c->act.cap = 0; }
  pthread_mutex_unlock(&c->actlock);
  if (!t.n) return;
  for (int type = 1; type <= 2; type++) {
    for (uint32_t i = 0; i < t.cap; i++) {
      const act_t *e = &t.e[i];
      if (e->type != type) continue;
      if (type == 1) {
        row_copy_t r = {0};
        r.bucket = e->bucket; r.kind = (uint8_t)e->k; r.src_mem = (uint8_t)(e->k >> 8); r.dst_mem = (uint8_t)(e->k >> 16);
        r.src_dev = e->a; r.dst_dev = e->b; r.count = e->v[0]; r.bytes = e->v[1]; r.ns = e->v[2];
        blk_row(b, BT_CUDA_COPY, &r, sizeof r);
      } else {
        /* names are never freed or changed once set: reading one without the lock is safe */
        const char *nm = e->b >= 0 && e->b < RMREC_MAX_NAMES && c->name[e->b] ? c->name[e->b] : "";
        size_t nl = e->b >= 0 ? strnlen(nm, 4096) : 0;
        unsigned char row[sizeof(row_kernel_t) + 4096];
        row_kernel_t r = { .bucket = e->bucket, .device = e->a, .name_length = (uint32_t)nl, .count = e->v[0],
                           .ns = e->v[1] };
        memcpy(row, &r, sizeof r);
        memcpy(row + sizeof r, nm, nl);
        blk_row(b, BT_CUDA_KERNEL, row, sizeof r + nl);
      }
    }
    blk_end(b);
  }
  free(t.e);
}

/* ---- flush --------------------------------------------------------------------------- */

static void write_all(rmrec_t *c, const unsigned char *p, size_t n) {
  while (n) {
    ssize_t w = write(c->fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) { failf(c, "cannot write %s: %s", c->path, w < 0 ? strerror(errno) : "short write"); return; }
    p += w; n -= (size_t)w;
  }
}

/* a counter of op summed over the shards (off: its offset in opstat_t) */
static uint64_t shard_sum(opstat_t *const *sh, int n, int op, size_t off) {
  uint64_t sum = 0;
  for (int k = 0; k < n; k++)
    sum += atomic_load_explicit((_Atomic uint64_t *)((char *)&sh[k][op] + off), memory_order_relaxed);
  return sum;
}

static void flush_impl(rmrec_t *c, int final) {
  if (c->fd < 0 || c->pid != getpid()) return;
  if (atomic_load(&c->failed)) return;
  obuf_t b = {0};
  calibrate(c, 0);

  /* operation names registered since the last flush */
  pthread_mutex_lock(&c->oplock);
  int nops = atomic_load(&c->nops);
  for (int i = c->ops_emitted; i < nops; i++) {
    row_string_entry_t e = { (uint32_t)i, (uint32_t)strlen(c->opname[i]) };
    if (b.type != BT_STRINGS) blk_begin(&b, BT_STRINGS);
    ob_put(&b, &e, sizeof e); ob_put(&b, c->opname[i], e.length);
  }
  c->ops_emitted = nops;
  pend_t *meta = c->meta, *comm = c->comm;
  c->meta = c->comm = NULL;
  pthread_mutex_unlock(&c->oplock);
  blk_end(&b);
  for (pend_t *p = meta, *n; p; p = n) { n = p->next; blk_row(&b, BT_META, p->data, p->len); free(p); }
  blk_end(&b);
  for (pend_t *p = comm, *n; p; p = n) { n = p->next; blk_row(&b, BT_COMM, p->data, p->len); free(p); }
  blk_end(&b);

  /* traffic rows: delta against what was flushed before */
  uint64_t nused = atomic_load_explicit(&c->nused, memory_order_acquire);
  for (uint64_t u = 0; u < nused; u++) {
    uint64_t iu = atomic_load_explicit(&c->used[u], memory_order_acquire);
    if (!iu) continue;                /* its taker is between the count and the index: next flush */
    uint64_t i = iu - 1;              /* published after its key: the key is set */
    uint64_t key = atomic_load_explicit(&c->tab[i].key, memory_order_relaxed);
    uint64_t by = atomic_load_explicit(&c->tab[i].bytes, memory_order_relaxed);
    uint64_t ms = atomic_load_explicit(&c->tab[i].msgs, memory_order_relaxed);
    uint64_t db = by - c->tshadow[i][0], dm = ms - c->tshadow[i][1];
    if (!db && !dm) continue;
    c->tshadow[i][0] = by; c->tshadow[i][1] = ms;
    row_traffic_t r = {0};      /* shards of one row become rows of their own; readers sum them */
    r.peer = (int32_t)(uint32_t)(key >> 24);
    r.op = (uint16_t)(key >> 8);
    r.klass = (uint8_t)((key >> 4) & 0xf);
    r.mem = (uint8_t)((key >> 1) & 0x7);
    r.dir = (uint8_t)(key & 1);
    r.origin = (uint8_t)((key >> 56) & 3);
    r.bytes = db; r.msgs = dm;
    blk_row(&b, BT_TRAFFIC, &r, sizeof r);
  }
  blk_end(&b);

  /* per-operation calls/time/payload and size histogram, summed over the shards */
  opstat_t *shards[MAX_SHARDS];
  int nsh = 0;
  for (int k = 0; k < MAX_SHARDS; k++) {
    opstat_t *o = k ? atomic_load_explicit(&c->shard_ops[k], memory_order_acquire) : c->ops;
    if (o) shards[nsh++] = o;
  }
#define SUM_(field) shard_sum(shards, nsh, op, offsetof(opstat_t, field))
  for (int op = 0; op < nops; op++) {
    uint64_t calls = 0, ticks = SUM_(ticks), bytes = SUM_(bytes);   /* every call adds to one bin */
    for (int k = 0; k < RMREC_HIST_BINS; k++)
      calls += shard_sum(shards, nsh, op, offsetof(opstat_t, hist) + (size_t)k * sizeof(uint64_t));
    if (calls != c->opshadow[op][0] || ticks != c->opshadow[op][1] || bytes != c->opshadow[op][2]) {
      row_optime_t r = {0};
      r.op = (uint16_t)op;
      r.calls = calls - c->opshadow[op][0];
      r.ns = rmrec_ticks_to_ns(ticks - c->opshadow[op][1]);
      r.bytes = bytes - c->opshadow[op][2];
      c->opshadow[op][0] = calls; c->opshadow[op][1] = ticks; c->opshadow[op][2] = bytes;
      blk_row(&b, BT_OPTIME, &r, sizeof r);
    }
  }
  blk_end(&b);
  for (int op = 0; op < nops; op++)
    for (int k = 0; k < RMREC_HIST_BINS; k++) {
      uint64_t v = shard_sum(shards, nsh, op, offsetof(opstat_t, hist) + (size_t)k * sizeof(uint64_t));
      if (v == c->histshadow[op][k]) continue;
      row_hist_t r = {0};
      r.op = (uint16_t)op; r.bin = (uint8_t)k; r.count = v - c->histshadow[op][k];
      c->histshadow[op][k] = v;
      blk_row(&b, BT_HIST, &r, sizeof r);
    }
  blk_end(&b);

  /* timeline: the growth of every ring cell since the last flush; slot s holds bucket
   * cb - ((cb - s) mod R) (the ring spans two flush intervals, so a slot is not reused between
   * two flushes) */
  uint64_t now = rmrec_now_ns();
  if (c->tl) {
    uint64_t cb = ticks_to_bucket(c, rmrec_ticks() - c->tick0), R = (uint64_t)c->nring;
    for (uint64_t s = 0; s < R; s++) {
      uint64_t bucket = cb - ((cb + R - s % R) % R);
      if (bucket > cb) continue;   /* before the start */
      _Atomic uint64_t *row = c->tl + s * (uint64_t)c->world_size * RMREC_NCLASS;
      for (int p = 0; p < c->world_size; p++)
        for (int k = 0; k < RMREC_NCLASS; k++) {
          size_t ci = (size_t)(row - c->tl) + (size_t)p * RMREC_NCLASS + (size_t)k;
          uint64_t v = atomic_load_explicit(&c->tl[ci], memory_order_relaxed), d = v - c->tlshadow[ci];
          if (!d) continue;
          c->tlshadow[ci] = v;
          row_timeline_t r = {0};
          r.bucket = (int64_t)bucket; r.peer = p; r.klass = (uint8_t)k; r.bytes = d;
          blk_row(&b, BT_TIMELINE, &r, sizeof r);
        }
    }
    blk_end(&b);
  }

  flush_activity(c, &b);

  /* the source's own blocks */
  if (c->hook) {
    c->out = &b;
    c->hook(c, c->hook_arg, final);
    c->out = NULL;
    blk_end(&b);
  }

  /* flush marker */
  row_flush_t f = {0};
  f.seq = ++c->seq;
  f.wall_ns = (int64_t)wall_ns();
  f.elapsed_ns = (int64_t)(now - c->start_ns);
  f.final = (uint32_t)final;
  blk_begin(&b, BT_FLUSH);
  ob_put(&b, &f, sizeof f);
  blk_end(&b);

  if (b.oom) failf(c, "out of memory while flushing %s", c->path);
  else write_all(c, b.p, b.len);
  free(b.p);
}

void rmrec_on_flush(rmrec_t *c, void (*fn)(rmrec_t *, void *, int), void *arg) {
  if (!c) return;
  pthread_mutex_lock(&c->flock);
  c->hook = fn;
  c->hook_arg = arg;
  pthread_mutex_unlock(&c->flock);
}

void rmrec_put(rmrec_t *c, int type, const void *row, uint32_t len) {
  if (!c || !c->out) return;          /* only inside a flush hook */
  blk_row(c->out, type, row, len);
}

int64_t rmrec_bucket(rmrec_t *c, uint64_t ticks) {
  if (!c) return 0;
  return (int64_t)ticks_to_bucket(c, ticks - c->tick0);
}

int64_t rmrec_elapsed_ns(rmrec_t *c) { return c ? (int64_t)(rmrec_now_ns() - c->start_ns) : 0; }

void rmrec_flush(rmrec_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->flock);
  if (!c->closed) flush_impl(c, 0);
  pthread_mutex_unlock(&c->flock);
}

volatile unsigned rmrec_epoch;

/* ns from now to just past the next timeline bucket boundary */
static uint64_t to_next_bucket(rmrec_t *c) {
  uint64_t el = rmrec_ticks_to_ns(rmrec_ticks() - c->tick0);
  return c->bucket_ns - el % c->bucket_ns + 20000;
}

/* The monotonic time of the next flush: the next multiple of flush_ns on the wall clock, so that the
 * ranks of a job (one clock per node, NTP across nodes) flush at the same moment. A job whose ranks
 * exchange in lockstep waits at its next exchange for every rank a flush delays: flushes at 16
 * scattered moments held all of a 16-rank job 16 times a second, flushes at one moment once.
 * RANKMAP_FLUSH_ALIGN=0: flush_ns after the last flush instead. */
static int flush_align = -1;
static uint64_t next_flush_at(rmrec_t *c) __attribute__((unused));
static uint64_t next_flush_at(rmrec_t *c) {
  uint64_t now = rmrec_now_ns();
  if (flush_align < 0) flush_align = env_on("RANKMAP_FLUSH_ALIGN");
  if (!flush_align) return now + c->flush_ns;
  uint64_t w = wall_ns(), to = c->flush_ns - w % c->flush_ns;
  return now + (to < c->flush_ns / 2 ? to + c->flush_ns : to);   /* never sooner than half an interval */
}

/* Wakes at every timeline bucket boundary (rmrec_epoch) and flushes every flush_ns. */
static void *flush_thread(void *arg) {
  rmrec_t *c = arg;
  pthread_mutex_lock(&c->flock);
  uint64_t next_flush = next_flush_at(c);
  while (!c->stop) {
    uint64_t now = rmrec_now_ns(), wait = to_next_bucket(c);
    if (next_flush > now && next_flush - now < wait) wait = next_flush - now;
    if (next_flush <= now) wait = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts = ts_add(ts, wait);
    if (wait) {                       /* the semaphore keeps a post made while the lock is let go */
      pthread_mutex_unlock(&c->flock);
      sem_timedwait(&c->fsem, &ts);   /* a timeout, a post or EINTR: each goes round the loop */
      pthread_mutex_lock(&c->flock);
    }
    if (c->stop || c->closed) break;
    if (sig_noted) act_on_signal(c);
    c->wakeups++;
    __atomic_fetch_add(&rmrec_epoch, 1, __ATOMIC_RELAXED);
    if (rmrec_now_ns() < next_flush) continue;
    if (c->pre_flush) {               /* outside the flush lock: the hook may take its own locks */
      pthread_mutex_unlock(&c->flock);
      c->pre_flush(c->pre_flush_arg);
      pthread_mutex_lock(&c->flock);
      if (c->stop || c->closed) break;
    }
    flush_impl(c, 0);
    next_flush = next_flush_at(c);
  }
  pthread_mutex_unlock(&c->flock);
  return NULL;
}

void rmrec_close(rmrec_t *c) {
  if (!c || c->pid != getpid()) return;
  pthread_mutex_lock(&c->flock);
  if (c->closed) { pthread_mutex_unlock(&c->flock); return; }
  c->stop = 1;
  sem_post(&c->fsem);
  pthread_mutex_unlock(&c->flock);
  if (c->thread_started) pthread_join(c->thread, NULL);
  if (c->thread_started) {
    char n[24];
    snprintf(n, sizeof n, "%llu", (unsigned long long)c->wakeups);
    rmrec_meta(c, "flush_thread.wakeups", n);
  }
  pthread_mutex_lock(&c->flock);
  flush_impl(c, 1);
  atomic_store(&c->enabled, 0);
  c->closed = 1;
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  pthread_mutex_unlock(&c->flock);
  pthread_mutex_lock(&open_lock);
  int left = 0;
  for (int i = 0; i < MAX_OPEN; i++) {
    if (open_list[i] == c) open_list[i] = NULL;
    else if (open_list[i] && open_list[i]->pid == getpid()) left++;
  }
  pthread_mutex_unlock(&open_lock);
  if (!left) stop_signals_give_back();
  if (sig_noted && !atomic_load(&sig_acting)) raise_after_linger(sig_noted);   /* noted after the flush thread stopped */
  /* c is intentionally not freed: other threads may still call the hot path (now a no-op) */
}
