/* cuda_ring.c -- a ring exchange of GPU data through an MPI that need not be CUDA-aware.
 *
 * Each rank owns BYTES of device memory on "its" GPU. Per iteration it copies them to a host
 * buffer, exchanges that buffer with its ring neighbours (MPI_Sendrecv to rank+1, from rank-1),
 * and copies what it received back to the GPU: traffic staged through the host, as an MPI
 * without CUDA support forces.
 *
 * Which GPU: with CUDA_VISIBLE_DEVICES naming one GPU (as `rankmap run` sets it) that one;
 * otherwise local rank mod device count (the usual default). Every rank prints the PCI bus id of
 * the GPU it used, so a placement can be checked; rank 0 prints the loop time.
 *
 *   mpicc cuda_ring.c -I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lcudart -o cuda_ring
 *   usage: cuda_ring BYTES ITERS
 * Expected traffic: every rank sends BYTES*ITERS bytes to rank+1 in ITERS messages (host memory);
 * every GPU moves BYTES*ITERS bytes device->host and as many host->device over PCIe.
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "cuda_ring: %s: %s\n", #x, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 2); } } while (0)

static int local_rank(void) {
  const char *names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    const char *v = getenv(names[i]);
    if (v && *v) return atoi(v);
  }
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (1u << 24);
  int iters = argc > 2 ? atoi(argv[2]) : 10;

  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  int dev = (cvd && *cvd && !strchr(cvd, ',')) ? 0 : local_rank() % ndev;
  CK(cudaSetDevice(dev));
  char bus[32] = "?";
  CK(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));

  char *d_buf, *h_send, *h_recv;
  CK(cudaMalloc((void **)&d_buf, n));
  CK(cudaMemset(d_buf, rank & 0xff, n));
  h_send = malloc(n);
  h_recv = malloc(n);
  if (!h_send || !h_recv) MPI_Abort(MPI_COMM_WORLD, 3);

  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) {
    CK(cudaMemcpy(h_send, d_buf, n, cudaMemcpyDeviceToHost));
    MPI_Sendrecv(h_send, (int)n, MPI_BYTE, next, 7, h_recv, (int)n, MPI_BYTE, prev, 7,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CK(cudaMemcpy(d_buf, h_recv, n, cudaMemcpyHostToDevice));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime() - t0;

  unsigned char first = 0;
  CK(cudaMemcpy(&first, d_buf, 1, cudaMemcpyDeviceToHost));
  int want = ((rank - iters) % size + size) % size;  /* after ITERS steps: the data of rank - ITERS */
  printf("cuda_ring: rank %d local %d gpu %s CUDA_VISIBLE_DEVICES=%s data %s\n", rank, local_rank(), bus,
         cvd ? cvd : "(unset)", first == (unsigned char)(want & 0xff) ? "ok" : "WRONG");
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("cuda_ring: %d ranks, %zu bytes x %d iterations, %.6f s\n", size, n, iters, t);
  free(h_send);
  free(h_recv);
  CK(cudaFree(d_buf));
  MPI_Finalize();
  return first == (unsigned char)(want & 0xff) ? 0 : 1;
}
