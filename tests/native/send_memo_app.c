/* send_memo_app.c -- sends that repeat their arguments while what the arguments mean changes.
 *
 * The shim remembers a thread's recent sends by their arguments (communicator, peer, count,
 * datatype, operation).  Each phase keeps the arguments and changes their meaning, so a stale
 * memory would put bytes on the wrong pair or count the wrong payload:
 *   1. a communicator whose ranks run in reverse order, freed, then one in world order that may
 *      reuse its handle: REPS sends to comm rank (me + 1) % p through each;
 *   2. a derived type of 2 ints, freed, then one of 3 ints (a handle again possibly reused):
 *      REPS sends of count 1 to world rank (me + 1) % p each;
 *   3. MPI_Isend and MPI_Send with one set of arguments, interleaved (the operation tells them apart),
 *      and sends to MPI_PROC_NULL in between (no row);
 *   4. collectives, which the shim also remembers by their arguments: REPS MPI_Bcast of 2 ints from
 *      root 0 through a reversed communicator, freed, then through a world-ordered one; REPS
 *      MPI_Bcast of count 1 of a 2-int then (freed) a 3-int derived type over MPI_COMM_WORLD.
 * Every message is received with MPI_Recv from MPI_ANY_SOURCE.  Run on any number of ranks >= 2. */
#include <mpi.h>
#include <stdio.h>

#define REPS 5

static int me, p;

static void drain(int n, int bytes_each) {
  char buf[64];
  for (int i = 0; i < n; i++) {
    MPI_Status st;
    MPI_Recv(buf, bytes_each, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int data[4] = {1, 2, 3, 4};
  MPI_Request rq[REPS];

  /* 1: reversed communicator, freed; then world order (same handle or not) */
  for (int pass = 0; pass < 2; pass++) {
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, 0, pass == 0 ? p - 1 - me : me, &c);
    int cr;
    MPI_Comm_rank(c, &cr);
    for (int i = 0; i < REPS; i++) MPI_Isend(data, 2, MPI_INT, (cr + 1) % p, 1, c, &rq[i]);
    /* the messages come over c: receive them there */
    char buf[64];
    for (int i = 0; i < REPS; i++) MPI_Recv(buf, 8, MPI_BYTE, MPI_ANY_SOURCE, 1, c, MPI_STATUS_IGNORE);
    MPI_Waitall(REPS, rq, MPI_STATUSES_IGNORE);
    MPI_Comm_free(&c);
  }

  /* 2: a derived type of 2 ints, freed; then one of 3 ints */
  for (int pass = 0; pass < 2; pass++) {
    MPI_Datatype t;
    MPI_Type_contiguous(2 + pass, MPI_INT, &t);
    MPI_Type_commit(&t);
    for (int i = 0; i < REPS; i++) MPI_Isend(data, 1, t, (me + 1) % p, 2, MPI_COMM_WORLD, &rq[i]);
    drain(REPS, 4 * (2 + pass));
    MPI_Waitall(REPS, rq, MPI_STATUSES_IGNORE);
    MPI_Type_free(&t);
  }

  /* 3: one set of arguments through two operations, and sends to nobody */
  for (int i = 0; i < REPS; i++) {
    MPI_Request r;
    MPI_Isend(data, 4, MPI_INT, (me + 1) % p, 3, MPI_COMM_WORLD, &r);
    MPI_Send(data, 4, MPI_INT, MPI_PROC_NULL, 3, MPI_COMM_WORLD);
    MPI_Send(data, 4, MPI_INT, (me + 1) % p, 3, MPI_COMM_WORLD);
    drain(2, 16);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }

  /* 4: collectives with repeated arguments */
  for (int pass = 0; pass < 2; pass++) {
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, 0, pass == 0 ? p - 1 - me : me, &c);
    for (int i = 0; i < REPS; i++) MPI_Bcast(data, 2, MPI_INT, 0, c);
    MPI_Comm_free(&c);
  }
  for (int pass = 0; pass < 2; pass++) {
    MPI_Datatype t;
    MPI_Type_contiguous(2 + pass, MPI_INT, &t);
    MPI_Type_commit(&t);
    for (int i = 0; i < REPS; i++) MPI_Bcast(data, 1, t, 0, MPI_COMM_WORLD);
    MPI_Type_free(&t);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) printf("done\n");
  MPI_Finalize();
  return 0;
}
