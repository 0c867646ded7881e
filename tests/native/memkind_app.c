/* memkind_app.c -- ranks 0 and 1 ping-pong from a host, a "device" and a "managed" buffer, the
 * latter two registered with the fake libcuda (tests/native/fake_cuda.c).
 * usage: memkind_app BYTES ITERS.  Each kind: ITERS round trips of BYTES, MPI_Send there and back,
 * received with MPI_Recv, MPI_Irecv + MPI_Wait and MPI_Irecv + MPI_Waitall (the kind of a nonblocking
 * receive's buffer is looked up when it completes), with the offset inside the buffer varying
 * (exercises the allocation-range cache).  Then NB = 40 MPI_Bcast of 16 bytes from rank 0 out of
 * each kind of buffer in turn.  Then one
 * message from rank 0 to 1 out of a small malloc'ed (brk heap) buffer: "heap R queries 0" says
 * it cost no driver call. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define NB 40

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int n = atoi(argv[1]), iters = atoi(argv[2]);
  size_t sz = (size_t)4 << 20;      /* several 64 KiB granules per buffer */
  char *buf[3];
  for (int k = 0; k < 3; k++) if (posix_memalign((void **)&buf[k], 1 << 16, sz)) return 1;
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  void (*reg)(void *, size_t, int) = h ? (void (*)(void *, size_t, int))dlsym(h, "fake_cuda_register") : NULL;
  if (!reg) { fprintf(stderr, "fake libcuda not found\n"); return 2; }
  reg(buf[1], sz, 2);
  reg(buf[2], sz, 3);
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < iters; i++) {
      char *p = buf[k] + (size_t)i * 200000 % (sz - (size_t)n);
      MPI_Request rq;
      if (rank == 0) {              /* the reply: a nonblocking receive, completed by MPI_Wait */
        MPI_Send(p, n, MPI_CHAR, 1, k, MPI_COMM_WORLD);
        MPI_Irecv(p, n, MPI_CHAR, 1, k, MPI_COMM_WORLD, &rq);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
      } else if (rank == 1) {       /* MPI_Recv and MPI_Irecv + MPI_Waitall in turn */
        if (i % 2) {
          MPI_Irecv(p, n, MPI_CHAR, 0, k, MPI_COMM_WORLD, &rq);
          MPI_Waitall(1, &rq, MPI_STATUSES_IGNORE);
        } else MPI_Recv(p, n, MPI_CHAR, 0, k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(p, n, MPI_CHAR, 0, k, MPI_COMM_WORLD);
      }
    }
  /* collectives: NB MPI_Bcast in a row from each kind of buffer, the same arguments but the buffer
   * (all but the first of a kind may take the entry point's fast path, whose kind must follow the
   * buffer) */
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < NB; i++) MPI_Bcast(buf[k], 16, MPI_CHAR, 0, MPI_COMM_WORLD);
  long (*q)(void) = (long (*)(void))dlsym(h, "fake_cuda_queries");
  long before = q();
  char *small = malloc((size_t)n);             /* the brk heap: known host memory, no driver call */
  if (rank < 2) {
    if (rank == 0) MPI_Send(small, n, MPI_CHAR, 1, 9, MPI_COMM_WORLD);
    else MPI_Recv(small, n, MPI_CHAR, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  printf("heap %d queries %ld\n", rank, q() - before);
  free(small);
  printf("rank %d queries %ld\n", rank, before);
  MPI_Finalize();
  return 0;
}
