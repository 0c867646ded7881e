/* master_worker.c -- rank 0 hands out tasks, workers return results, the master receives with
 * MPI_ANY_SOURCE (half with MPI_Recv, half with MPI_Irecv + MPI_Waitany).
 * usage: master_worker [TASKS=4] [TASK_BYTES=512] [RESULT_BYTES=100]
 * Worker w (1..p-1) gets TASKS tasks of TASK_BYTES (MPI_Send from 0, MPI_Recv at w) and returns
 * TASKS results of RESULT_BYTES*w bytes (MPI_Send from w); the master posts receives of the
 * largest size, so only the status gives the true source and length:
 *   T[0][w] = TASKS*TASK_BYTES, T[w][0] = TASKS*RESULT_BYTES*w, TASKS messages each way.
 * Master recv rows: ceil(TASKS*(p-1)/2) results via MPI_Recv, the rest via MPI_Irecv. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int tasks = argc > 1 ? atoi(argv[1]) : 4, tb = argc > 2 ? atoi(argv[2]) : 512, rbytes = argc > 3 ? atoi(argv[3]) : 100;
  int maxr = rbytes * p;
  char *buf = calloc((size_t)(tb > maxr ? tb : maxr) + 1, 1);
  if (rank == 0) {
    for (int t = 0; t < tasks; t++)
      for (int w = 1; w < p; w++) MPI_Send(buf, tb, MPI_CHAR, w, t, MPI_COMM_WORLD);
    int total = tasks * (p - 1), got = 0;
    long sum = 0;
    while (got < (total + 1) / 2) {
      MPI_Status st;
      int n;
      MPI_Recv(buf, maxr, MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
      MPI_Get_count(&st, MPI_CHAR, &n);
      sum += n; got++;
    }
    while (got < total) {
      MPI_Request rq[1];
      int idx;
      MPI_Irecv(buf, maxr, MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq[0]);
      MPI_Waitany(1, rq, &idx, MPI_STATUS_IGNORE);
      got++;
    }
    printf("master_worker: %d workers x %d tasks\n", p - 1, tasks);
  } else {
    for (int t = 0; t < tasks; t++) {
      MPI_Recv(buf, tb, MPI_CHAR, 0, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, rbytes * rank, MPI_CHAR, 0, t, MPI_COMM_WORLD);
    }
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
