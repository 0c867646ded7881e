/* fake_cuda.c -- a stand-in libcuda.so.1 for testing the shim's memory-kind classification on a
 * machine without a GPU.  Implements cuPointerGetAttributes for four attributes (MEMORY_TYPE=2,
 * IS_MANAGED=8, RANGE_START_ADDR=11, RANGE_SIZE=12) over ranges registered by the test program
 * through fake_cuda_register(ptr, size, kind) with kind 2 = device, 3 = managed.  Counts queries
 * (fake_cuda_queries) so the test can check the cache. */
/* The driver's version and cuInit, which rankmap's driver probe asks (capture/cuda_build.py).
 * Built with -DFAKE_CUDA_INIT=34 it plays the CUDA toolkit's stub libcuda (both answer
 * CUDA_ERROR_STUB_LIBRARY); with another code, a driver whose cuInit fails with it. */
#ifndef FAKE_CUDA_INIT
#define FAKE_CUDA_INIT 0
#endif
int cuDriverGetVersion(int *v) {
  if (FAKE_CUDA_INIT == 34) return 34;
  *v = 13000;
  return 0;
}
int cuInit(unsigned flags) { (void)flags; return FAKE_CUDA_INIT; }

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static struct { uintptr_t lo, hi; int kind; } ranges[16];
static int nranges;
static long queries;

void fake_cuda_register(void *p, size_t size, int kind) {
  if (nranges < 16) { ranges[nranges].lo = (uintptr_t)p; ranges[nranges].hi = (uintptr_t)p + size; ranges[nranges++].kind = kind; }
}
long fake_cuda_queries(void) { return queries; }

int cuPointerGetAttributes(unsigned n, int *attrs, void **data, unsigned long long ptr) {
  queries++;
  int kind = 0;
  uintptr_t lo = 0, hi = 0;
  for (int i = 0; i < nranges; i++)
    if (ptr >= ranges[i].lo && ptr < ranges[i].hi) { kind = ranges[i].kind; lo = ranges[i].lo; hi = ranges[i].hi; }
  for (unsigned i = 0; i < n; i++) {
    switch (attrs[i]) {
      case 2: *(unsigned *)data[i] = kind == 2 ? 2u : kind == 3 ? 2u : 0u; break;   /* managed reports DEVICE too */
      case 8: *(int *)data[i] = kind == 3; break;
      case 11: *(unsigned long long *)data[i] = lo; break;
      case 12: *(size_t *)data[i] = hi - lo; break;
      default: break;
    }
  }
  return 0;
}

static int current_device = -1;
void fake_cuda_set_device(int d) { current_device = d; }
int cuCtxGetDevice(int *d) {
  if (current_device < 0) return 201;      /* CUDA_ERROR_INVALID_CONTEXT */
  *d = current_device;
  return 0;
}
int cuDeviceGetPCIBusId(char *s, int n, int d) {
  snprintf(s, (size_t)n, "0000:%02X:00.0", 0x18 + 16 * d);
  return 0;
}
/* Device identity as the CUDA activity library also asks for it: ordinals 0..7, "Fake GPU N". */
int cuDeviceGet(int *dev, int ordinal) {
  if (ordinal < 0 || ordinal > 7) return 101;   /* CUDA_ERROR_INVALID_DEVICE */
  *dev = ordinal;
  return 0;
}
int cuDeviceGetName(char *name, int len, int dev) { snprintf(name, (size_t)len, "Fake GPU %d", dev); return 0; }
