/* cuda_app.c -- play the CUDA driver and a CUDA application for rankmap's CUDA activity library,
 * with the stand-in CUPTI (fake_cupti.c) and libcuda (fake_cuda.c):
 *
 *   cuda_app INJECTION.so scenario    InitializeInjection() as the driver calls it inside cuInit,
 *                                     then the scenario below, in two phases: after phase 1 it
 *                                     prints "phase1" and waits for a line on stdin (the test reads
 *                                     the record file live meanwhile), then phase 2, then exit(0).
 *   cuda_app INJECTION.so init        InitializeInjection() only, print "enabled <n>" (activity kinds
 *                                     the stand-in CUPTI has enabled; -1: not loaded), exit(0).
 *   cuda_app INJECTION.so fork        after the scenario's phase 1, fork: the child exits at once.
 *
 * Environment: FAKE_CUDA (path of the stand-in libcuda.so.1, loaded first, as the driver is),
 * FAKE_CUPTI (path of the stand-in libcupti.so.13), FAKE_CUPTI_PRELOAD=1 (the application loaded
 * CUPTI itself before cuInit, as PyTorch does: the library must use that copy).
 *
 * The scenario (device ordinals as CUPTI reports them; CUPTI memory kinds 1 pageable, 2 pinned,
 * 3 device):
 *   phase 1: 5 H2D  1 MiB pageable->device on dev 0, 100 us each
 *            5 D2H  1 MiB device->pageable on dev 0, 120 us each
 *            1 H2D batched record: 3 copies, 3000 bytes pinned->device on dev 0, 9 us
 *            4 kernels "_Z6step_kPfi" on dev 0, 50 us each
 *   phase 2: 2 D2D  4096 bytes on dev 0, 2 us each
 *            3 P2P  2 MiB dev 0 -> dev 1, 10 us each; 1 P2P 2 MiB dev 1 -> dev 0, 11 us
 *            2 memsets 256 bytes on dev 0 (device memory), 1 us each
 *            2 kernels "ncclDevKernel_SendRecv" on dev 1, 300 us each
 *            1 kernel without a name on dev 0, 7 us; 1 kernel "_Z6step_kPfi" on dev 0 with no
 *            timestamps (0, as CUPTI reports when it ran out of device memory)
 *            1 record of another kind (a runtime API record): skipped
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define US 1000ull

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: cuda_app INJECTION.so scenario|init|fork\n"); return 2; }
  const char *fake_cuda = getenv("FAKE_CUDA"), *fake_cupti = getenv("FAKE_CUPTI");
  if (fake_cuda && !dlopen(fake_cuda, RTLD_NOW | RTLD_GLOBAL)) { fprintf(stderr, "%s\n", dlerror()); return 2; }
  void *cupti = NULL;
  const char *pre = getenv("FAKE_CUPTI_PRELOAD");
  if (pre && *pre == '1' && !(cupti = dlopen(fake_cupti, RTLD_NOW | RTLD_GLOBAL))) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  void *inj = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!inj) { fprintf(stderr, "%s\n", dlerror()); return 2; }
  int (*init)(void) = (int (*)(void))dlsym(inj, "InitializeInjection");
  if (!init) { fprintf(stderr, "no InitializeInjection\n"); return 2; }
  if (init() != 1) { fprintf(stderr, "InitializeInjection did not return 1\n"); return 2; }
  if (!cupti && fake_cupti) cupti = dlopen(fake_cupti, RTLD_NOW | RTLD_NOLOAD);
  if (!strcmp(argv[2], "init")) {           /* how many activity kinds were left enabled */
    int (*count)(void) = cupti ? (int (*)(void))dlsym(cupti, "fake_cupti_enabled_count") : NULL;
    printf("enabled %d\n", count ? count() : -1);
    return 0;
  }

  if (!cupti) { printf("cupti not loaded by the library\n"); return 0; }
  uint64_t (*now)(void) = (uint64_t (*)(void))dlsym(cupti, "fake_cupti_now");
  void (*cpy)(uint8_t, uint8_t, uint8_t, uint64_t, uint32_t, uint64_t, uint64_t, uint64_t) =
      (void (*)(uint8_t, uint8_t, uint8_t, uint64_t, uint32_t, uint64_t, uint64_t, uint64_t))dlsym(cupti, "fake_cupti_memcpy");
  void (*ptop)(uint64_t, uint32_t, uint32_t, uint64_t, uint64_t) =
      (void (*)(uint64_t, uint32_t, uint32_t, uint64_t, uint64_t))dlsym(cupti, "fake_cupti_ptop");
  void (*mset)(uint64_t, uint32_t, uint16_t, uint64_t, uint64_t) =
      (void (*)(uint64_t, uint32_t, uint16_t, uint64_t, uint64_t))dlsym(cupti, "fake_cupti_memset");
  void (*kern)(const char *, uint32_t, uint64_t, uint64_t) =
      (void (*)(const char *, uint32_t, uint64_t, uint64_t))dlsym(cupti, "fake_cupti_kernel");
  void (*other)(void) = (void (*)(void))dlsym(cupti, "fake_cupti_other");
  if (!now || !cpy || !ptop || !mset || !kern || !other) { fprintf(stderr, "stand-in CUPTI incomplete\n"); return 2; }

  static const char step[] = "_Z6step_kPfi", nccl[] = "ncclDevKernel_SendRecv";
  uint64_t t = now();
  for (int i = 0; i < 5; i++) cpy(1, 1, 3, 1 << 20, 0, t + i * 1000 * US, t + i * 1000 * US + 100 * US, 1);
  for (int i = 0; i < 5; i++) cpy(2, 3, 1, 1 << 20, 0, t + i * 1000 * US + 200 * US, t + i * 1000 * US + 320 * US, 1);
  cpy(1, 2, 3, 3000, 0, t + 10 * US, t + 19 * US, 3);
  for (int i = 0; i < 4; i++) kern(step, 0, t + i * 1000 * US + 500 * US, t + i * 1000 * US + 550 * US);
  printf("phase1\n");
  fflush(stdout);
  if (!strcmp(argv[2], "fork")) {
    pid_t p = fork();
    if (p == 0) exit(0);       /* the exit handlers run in the child: they must leave the file alone */
    int st;
    waitpid(p, &st, 0);
  } else {
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
  }

  t = now();
  for (int i = 0; i < 2; i++) cpy(8, 3, 3, 4096, 0, t + i * 10 * US, t + i * 10 * US + 2 * US, 1);
  for (int i = 0; i < 3; i++) ptop(2 << 20, 0, 1, t + 100 * US + i * 20 * US, t + 110 * US + i * 20 * US);
  ptop(2 << 20, 1, 0, t + 200 * US, t + 211 * US);
  for (int i = 0; i < 2; i++) mset(256, 0, 3, t + 300 * US + i * 5 * US, t + 301 * US + i * 5 * US);
  for (int i = 0; i < 2; i++) kern(nccl, 1, t + 400 * US + i * 400 * US, t + 700 * US + i * 400 * US);
  kern(NULL, 0, t + 2000 * US, t + 2007 * US);
  kern(step, 0, 0, 0);
  other();
  return 0;                 /* exit(): the library's exit handler flushes CUPTI and closes the file */
}
