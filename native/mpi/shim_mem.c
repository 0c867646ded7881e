/*
 * shim_mem.c -- the memory kind of a buffer (host, device, managed), through the CUDA driver
 * of the process, without a driver call for a host buffer on the hot path.
 *
 * Order of the checks, cheapest first:
 *   1. the 64 KiB granule was classified before (a direct-mapped cache of answers, read inline:
 *      rm_mem in shim_core.h; the granules of the sentinels MPI_BOTTOM / MPI_IN_PLACE are never
 *      cached, so they always come here);
 *   2. the buffer lies in the brk heap (never device or managed memory: the driver maps those);
 *   3. CUDA is not loaded in the process -- host.  The shim never loads libcuda itself: it asks
 *      for it with RTLD_NOLOAD, at MPI_Init and again whenever a library was loaded since the
 *      last look (dl_iterate_phdr's load counter), so a program that loads CUDA later is seen;
 *   4. a device or managed allocation seen before (its whole range, as the driver reported it);
 *   5. cuPointerGetAttributes, once per granule (host) or allocation (device, managed).
 * Without libcuda everything is host and META "cuda" says so.  A buffer freed and reallocated
 * as another kind at the same address may keep its cached kind.
 */
#define _GNU_SOURCE
#include "shim_core.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int (*cu_attrs_fn)(unsigned n, int *attrs, void **data, unsigned long long ptr);
static cu_attrs_fn _Atomic cu_attrs;
#define MK_SLOTS RM_MK_SLOTS
#define mk_cache rm_mk_cache
_Atomic uint64_t rm_mk_cache[RM_MK_SLOTS];
#define MR_SLOTS 64
static struct { _Atomic uint64_t lo, hi; _Atomic int kind; } mk_range[MR_SLOTS];
static _Atomic unsigned mk_nrange;
static uintptr_t heap_lo;                      /* the brk heap: [heap_lo, heap_hi) */
static _Atomic uintptr_t heap_hi;
static _Atomic unsigned long long dl_adds;     /* libraries loaded when CUDA was last looked for */

static int first_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  *(unsigned long long *)data = info->dlpi_adds;
  return 1;
}

/* Is CUDA in the process now?  Looks again only if a library was loaded since the last look. */
static cu_attrs_fn cuda_now(void) {
  cu_attrs_fn f = atomic_load_explicit(&cu_attrs, memory_order_acquire);
  if (f) return f;
  unsigned long long adds = 0;
  dl_iterate_phdr(first_object, &adds);
  if (adds == atomic_load_explicit(&dl_adds, memory_order_relaxed)) return NULL;
  atomic_store_explicit(&dl_adds, adds, memory_order_relaxed);
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
  if (h) f = (cu_attrs_fn)dlsym(h, "cuPointerGetAttributes");
  if (f) {
    atomic_store_explicit(&cu_attrs, f, memory_order_release);
    rmrec_meta(rm_R, "cuda", "loaded");
  }
  return f;
}

/* where the brk heap starts: its line in /proc/self/maps, else the current break */
static uintptr_t heap_start(void) {
  uintptr_t lo = (uintptr_t)sbrk(0);
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return lo;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (strstr(line, "[heap]")) {
      unsigned long a = 0;
      if (sscanf(line, "%lx-", &a) == 1) lo = (uintptr_t)a;
      break;
    }
  fclose(f);
  return lo;
}

void rm_mem_init(void) {
  heap_lo = heap_start();
  atomic_store(&heap_hi, (uintptr_t)sbrk(0));
  atomic_store(&dl_adds, 0);
  rmrec_meta(rm_R, "cuda", cuda_now() ? "loaded" : "not loaded");
}

static int in_heap(uintptr_t a) {
  if (a >= heap_lo && a < atomic_load_explicit(&heap_hi, memory_order_relaxed)) return 1;
  uintptr_t hi = (uintptr_t)sbrk(0);                    /* the heap may have grown */
  atomic_store_explicit(&heap_hi, hi, memory_order_relaxed);
  return a >= heap_lo && a < hi;
}

static inline int remember(uint64_t g, int kind) {
  if (g == 0 || g == (uint64_t)(uintptr_t)MPI_IN_PLACE >> 16 || g == (uint64_t)(uintptr_t)MPI_BOTTOM >> 16)
    return kind;                                        /* the inline check must miss these */
  atomic_store_explicit(&mk_cache[g & (MK_SLOTS - 1)], (g << 2) | (uint64_t)kind, memory_order_relaxed);
  return kind;
}

int rm_mem_slow(const void *buf) {
  if (!buf || buf == MPI_IN_PLACE || buf == MPI_BOTTOM) return RMREC_MEM_UNKNOWN;
  uint64_t a = (uint64_t)(uintptr_t)buf, g = a >> 16;
  uint64_t c = atomic_load_explicit(&mk_cache[g & (MK_SLOTS - 1)], memory_order_relaxed);
  if (c && (c >> 2) == g) return (int)(c & 3);
  if (in_heap((uintptr_t)a)) return remember(g, RMREC_MEM_HOST);
  cu_attrs_fn f = cuda_now();
  if (!f) return remember(g, RMREC_MEM_HOST);
  unsigned nr = atomic_load_explicit(&mk_nrange, memory_order_acquire);
  for (unsigned i = 0; i < nr && i < MR_SLOTS; i++)
    if (a >= atomic_load_explicit(&mk_range[i].lo, memory_order_relaxed) &&
        a < atomic_load_explicit(&mk_range[i].hi, memory_order_relaxed))
      return atomic_load_explicit(&mk_range[i].kind, memory_order_relaxed);
  /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE=2, IS_MANAGED=8, RANGE_START_ADDR=11, RANGE_SIZE=12 */
  int attrs[4] = {2, 8, 11, 12};
  unsigned int mtype = 0;
  int managed = 0;
  unsigned long long start = 0;
  size_t size = 0;
  void *data[4] = {&mtype, &managed, &start, &size};
  int kind = RMREC_MEM_HOST;
  if (f(4, attrs, data, (unsigned long long)a) == 0) {
    if (managed) kind = RMREC_MEM_MANAGED;
    else if (mtype == 2 /* CU_MEMORYTYPE_DEVICE */) kind = RMREC_MEM_DEVICE;
  }
  if (kind != RMREC_MEM_HOST && size) {
    unsigned i = atomic_fetch_add(&mk_nrange, 1);
    if (i < MR_SLOTS) {
      atomic_store(&mk_range[i].lo, start);
      atomic_store(&mk_range[i].hi, start + size);
      atomic_store(&mk_range[i].kind, kind);
    } else atomic_store(&mk_nrange, MR_SLOTS);
  }
  return remember(g, kind);
}
