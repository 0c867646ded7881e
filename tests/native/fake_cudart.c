/* fake_cudart.c -- a stand-in CUDA runtime for testing rankmap's MPI and NCCL benchmarks without a GPU.
 *
 * Implements the calls of native/linkbench/cudart_dl.h on host memory: "device" allocations are
 * anonymous shared memory (memfd) so that an IPC handle (the owner's pid and descriptor, opened
 * through /proc/<pid>/fd/<fd>) opens in another process, copies are memcpy, streams and events are
 * nothing.  A memfd has no name in /dev/shm: its memory goes with the last process that maps it, so
 * a job killed before its exit handlers (an MPI_Abort) leaves nothing behind, as real device
 * memory would.  FAKE_CUDA_DEVICES sets how many devices there are (default 2; 0 =
 * cudaErrorNoDevice); FAKE_CUDA_FAIL_IPC=1 makes cudaIpcOpenMemHandle fail; FAKE_CUDA_LOG=path
 * appends one line per copy ("copy <bytes>") and one per allocation ("alloc <handle>") so a test
 * can count them. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct { char reserved[64]; } ipc_handle;
struct seg { void *p; size_t n; int fd; };   /* fd: the memfd of an allocation, -1 for a mapped peer's */
static struct seg segs[256];
static int nsegs, current;

static int devices(void) {
  const char *e = getenv("FAKE_CUDA_DEVICES");
  return e ? atoi(e) : 2;
}

static void log_line(const char *what, const char *value) {
  const char *path = getenv("FAKE_CUDA_LOG");
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (f) { fprintf(f, "%s %s\n", what, value); fclose(f); }
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
  int fd = memfd_create("rmfake", MFD_CLOEXEC);
  if (fd < 0) return 2;
  if (ftruncate(fd, (off_t)(n ? n : 1)) != 0) { close(fd); return 2; }
  s->p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (s->p == MAP_FAILED) { close(fd); return 2; }
  s->n = n ? n : 1;
  s->fd = fd;
  nsegs++;
  char name[48];
  snprintf(name, sizeof name, "/proc/%d/fd/%d", (int)getpid(), fd);
  log_line("alloc", name);
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
  if (s->fd >= 0) close(s->fd);
  s->p = NULL;
  return 0;
}

int cudaMallocHost(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
int cudaFreeHost(void *p) { free(p); return 0; }
int cudaMemcpy(void *d, const void *s, size_t n, int kind) {
  (void)kind;
  memmove(d, s, n);
  if (getenv("FAKE_CUDA_LOG")) {
    char b[24];
    snprintf(b, sizeof b, "%zu", n);
    log_line("copy", b);
  }
  return 0;
}
int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *st) { (void)st; return cudaMemcpy(d, s, n, kind); }
int cudaMemset(void *p, int v, size_t n) { memset(p, v, n); return 0; }
int cudaStreamCreateWithFlags(void **s, unsigned f) { (void)f; *s = (void *)0x5; return 0; }
int cudaStreamSynchronize(void *s) { (void)s; return 0; }
int cudaStreamDestroy(void *s) { (void)s; return 0; }
int cudaDeviceSynchronize(void) { return 0; }

/* The handle: "/proc/<owner pid>/fd/<memfd>" and the size; the owner keeps the memfd open until
 * cudaFree, as a real owner keeps its allocation. */
int cudaIpcGetMemHandle(ipc_handle *h, void *p) {
  struct seg *s = find(p);
  if (!s || s->fd < 0) return 1;
  memset(h, 0, sizeof *h);
  snprintf(h->reserved, 48, "/proc/%d/fd/%d", (int)getpid(), s->fd);
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
  int fd = open(name, O_RDWR | O_CLOEXEC);
  if (fd < 0) return 1;
  void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED || nsegs == 256) return 1;
  struct seg *s = &segs[nsegs++];
  s->p = m;
  s->n = n;
  s->fd = -1;
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
