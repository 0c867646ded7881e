/*
 * shim_fort.c -- helpers of the generated Fortran wrappers (see shim_fort.h).
 *
 * Sentinels: Open MPI's Fortran MPI_IN_PLACE is the common block mpi_fortran_in_place (under
 * each Fortran mangling), the same for mpif.h, `use mpi` and `use mpi_f08`; MPICH's is
 * MPIR_F08_MPI_IN_PLACE for mpi_f08, and for mpif.h a common block whose address MPICH keeps in
 * MPIR_F_MPI_IN_PLACE, set when its Fortran layer initialises.  All are looked up once (dlsym);
 * MPICH's address variables are read at every use.
 */
#define _GNU_SOURCE
#include "shim_fort.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the library's Fortran routines ---------------------------------------------------------- */

void *rm_fresolve(const char *lower) {
  char b[128];
  void *p;
  snprintf(b, sizeof b, "%s_", lower);
  if ((p = dlsym(RTLD_NEXT, b))) return p;
  snprintf(b, sizeof b, "%s__", lower);
  if ((p = dlsym(RTLD_NEXT, b))) return p;
  if ((p = dlsym(RTLD_NEXT, lower))) return p;
  size_t i = 0;
  for (; lower[i] && i < sizeof b - 1; i++) b[i] = (char)toupper((unsigned char)lower[i]);
  b[i] = 0;
  return dlsym(RTLD_NEXT, b);
}

void *rm_fresolve_exact(const char *name) { return dlsym(RTLD_NEXT, name); }

void rm_fmissing(const char *name, MPI_Fint *ierr) {
  fprintf(stderr, "rankmap: %s: the MPI library has no such Fortran routine\n", name);
  if (ierr) *ierr = MPI_ERR_OTHER;
}

/* ---- sentinels ---------------------------------------------------------------------------------- */

enum { FS_IN_PLACE, FS_BOTTOM, FS_STATUS_IGNORE, FS_STATUSES_IGNORE, FS_KINDS };
#define FS_NAMES 5
static const void *fs_addr[FS_KINDS][FS_NAMES];   /* Open MPI: the variables themselves */
static void *const *fs_ref[FS_KINDS];             /* MPICH: a variable holding the address */
static pthread_once_t fs_once = PTHREAD_ONCE_INIT;

static void fs_init(void) {
  static const char *ompi[FS_KINDS] = {"mpi_fortran_in_place", "mpi_fortran_bottom",
                                       "mpi_fortran_status_ignore", "mpi_fortran_statuses_ignore"};
  static const char *mpich_ref[FS_KINDS] = {"MPIR_F_MPI_IN_PLACE", "MPIR_F_MPI_BOTTOM", NULL, NULL};
  static const char *mpich08[FS_KINDS] = {"MPIR_F08_MPI_IN_PLACE", "MPIR_F08_MPI_BOTTOM",
                                          "MPIR_F08_MPI_STATUS_IGNORE_OBJ", "MPIR_F08_MPI_STATUSES_IGNORE_OBJ"};
  for (int k = 0; k < FS_KINDS; k++) {
    char b[64], u[64];
    size_t i = 0;
    for (; ompi[k][i]; i++) u[i] = (char)toupper((unsigned char)ompi[k][i]);
    u[i] = 0;
    const char *names[FS_NAMES] = {ompi[k], b, b + 32, u, mpich08[k]};
    snprintf(b, 32, "%s_", ompi[k]);
    snprintf(b + 32, 32, "%s__", ompi[k]);
    for (int j = 0; j < FS_NAMES; j++) fs_addr[k][j] = dlsym(RTLD_DEFAULT, names[j]);
    if (mpich_ref[k]) fs_ref[k] = dlsym(RTLD_DEFAULT, mpich_ref[k]);
  }
}

static inline int fs_is(int kind, const void *p) {
  pthread_once(&fs_once, fs_init);
  if (!p) return 0;
  for (int j = 0; j < FS_NAMES; j++)
    if (p == fs_addr[kind][j]) return 1;
  return fs_ref[kind] && p == *fs_ref[kind];
}

const void *rm_fbuf(const void *p) {
  if (fs_is(FS_IN_PLACE, p)) return MPI_IN_PLACE;
  if (fs_is(FS_BOTTOM, p)) return MPI_BOTTOM;
  return p;
}

int rm_fstatus_ignored_x(const MPI_Fint *st, int f08) {
  (void)f08;
  return st == MPI_F_STATUS_IGNORE || fs_is(FS_STATUS_IGNORE, st);
}

int rm_fstatuses_ignored_x(const MPI_Fint *sts, int f08) {
  (void)f08;
  return sts == MPI_F_STATUSES_IGNORE || fs_is(FS_STATUSES_IGNORE, sts);
}

#ifdef RM_HAVE_PMPI_Status_f082c
_Static_assert(sizeof(MPI_F08_status) == RM_F_STATUS_SIZE * sizeof(MPI_Fint), "f08 status size");
#endif

MPI_Status *rm_fstatus_x(const MPI_Fint *f, MPI_Status *c, int f08) {
  if (rm_fstatus_ignored_x(f, f08)) return MPI_STATUS_IGNORE;
#ifdef RM_HAVE_PMPI_Status_f082c
  if (f08) return PMPI_Status_f082c((const MPI_F08_status *)(const void *)f, c) == MPI_SUCCESS ? c : MPI_STATUS_IGNORE;
#endif
  return PMPI_Status_f2c(f, c) == MPI_SUCCESS ? c : MPI_STATUS_IGNORE;
}

/* ---- handle arrays ----------------------------------------------------------------------------- */

static int degree(MPI_Comm comm, int out) {
  int topo = MPI_UNDEFINED, n = 0;
  PMPI_Topo_test(comm, &topo);
  if (topo == MPI_CART) {
    PMPI_Cartdim_get(comm, &n);
    return 2 * n;
  }
  if (topo == MPI_GRAPH) {
    int me = 0;
    PMPI_Comm_rank(comm, &me);
    PMPI_Graph_neighbors_count(comm, me, &n);
    return n;
  }
  if (topo == MPI_DIST_GRAPH) {
    int ni = 0, no = 0, w = 0;
    PMPI_Dist_graph_neighbors_count(comm, &ni, &no, &w);
    return out ? no : ni;
  }
  return 0;
}

MPI_Datatype *rm_ftypes(const MPI_Fint *f, MPI_Comm comm, int which) {
  if (!f || comm == MPI_COMM_NULL) return NULL;
  int n = 0, inter = 0;
  if (which & RM_FT_NEIGHBOR) n = degree(comm, !(which & RM_FT_RECV));
  else {
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) PMPI_Comm_remote_size(comm, &n); else PMPI_Comm_size(comm, &n);
  }
  MPI_Datatype *t = malloc(sizeof *t * (size_t)(n > 0 ? n : 1));
  if (t)
    for (int i = 0; i < n; i++) t[i] = PMPI_Type_f2c(f[i]);
  return t;
}

/* ---- requests ------------------------------------------------------------------------------------ */

uint64_t rm_start_all_f(int n, const MPI_Fint *reqs) {
  uint64_t sum = 0;
  for (int i = 0; i < n && rm_rq_count; i++) sum += rm_start_one(PMPI_Request_f2c(reqs[i]));
  return sum;
}

/* The C handles of a Fortran request array, in a per-thread buffer grown once: used only while
 * rm_multi_get_f looks them up (before the library's call), so a nested completion call cannot
 * meet it in use. */
static RM_TLS MPI_Request *fq;
static RM_TLS size_t nfq;

int rm_multi_get_f(rm_multi_t *m, int n, const MPI_Fint *reqs) {
  if (!rm_rq_pending() || n <= 0) return rm_multi_get(m, 0, NULL);
  if ((size_t)n > nfq) {
    size_t cap = nfq ? nfq : 64;
    while (cap < (size_t)n) cap *= 2;
    MPI_Request *c = malloc(sizeof *c * cap);
    if (!c) return rm_multi_get(m, 0, NULL);
    free(fq);
    fq = c; nfq = cap;
  }
  for (int i = 0; i < n; i++) fq[i] = PMPI_Request_f2c(reqs[i]);
  return rm_multi_get(m, n, fq);
}

MPI_Fint *rm_multi_fstatuses_x(rm_multi_t *m, MPI_Fint *sts, int f08) {
  if (!rm_fstatuses_ignored_x(sts, f08)) return sts;
  MPI_Fint *b = rm_multi_fbuf(m, (size_t)m->n * RM_F_STATUS_SIZE);
  return b ? b : sts;
}

/* the C view, in *st, of Fortran status `slot` of a batch's tracked request i; NULL if i is not
 * tracked or the statuses were ignored */
static const MPI_Status *fstatus_of(rm_multi_t *m, int i, const MPI_Fint *sts, int slot, int f08, MPI_Status *st) {
  if (!rm_multi_has(m, i) || rm_fstatuses_ignored_x(sts, f08)) return NULL;
  const MPI_Status *c = rm_fstatus_x(sts + (size_t)slot * RM_F_STATUS_SIZE, st, f08);
  return c != MPI_STATUS_IGNORE ? c : NULL;
}

void rm_multi_done_fx(rm_multi_t *m, int i, const MPI_Fint *sts, int slot, int f08) {
  MPI_Status st;
  const MPI_Status *c = fstatus_of(m, i, sts, slot, f08, &st);
  if (c) rm_multi_done(m, i, c);
}

void rm_multi_done_err_fx(rm_multi_t *m, int i, const MPI_Fint *sts, int slot, int f08) {
  MPI_Status st;
  const MPI_Status *c = fstatus_of(m, i, sts, slot, f08, &st);
  if (c) rm_multi_done_err(m, i, c);
}
