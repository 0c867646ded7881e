/* cuda_pingpong.c -- ping-pong between ranks 0 and 1 from host, pinned-host, managed and device
 * buffers, to check the shim's memory-kind classification.  Needs the CUDA runtime:
 *   mpicc cuda_pingpong.c -I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lcudart -o cuda_pingpong
 * usage: cuda_pingpong BYTES ITERS AWARE      (AWARE=1: the MPI is CUDA-aware)
 * Per iteration and kind, rank 0 sends BYTES to rank 1 and rank 1 sends them back (MPI_Send/MPI_Recv):
 *   host (malloc) and pinned (cudaMallocHost): classified host; managed (cudaMallocManaged): managed;
 *   device (cudaMalloc): with AWARE=1 passed to MPI directly -> device; with AWARE=0 staged through
 *   a malloc'ed buffer (cudaMemcpy) -> host, plus one 0-byte MPI_Send/MPI_Recv of the device pointer
 *   per iteration (no data touched) so the device classification is still exercised.
 * Expected send bytes of each rank: host 2*BYTES*ITERS (+ BYTES*ITERS staged when AWARE=0),
 * managed BYTES*ITERS, device AWARE ? BYTES*ITERS : 0 (in ITERS messages). */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)

static void pingpong(void *buf, int n, int rank, int iters) {
  for (int i = 0; i < iters; i++) {
    if (rank == 0) {
      MPI_Send(buf, n, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buf, n, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buf, n, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, n, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
    }
  }
}

int main(int argc, char **argv) {
  int rank, ndev = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int n = argc > 1 ? atoi(argv[1]) : 1 << 20, iters = argc > 2 ? atoi(argv[2]) : 5, aware = argc > 3 ? atoi(argv[3]) : 0;
  CK(cudaGetDeviceCount(&ndev));
  CK(cudaSetDevice(rank % ndev));
  char *host = malloc((size_t)n), *stage = malloc((size_t)n), *pinned, *managed, *dev;
  CK(cudaMallocHost((void **)&pinned, (size_t)n));
  CK(cudaMallocManaged((void **)&managed, (size_t)n, cudaMemAttachGlobal));
  CK(cudaMalloc((void **)&dev, (size_t)n));
  CK(cudaMemset(dev, rank, (size_t)n));
  CK(cudaDeviceSynchronize());
  pingpong(host, n, rank, iters);
  pingpong(pinned, n, rank, iters);
  pingpong(managed, n, rank, iters);
  if (aware) {
    pingpong(dev, n, rank, iters);
  } else {
    for (int i = 0; i < iters; i++) {          /* staged: device -> host -> MPI -> host -> device */
      if (rank == 0) {
        CK(cudaMemcpy(stage, dev, (size_t)n, cudaMemcpyDeviceToHost));
        MPI_Send(stage, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(stage, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CK(cudaMemcpy(dev, stage, (size_t)n, cudaMemcpyHostToDevice));
      } else if (rank == 1) {
        MPI_Recv(stage, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CK(cudaMemcpy(dev, stage, (size_t)n, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(stage, dev, (size_t)n, cudaMemcpyDeviceToHost));
        MPI_Send(stage, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
      }
    }
    pingpong(dev, 0, rank, iters);             /* 0 bytes: classification only */
  }
  if (rank == 0) printf("cuda_pingpong: %d bytes x %d iterations, cuda-aware=%d\n", n, iters, aware);
  cudaFree(dev); cudaFree(managed); cudaFreeHost(pinned); free(host); free(stage);
  MPI_Finalize();
  return 0;
}
