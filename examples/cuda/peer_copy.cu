/* peer_copy.cu -- peer-to-peer copies between two GPUs of one process, for checking that a profile
 * names the source and destination GPU of each: COUNT cudaMemcpyPeer of BYTES from GPU 0 to GPU 1,
 * then COUNT/2 from GPU 1 to GPU 0 (peer access enabled where the GPUs allow it).
 *
 *   make -C examples/cuda peer_copy
 *   ./examples/cuda/build/peer_copy 16777216 10
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "peer_copy: %s: %s\n", #x, cudaGetErrorString(e_)); exit(2); } } while (0)

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : (16u << 20);
  int count = argc > 2 ? atoi(argv[2]) : 10, ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (ndev < 2) { fprintf(stderr, "peer_copy: needs two GPUs, this process sees %d\n", ndev); return 3; }
  void *a, *b;
  int can01 = 0, can10 = 0;
  CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
  CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
  CK(cudaSetDevice(0));
  if (can01) CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&a, bytes));
  CK(cudaSetDevice(1));
  if (can10) CK(cudaDeviceEnablePeerAccess(0, 0));
  CK(cudaMalloc(&b, bytes));
  cudaEvent_t t0, t1;
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  CK(cudaEventRecord(t0));
  for (int i = 0; i < count; i++) CK(cudaMemcpyPeer(b, 1, a, 0, bytes));
  CK(cudaEventRecord(t1));
  CK(cudaEventSynchronize(t1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, t0, t1));
  for (int i = 0; i < count / 2; i++) CK(cudaMemcpyPeer(a, 0, b, 1, bytes));
  CK(cudaDeviceSynchronize());
  printf("peer_copy: %d x %zu bytes GPU 0 -> GPU 1 at %.1f GB/s (peer access %d/%d), %d x GPU 1 -> GPU 0\n",
         count, bytes, ms > 0 ? count * (double)bytes / (ms * 1e6) : 0.0, can01, can10, count / 2);
  printf("peer_copy: expect: P2P 0->1 %d x %zu bytes, P2P 1->0 %d x %zu bytes\n", count, bytes, count / 2, bytes);
  return 0;
}
