/* fake_cupti.c -- a stand-in libcupti.so.13 for testing rankmap's CUDA activity library without a
 * GPU. It implements the activity API entry points rankmap uses and hands over activity buffers
 * the way CUPTI does (buffer-request callback, records packed back to back, 8-byte aligned,
 * buffer-complete callback; cuptiActivityGetNextRecord walks them). The records are laid out as
 * CUPTI 13 lays out CUpti_ActivityMemcpy6, CUpti_ActivityMemcpyPtoP4, CUpti_ActivityMemset4 and
 * CUpti_ActivityKernel10, written here at explicit byte offsets taken from cupti_activity.h of
 * CUDA 13.0 (independently of native/cuda/cupti_abi.h, so a wrong declaration there shows).
 *
 * The test program queues records with fake_cupti_memcpy/_ptop/_memset/_kernel/_other; they are
 * delivered at the next cuptiActivityFlushAll (only kinds that were enabled: the others are
 * dropped, as CUPTI would never have made them).
 *
 * Environment: FAKE_CUPTI_VERSION (default 130001), FAKE_CUPTI_FAIL=<entry point name> (that
 * entry point returns CUPTI_ERROR_NOT_SUPPORTED), FAKE_CUPTI_DROPPED (records reported dropped,
 * once), FAKE_CUPTI_BUFFER_RECORDS (at most this many records per buffer, default 0: as many as fit).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);
static req_fn req;
static done_fn done;
static int enabled[64];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *queue;          /* records waiting for a flush, each padded to a multiple of 8 */
static size_t qlen, qcap;
static int dropped_reported;

enum { NOT_SUPPORTED = 27, MAX_LIMIT = 12, INVALID_KIND = 21, INVALID_PARAM = 1, NOT_INIT = 15 };
enum { K_MEMCPY = 1, K_MEMSET = 2, K_RUNTIME = 5, K_CONC_KERNEL = 10, K_MEMCPY2 = 22 };

static int fails(const char *fn) {
  const char *f = getenv("FAKE_CUPTI_FAIL");
  return f && strcmp(f, fn) == 0;
}
/* Bytes a record of this kind occupies in a CUPTI 13 buffer. */
static size_t rec_size(uint32_t kind) {
  switch (kind) {
    case K_MEMCPY: return 96;       /* sizeof(CUpti_ActivityMemcpy6) */
    case K_MEMCPY2: return 96;      /* sizeof(CUpti_ActivityMemcpyPtoP4) */
    case K_MEMSET: return 88;       /* sizeof(CUpti_ActivityMemset4) */
    case K_CONC_KERNEL: return 216; /* sizeof(CUpti_ActivityKernel10) */
    case K_RUNTIME: return 40;      /* sizeof(CUpti_ActivityAPI) */
    default: return 0;
  }
}
static uint8_t *push(uint32_t kind) {
  size_t n = rec_size(kind);
  pthread_mutex_lock(&lock);
  if (qlen + n > qcap) {
    qcap = qcap ? 2 * qcap : 4096;
    while (qcap < qlen + n) qcap *= 2;
    queue = realloc(queue, qcap);
  }
  uint8_t *r = queue + qlen;
  memset(r, 0xA5, n);             /* fields rankmap should not read are garbage, not zero */
  memcpy(r, &kind, 4);
  qlen += n;
  return r;                        /* lock held: the caller fills the record, then fake_unlock */
}
static void fake_unlock(void) { pthread_mutex_unlock(&lock); }
#define PUT(r, off, T, v) do { T v_ = (T)(v); memcpy((r) + (off), &v_, sizeof v_); } while (0)

uint64_t fake_cupti_now(void) {          /* CUPTI's clock on Linux: CLOCK_REALTIME ns */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fake_cupti_memcpy(uint8_t copy_kind, uint8_t src_kind, uint8_t dst_kind, uint64_t bytes, uint32_t dev,
                       uint64_t start, uint64_t end, uint64_t copy_count) {
  uint8_t *r = push(K_MEMCPY);
  PUT(r, 4, uint8_t, copy_kind); PUT(r, 5, uint8_t, src_kind); PUT(r, 6, uint8_t, dst_kind); PUT(r, 7, uint8_t, 1);
  PUT(r, 8, uint64_t, bytes); PUT(r, 16, uint64_t, start); PUT(r, 24, uint64_t, end);
  PUT(r, 32, uint32_t, dev); PUT(r, 88, uint64_t, copy_count);
  fake_unlock();
}
void fake_cupti_ptop(uint64_t bytes, uint32_t src_dev, uint32_t dst_dev, uint64_t start, uint64_t end) {
  uint8_t *r = push(K_MEMCPY2);
  PUT(r, 4, uint8_t, 10); PUT(r, 5, uint8_t, 3); PUT(r, 6, uint8_t, 3);
  PUT(r, 8, uint64_t, bytes); PUT(r, 16, uint64_t, start); PUT(r, 24, uint64_t, end);
  PUT(r, 32, uint32_t, src_dev);  /* deviceId: the device that runs the copy */
  PUT(r, 44, uint32_t, src_dev); PUT(r, 52, uint32_t, dst_dev);
  fake_unlock();
}
void fake_cupti_memset(uint64_t bytes, uint32_t dev, uint16_t memory_kind, uint64_t start, uint64_t end) {
  uint8_t *r = push(K_MEMSET);
  PUT(r, 4, uint32_t, 0); PUT(r, 8, uint64_t, bytes); PUT(r, 16, uint64_t, start); PUT(r, 24, uint64_t, end);
  PUT(r, 32, uint32_t, dev); PUT(r, 48, uint16_t, 0); PUT(r, 50, uint16_t, memory_kind);
  fake_unlock();
}
void fake_cupti_kernel(const char *name, uint32_t dev, uint64_t start, uint64_t end) {
  uint8_t *r = push(K_CONC_KERNEL);
  PUT(r, 16, uint64_t, start); PUT(r, 24, uint64_t, end); PUT(r, 32, uint64_t, end);
  PUT(r, 40, uint32_t, dev);
  PUT(r, 104, const char *, name);
  fake_unlock();
}
void fake_cupti_other(void) { push(K_RUNTIME); fake_unlock(); }

/* ---- the entry points ------------------------------------------------------------------------ */

int cuptiGetVersion(uint32_t *v) {
  if (fails("cuptiGetVersion")) return NOT_SUPPORTED;
  const char *e = getenv("FAKE_CUPTI_VERSION");
  *v = e && *e ? (uint32_t)strtoul(e, NULL, 10) : 130001u;
  return 0;
}
int cuptiGetResultString(int rc, const char **s) {
  *s = rc == NOT_SUPPORTED ? "CUPTI_ERROR_NOT_SUPPORTED" : "CUPTI_ERROR_UNKNOWN";
  return 0;
}
int cuptiGetTimestamp(uint64_t *t) {
  if (fails("cuptiGetTimestamp")) return NOT_SUPPORTED;
  *t = fake_cupti_now();
  return 0;
}
int cuptiActivityRegisterCallbacks(req_fn r, done_fn d) {
  if (fails("cuptiActivityRegisterCallbacks")) return NOT_SUPPORTED;
  if (!r || !d) return INVALID_PARAM;
  req = r; done = d;
  return 0;
}
int cuptiActivityEnable(uint32_t kind) {
  char name[64];
  snprintf(name, sizeof name, "cuptiActivityEnable(%u)", kind);
  if (fails("cuptiActivityEnable") || fails(name)) return NOT_SUPPORTED;
  if (kind < 64) enabled[kind] = 1;
  return 0;
}
int cuptiActivityDisable(uint32_t kind) {
  if (kind < 64) enabled[kind] = 0;
  return 0;
}
/* How many kinds are enabled right now (the test checks a failed start leaves none on). */
int fake_cupti_enabled_count(void) {
  int n = 0;
  for (int i = 0; i < 64; i++) n += enabled[i];
  return n;
}

int cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  if (fails("cuptiActivityFlushAll")) return NOT_SUPPORTED;
  if (!req || !done) return NOT_INIT;
  pthread_mutex_lock(&lock);
  uint8_t *q = queue;
  size_t n = qlen;
  queue = NULL; qlen = qcap = 0;
  pthread_mutex_unlock(&lock);
  const char *lim = getenv("FAKE_CUPTI_BUFFER_RECORDS");
  size_t per = lim ? strtoul(lim, NULL, 10) : 0;
  size_t off = 0;
  while (off < n) {
    uint8_t *buf = NULL;
    size_t size = 0, maxrec = 0, used = 0, nrec = 0;
    req(&buf, &size, &maxrec);
    if (!buf) break;                                 /* the client declined: records dropped */
    while (off < n && (!per || nrec < per)) {
      uint32_t kind;
      memcpy(&kind, q + off, 4);
      size_t rs = rec_size(kind);
      if (used + rs > size) break;
      int keep = kind < 64 && (enabled[kind] || kind == K_RUNTIME);
      if (keep) { memcpy(buf + used, q + off, rs); used += rs; nrec++; }
      off += rs;
    }
    done(NULL, 0, buf, size, used);
  }
  free(q);
  return 0;
}

int cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **rec) {
  if (!buf || !rec) return INVALID_PARAM;
  size_t off = 0;
  if (*rec) {
    uint32_t kind;
    memcpy(&kind, *rec, 4);
    off = (size_t)((uint8_t *)*rec - buf) + rec_size(kind);
  }
  if (off >= valid) return MAX_LIMIT;
  uint32_t kind;
  memcpy(&kind, buf + off, 4);
  if (!rec_size(kind) || off + rec_size(kind) > valid) return INVALID_KIND;
  *rec = buf + off;
  return 0;
}

int cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *dropped) {
  (void)ctx; (void)stream;
  const char *d = getenv("FAKE_CUPTI_DROPPED");
  *dropped = (!dropped_reported && d) ? strtoul(d, NULL, 10) : 0;
  dropped_reported = 1;
  return 0;
}
