/* threads_app.c -- MPI_THREAD_MULTIPLE: THREADS threads per rank exchange with both ring
 * neighbours at the same time (tag = thread).  usage: threads_app THREADS ITERS BYTES
 * Each thread t, per iteration: MPI_Irecv from left and right, MPI_Isend of BYTES*(t+1) to right and
 * of BYTES to left, MPI_Waitall.  T[r][right] = ITERS*BYTES*sum(t+1), T[r][left] = ITERS*BYTES*THREADS. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, size, iters, bytes;

static void *worker(void *arg) {
  int t = (int)(long)arg, right = (rank + 1) % size, left = (rank - 1 + size) % size;
  int nr = bytes * (t + 1);
  char *sb = calloc((size_t)nr + bytes, 1), *rb = calloc((size_t)nr + bytes, 1);
  for (int i = 0; i < iters; i++) {
    MPI_Request rq[4];
    MPI_Irecv(rb, nr, MPI_CHAR, left, t, MPI_COMM_WORLD, &rq[0]);
    MPI_Irecv(rb + nr, bytes, MPI_CHAR, right, 1000 + t, MPI_COMM_WORLD, &rq[1]);
    MPI_Isend(sb, nr, MPI_CHAR, right, t, MPI_COMM_WORLD, &rq[2]);
    MPI_Isend(sb + nr, bytes, MPI_CHAR, left, 1000 + t, MPI_COMM_WORLD, &rq[3]);
    MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
  }
  free(sb); free(rb);
  return NULL;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) { printf("no MPI_THREAD_MULTIPLE\n"); MPI_Finalize(); return 0; }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int nt = atoi(argv[1]);
  iters = atoi(argv[2]);
  bytes = atoi(argv[3]);
  pthread_t th[64];
  for (long t = 0; t < nt; t++) pthread_create(&th[t], NULL, worker, (void *)t);
  for (int t = 0; t < nt; t++) pthread_join(th[t], NULL);
  if (rank == 0) printf("threads_app: %d ranks x %d threads\n", size, nt);
  MPI_Finalize();
  return 0;
}
