/* fake_nccl.c -- a stand-in NCCL for testing `rankmap bench nccl` in one process without a GPU.
 *
 * Communicators come from ncclCommInitAll only (one process drives every "GPU"); operations are
 * queued between ncclGroupStart and ncclGroupEnd and carried out on host memory at the outermost
 * ncclGroupEnd, one of each kind per rank, so the benchmark's grouping and buffer arithmetic are
 * checked against real results.  float32 sums only; ncclCommInitRank answers "invalid usage". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct comm { int rank, n; } comm;
enum { AR, AG, RS, BC, RD, SEND, RECV };
struct op { int kind, rank, peer, root; const float *s; float *r; size_t count; };
static struct op q[4096];
static int nq, depth;

int ncclGetVersion(int *v) { *v = 22809; return 0; }
const char *ncclGetErrorString(int e) { return e == 5 ? "invalid usage (fake NCCL)" : "fake NCCL error"; }
int ncclGetUniqueId(void *id) { memset(id, 0, 128); return 0; }
int ncclCommInitRank(comm **c, int n, char id[128], int r) { (void)c; (void)n; (void)id; (void)r; return 5; }
int ncclCommInitAll(comm **cs, int n, const int *devs) {
  (void)devs;
  for (int i = 0; i < n; i++) {
    cs[i] = malloc(sizeof(comm));
    cs[i]->rank = i;
    cs[i]->n = n;
  }
  return 0;
}
int ncclCommDestroy(comm *c) { free(c); return 0; }

static int nranks;
static void run_group(void) {
  /* one collective kind at a time: every rank's entry of that kind, in queue order */
  for (int kind = AR; kind <= RD; kind++) {
    struct op *e[64];
    int m = 0;
    for (int i = 0; i < nq; i++) if (q[i].kind == kind && m < 64) e[m++] = &q[i];
    if (!m) continue;
    size_t c = e[0]->count;
    float *tmp = calloc(c * (size_t)nranks + 1, sizeof(float));
    switch (kind) {
      case AR: case RD: case RS: {
        size_t len = kind == RS ? c * (size_t)nranks : c;
        for (int k = 0; k < m; k++) for (size_t i = 0; i < len; i++) tmp[i] += e[k]->s[i];
        for (int k = 0; k < m; k++) {
          if (kind == RD && e[k]->rank != e[k]->root) continue;
          if (kind == RS) memcpy(e[k]->r, tmp + (size_t)e[k]->rank * c, c * sizeof(float));
          else memcpy(e[k]->r, tmp, c * sizeof(float));
        }
        break;
      }
      case AG:
        for (int k = 0; k < m; k++) memcpy(tmp + (size_t)e[k]->rank * c, e[k]->s, c * sizeof(float));
        for (int k = 0; k < m; k++) memcpy(e[k]->r, tmp, c * (size_t)nranks * sizeof(float));
        break;
      case BC:
        for (int k = 0; k < m; k++) if (e[k]->rank == e[k]->root) memcpy(tmp, e[k]->s, c * sizeof(float));
        for (int k = 0; k < m; k++) memcpy(e[k]->r, tmp, c * sizeof(float));
        break;
    }
    free(tmp);
  }
  /* sends meet receives: the i-th send from a to b goes to the i-th receive at b from a */
  for (int i = 0; i < nq; i++) {
    if (q[i].kind != SEND) continue;
    for (int j = 0; j < nq; j++) {
      if (q[j].kind == RECV && q[j].rank == q[i].peer && q[j].peer == q[i].rank && q[j].r) {
        memcpy(q[j].r, q[i].s, q[i].count * sizeof(float));
        q[j].r = NULL;   /* used */
        break;
      }
    }
  }
  nq = 0;
}

static int push(int kind, const comm *c, const void *s, void *r, size_t count, int dtype, int op, int root, int peer) {
  if (dtype != 7 || op != 0) return 5;
  if (nq == 4096) return 5;
  nranks = c->n;
  q[nq++] = (struct op){kind, c->rank, peer, root, (const float *)s, (float *)r, count};
  if (depth == 0) {
    if (c->n > 1) return 5;           /* a lone call of a multi-rank communicator would hang in NCCL */
    run_group();
  }
  return 0;
}

int ncclGroupStart(void) { depth++; return 0; }
int ncclGroupEnd(void) { if (depth == 0) return 5; if (--depth == 0) run_group(); return 0; }
int ncclAllReduce(const void *s, void *r, size_t n, int t, int op, comm *c, void *st) { (void)st; return push(AR, c, s, r, n, t, op, 0, -1); }
int ncclAllGather(const void *s, void *r, size_t n, int t, comm *c, void *st) { (void)st; return push(AG, c, s, r, n, t, 0, 0, -1); }
int ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, comm *c, void *st) { (void)st; return push(RS, c, s, r, n, t, op, 0, -1); }
int ncclBroadcast(const void *s, void *r, size_t n, int t, int root, comm *c, void *st) { (void)st; return push(BC, c, s, r, n, t, 0, root, -1); }
int ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, comm *c, void *st) { (void)st; return push(RD, c, s, r, n, t, op, root, -1); }
int ncclSend(const void *s, size_t n, int t, int peer, comm *c, void *st) { (void)st; return push(SEND, c, s, NULL, n, t, 0, 0, peer); }
int ncclRecv(void *r, size_t n, int t, int peer, comm *c, void *st) { (void)st; return push(RECV, c, NULL, r, n, t, 0, 0, peer); }
