/* exchange.h -- what the two exchange programs share: the GPU choice, the kernels, the loop and
 * the line of expected figures. Only the exchange step differs:
 *   exchange_staged.cu  GPU-unaware: copy to host, MPI_Sendrecv, copy back (what an MPI without CUDA
 *                       support forces on the code);
 *   exchange_nccl.cu    GPU-aware: device buffers straight to ncclSend/ncclRecv.
 *
 * Each rank owns BYTES of floats on its GPU. Per iteration: kernel `step` on the buffer, the
 * exchange (send it to rank+1, receive rank-1's into a second buffer), kernel `accumulate` adding
 * the received values. Before the loop one kernel `fill`; after it one copy of the buffer to the
 * host to check the result. Usage: PROGRAM BYTES ITERS. Rank 0 prints the loop time and both
 * programs print, per rank, what they do ("expect: ...") so a profile can be checked against it.
 */
#pragma once
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s: %s: %s\n", prog_name, #x, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)

static const char *prog_name = "exchange";

__global__ void fill(float *a, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    a[i] = (float)rank;
}
__global__ void step(float *a, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    a[i] = 0.5f * a[i];
}
__global__ void accumulate(float *a, const float *b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    a[i] += b[i];
}

/* local rank mod device count, unless CUDA_VISIBLE_DEVICES names one GPU (as `rankmap run` sets it) */
static int choose_gpu(void) {
  const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
  int local = 0, ndev = 0;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    const char *v = getenv(names[i]);
    if (v && *v) { local = atoi(v); break; }
  }
  CK(cudaGetDeviceCount(&ndev));
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  int dev = (cvd && *cvd && !strchr(cvd, ',')) ? 0 : local % ndev;
  CK(cudaSetDevice(dev));
  return dev;
}

typedef struct {
  int rank, size, next, prev, iters;
  size_t bytes, n;
  float *d_buf, *d_recv;
  cudaStream_t stream;
} job_t;

static void setup(job_t *j, int argc, char **argv) {
  MPI_Comm_rank(MPI_COMM_WORLD, &j->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &j->size);
  j->bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : (8u << 20);
  j->iters = argc > 2 ? atoi(argv[2]) : 20;
  j->bytes -= j->bytes % sizeof(float);
  j->n = j->bytes / sizeof(float);
  j->next = (j->rank + 1) % j->size;
  j->prev = (j->rank + j->size - 1) % j->size;
  int dev = choose_gpu();
  char bus[32] = "?";
  CK(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
  printf("%s: rank %d on GPU %s\n", prog_name, j->rank, bus);
  CK(cudaStreamCreate(&j->stream));
  CK(cudaMalloc((void **)&j->d_buf, j->bytes));
  CK(cudaMalloc((void **)&j->d_recv, j->bytes));
  fill<<<256, 256, 0, j->stream>>>(j->d_buf, j->n, j->rank);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(j->stream));
}

/* The loop; exchange() sends d_buf to next and receives prev's into d_recv. */
static void run(job_t *j, void (*exchange)(job_t *)) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int it = 0; it < j->iters; it++) {
    step<<<256, 256, 0, j->stream>>>(j->d_buf, j->n);
    exchange(j);
    accumulate<<<256, 256, 0, j->stream>>>(j->d_buf, j->d_recv, j->n);
  }
  CK(cudaStreamSynchronize(j->stream));
  CK(cudaGetLastError());
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime() - t0;
  float *h = (float *)malloc(j->bytes);
  if (!h) MPI_Abort(MPI_COMM_WORLD, 3);
  CK(cudaMemcpy(h, j->d_buf, j->bytes, cudaMemcpyDeviceToHost));
  /* every rank's value halves then adds its neighbour's: all ranks converge to the same sequence
   * only when they start equal, so just report the first element */
  if (j->rank == 0)
    printf("%s: %d ranks, %zu bytes, %d iterations: %.3f ms per iteration, a[0] = %g\n", prog_name, j->size,
           j->bytes, j->iters, 1e3 * t / j->iters, h[0]);
  free(h);
}
