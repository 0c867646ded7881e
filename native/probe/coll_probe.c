/*
 * coll_probe.c -- what an MPI library really sends for one collective, per call.
 *
 * usage: coll_probe COLL[,COLL...] SIZE...   (COLL: allreduce bcast reduce allgather alltoall gather
 *                  scatter reduce_scatter_block reduce_scatter allgatherv alltoallv, and the
 *                  nonblocking iallreduce ibcast ireduce iallgather ialltoall igather iscatter,
 *                  each started and waited for at once; SIZE bytes, a multiple of 8)
 * Runs each COLL once per size (and per root for the rooted ones), each call followed by a barrier,
 * and prints, on rank 0, one line per (collective, size, root, src, dst) with the bytes and messages
 * src sent to dst in that call (dst -1: a peer the probe could not name):
 *     COLL SIZE ROOT SRC DST BYTES MESSAGES
 * after two lines that name the library as rankmap's shim records it (META mpi_library and
 * mpi_library_file: the key of a conformance record):
 *     #library <first line of MPI_Get_library_version>
 *     #file <the file that defines PMPI_Init>
 * Reductions use MPI_DOUBLE/MPI_SUM (SIZE/8 elements), the rest MPI_BYTE; PROBE_INPLACE=1 uses
 * MPI_IN_PLACE where the collective allows it. The v forms' blocks: allgatherv rank i contributes
 * SIZE bytes for odd i, SIZE/2 for even i; alltoallv rank r sends SIZE bytes to rank j, none
 * where (r + j) % 3 == 0 (pairs/probe.py's probe_call says the same).
 *
 * Where the messages are seen (the executable's own definition of these symbols wins over the
 * library's, as it comes first in the lookup order; it passes every call on):
 *   Open MPI  mca_common_monitoring_record_pml(world rank, bytes, tag): every message its
 *             monitoring PML records (run with --mca pml_monitoring_enable 1 or 2);
 *   UCX       ucp_tag_send_nbx / ucp_tag_send_sync_nbx (MPICH's ch4:ucx): every tag send; the
 *             endpoint of each peer is learnt from 100+peer byte messages sent before the phases.
 * Build: mpicc -rdynamic [-DPROBE_UCX] coll_probe.c -ldl
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXPH 8192

static int phase = -1, P;
static long long *bytes, *msgs;       /* [phase][P + 1]: the last column is an unknown peer */

static void count(int peer, size_t n) {
  if (phase < 0 || !bytes) return;
  if (peer < 0 || peer >= P) peer = P;
  bytes[(size_t)phase * (P + 1) + peer] += (long long)n;
  msgs[(size_t)phase * (P + 1) + peer]++;
}

#ifdef PROBE_UCX
#include <ucp/api/ucp.h>
#define MAXEP 4096
static ucp_ep_h eps[MAXEP];
static int ep_peer[MAXEP], neps, learning;

static int ep_slot(ucp_ep_h ep) {
  for (int i = 0; i < neps; i++) if (eps[i] == ep) return i;
  if (neps == MAXEP) return -1;
  eps[neps] = ep; ep_peer[neps] = -1;
  return neps++;
}
/* bytes of a send: contiguous types carry their element size; MPICH's generic types have its
 * MPIR_Datatype as context, whose first member is the MPI handle */
static size_t send_bytes(size_t cnt, const ucp_request_param_t *prm) {
  ucp_datatype_t dt = (prm && (prm->op_attr_mask & UCP_OP_ATTR_FIELD_DATATYPE)) ? prm->datatype : ucp_dt_make_contig(1);
  if ((dt & UCP_DATATYPE_CLASS_MASK) == UCP_DATATYPE_CONTIG) return cnt * (size_t)(dt >> UCP_DATATYPE_SHIFT);
  if ((dt & UCP_DATATYPE_CLASS_MASK) == UCP_DATATYPE_GENERIC) {
    struct { void *context; } *g = (void *)(uintptr_t)(dt & ~(ucp_datatype_t)UCP_DATATYPE_CLASS_MASK);
    int sz = 0;
    PMPI_Type_size((MPI_Datatype)(*(int *)g->context), &sz);
    return cnt * (size_t)sz;
  }
  return cnt;
}
static void seen(ucp_ep_h ep, size_t n) {
  int s = ep_slot(ep);
  if (s < 0) return;
  if (learning && n >= 100 && n < 100 + (size_t)P) ep_peer[s] = (int)n - 100;
  count(ep_peer[s] < 0 ? -1 : ep_peer[s], n);
}
typedef ucs_status_ptr_t (*send_fn)(ucp_ep_h, const void *, size_t, ucp_tag_t, const ucp_request_param_t *);
ucs_status_ptr_t ucp_tag_send_nbx(ucp_ep_h ep, const void *b, size_t c, ucp_tag_t t, const ucp_request_param_t *p) {
  static send_fn real;
  if (!real) real = (send_fn)dlsym(RTLD_NEXT, "ucp_tag_send_nbx");
  seen(ep, send_bytes(c, p));
  return real(ep, b, c, t, p);
}
ucs_status_ptr_t ucp_tag_send_sync_nbx(ucp_ep_h ep, const void *b, size_t c, ucp_tag_t t, const ucp_request_param_t *p) {
  static send_fn real;
  if (!real) real = (send_fn)dlsym(RTLD_NEXT, "ucp_tag_send_sync_nbx");
  seen(ep, send_bytes(c, p));
  return real(ep, b, c, t, p);
}
#else
#include <link.h>
static int find_lib(struct dl_phdr_info *i, size_t s, void *d) {
  (void)s;
  if (strstr(i->dlpi_name, "libmca_common_monitoring")) *(const char **)d = i->dlpi_name;
  return 0;
}
void mca_common_monitoring_record_pml(int world_rank, size_t n, int tag) {
  static void (*real)(int, size_t, int);
  if (!real) {
    const char *name = NULL;
    dl_iterate_phdr(find_lib, &name);
    void *h = name ? dlopen(name, RTLD_NOLOAD | RTLD_LAZY) : NULL;
    /* Open MPI 5 built without dlopen (PyPI's wheel): the monitoring is in libmpi itself */
    real = (void (*)(int, size_t, int))(h ? dlsym(h, "mca_common_monitoring_record_pml")
                                          : dlsym(RTLD_NEXT, "mca_common_monitoring_record_pml"));
  }
  if (real) real(world_rank, n, tag);
  count(world_rank, n);
}
#endif

static int rooted(const char *c) {
  if (c[0] == 'i') c++;
  return !strcmp(c, "bcast") || !strcmp(c, "reduce") || !strcmp(c, "gather") || !strcmp(c, "scatter");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (argc < 3) { if (!r) fprintf(stderr, "usage: coll_probe COLL[,COLL...] SIZE...\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
  char *colls[32];
  int ncoll = 0, nph = 0, inplace = getenv("PROBE_INPLACE") != NULL;
  for (char *t = strtok(argv[1], ","); t && ncoll < 32; t = strtok(NULL, ",")) {
    colls[ncoll++] = t;
    nph += (argc - 2) * (rooted(t) ? P : 1);
  }
  size_t max = 256;
  for (int i = 2; i < argc; i++) if ((size_t)atol(argv[i]) > max) max = (size_t)atol(argv[i]);
  bytes = calloc((size_t)MAXPH * (P + 1), sizeof *bytes);
  msgs = calloc((size_t)MAXPH * (P + 1), sizeof *msgs);
  char *a = calloc(max * (size_t)P + 64, 1), *b = calloc(max * (size_t)P + 64, 1);
  int *rc = malloc(sizeof(int) * (size_t)P), *sc = malloc(sizeof(int) * (size_t)P);
  int *sd = malloc(sizeof(int) * (size_t)P), *rd = malloc(sizeof(int) * (size_t)P);
  if (!bytes || !msgs || !a || !b || !rc || !sc || !sd || !rd || nph > MAXPH) {
    fprintf(stderr, "coll_probe: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
#ifdef PROBE_UCX
  learning = 1;        /* each rank sends 100+dst bytes to each dst: the endpoint of dst */
  for (int s = 0; s < P; s++)
    for (int d = 0; d < P; d++) {
      if (s == d) continue;
      if (r == s) MPI_Send(a, 100 + d, MPI_BYTE, d, 7, MPI_COMM_WORLD);
      if (r == d) MPI_Recv(b, 100 + d, MPI_BYTE, s, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  learning = 0;
#endif
  /* A message counts for the phase its sender is in, so one barrier between two calls is enough: a
   * rank leaves it, and starts the next call, only once every rank has made every send of the call
   * before (a barrier before each call as well cost a third of an oversubscribed probe's time). */
  MPI_Barrier(MPI_COMM_WORLD);
  int ph = 0;
  for (int c = 0; c < ncoll; c++)
  for (int k = 2; k < argc; k++) {
    const char *coll = colls[c];
    int s = atoi(argv[k]), d = s / 8, nroots = rooted(coll) ? P : 1;
    for (int i = 0; i < P; i++) rc[i] = d;
    for (int root = 0; root < nroots; root++, ph++) {
      phase = ph;
      void *sb = inplace ? MPI_IN_PLACE : (void *)a;
      if (!strcmp(coll, "allreduce")) MPI_Allreduce(sb, b, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      else if (!strcmp(coll, "bcast")) MPI_Bcast(a, s, MPI_BYTE, root, MPI_COMM_WORLD);
      else if (!strcmp(coll, "reduce")) MPI_Reduce(a, b, d, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD);
      else if (!strcmp(coll, "allgather")) MPI_Allgather(sb, s, MPI_BYTE, b, s, MPI_BYTE, MPI_COMM_WORLD);
      else if (!strcmp(coll, "alltoall")) MPI_Alltoall(sb, s, MPI_BYTE, b, s, MPI_BYTE, MPI_COMM_WORLD);
      else if (!strcmp(coll, "gather")) MPI_Gather(a, s, MPI_BYTE, b, s, MPI_BYTE, root, MPI_COMM_WORLD);
      else if (!strcmp(coll, "scatter")) MPI_Scatter(a, s, MPI_BYTE, b, s, MPI_BYTE, root, MPI_COMM_WORLD);
      else if (!strcmp(coll, "reduce_scatter_block"))
        MPI_Reduce_scatter_block(a, b, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      else if (!strcmp(coll, "reduce_scatter")) MPI_Reduce_scatter(a, b, rc, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      else if (!strcmp(coll, "allgatherv")) {
        for (int i = 0, o = 0; i < P; o += rc[i], i++) { rc[i] = i % 2 ? s : s / 2; rd[i] = o; }
        MPI_Allgatherv(inplace ? MPI_IN_PLACE : (void *)a, rc[r], MPI_BYTE, b, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
        for (int i = 0; i < P; i++) rc[i] = d;
      } else if (!strcmp(coll, "alltoallv")) {
        for (int j = 0; j < P; j++) { sc[j] = (r + j) % 3 ? s : 0; sd[j] = rd[j] = j * s; }
        MPI_Alltoallv(a, sc, sd, MPI_BYTE, b, sc, rd, MPI_BYTE, MPI_COMM_WORLD);
      } else if (coll[0] == 'i') {
        MPI_Request q = MPI_REQUEST_NULL;
        const char *n = coll + 1;
        if (!strcmp(n, "allreduce")) MPI_Iallreduce(sb, b, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &q);
        else if (!strcmp(n, "bcast")) MPI_Ibcast(a, s, MPI_BYTE, root, MPI_COMM_WORLD, &q);
        else if (!strcmp(n, "reduce")) MPI_Ireduce(a, b, d, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD, &q);
        else if (!strcmp(n, "allgather")) MPI_Iallgather(sb, s, MPI_BYTE, b, s, MPI_BYTE, MPI_COMM_WORLD, &q);
        else if (!strcmp(n, "alltoall")) MPI_Ialltoall(sb, s, MPI_BYTE, b, s, MPI_BYTE, MPI_COMM_WORLD, &q);
        else if (!strcmp(n, "gather")) MPI_Igather(a, s, MPI_BYTE, b, s, MPI_BYTE, root, MPI_COMM_WORLD, &q);
        else if (!strcmp(n, "scatter")) MPI_Iscatter(a, s, MPI_BYTE, b, s, MPI_BYTE, root, MPI_COMM_WORLD, &q);
        else { if (!r) fprintf(stderr, "coll_probe: unknown collective %s\n", coll); MPI_Abort(MPI_COMM_WORLD, 2); }
        MPI_Wait(&q, MPI_STATUS_IGNORE);
      } else { if (!r) fprintf(stderr, "coll_probe: unknown collective %s\n", coll); MPI_Abort(MPI_COMM_WORLD, 2); }
      phase = -1;
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  int w = P + 1;
  long long *ab = NULL, *am = NULL;
  if (!r) { ab = calloc((size_t)ph * w * P, sizeof *ab); am = calloc((size_t)ph * w * P, sizeof *am); }
  MPI_Gather(bytes, ph * w, MPI_LONG_LONG, ab, ph * w, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  MPI_Gather(msgs, ph * w, MPI_LONG_LONG, am, ph * w, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (!r) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING + 1] = "";
    int len = 0;
    PMPI_Get_library_version(lib, &len);
    lib[len > 0 && len <= MPI_MAX_LIBRARY_VERSION_STRING ? len : 0] = 0;
    lib[strcspn(lib, "\n")] = 0;
    Dl_info where;
    printf("#library %s\n#file %s\n", lib,
           dladdr((void *)PMPI_Init, &where) && where.dli_fname ? where.dli_fname : "");
    int q = 0;
    for (int c = 0; c < ncoll; c++)
      for (int k = 2; k < argc; k++)
        for (int root = 0; root < (rooted(colls[c]) ? P : 1); root++, q++)
          for (int src = 0; src < P; src++)
            for (int dst = 0; dst < w; dst++) {
              size_t at = (size_t)src * ph * w + (size_t)q * w + dst;
              if (am[at])
                printf("%s %s %d %d %d %lld %lld\n", colls[c], argv[k], root, src, dst == P ? -1 : dst, ab[at], am[at]);
            }
  }
  MPI_Finalize();
  return 0;
}
