/* fake_cudart.c -- a stand-in CUDA runtime for testing rankmap's MPI and NCCL benchmarks without a GPU.
 *
 * Implements the calls of native/bench/cudart_dl.h on host memory: "device" allocations are POSIX
 * shared memory so that an IPC handle (the segment's name) opens in another process, copies are
 * memcpy, streams and events are nothing.  FAKE_CUDA_DEVICES sets how many devices there are
 * (default 2; 0 = cudaErrorNoDevice); FAKE_CUDA_FAIL_IPC=1 makes cudaIpcOpenMemHandle fail;
 * FAKE_CUDA_LOG=path appends one line per copy ("copy <bytes>") so a test can count them. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct { char reserved[64]; } ipc_handle;
struct seg { void *p; size_t n; char name[56]; int ipc; };
static struct seg segs[256];
static int nsegs, seq, current;

static int devices(void) {
  const char *e = getenv("FAKE_CUDA_DEVICES");
  return e ? atoi(e) : 2;
}

static void log_copy(size_t n) {
  const char *path = getenv("FAKE_CUDA_LOG");
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (f) { fprintf(f, "copy %zu\n", n); fclose(f); }
}

static void cleanup(void) {
  for (int i = 0; i < nsegs; i++)
    if (segs[i].p && !segs[i].ipc) shm_unlink(segs[i].name);
}

int cudaGetDeviceCount(int *n) {
  *n = devices();
  return *n > 0 ? 0 : 100;            /* cudaErrorNoDevice */
}
int cudaSetDevice(int d) { if (d < 0 || d >= devices()) return 101; current = d; return 0; }
int cudaGetDevice(int *d) { *d = current; return 0; }
const char *cudaGetErrorString(int e) {
  static char buf[64];
  snprintf(buf, sizeof buf, "fake CUDA error %d", e);
  return buf;
}
int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
int cudaDriverGetVersion(int *v) { *v = 13000; return 0; }
int cudaDeviceGetPCIBusId(char *buf, int len, int dev) { snprintf(buf, (size_t)len, "0000:%02x:00.0", 0x10 + dev); return 0; }

int cudaMalloc(void **p, size_t n) {
  if (nsegs == 256) return 2;        /* cudaErrorMemoryAllocation */
  struct seg *s = &segs[nsegs];
  if (nsegs == 0) atexit(cleanup);
  /* A process killed before its atexit (an aborted MPI job) leaves its segments behind, and a later
   * process can get the same pid: skip names that exist instead of failing on them. */
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 1000; tries++) {
    snprintf(s->name, sizeof s->name, "/rmfake-%d-%d", (int)getpid(), seq++);
    fd = shm_open(s->name, O_CREAT | O_RDWR | O_EXCL, 0600);
  }
  if (fd < 0) return 2;
  if (ftruncate(fd, (off_t)(n ? n : 1)) != 0) { close(fd); shm_unlink(s->name); return 2; }
  s->p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (s->p == MAP_FAILED) { shm_unlink(s->name); return 2; }
  s->n = n ? n : 1;
  s->ipc = 0;
  nsegs++;
  *p = s->p;
  return 0;
}

static struct seg *find(void *p) {
  for (int i = 0; i < nsegs; i++)
    if (segs[i].p == p) return &segs[i];
  return NULL;
}

int cudaFree(void *p) {
  struct seg *s = find(p);
  if (!s) return 1;                   /* cudaErrorInvalidValue */
  munmap(s->p, s->n);
  if (!s->ipc) shm_unlink(s->name);
  s->p = NULL;
  return 0;
}

int cudaMallocHost(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
int cudaFreeHost(void *p) { free(p); return 0; }
int cudaMemcpy(void *d, const void *s, size_t n, int kind) { (void)kind; memmove(d, s, n); log_copy(n); return 0; }
int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *st) { (void)st; return cudaMemcpy(d, s, n, kind); }
int cudaMemset(void *p, int v, size_t n) { memset(p, v, n); return 0; }
int cudaStreamCreateWithFlags(void **s, unsigned f) { (void)f; *s = (void *)0x5; return 0; }
int cudaStreamSynchronize(void *s) { (void)s; return 0; }
int cudaStreamDestroy(void *s) { (void)s; return 0; }
int cudaDeviceSynchronize(void) { return 0; }

int cudaIpcGetMemHandle(ipc_handle *h, void *p) {
  struct seg *s = find(p);
  if (!s) return 1;
  memset(h, 0, sizeof *h);
  snprintf(h->reserved, 48, "%s", s->name);
  memcpy(h->reserved + 48, &s->n, sizeof s->n);
  return 0;
}

int cudaIpcOpenMemHandle(void **p, ipc_handle h, unsigned flags) {
  (void)flags;
  const char *fail = getenv("FAKE_CUDA_FAIL_IPC");
  if (fail && atoi(fail)) return 201;   /* cudaErrorDeviceUninitialized: "invalid context" */
  size_t n = 0;
  char name[49];
  memcpy(name, h.reserved, 48);
  name[48] = 0;
  memcpy(&n, h.reserved + 48, sizeof n);
  int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0) return 1;
  void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED || nsegs == 256) return 1;
  struct seg *s = &segs[nsegs++];
  s->p = m;
  s->n = n;
  s->ipc = 1;
  snprintf(s->name, sizeof s->name, "%s", name);
  *p = m;
  return 0;
}

int cudaIpcCloseMemHandle(void *p) {
  struct seg *s = find(p);
  if (!s) return 1;
  munmap(s->p, s->n);
  s->p = NULL;
  return 0;
}
