/* Drives the record writer directly: known counts from several threads, then an optional
 * fork and an optional kill before close.  Usage: rmrec_writer_test DIR RANK SIZE THREADS ITERS MODE
 * MODE: close | kill (SIGKILL self after one explicit flush and more counting) | fork
 *       | single (rmrec_single_writer; the threads run one after another, as MPI below
 *         MPI_THREAD_MULTIPLE serialises its callers: counts must stay exact)
 *       | wait (idle 300 ms before close: the flush thread's wake-ups over that time) */
#include "rmrec.h"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static rmrec_t *c;
static int size, iters, op_send, op_ar;

static void *worker(void *arg) {
  long t = (long)arg;
  for (int i = 0; i < iters; i++) {
    int peer = (int)((t + i) % size);
    rmrec_traffic(c, peer, RMREC_P2P, op_send, RMREC_MEM_HOST, RMREC_SEND, 100, 1);
    rmrec_traffic(c, peer, RMREC_P2P, op_send, RMREC_MEM_HOST, RMREC_RECV, 10, 1);
    rmrec_call(c, op_send, 100, 5);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 7) return 2;
  size = atoi(argv[3]);
  int nthr = atoi(argv[4]);
  iters = atoi(argv[5]);
  c = rmrec_open(argv[1], "mpi", atoi(argv[2]), size);
  if (!c) return 3;
  op_send = rmrec_op(c, "MPI_Send");
  op_ar = rmrec_op(c, "MPI_Allreduce");
  int members[3] = {0, 1, 2};
  rmrec_comm(c, 7, "sub", 3, members);
  rmrec_meta(c, "mpi_library", "test writer");
  pthread_t th[64];
  if (argv[6][0] == 's') {
    rmrec_single_writer(c, 1);
    for (long t = 0; t < nthr; t++) { pthread_create(&th[t], NULL, worker, (void *)t); pthread_join(th[t], NULL); }
  } else {
    for (long t = 0; t < nthr; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < nthr; t++) pthread_join(th[t], NULL);
  }
  rmrec_call(c, op_ar, 0, 1);
  rmrec_call(c, op_ar, 4096, 1);
  rmrec_traffic(c, 1, RMREC_COLL, op_ar, RMREC_MEM_DEVICE, RMREC_SEND, 4096, 1);
  if (argv[6][0] == 'k') {
    rmrec_flush(c);
    rmrec_traffic(c, 1, RMREC_COLL, op_ar, RMREC_MEM_DEVICE, RMREC_SEND, 1, 1);  /* lost */
    kill(getpid(), SIGKILL);
  }
  if (argv[6][0] == 'f') {
    pid_t pid = fork();
    if (pid == 0) {  /* child: counting and closing must not touch the parent's file */
      rmrec_traffic(c, 0, RMREC_P2P, op_send, RMREC_MEM_HOST, RMREC_SEND, 999999, 1);
      rmrec_close(c);
      _exit(0);
    }
    waitpid(pid, NULL, 0);
  }
  if (argv[6][0] == 'w') usleep(300000);
  rmrec_close(c);
  return 0;
}
