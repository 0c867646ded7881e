/* where_app.c -- a rank that says where it runs and what it sent, for the emulated-node tests.
 * usage: where_app [BYTES=1048576] [ITERS=4]
 * Per iteration rank r exchanges BYTES with r^2 (its heavy partner) and BYTES/8 with r^1 (a light
 * one), both ways, with MPI_Isend/MPI_Irecv (partners past the world size are skipped). So
 *   T[r][r^2] = BYTES*ITERS and T[r][r^1] = (BYTES/8)*ITERS, one message per iteration each;
 * ranks numbered in blocks put the heavy pairs on different nodes.
 * Then every rank prints one line: WHERE {"rank", "host", "affinity", "env": {...}, "sent": {...}}
 * with its host name, the CPUs it may run on (sched_getaffinity), the placement variables rankmap's
 * exec wrapper sets, and the bytes it sent to each peer. */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *VARS[] = {"RANKMAP_PLACED", "RANKMAP_CPUS", "UCX_NET_DEVICES", "NCCL_SOCKET_IFNAME",
                             "NCCL_IB_HCA", "CUDA_VISIBLE_DEVICES", "RANKMAP_MEMBIND", NULL};

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  long bytes = argc > 1 ? atol(argv[1]) : 1048576;
  int iters = argc > 2 ? atoi(argv[2]) : 4, rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int peer[2] = {rank ^ 2, rank ^ 1};
  long len[2] = {bytes, bytes / 8}, sent[2] = {0, 0};
  char *sb = calloc((size_t)bytes + 1, 1), *rb = calloc(2 * (size_t)bytes + 1, 1);
  for (int it = 0; it < iters; it++) {
    MPI_Request rq[4];
    int k = 0;
    for (int i = 0; i < 2; i++) {
      if (peer[i] >= size) continue;
      MPI_Irecv(rb + i * bytes, (int)len[i], MPI_CHAR, peer[i], i, MPI_COMM_WORLD, &rq[k++]);
      MPI_Isend(sb, (int)len[i], MPI_CHAR, peer[i], i, MPI_COMM_WORLD, &rq[k++]);
      sent[i] += len[i];
    }
    MPI_Waitall(k, rq, MPI_STATUSES_IGNORE);
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  char line[4096];
  int n = snprintf(line, sizeof line, "WHERE {\"rank\": %d, \"host\": \"%s\", \"affinity\": [", rank, host);
  for (int c = 0, first = 1; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) { n += snprintf(line + n, sizeof line - n, "%s%d", first ? "" : ", ", c); first = 0; }
  n += snprintf(line + n, sizeof line - n, "], \"env\": {");
  for (int i = 0, first = 1; VARS[i]; i++) {
    const char *v = getenv(VARS[i]);
    if (!v) continue;
    n += snprintf(line + n, sizeof line - n, "%s\"%s\": \"%s\"", first ? "" : ", ", VARS[i], v);
    first = 0;
  }
  n += snprintf(line + n, sizeof line - n, "}, \"sent\": {");
  for (int i = 0, first = 1; i < 2; i++) {
    if (peer[i] >= size) continue;
    n += snprintf(line + n, sizeof line - n, "%s\"%d\": %ld", first ? "" : ", ", peer[i], sent[i]);
    first = 0;
  }
  snprintf(line + n, sizeof line - n, "}}\n");
  fputs(line, stdout);
  fflush(stdout);
  free(sb); free(rb);
  MPI_Finalize();
  return 0;
}
