/*
 * activity.c -- rankmap's CUDA activity capture: CUPTI activity records of memory copies, memsets
 * and kernels, summed into the rank's record file rank-<N>.cuda.rmrec (docs/cuda-activity.md).
 *
 * How it gets in: `rankmap profile` sets CUDA_INJECTION64_PATH to this library in the ranks, and
 * the CUDA driver loads it and calls InitializeInjection() inside the process's first cuInit. A
 * process that never initialises CUDA never loads it, so a job without CUDA is untouched. CUPTI
 * is opened with dlopen (the copy the process already has, else RANKMAP_CUPTI, else the dynamic
 * linker's search when RANKMAP_CUPTI is unset): nothing here links against CUDA or CUPTI.
 *
 * What it costs the application: CUPTI timestamps each copy and kernel on the GPU and hands the
 * records over in buffers; parsing happens on CUPTI's buffer thread (and this library's own
 * thread, which asks for completed buffers once per flush interval), never on the application's.
 *
 * Failures: every CUPTI call is checked; any failure turns the capture off with one stderr line
 * ("rankmap: CUDA activity capture disabled: ...") and the reason in the file's meta, and the
 * application runs on as if nothing was there.
 *
 * Environment: RANKMAP_RUN_DIR (required), RANKMAP_CUDA_KINDS (all | copies | kernels | none),
 * RANKMAP_CUPTI (path of libcupti), RANKMAP_CUDA_NEED_RANK=1 (stay off in a process without a
 * rank variable: a launcher), RANKMAP_CUDA_BUFFER_KB (activity buffer size, default 4096),
 * RANKMAP_FLUSH_MS (how often completed buffers are asked for; the writer's flush interval).
 */
#define _GNU_SOURCE
#include "rmrec.h"
#include "rank_env.h"
#include "cupti_abi.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static rmrec_t *g_rec;
static rm_cupti_api_t F;
static uint32_t g_version;
static int64_t g_clock_off;                 /* CUPTI timestamp - CLOCK_MONOTONIC ns */
static _Atomic int g_on;                    /* records are being summed */
static pid_t g_pid;
static pthread_mutex_t g_parse = PTHREAD_MUTEX_INITIALIZER;   /* one buffer parsed at a time */
static size_t g_buf_bytes = 4u << 20;
static uint64_t g_flush_ns = 1000000000ull;
static char g_cupti_path[512] = "?";

/* thread that asks CUPTI for completed buffers and names the devices seen */
static pthread_t g_thread;
static int g_thread_started, g_stop;
static pthread_mutex_t g_tlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_tcond = PTHREAD_COND_INITIALIZER;

/* counters for the meta (under g_parse) */
static uint64_t g_nrec[4];                  /* copies, peer copies, memsets, kernels */
static uint64_t g_other_records, g_bad_buffers, g_dropped;
static _Atomic uint64_t g_dev_seen;         /* bit d: device ordinal d appeared in a record */
static uint64_t g_dev_named;

/* kernel name pointer -> name id (CUPTI shares one name string among a kernel's records) */
#define NAME_SLOTS 8192
static struct { const char *p; int id; } g_names[NAME_SLOTS];
typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
static demangle_fn g_demangle;

/* ---- turning off ------------------------------------------------------------------------------ */

static void say(const char *why) {
  char line[700];
  int n = snprintf(line, sizeof line, "rankmap: CUDA activity capture disabled: %s\n", why);
  if (n > 0) { ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1); (void)w; }
}

/* A failure before the capture ran: the reason goes into the file, which is closed. */
static void off_at_start(const char *why) {
  say(why);
  char v[600];
  snprintf(v, sizeof v, "off: %s", why);
  rmrec_meta(g_rec, "cuda.activity", v);
  rmrec_close(g_rec);
}

/* A failure while running: stop summing (callbacks may still come; they only free buffers). */
static void stop_running(const char *why) {
  if (!atomic_exchange(&g_on, 0)) return;
  say(why);
  char v[600];
  snprintf(v, sizeof v, "stopped: %s", why);
  rmrec_meta(g_rec, "cuda.activity", v);
}

static const char *cupti_error(rm_cupti_result_t rc, char *buf, size_t n) {
  const char *s = NULL;
  if (F.get_result_string && F.get_result_string(rc, &s) == RM_CUPTI_SUCCESS && s)
    snprintf(buf, n, "%s (%d)", s, rc);
  else
    snprintf(buf, n, "CUPTI error %d", rc);
  return buf;
}

/* ---- parsing activity buffers --------------------------------------------------------------- */

static inline uint64_t to_mono(uint64_t ts) {
  if (!ts) return 0;
  int64_t m = (int64_t)ts - g_clock_off;
  return m > 0 ? (uint64_t)m : 1;
}
static inline uint64_t span(uint64_t start, uint64_t end) { return start && end > start ? end - start : 0; }
static inline void seen(uint32_t dev) {
  if (dev < 64) atomic_fetch_or_explicit(&g_dev_seen, 1ull << dev, memory_order_relaxed);
}

static int copy_kind(uint8_t k) {
  switch (k) {
    case RM_CPY_HTOD: case RM_CPY_HTOA: return RMREC_COPY_H2D;
    case RM_CPY_DTOH: case RM_CPY_ATOH: return RMREC_COPY_D2H;
    case RM_CPY_DTOD: case RM_CPY_ATOA: case RM_CPY_ATOD: case RM_CPY_DTOA: return RMREC_COPY_D2D;
    case RM_CPY_HTOH: return RMREC_COPY_H2H;
    case RM_CPY_PTOP: return RMREC_COPY_P2P;
    default: return RMREC_COPY_OTHER;
  }
}

static int kernel_name_id(const char *p) {
  static int unnamed = -1;
  if (!p) return unnamed >= 0 ? unnamed : (unnamed = rmrec_name(g_rec, "(unnamed)"));
  uint64_t h = ((uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull) >> 51;   /* 13 bits */
  for (unsigned i = 0, j = (unsigned)h; i < 64; i++, j = (j + 1) & (NAME_SLOTS - 1)) {
    if (g_names[j].p == p) return g_names[j].id;
    if (!g_names[j].p) {
      int id;
      char *d = NULL;
      int st = -1;
      if (g_demangle && p[0] == '_' && p[1] == 'Z') d = g_demangle(p, NULL, NULL, &st);
      id = rmrec_name(g_rec, st == 0 && d ? d : p);
      free(d);
      g_names[j].p = p; g_names[j].id = id;
      return id;
    }
  }
  return rmrec_name(g_rec, p);   /* a crowded neighbourhood: no cache */
}

static void one_record(const rm_cupti_activity_t *r) {
  switch (r->kind) {
    case RM_ACT_MEMCPY: {
      const rm_cupti_memcpy_t *m = (const void *)r;
      int kind = copy_kind(m->copy_kind);
      uint64_t n = g_version >= RM_CUPTI_COPY_COUNT_VERSION && m->copy_count ? m->copy_count : 1;
      int dev = (int)m->device_id;
      int src = kind == RMREC_COPY_H2D || kind == RMREC_COPY_H2H ? -1 : dev;
      int dst = kind == RMREC_COPY_D2H || kind == RMREC_COPY_H2H ? -1 : dev;
      seen(m->device_id);
      rmrec_copy(g_rec, to_mono(m->start), kind, m->src_kind, m->dst_kind, src, dst, m->bytes, n,
                 span(m->start, m->end));
      g_nrec[0]++;
      break;
    }
    case RM_ACT_MEMCPY2: {
      const rm_cupti_ptop_t *m = (const void *)r;
      int kind = m->src_device_id == m->dst_device_id ? RMREC_COPY_D2D : RMREC_COPY_P2P;
      seen(m->src_device_id); seen(m->dst_device_id);
      rmrec_copy(g_rec, to_mono(m->start), kind, m->src_kind, m->dst_kind, (int)m->src_device_id,
                 (int)m->dst_device_id, m->bytes, 1, span(m->start, m->end));
      g_nrec[1]++;
      break;
    }
    case RM_ACT_MEMSET: {
      const rm_cupti_memset_t *m = (const void *)r;
      seen(m->device_id);
      rmrec_copy(g_rec, to_mono(m->start), RMREC_COPY_MEMSET, 0, m->memory_kind & 0xff, -1, (int)m->device_id,
                 m->bytes, 1, span(m->start, m->end));
      g_nrec[2]++;
      break;
    }
    case RM_ACT_KERNEL: case RM_ACT_CONCURRENT_KERNEL: {
      const rm_cupti_kernel_t *k = (const void *)r;
      seen(k->device_id);
      rmrec_kernel(g_rec, to_mono(k->start), (int)k->device_id, kernel_name_id(k->name), span(k->start, k->end));
      g_nrec[3]++;
      break;
    }
    default:
      g_other_records++;
  }
}

static void buf_request(uint8_t **buffer, size_t *size, size_t *max_records) {
  void *p = NULL;
  *max_records = 0;
  if (!atomic_load(&g_on) || posix_memalign(&p, 8, g_buf_bytes) != 0) p = NULL;   /* NULL: CUPTI drops */
  *buffer = p;
  *size = p ? g_buf_bytes : 0;
}

static void buf_complete(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  (void)ctx; (void)stream; (void)size;
  pthread_mutex_lock(&g_parse);
  if (atomic_load(&g_on) && buffer && valid) {
    rm_cupti_activity_t *r = NULL;
    rm_cupti_result_t rc;
    while ((rc = F.next_record(buffer, valid, &r)) == RM_CUPTI_SUCCESS && r) one_record(r);
    if (rc != RM_CUPTI_SUCCESS && rc != RM_CUPTI_ERROR_MAX_LIMIT_REACHED && rc != RM_CUPTI_ERROR_INVALID_KIND)
      g_bad_buffers++;
  }
  size_t dropped = 0;
  if (atomic_load(&g_on) && F.dropped(NULL, 0, &dropped) == RM_CUPTI_SUCCESS) g_dropped += dropped;
  pthread_mutex_unlock(&g_parse);
  free(buffer);
}

/* ---- device names (from the driver that loaded us; never called inside cuInit) -------------- */

static void name_devices(void) {
  uint64_t todo = atomic_load(&g_dev_seen) & ~g_dev_named;
  if (!todo) return;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return;
  int (*dev_get)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
  int (*bus)(char *, int, int) = (int (*)(char *, int, int))dlsym(h, "cuDeviceGetPCIBusId");
  int (*nm)(char *, int, int) = (int (*)(char *, int, int))dlsym(h, "cuDeviceGetName");
  for (int d = 0; d < 64 && dev_get && bus; d++) {
    if (!(todo >> d & 1)) continue;
    int dev = 0;
    char b[64] = "", n[128] = "", key[48], v[200];
    if (dev_get(&dev, d) != 0 || bus(b, sizeof b, dev) != 0) continue;
    if (!nm || nm(n, sizeof n, dev) != 0) n[0] = 0;
    snprintf(key, sizeof key, "cuda.device.%d", d);
    snprintf(v, sizeof v, "%s %s", b, n);
    rmrec_meta(g_rec, key, v);
    g_dev_named |= 1ull << d;
  }
  dlclose(h);
}

static void write_counts(void) {
  char v[300];
  pthread_mutex_lock(&g_parse);
  snprintf(v, sizeof v, "copies=%llu peer_copies=%llu memsets=%llu kernels=%llu other=%llu bad_buffers=%llu "
           "dropped=%llu", (unsigned long long)g_nrec[0], (unsigned long long)g_nrec[1],
           (unsigned long long)g_nrec[2], (unsigned long long)g_nrec[3], (unsigned long long)g_other_records,
           (unsigned long long)g_bad_buffers, (unsigned long long)g_dropped);
  pthread_mutex_unlock(&g_parse);
  rmrec_meta(g_rec, "cuda.records", v);
}

static void *flush_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_tlock);
  while (!g_stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t = (uint64_t)ts.tv_nsec + g_flush_ns;
    ts.tv_sec += (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    pthread_cond_timedwait(&g_tcond, &g_tlock, &ts);
    if (g_stop) break;
    pthread_mutex_unlock(&g_tlock);
    if (atomic_load(&g_on)) {
      rm_cupti_result_t rc = F.flush_all(0);     /* completed buffers only: no synchronisation */
      if (rc != RM_CUPTI_SUCCESS) {
        char e[200], why[300];
        snprintf(why, sizeof why, "cuptiActivityFlushAll: %s", cupti_error(rc, e, sizeof e));
        stop_running(why);
      }
      name_devices();
    }
    pthread_mutex_lock(&g_tlock);
  }
  pthread_mutex_unlock(&g_tlock);
  return NULL;
}

static void at_exit(void) {
  if (getpid() != g_pid) return;
  pthread_mutex_lock(&g_tlock);
  g_stop = 1;
  pthread_cond_broadcast(&g_tcond);
  pthread_mutex_unlock(&g_tlock);
  if (g_thread_started) { pthread_join(g_thread, NULL); g_thread_started = 0; }
  if (atomic_load(&g_on)) {
    rm_cupti_result_t rc = F.flush_all(RM_CUPTI_FLUSH_FORCED);
    if (rc != RM_CUPTI_SUCCESS) {
      char e[200], why[300];
      snprintf(why, sizeof why, "final cuptiActivityFlushAll: %s", cupti_error(rc, e, sizeof e));
      stop_running(why);
    }
    name_devices();
  }
  write_counts();
  pthread_mutex_lock(&g_parse);      /* no buffer is being summed while the file closes */
  atomic_store(&g_on, 0);
  pthread_mutex_unlock(&g_parse);
  rmrec_close(g_rec);
}

static void atfork_child(void) {       /* the child records nothing and has no thread */
  atomic_store(&g_on, 0);
  g_thread_started = 0;
  pthread_mutex_init(&g_parse, NULL);
  pthread_mutex_init(&g_tlock, NULL);
}

/* ---- start ---------------------------------------------------------------------------------- */

static void *open_cupti(void) {
  static const char *const sonames[] = { "libcupti.so.13", "libcupti.so.12", "libcupti.so" };
  void *h = NULL;
  for (size_t i = 0; !h && i < sizeof sonames / sizeof *sonames; i++)   /* the process's own copy */
    h = dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD);
  const char *env = getenv("RANKMAP_CUPTI");   /* where rankmap found one: then only that one */
  if (!h && env && *env) h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
  for (size_t i = 0; !h && !(env && *env) && i < sizeof sonames / sizeof *sonames; i++)
    h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
  struct link_map *lm = NULL;
  if (h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
    snprintf(g_cupti_path, sizeof g_cupti_path, "%s", lm->l_name);
  return h;
}

static int resolve(void *h, char *why, size_t n) {
  static const char *const names[] = RM_CUPTI_SYMBOLS;
  void *p[sizeof names / sizeof *names];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    p[i] = dlsym(h, names[i]);
    if (!p[i]) { snprintf(why, n, "%s has no %s", g_cupti_path, names[i]); return 0; }
  }
  _Static_assert(sizeof p == sizeof F, "one symbol per entry point");
  memcpy(&F, p, sizeof F);   /* function pointers and void * share one representation on Linux */
  return 1;
}

static int rank_from_env(int *rank, int *size) {
  static const char *const rank_env[] = RM_RANK_ENV;
  static const char *const size_env[] = RM_SIZE_ENV;
  int found = 0;
  *rank = 0; *size = 1;
  for (const char *const *e = rank_env; *e && !found; e++) {
    const char *s = getenv(*e);
    char *end;
    long v = s && *s ? strtol(s, &end, 10) : -1;
    if (v >= 0 && !*end) { *rank = (int)v; found = 1; }
  }
  for (const char *const *e = size_env; *e; e++) {
    const char *s = getenv(*e);
    char *end;
    long v = s && *s ? strtol(s, &end, 10) : -1;
    if (v > 0 && !*end) { *size = (int)v; break; }
  }
  if (*size <= *rank) *size = *rank + 1;
  return found;
}

/* Enable the kinds asked for; on a failure disable what was enabled and say why (returns 0). */
static int enable_kinds(const char *kinds, char *why, size_t n) {
  uint32_t want[4];
  int nw = 0;
  int copies = !strcmp(kinds, "all") || !strcmp(kinds, "copies");
  int kernels = !strcmp(kinds, "all") || !strcmp(kinds, "kernels");
  if (copies) { want[nw++] = RM_ACT_MEMCPY; want[nw++] = RM_ACT_MEMCPY2; want[nw++] = RM_ACT_MEMSET; }
  if (kernels) want[nw++] = RM_ACT_CONCURRENT_KERNEL;
  for (int i = 0; i < nw; i++) {
    rm_cupti_result_t rc = F.enable(want[i]);
    if (rc != RM_CUPTI_SUCCESS) {
      char e[200];
      snprintf(why, n, "cuptiActivityEnable(kind %u): %s", want[i], cupti_error(rc, e, sizeof e));
      for (int j = 0; j < i; j++) (void)F.disable(want[j]);   /* best effort: we are turning off */
      return 0;
    }
  }
  return 1;
}

EXPORT int InitializeInjection(void) {
  static int done;
  if (done) return 1;
  done = 1;
  const char *dir = getenv("RANKMAP_RUN_DIR");
  if (!dir || !*dir) return 1;
  int rank, size;
  if (!rank_from_env(&rank, &size)) {
    const char *need = getenv("RANKMAP_CUDA_NEED_RANK");
    if (need && *need == '1') return 1;            /* a launcher process, not a rank */
  }
  const char *kinds = getenv("RANKMAP_CUDA_KINDS");
  if (!kinds || !*kinds) kinds = "all";
  if (strcmp(kinds, "all") && strcmp(kinds, "copies") && strcmp(kinds, "kernels") && strcmp(kinds, "none")) {
    char why[200];
    snprintf(why, sizeof why, "RANKMAP_CUDA_KINDS=%.40s is not all, copies, kernels or none", kinds);
    say(why);
    return 1;
  }
  {   /* a second process of the same rank (a helper that initialised CUDA) keeps out of its file */
    char path[4200];
    snprintf(path, sizeof path, "%s/rank-%d.cuda.rmrec", dir, rank);
    if (access(path, F_OK) == 0) {
      char why[4400];
      snprintf(why, sizeof why, "%s is already written by another process of rank %d (this is pid %d)",
               path, rank, (int)getpid());
      say(why);
      return 1;
    }
  }
  g_rec = rmrec_open(dir, "cuda", rank, size);
  if (!g_rec) return 1;                            /* rmrec said why, in one line */
  g_pid = getpid();
  const char *kb = getenv("RANKMAP_CUDA_BUFFER_KB");
  if (kb && atol(kb) >= 64 && atol(kb) <= (1 << 20)) g_buf_bytes = (size_t)atol(kb) << 10;
  const char *fm = getenv("RANKMAP_FLUSH_MS");
  if (fm && atol(fm) > 0) g_flush_ns = (uint64_t)atol(fm) * 1000000ull;
  rmrec_meta(g_rec, "cuda.kinds", kinds);
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd) rmrec_meta(g_rec, "cuda.visible_devices", cvd);
  if (!strcmp(kinds, "none")) {                    /* the injection alone: for overhead measurements */
    rmrec_meta(g_rec, "cuda.activity", "off: RANKMAP_CUDA_KINDS=none");
    rmrec_close(g_rec);
    return 1;
  }

  char why[600], e[200];
  void *h = open_cupti();
  if (!h) {
    snprintf(why, sizeof why, "cannot load libcupti (%.200s); set RANKMAP_CUPTI to its path", dlerror());
    off_at_start(why);
    return 1;
  }
  if (!resolve(h, why, sizeof why)) { off_at_start(why); return 1; }
  rm_cupti_result_t rc = F.get_version(&g_version);
  if (rc != RM_CUPTI_SUCCESS) {
    snprintf(why, sizeof why, "cuptiGetVersion: %s", cupti_error(rc, e, sizeof e));
    off_at_start(why);
    return 1;
  }
  if (g_version < RM_CUPTI_MIN_VERSION || g_version >= RM_CUPTI_NEXT_MAJOR) {
    snprintf(why, sizeof why, "CUPTI API version %u of %s: rankmap reads the activity records of "
             "CUPTI 12.0 (19) to 13.x", g_version, g_cupti_path);
    off_at_start(why);
    return 1;
  }
  uint64_t ts = 0, m0 = rmrec_now_ns();
  rc = F.get_timestamp(&ts);
  uint64_t m1 = rmrec_now_ns();
  if (rc != RM_CUPTI_SUCCESS || !ts) {
    snprintf(why, sizeof why, "cuptiGetTimestamp: %s", rc ? cupti_error(rc, e, sizeof e) : "returned 0");
    off_at_start(why);
    return 1;
  }
  g_clock_off = (int64_t)ts - (int64_t)(m0 + (m1 - m0) / 2);
  g_demangle = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
  atomic_store(&g_on, 1);                          /* before enabling: buffers may be asked for at once */
  rc = F.register_callbacks(buf_request, buf_complete);
  if (rc != RM_CUPTI_SUCCESS) {
    atomic_store(&g_on, 0);
    snprintf(why, sizeof why, "cuptiActivityRegisterCallbacks: %s", cupti_error(rc, e, sizeof e));
    off_at_start(why);
    return 1;
  }
  if (!enable_kinds(kinds, why, sizeof why)) {
    atomic_store(&g_on, 0);
    off_at_start(why);
    return 1;
  }
  { /* keep this library mapped until exit: its exit handler and thread live here */
    Dl_info info;
    if (dladdr((void *)&InitializeInjection, &info) && info.dli_fname)
      (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
  pthread_atfork(NULL, NULL, atfork_child);
  atexit(at_exit);
  if (pthread_create(&g_thread, NULL, flush_thread, NULL) == 0) g_thread_started = 1;
  else rmrec_meta(g_rec, "cuda.flush_thread", "not started: activity arrives when CUPTI's buffers fill and at exit");
  char v[700];
  snprintf(v, sizeof v, "on: %s (CUPTI API %u, %s)", kinds, g_version, g_cupti_path);
  rmrec_meta(g_rec, "cuda.activity", v);
  return 1;
}
