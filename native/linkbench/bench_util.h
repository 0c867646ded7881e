/*
 * bench_util.h -- what every benchmark program of native/linkbench does the same way: read a number
 * option, match a name in a comma list, take a monotonic time, and fail.
 *
 * Failing is one error record (bench_out.h) naming the call, its rank and the library's words,
 * then the end of the program -- of the whole MPI job when <mpi.h> was included before this header
 * (MPI_Abort), so no rank is left waiting.  CU() checks a CUDA runtime call loaded with cudart_dl.h
 * (set rmb_cuda_error to its cudaGetErrorString), MP() an MPI call.
 */
#ifndef RANKMAP_BENCH_UTIL_H
#define RANKMAP_BENCH_UTIL_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_out.h"

static int rmb_rank;                                 /* who is failing: the MPI rank, else 0 */
static const char *(*rmb_cuda_error)(int);           /* cudaGetErrorString once the runtime is loaded */

static inline long long rmb_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}

/* 1 when `name` is an entry of the comma list (or the list is "all"). */
static inline int rmb_listed(const char *list, const char *name) {
  if (!strcmp(list, "all")) return 1;
  size_t k = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += k)
    if ((p == list || p[-1] == ',') && (p[k] == 0 || p[k] == ',')) return 1;
  return 0;
}

/* 1 and *out when `v` is a whole number (or decimal) >= lo. */
static inline int rmb_number(const char *v, double lo, double *out) {
  char *end;
  double x = strtod(v, &end);
  if (*v == 0 || *end != 0 || x < lo) return 0;
  *out = x;
  return 1;
}

/* Bad arguments (rankmap's own mistake): say so once, end (every rank of an MPI job does the same). */
static inline void rmb_usage(const char *fmt, const char *arg) {
  if (rmb_rank == 0) {
    char m[400];
    snprintf(m, sizeof m, fmt, arg);
    rmb_error("arguments", -1, m);
  }
#ifdef MPI_VERSION
  MPI_Finalize();
#endif
  exit(RMB_EXIT_USAGE);
}

/* The number of option `opt`, which must be >= lo. */
static inline double rmb_option(const char *opt, const char *v, double lo) {
  double x = 0;
  if (!rmb_number(v, lo, &x)) rmb_usage("bad value for %s", opt);
  return x;
}

static inline void rmb_die(const char *what, long long code, const char *msg) {
  char w[512];
  snprintf(w, sizeof w, "%s (rank %d)", what, rmb_rank);
  rmb_error(w, code, msg);
#ifdef MPI_VERSION
  MPI_Abort(MPI_COMM_WORLD, RMB_EXIT_FAILED);
#endif
  exit(RMB_EXIT_FAILED);
}

static inline void rmb_cuda_check(int e, const char *call) {
  if (e) rmb_die(call, e, rmb_cuda_error ? rmb_cuda_error(e) : "CUDA error");
}
#define CU(x) rmb_cuda_check((x), #x)

#ifdef MPI_VERSION
static inline void rmb_mpi_check(int e, const char *call) {
  if (e == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(e, msg, &len);
  rmb_die(call, e, msg);
}
#define MP(x) rmb_mpi_check((x), #x)
#endif

#endif
