/* staged_app.c -- an MPI job whose GPU side is played through the stand-ins: the same exchange as
 * examples/cuda/exchange_staged.cu (GPU-unaware) or a GPU-aware one, with real MPI traffic
 * (captured by the shim) and CUDA activity handed over by the stand-in CUPTI (tests/native/
 * fake_cupti.c) to the CUDA activity library, which this program loads from CUDA_INJECTION64_PATH
 * as the CUDA driver would at cuInit.
 *
 *   staged_app staged BYTES ITERS   per iteration: D2H copy of BYTES (pageable), MPI_Sendrecv of host
 *                                   buffers to rank+1 from rank-1, H2D copy of BYTES; kernels "step" and
 *                                   "accumulate"; one "fill" kernel first and one D2H copy at the end
 *   staged_app aware BYTES ITERS    the same without the copies: MPI_Sendrecv of buffers the stand-in
 *                                   libcuda calls device memory (a CUDA-aware MPI); the final D2H copy
 *
 * Every copy takes 100 us and every kernel 50 us (stand-in timestamps).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define US 1000ull
typedef void (*cpy_fn)(uint8_t, uint8_t, uint8_t, uint64_t, uint32_t, uint64_t, uint64_t, uint64_t);
typedef void (*kern_fn)(const char *, uint32_t, uint64_t, uint64_t);
static cpy_fn cpy;
static kern_fn kern;
static uint64_t (*now)(void);

static void copy(int kind, uint64_t bytes) {       /* 1 H2D pageable->device, 2 D2H device->pageable */
  if (!cpy) return;
  uint64_t t = now();
  cpy((uint8_t)kind, kind == 1 ? 1 : 3, kind == 1 ? 3 : 1, bytes, 0, t, t + 100 * US, 1);
}
static void kernel(const char *name) {
  if (!kern) return;
  uint64_t t = now();
  kern(name, 0, t, t + 50 * US);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int aware = argc > 1 && !strcmp(argv[1], "aware");
  size_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
  int iters = argc > 3 ? atoi(argv[3]) : 5;
  const char *inj = getenv("CUDA_INJECTION64_PATH"), *cupti_path = getenv("RANKMAP_CUPTI");
  if (inj && *inj) {                     /* cuInit: the driver (libcuda) is in the process, and loads */
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {          /* the injection library */
      fprintf(stderr, "staged_app: stand-in libcuda not found\n");
      return 2;
    }
    void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
    int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
    if (!init) { fprintf(stderr, "staged_app: cannot load %s\n", inj); return 2; }
    init();
    void *c = cupti_path ? dlopen(cupti_path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (c) {
      cpy = (cpy_fn)dlsym(c, "fake_cupti_memcpy");
      kern = (kern_fn)dlsym(c, "fake_cupti_kernel");
      now = (uint64_t (*)(void))dlsym(c, "fake_cupti_now");
    }
  }
  char *sb, *rb;
  if (posix_memalign((void **)&sb, 1 << 16, n) || posix_memalign((void **)&rb, 1 << 16, n)) return 1;
  memset(sb, rank, n);
  if (aware) {                           /* the stand-in libcuda says these are device buffers */
    void *cu = dlopen("libcuda.so.1", RTLD_NOW);
    void (*reg)(void *, size_t, int) = cu ? (void (*)(void *, size_t, int))dlsym(cu, "fake_cuda_register") : NULL;
    if (!reg) { fprintf(stderr, "staged_app: stand-in libcuda not found\n"); return 2; }
    reg(sb, n, 2);
    reg(rb, n, 2);
  }
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  kernel("fill");
  for (int i = 0; i < iters; i++) {
    kernel("step");
    if (!aware) copy(2, n);
    MPI_Sendrecv(sb, (int)n, MPI_BYTE, next, 7, rb, (int)n, MPI_BYTE, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (!aware) copy(1, n);
    kernel("accumulate");
  }
  copy(2, n);
  MPI_Finalize();
  return 0;
}
