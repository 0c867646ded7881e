/* exchange_staged.cu -- the GPU-unaware exchange: device -> host copy, MPI_Sendrecv of host memory,
 * host -> device copy, every iteration (exchange.h says what the program does around it).
 *
 * Per rank, exactly: ITERS+1 device-to-host copies of BYTES (one per iteration, one for the final
 * check), ITERS host-to-device copies of BYTES, 1+2*ITERS kernels (fill, step, accumulate), and
 * ITERS MPI_Sendrecv of BYTES to rank+1 from rank-1, all in pageable host memory.
 *
 *   make -C examples/cuda exchange_staged      (nvcc, with mpicxx as the host compiler)
 *   mpirun -np 2 examples/cuda/build/exchange_staged 8388608 20
 */
#include "exchange.h"

static float *h_send, *h_recv;

static void exchange(job_t *j) {
  CK(cudaMemcpyAsync(h_send, j->d_buf, j->bytes, cudaMemcpyDeviceToHost, j->stream));
  CK(cudaStreamSynchronize(j->stream));
  MPI_Sendrecv(h_send, (int)j->bytes, MPI_BYTE, j->next, 7, h_recv, (int)j->bytes, MPI_BYTE, j->prev, 7,
               MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CK(cudaMemcpyAsync(j->d_recv, h_recv, j->bytes, cudaMemcpyHostToDevice, j->stream));
}

int main(int argc, char **argv) {
  prog_name = "exchange_staged";
  MPI_Init(&argc, &argv);
  job_t j;
  setup(&j, argc, argv);
  h_send = (float *)malloc(j.bytes);
  h_recv = (float *)malloc(j.bytes);
  if (!h_send || !h_recv) MPI_Abort(MPI_COMM_WORLD, 3);
  run(&j, exchange);
  printf("%s: rank %d expect: H2D %d x %zu bytes, D2H %d x %zu bytes, kernels %d, MPI_Sendrecv %d x %zu bytes\n",
         prog_name, j.rank, j.iters, j.bytes, j.iters + 1, j.bytes, 1 + 2 * j.iters, j.iters, j.bytes);
  MPI_Finalize();
  return 0;
}
