/* osu_style_bw.c -- an independent windowed MPI bandwidth test, defined the way the OSU
 * micro-benchmarks define theirs, to check `rankmap bench mpi`'s bw figures against.
 *
 *   osu_style_bw SIZE WINDOW ITERS SKIP
 * Rank 0 posts WINDOW non-blocking sends of SIZE bytes from one buffer, rank 1 as many receives
 * into one buffer; both wait for all of them, then rank 1 answers with a 4-byte message.  The
 * first SKIP rounds are not timed; rank 0 prints "size window iters nanoseconds" for the other
 * ITERS rounds (bandwidth = size * window * iters / time). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 5 || size < 2) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 osu_style_bw SIZE WINDOW ITERS SKIP\n");
    MPI_Finalize();
    return 2;
  }
  long bytes = atol(argv[1]);
  int window = atoi(argv[2]), iters = atoi(argv[3]), skip = atoi(argv[4]);
  char *buf = NULL;
  if (posix_memalign((void **)&buf, 4096, (size_t)bytes) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
  memset(buf, rank, (size_t)bytes);
  MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)window);
  int ack = 0;
  struct timespec t0 = {0, 0}, t1;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < skip + iters; i++) {
    if (i == skip) clock_gettime(CLOCK_MONOTONIC, &t0);
    if (rank == 0) {
      for (int w = 0; w < window; w++) MPI_Isend(buf, (int)bytes, MPI_CHAR, 1, 1, MPI_COMM_WORLD, &req[w]);
      MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
      MPI_Recv(&ack, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      for (int w = 0; w < window; w++) MPI_Irecv(buf, (int)bytes, MPI_CHAR, 0, 1, MPI_COMM_WORLD, &req[w]);
      MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
      MPI_Send(&ack, 1, MPI_INT, 0, 2, MPI_COMM_WORLD);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (rank == 0) {
    long long ns = (long long)(t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec);
    printf("%ld %d %d %lld\n", bytes, window, iters, ns);
  }
  free(req);
  free(buf);
  MPI_Finalize();
  return 0;
}
