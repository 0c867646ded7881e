/* fake_mpi_version.c -- an MPI library that says it is another version: PMPI_Get_library_version
 * answers the real library's text with its first FROM replaced by TO (both given at build time:
 * -DFROM='"v4.1."' -DTO='"v4.7."'). Preloaded beside the real library, it is how a test meets a
 * release no mirror names, with the real library's messages underneath.
 * Build: cc -shared -fPIC -DFROM=... -DTO=... fake_mpi_version.c -o fake.so -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <string.h>

int PMPI_Get_library_version(char *version, int *len) {
  int (*real)(char *, int *) = (int (*)(char *, int *))dlsym(RTLD_NEXT, "PMPI_Get_library_version");
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0, rc = real(text, &n);
  if (rc != MPI_SUCCESS || n <= 0 || n >= MPI_MAX_LIBRARY_VERSION_STRING) return rc;
  text[n] = 0;
  char *at = strstr(text, FROM);
  size_t f = strlen(FROM), t = strlen(TO);
  if (at && (size_t)n - f + t < MPI_MAX_LIBRARY_VERSION_STRING) {
    memmove(at + t, at + f, strlen(at + f) + 1);
    memcpy(at, TO, t);
  }
  strcpy(version, text);
  *len = (int)strlen(text);
  return MPI_SUCCESS;
}
