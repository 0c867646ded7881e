/*
 * shim_fort.h -- what the generated Fortran wrappers (wrap_f.c: mpif.h / `use mpi` and Open MPI's
 * `use mpi_f08`) need beyond shim_core.h: the library's own Fortran routines, the Fortran
 * sentinels, Fortran statuses and handle arrays.
 */
#ifndef RANKMAP_SHIM_FORT_H
#define RANKMAP_SHIM_FORT_H

#include "shim_core.h"

_Static_assert(sizeof(MPI_Fint) == sizeof(int), "Fortran INTEGER must be a C int");

#ifdef MPI_F_STATUS_SIZE
#define RM_F_STATUS_SIZE MPI_F_STATUS_SIZE
#else
#define RM_F_STATUS_SIZE ((int)(sizeof(MPI_Status) / sizeof(MPI_Fint)))
#endif

/* Fortran indices (MPI_Waitany, MPI_Testany, MPI_Waitsome, MPI_Testsome) count from 1; MPICH
 * 4.0's mpi_f08 returns them counted from 0 (pmodels/mpich#6270, fixed in 4.1). */
#if defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000 && MPICH_NUMVERSION < 40100000
#define RM_F_INDEX_BASE (RM_F08 ? 0 : 1)
#else
#define RM_F_INDEX_BASE 1
#endif

#pragma GCC visibility push(hidden)

/* The library's Fortran routine: rm_fresolve tries lower_, lower__, lower, LOWER (mpif.h);
 * rm_fresolve_exact the one name (mpi_x_f08_).  Both look past the shim (RTLD_NEXT). */
void *rm_fresolve(const char *lower);
void *rm_fresolve_exact(const char *name);
void rm_fmissing(const char *name, MPI_Fint *ierr);     /* one stderr line, ierr = MPI_ERR_OTHER */

/* Fortran MPI_IN_PLACE / MPI_BOTTOM arrive as the address of a library variable: the C sentinel
 * instead, so that the accounting reads the arguments as the C wrappers do. */
const void *rm_fbuf(const void *p);

/* Statuses: f08 = 0 for mpif.h / `use mpi` (an INTEGER array), 1 for `use mpi_f08` (TYPE(MPI_Status):
 * Open MPI lays it out as the INTEGER array, MPICH as its C MPI_Status, converted by
 * MPI_Status_f082c).  Either takes RM_F_STATUS_SIZE INTEGERs.  The generated wrappers call the
 * macros below; RM_F08 says which family they are. */
int rm_fstatus_ignored_x(const MPI_Fint *st, int f08);
int rm_fstatuses_ignored_x(const MPI_Fint *sts, int f08);
MPI_Status *rm_fstatus_x(const MPI_Fint *f, MPI_Status *c, int f08);   /* MPI_STATUS_IGNORE if ignored */
#define rm_fstatus_ignored(st) rm_fstatus_ignored_x(st, RM_F08)
#define rm_fstatus(f, c) rm_fstatus_x(f, c, RM_F08)

/* C handles of a Fortran datatype array (alltoallw forms; caller frees): its length is the group
 * size, the remote group's for an inter-communicator, or the neighbour count. */
enum { RM_FT_SEND = 0, RM_FT_RECV = 1, RM_FT_NEIGHBOR = 2 };
MPI_Datatype *rm_ftypes(const MPI_Fint *f, MPI_Comm comm, int which);

uint64_t rm_start_all_f(int n, const MPI_Fint *reqs);
int  rm_multi_get_f(rm_multi_t *m, int n, const MPI_Fint *reqs);
MPI_Fint *rm_multi_fstatuses_x(rm_multi_t *m, MPI_Fint *sts, int f08);   /* ours if sts is ignored */
void rm_multi_done_fx(rm_multi_t *m, int i, const MPI_Fint *sts, int slot, int f08);
void rm_multi_done_err_fx(rm_multi_t *m, int i, const MPI_Fint *sts, int slot, int f08);
#define rm_multi_fstatuses(m, sts) rm_multi_fstatuses_x(m, sts, RM_F08)
#define rm_multi_done_f(m, i, sts, slot) rm_multi_done_fx(m, i, sts, slot, RM_F08)
#define rm_multi_done_err_f(m, i, sts, slot) rm_multi_done_err_fx(m, i, sts, slot, RM_F08)

#pragma GCC visibility pop

/* a generated wrapper rmf_x under the names a Fortran compiler gives routine x */
#define RM_F_EXPORT(lower, UPPER)                                                  \
  extern __typeof__(rmf_##lower) lower##_ __attribute__((alias("rmf_" #lower)));   \
  extern __typeof__(rmf_##lower) lower##__ __attribute__((alias("rmf_" #lower)));  \
  extern __typeof__(rmf_##lower) lower __attribute__((alias("rmf_" #lower)));      \
  extern __typeof__(rmf_##lower) UPPER __attribute__((alias("rmf_" #lower)));
#define RM_F08_EXPORT(name) \
  extern __typeof__(rmf_##name) name __attribute__((alias("rmf_" #name)));

#endif
