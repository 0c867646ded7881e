/* mpi_init_finalize.c -- an MPI job that does nothing: MPI_Init, MPI_Finalize.  What a profiler's
 * fixed cost is measured on (bench/profile_cost.py): the launch and the MPI start-up are the job's
 * own, everything a profile adds to its wall time is the profiler's. */
#include <mpi.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Finalize();
  return 0;
}
