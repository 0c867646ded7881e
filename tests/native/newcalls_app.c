/* newcalls_app.c -- routines beyond the classic point-to-point set, each with a known pattern.
 * usage: newcalls_app   (p >= 3 ranks; r+1 and r-1 are taken mod p)
 *
 * Always (MPI-3):
 *   MPI_Mprobe(ANY_SOURCE) + MPI_Mrecv(STATUS_IGNORE): r -> r+1, 100*(r+1) bytes (sent with MPI_Send)
 *   MPI_Improbe loop + MPI_Imrecv + MPI_Waitall:       r -> r-1, 50 bytes (MPI_Send)
 * With MPI 4 (prints "mpi4"):
 *   MPI_Isendrecv + MPI_Wait:           r -> r+1, 30 bytes;  MPI_Isendrecv_replace: r -> r-1, 20 bytes
 *   MPI_Send_c/MPI_Recv_c (counted as MPI_Send/MPI_Recv): r -> r+1, 7 doubles
 *   MPI_Alltoallv_c with MPI_Count counts c(i,j) = 8*(1+(i+j)%3) bytes from i to j (j != i)
 *   MPI_Allreduce_init + 3 x (MPI_Start, MPI_Wait) of 4 doubles
 *   partitioned: MPI_Psend_init r -> r+1 and MPI_Precv_init from r-1, 4 partitions of 8 ints,
 *   2 x (MPI_Startall, MPI_Pready of each partition, MPI_Waitall)  (prints "partitioned" if it ran)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int right = (r + 1) % p, left = (r - 1 + p) % p;
  char *sb = calloc(4096, 1), *rb = calloc(4096, 1);

  /* matched probe, blocking */
  MPI_Send(sb, 100 * (r + 1), MPI_CHAR, right, 1, MPI_COMM_WORLD);
  MPI_Message msg;
  MPI_Status st;
  MPI_Mprobe(MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &msg, &st);
  int n;
  MPI_Get_count(&st, MPI_CHAR, &n);
  MPI_Mrecv(rb, n, MPI_CHAR, &msg, MPI_STATUS_IGNORE);

  /* matched probe, nonblocking */
  MPI_Request rq[4];
  MPI_Isend(sb, 50, MPI_CHAR, left, 2, MPI_COMM_WORLD, &rq[0]);
  int flag = 0;
  while (!flag) MPI_Improbe(right, 2, MPI_COMM_WORLD, &flag, &msg, MPI_STATUS_IGNORE);
  MPI_Imrecv(rb, 50, MPI_CHAR, &msg, &rq[1]);
  MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD);

#if MPI_VERSION >= 4
  if (r == 0) printf("mpi4\n");
  MPI_Isendrecv(sb, 30, MPI_CHAR, right, 3, rb, 30, MPI_CHAR, left, 3, MPI_COMM_WORLD, &rq[0]);
  MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
  memset(rb, 0, 20);
  MPI_Isendrecv_replace(rb, 20, MPI_CHAR, left, 4, right, 4, MPI_COMM_WORLD, &rq[0]);
  MPI_Wait(&rq[0], MPI_STATUS_IGNORE);

  double d[7] = {0};
  MPI_Request lr;
  MPI_Irecv_c(rb, 7, MPI_DOUBLE, left, 5, MPI_COMM_WORLD, &lr);
  MPI_Send_c(d, 7, MPI_DOUBLE, right, 5, MPI_COMM_WORLD);
  MPI_Wait(&lr, MPI_STATUS_IGNORE);
  MPI_Recv_c(rb, 0, MPI_CHAR, MPI_PROC_NULL, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

  MPI_Count *sc = calloc((size_t)p, sizeof *sc), *rc = calloc((size_t)p, sizeof *rc);
  MPI_Aint *sd = calloc((size_t)p, sizeof *sd), *rd = calloc((size_t)p, sizeof *rd);
  for (int j = 0, so = 0; j < p; j++) { sc[j] = rc[j] = 8 * (1 + (r + j) % 3); sd[j] = rd[j] = so; so += (int)sc[j]; }
  MPI_Alltoallv_c(sb, sc, sd, MPI_CHAR, rb, rc, rd, MPI_CHAR, MPI_COMM_WORLD);

  double x[4] = {1, 2, 3, 4}, y[4];
  MPI_Request pr;
  MPI_Allreduce_init(x, y, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &pr);
  for (int i = 0; i < 3; i++) { MPI_Start(&pr); MPI_Wait(&pr, MPI_STATUS_IGNORE); }
  MPI_Request_free(&pr);

  int *ps = calloc(32, sizeof(int)), *prb = calloc(32, sizeof(int));
  MPI_Request part[2];
  int ok = MPI_Psend_init(ps, 4, 8, MPI_INT, right, 6, MPI_COMM_WORLD, MPI_INFO_NULL, &part[0]) == MPI_SUCCESS &&
           MPI_Precv_init(prb, 4, 8, MPI_INT, left, 6, MPI_COMM_WORLD, MPI_INFO_NULL, &part[1]) == MPI_SUCCESS;
  if (ok) {
    for (int it = 0; it < 2; it++) {
      MPI_Startall(2, part);
      for (int k = 0; k < 4; k++) MPI_Pready(k, part[0]);
      MPI_Waitall(2, part, MPI_STATUSES_IGNORE);
    }
    MPI_Request_free(&part[0]);
    MPI_Request_free(&part[1]);
    if (r == 0) printf("partitioned\n");
  }
#endif
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) printf("newcalls_app: %d ranks\n", p);
  MPI_Finalize();
  return 0;
}
