/*
 * cudart_dl.h -- the few CUDA runtime calls the MPI and NCCL benchmarks make, loaded with dlopen.
 *
 * Why not link libcudart: the MPI benchmark must build and run with host buffers on machines
 * without CUDA (it is compiled with the MPI's own mpicc, nothing else), and the same binary
 * measures device buffers where a CUDA runtime is found at run time.  The types below are the
 * runtime API's own, spelled out: handles are pointers, errors ints, an IPC handle 64 bytes.
 * Only plain (unversioned) entry points that every runtime since CUDA 11 exports are used.
 */
#ifndef RANKMAP_CUDART_DL_H
#define RANKMAP_CUDART_DL_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef void *rmc_stream;
typedef struct { char reserved[64]; } rmc_ipc_handle;

enum { RMC_H2D = 1, RMC_D2H = 2, RMC_D2D = 3, RMC_DEFAULT = 4 };    /* cudaMemcpyKind */
#define RMC_STREAM_NON_BLOCKING 1u                                   /* cudaStreamNonBlocking */
#define RMC_IPC_LAZY_PEER 1u                                         /* cudaIpcMemLazyEnablePeerAccess */

struct rmc {
  void *lib;
  int (*GetDeviceCount)(int *);
  int (*SetDevice)(int);
  int (*Malloc)(void **, size_t);
  int (*Free)(void *);
  int (*MallocHost)(void **, size_t);
  int (*FreeHost)(void *);
  int (*Memcpy)(void *, const void *, size_t, int);
  int (*MemcpyAsync)(void *, const void *, size_t, int, rmc_stream);
  int (*Memset)(void *, int, size_t);
  int (*StreamCreateWithFlags)(rmc_stream *, unsigned);
  int (*StreamSynchronize)(rmc_stream);
  int (*StreamDestroy)(rmc_stream);
  int (*DeviceSynchronize)(void);
  int (*IpcGetMemHandle)(rmc_ipc_handle *, void *);
  int (*IpcOpenMemHandle)(void **, rmc_ipc_handle, unsigned);
  int (*IpcCloseMemHandle)(void *);
  int (*DeviceGetPCIBusId)(char *, int, int);
  const char *(*GetErrorString)(int);
  int (*RuntimeGetVersion)(int *);
  int (*DriverGetVersion)(int *);
};

/* Look up `name` in `lib` into the function pointer `field`; on failure say so in `why` and return -1. */
#define RMC_DLSYM(lib, field, name, path, why, nwhy)                        \
  do {                                                                      \
    *(void **)(&(field)) = dlsym((lib), (name));                            \
    if (!(field)) {                                                         \
      snprintf((why), (nwhy), "%s lacks %s", (path), (name));               \
      return -1;                                                            \
    }                                                                       \
  } while (0)

/* dlopen `path` (a `what` library); NULL with the reason in `why` when there is none or it does not load. */
static inline void *rmc_open(const char *path, const char *what, char *why, size_t n) {
  if (!path || !*path) {
    snprintf(why, n, "no %s library was given", what);
    return NULL;
  }
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(why, n, "cannot load %s: %s", path, e ? e : "?");
  }
  return lib;
}

/* Load the runtime at `path`; 0 on success, else -1 with the reason in `why`. */
static inline int rmc_load(struct rmc *c, const char *path, char *why, size_t n) {
  memset(c, 0, sizeof *c);
  if (!(c->lib = rmc_open(path, "CUDA runtime", why, n))) return -1;
#define RMC_SYM(field, name) RMC_DLSYM(c->lib, c->field, name, path, why, n)
  RMC_SYM(GetDeviceCount, "cudaGetDeviceCount");
  RMC_SYM(SetDevice, "cudaSetDevice");
  RMC_SYM(Malloc, "cudaMalloc");
  RMC_SYM(Free, "cudaFree");
  RMC_SYM(MallocHost, "cudaMallocHost");
  RMC_SYM(FreeHost, "cudaFreeHost");
  RMC_SYM(Memcpy, "cudaMemcpy");
  RMC_SYM(MemcpyAsync, "cudaMemcpyAsync");
  RMC_SYM(Memset, "cudaMemset");
  RMC_SYM(StreamCreateWithFlags, "cudaStreamCreateWithFlags");
  RMC_SYM(StreamSynchronize, "cudaStreamSynchronize");
  RMC_SYM(StreamDestroy, "cudaStreamDestroy");
  RMC_SYM(DeviceSynchronize, "cudaDeviceSynchronize");
  RMC_SYM(IpcGetMemHandle, "cudaIpcGetMemHandle");
  RMC_SYM(IpcOpenMemHandle, "cudaIpcOpenMemHandle");
  RMC_SYM(IpcCloseMemHandle, "cudaIpcCloseMemHandle");
  RMC_SYM(DeviceGetPCIBusId, "cudaDeviceGetPCIBusId");
  RMC_SYM(GetErrorString, "cudaGetErrorString");
  RMC_SYM(RuntimeGetVersion, "cudaRuntimeGetVersion");
  RMC_SYM(DriverGetVersion, "cudaDriverGetVersion");
#undef RMC_SYM
  return 0;
}

#endif
