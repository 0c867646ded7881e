/* cuda_load.cu -- the two loads that price rankmap's CUDA activity capture (bench/cuda_activity.py).
 *
 *   cuda_load copies N BYTES   copy-heavy: N rounds of (H2D, D2H) of BYTES from/to pinned host memory
 *                              on one stream, synchronised every round (as a code that stages its
 *                              messages does); prints "ns_per_op <ns per copy>"
 *   cuda_load kernels N        kernel-heavy: N launches of an almost empty kernel, synchronised every
 *                              256 launches; prints "ns_per_op <ns per launch>"
 *
 * A warm-up round (CUDA context, module load, first copies) is not timed.
 *   nvcc -O2 bench/cuda_load.cu -o cuda_load
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "cuda_load: %s: %s\n", #x, cudaGetErrorString(e_)); exit(2); } } while (0)

__global__ void tiny(int *p) { if (threadIdx.x == 0 && p) p[blockIdx.x] += 1; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: cuda_load copies N BYTES | kernels N\n"); return 2; }
  long n = atol(argv[2]);
  cudaStream_t s;
  CK(cudaSetDevice(0));
  CK(cudaStreamCreate(&s));
  if (!strcmp(argv[1], "copies")) {
    size_t bytes = argc > 3 ? strtoull(argv[3], NULL, 10) : 65536;
    void *h, *d;
    CK(cudaMallocHost(&h, bytes));
    CK(cudaMalloc(&d, bytes));
    for (int i = 0; i < 10; i++) {
      CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s));
      CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
    }
    CK(cudaStreamSynchronize(s));
    double t0 = now();
    for (long i = 0; i < n; i++) {
      CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s));
      CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
    }
    printf("ns_per_op %.1f\n", (now() - t0) / (2.0 * n));
  } else if (!strcmp(argv[1], "kernels")) {
    int *d;
    CK(cudaMalloc((void **)&d, 1024 * sizeof(int)));
    for (int i = 0; i < 256; i++) tiny<<<1, 32, 0, s>>>(d);
    CK(cudaStreamSynchronize(s));
    double t0 = now();
    for (long i = 0; i < n; i++) {
      tiny<<<1, 32, 0, s>>>(d);
      if ((i & 255) == 255) CK(cudaStreamSynchronize(s));
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    printf("ns_per_op %.1f\n", (now() - t0) / n);
  } else {
    fprintf(stderr, "cuda_load: unknown load %s\n", argv[1]);
    return 2;
  }
  return 0;
}
