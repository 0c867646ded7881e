/* exchange_nccl.cu -- the GPU-aware exchange: device buffers straight to ncclSend/ncclRecv (one
 * group per iteration), no host staging (exchange.h says what the program does around it). MPI
 * only starts the ranks and hands the NCCL id around.
 *
 * Per rank: 1 device-to-host copy of BYTES (the final check), 1+2*ITERS kernels of its own plus
 * NCCL's send/receive kernels, ITERS ncclSend and ITERS ncclRecv of BYTES. (NCCL makes a few small
 * copies of its own while it sets the communicator up.)
 *
 * NCCL is opened at run time (NCCL_LIB, else libnccl.so.2 on the library path), so this builds
 * without NCCL; the few NCCL declarations it needs are below.
 *
 *   make -C examples/cuda exchange_nccl
 *   NCCL_LIB=/path/to/libnccl.so.2 mpirun -np 2 examples/cuda/build/exchange_nccl 8388608 20
 */
#include "exchange.h"
#include <dlfcn.h>

typedef struct { char internal[128]; } nccl_id_t;    /* ncclUniqueId */
typedef void *nccl_comm_t;
enum { NCCL_UINT8 = 1 };                              /* ncclUint8 */
static struct {
  int (*get_unique_id)(nccl_id_t *);
  int (*comm_init_rank)(nccl_comm_t *, int, nccl_id_t, int);
  int (*send)(const void *, size_t, int, int, nccl_comm_t, cudaStream_t);
  int (*recv)(void *, size_t, int, int, nccl_comm_t, cudaStream_t);
  int (*group_start)(void);
  int (*group_end)(void);
  int (*comm_destroy)(nccl_comm_t);
  const char *(*error_string)(int);
} nccl;
static nccl_comm_t comm;

#define NK(x) do { int r_ = (x); if (r_ != 0) { fprintf(stderr, "%s: %s: %s\n", prog_name, #x, \
  nccl.error_string ? nccl.error_string(r_) : "NCCL error"); MPI_Abort(MPI_COMM_WORLD, 4); } } while (0)

static void load_nccl(void) {
  const char *lib = getenv("NCCL_LIB");
  void *h = dlopen(lib && *lib ? lib : "libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
  if (!h) { fprintf(stderr, "%s: cannot load NCCL: %s (set NCCL_LIB)\n", prog_name, dlerror()); MPI_Abort(MPI_COMM_WORLD, 5); }
  const char *names[] = {"ncclGetUniqueId", "ncclCommInitRank", "ncclSend", "ncclRecv", "ncclGroupStart",
                         "ncclGroupEnd", "ncclCommDestroy", "ncclGetErrorString"};
  void **slots[] = {(void **)&nccl.get_unique_id, (void **)&nccl.comm_init_rank, (void **)&nccl.send,
                    (void **)&nccl.recv, (void **)&nccl.group_start, (void **)&nccl.group_end,
                    (void **)&nccl.comm_destroy, (void **)&nccl.error_string};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!(*slots[i] = dlsym(h, names[i]))) {
      fprintf(stderr, "%s: NCCL has no %s\n", prog_name, names[i]);
      MPI_Abort(MPI_COMM_WORLD, 5);
    }
}

static void exchange(job_t *j) {
  NK(nccl.group_start());
  NK(nccl.send(j->d_buf, j->bytes, NCCL_UINT8, j->next, comm, j->stream));
  NK(nccl.recv(j->d_recv, j->bytes, NCCL_UINT8, j->prev, comm, j->stream));
  NK(nccl.group_end());
}

int main(int argc, char **argv) {
  prog_name = "exchange_nccl";
  MPI_Init(&argc, &argv);
  job_t j;
  setup(&j, argc, argv);
  load_nccl();
  nccl_id_t id;
  if (j.rank == 0) NK(nccl.get_unique_id(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  NK(nccl.comm_init_rank(&comm, j.size, id, j.rank));
  run(&j, exchange);
  printf("%s: rank %d expect: H2D 0 x %zu bytes, D2H 1 x %zu bytes, kernels %d (+NCCL's), ncclSend %d x %zu bytes\n",
         prog_name, j.rank, j.bytes, j.bytes, 1 + 2 * j.iters, j.iters, j.bytes);
  NK(nccl.comm_destroy(comm));
  MPI_Finalize();
  return 0;
}
