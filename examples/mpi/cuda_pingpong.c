/* cuda_pingpong.c -- ping-pong between ranks 0 and 1 from host, pinned-host, managed and device
 * buffers, to check the shim's memory-kind classification, including the paths that skip the
 * driver (a small heap buffer used before and after CUDA is loaded, buffers seen before).
 * Needs the CUDA runtime:
 *   mpicc cuda_pingpong.c -I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lcudart -o cuda_pingpong
 * usage: cuda_pingpong BYTES ITERS AWARE      (AWARE=1: the MPI is CUDA-aware)
 * Per iteration and kind, rank 0 sends BYTES to rank 1 and rank 1 sends them back (MPI_Send; the
 * receive is MPI_Recv, MPI_Irecv + MPI_Wait or MPI_Irecv + MPI_Waitall in turn, iteration by
 * iteration, since a nonblocking receive's buffer is classified when it completes):
 *   host (malloc) and pinned (cudaMallocHost): classified host; managed (cudaMallocManaged): managed;
 *   device (cudaMalloc): with AWARE=1 passed to MPI directly -> device; with AWARE=0 staged through
 *   a malloc'ed buffer (cudaMemcpy) -> host, plus one 0-byte MPI_Send/MPI_Recv of the device pointer
 *   per iteration (no data touched) so the device classification is still exercised.
 * Then, S = 256 bytes: a small malloc'ed (brk heap) buffer ping-pongs before the first CUDA call
 * (the driver is not loaded yet) and again at the end (host); a small cudaMalloc'ed buffer (S bytes
 * if AWARE, else 0) and the middle of the big device buffer (0 bytes) ping-pong too (device).
 * Expected send (and receive) of each rank, bytes in messages:
 *   host    2*BYTES*ITERS + 2*S*ITERS (+ BYTES*ITERS staged when AWARE=0) in 4*ITERS (+ ITERS)
 *   managed BYTES*ITERS in ITERS
 *   device  AWARE ? BYTES*ITERS + S*ITERS : 0, in 3*ITERS
 * Last, collectives: MPI_Bcast from rank 0 of C = 16 bytes, NB = 40 times in a row from each of
 * host, pinned, managed and device (AWARE ? C : 0 bytes) buffers -- a repeat after the first goes
 * through the entry point's fast path, whose memory kind is the one cached for the buffer's
 * granule.  Expected MPI_Bcast calls of each rank by memory kind: host 2*NB, managed NB, device NB. */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)

/* receive i of a series: blocking, or nonblocking completed by MPI_Wait or by MPI_Waitall */
static void recv_nth(void *buf, int n, int src, int tag, int i) {
  MPI_Request r;
  switch (i % 3) {
  case 0: MPI_Recv(buf, n, MPI_CHAR, src, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE); break;
  case 1: MPI_Irecv(buf, n, MPI_CHAR, src, tag, MPI_COMM_WORLD, &r); MPI_Wait(&r, MPI_STATUS_IGNORE); break;
  default: MPI_Irecv(buf, n, MPI_CHAR, src, tag, MPI_COMM_WORLD, &r); MPI_Waitall(1, &r, MPI_STATUSES_IGNORE); break;
  }
}

static void pingpong(void *buf, int n, int rank, int iters) {
  for (int i = 0; i < iters; i++) {
    if (rank == 0) {
      MPI_Send(buf, n, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
      recv_nth(buf, n, 1, 0, i);
    } else if (rank == 1) {
      recv_nth(buf, n, 0, 0, i);
      MPI_Send(buf, n, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
    }
  }
}

int main(int argc, char **argv) {
  int rank, ndev = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int n = argc > 1 ? atoi(argv[1]) : 1 << 20, iters = argc > 2 ? atoi(argv[2]) : 5, aware = argc > 3 ? atoi(argv[3]) : 0;
  enum { S = 256 };
  char *small = malloc(S);                     /* the brk heap: known host memory */
  pingpong(small, S, rank, iters);             /* before any CUDA call: libcuda not loaded yet */
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
        recv_nth(stage, n, 1, 1, i);
        CK(cudaMemcpy(dev, stage, (size_t)n, cudaMemcpyHostToDevice));
      } else if (rank == 1) {
        recv_nth(stage, n, 0, 1, i);
        CK(cudaMemcpy(dev, stage, (size_t)n, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(stage, dev, (size_t)n, cudaMemcpyDeviceToHost));
        MPI_Send(stage, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
      }
    }
    pingpong(dev, 0, rank, iters);             /* 0 bytes: classification only */
  }
  char *dsmall;
  CK(cudaMalloc((void **)&dsmall, S));         /* a small allocation, next to others */
  pingpong(dsmall, aware ? S : 0, rank, iters);
  pingpong(dev + n / 2, 0, rank, iters);       /* inside an allocation seen before */
  pingpong(small, S, rank, iters);             /* heap again, CUDA loaded now */
  enum { C = 16, NB = 40 };
  char *kinds[4] = {host, pinned, managed, dev};
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < NB; i++) MPI_Bcast(kinds[k], k == 3 && !aware ? 0 : C, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("cuda_pingpong: %d bytes x %d iterations, cuda-aware=%d\n", n, iters, aware);
  cudaFree(dsmall); cudaFree(dev); cudaFree(managed); cudaFreeHost(pinned); free(host); free(stage); free(small);
  MPI_Finalize();
  return 0;
}
