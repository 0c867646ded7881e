/*
 * mpi_aware.h -- is this MPI CUDA-aware?  Asked the way each MPI lets itself be asked.
 *
 *   Open MPI   the `cuda` MPI extension (mpi-ext.h): MPIX_CUDA_AWARE_SUPPORT says whether it was
 *              built with CUDA, MPIX_Query_cuda_support() whether that support is on now;
 *   MPICH 4+   MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes), and the control variable
 *              MPIR_CVAR_ENABLE_GPU read through MPI_T;
 *   others     MVAPICH2's MV2_USE_CUDA, Cray MPICH's MPICH_GPU_SUPPORT_ENABLED; else "cannot tell",
 *              which counts as not CUDA-aware (the caller may be told otherwise).
 * Call after MPI_Init.  Returns 1 / 0 and says how it knows in `how`.
 */
#ifndef RANKMAP_MPI_AWARE_H
#define RANKMAP_MPI_AWARE_H

#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An integer control variable through MPI_T; 1 if read. */
static inline int rm_cvar_int(const char *name, long long *out) {
#if MPI_VERSION > 3 || (MPI_VERSION == 3 && MPI_SUBVERSION >= 1)
  int provided = 0, idx = -1, ok = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return 0;
  if (MPI_T_cvar_get_index(name, &idx) == MPI_SUCCESS) {
    char nm[256], desc[1024];
    int nlen = sizeof nm, dlen = sizeof desc, verb = 0, bind = 0, scope = 0;
    MPI_Datatype dt;
    MPI_T_enum en;
    if (MPI_T_cvar_get_info(idx, nm, &nlen, &verb, &dt, &en, desc, &dlen, &bind, &scope) == MPI_SUCCESS &&
        bind == MPI_T_BIND_NO_OBJECT) {
      MPI_T_cvar_handle h;
      int count = 0;
      if (MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS) {
        union { int i; unsigned u; long l; unsigned long ul; long long ll; unsigned long long ull; char pad[256]; } v;
        memset(&v, 0, sizeof v);
        if (count == 1 && MPI_T_cvar_read(h, &v) == MPI_SUCCESS) {
          if (dt == MPI_INT) { *out = v.i; ok = 1; }
          else if (dt == MPI_UNSIGNED) { *out = (long long)v.u; ok = 1; }
          else if (dt == MPI_LONG) { *out = v.l; ok = 1; }
          else if (dt == MPI_UNSIGNED_LONG) { *out = (long long)v.ul; ok = 1; }
          else if (dt == MPI_LONG_LONG) { *out = v.ll; ok = 1; }
          else if (dt == MPI_UNSIGNED_LONG_LONG) { *out = (long long)v.ull; ok = 1; }
        }
        MPI_T_cvar_handle_free(&h);
      }
    }
  }
  MPI_T_finalize();
  return ok;
#else
  (void)name;
  (void)out;
  return 0;
#endif
}

static inline int rm_cuda_aware(char *how, size_t n) {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA && defined(MPIX_CUDA_AWARE_SUPPORT)
#if MPIX_CUDA_AWARE_SUPPORT
  int now = MPIX_Query_cuda_support();
  snprintf(how, n, "Open MPI cuda extension: built with CUDA support, MPIX_Query_cuda_support() = %d", now);
  return now ? 1 : 0;
#else
  snprintf(how, n, "Open MPI cuda extension: built without CUDA support (MPIX_CUDA_AWARE_SUPPORT = 0)");
  return 0;
#endif
#elif defined(MPIX_GPU_SUPPORT_CUDA)
  int yes = 0;
  long long cvar = -1;
  int have_cvar = rm_cvar_int("MPIR_CVAR_ENABLE_GPU", &cvar);
  if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) != MPI_SUCCESS) yes = 0;
  if (have_cvar)
    snprintf(how, n, "MPIX_GPU_query_support(CUDA) = %d, MPIR_CVAR_ENABLE_GPU = %lld", yes, cvar);
  else
    snprintf(how, n, "MPIX_GPU_query_support(CUDA) = %d", yes);
  return yes && (!have_cvar || cvar != 0);
#else
  const char *mv2 = getenv("MV2_USE_CUDA"), *cray = getenv("MPICH_GPU_SUPPORT_ENABLED");
  long long cvar = -1;
  if (mv2) {
    snprintf(how, n, "MV2_USE_CUDA=%s", mv2);
    return atoi(mv2) != 0;
  }
  if (cray) {
    snprintf(how, n, "MPICH_GPU_SUPPORT_ENABLED=%s", cray);
    return atoi(cray) != 0;
  }
  if (rm_cvar_int("MPIR_CVAR_ENABLE_GPU", &cvar)) {
    snprintf(how, n, "MPIR_CVAR_ENABLE_GPU = %lld", cvar);
    return cvar != 0;
  }
  snprintf(how, n, "this MPI offers no way to ask (no cuda extension, no MPIX_GPU_query_support)");
  return 0;
#endif
}

#endif
